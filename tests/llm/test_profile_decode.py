"""scripts/profile_decode.py, the decode-step profiler: its ncu CSV summary, and a run on the
CPU backend (on the GPU the same script runs under ncu; see docs/PERFORMANCE.md)."""

import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import profile_decode  # noqa: E402

NCU_CSV = """==PROF== Connected to process 1
"ID","Kernel Name","Grid Size","Block Size","Metric Name","Metric Unit","Metric Value"
"0","gemv(const float *)","(64, 1, 1)","(256, 1, 1)","gpu__time_duration.sum","ns","6,000"
"1","copy_v<float>","(1, 1, 1)","(512, 1, 1)","gpu__time_duration.sum","ns","2,000"
"2","gemv(const float *)","(64, 1, 1)","(256, 1, 1)","gpu__time_duration.sum","ns","4,000"
"3","copy_v<float>","(1, 1, 1)","(512, 1, 1)","gpu__time_duration.sum","ns","3,000"
==PROF== Disconnected from process 1
"""


def test_ncu_csv_is_summarised_per_step():
    rows = profile_decode.kernel_rows(NCU_CSV)
    assert [r[:2] for r in rows] == [("gemv(const float *)", 6000.0), ("copy_v<float>", 2000.0),
                                     ("gemv(const float *)", 4000.0), ("copy_v<float>", 3000.0)]
    text = profile_decode.summarise(rows, steps=2)
    lines = text.splitlines()
    assert lines[0] == "2.0 kernels and 7.5 us of kernel time a step"
    # By time, largest first: gemv 10 us over two steps, copy 5.
    assert lines[2].split() == ["1.0", "5.0", "gemv(const", "float", "*)"]
    assert lines[3].split() == ["1.0", "2.5", "copy_v<float>"]
    assert "one step, in order" in lines[4] and len(lines) == 7


def test_a_small_decoder_steps_on_mlx_and_reports_its_mirrors():
    done = subprocess.run([sys.executable, str(SCRIPTS / "profile_decode.py"), "--small", "--layers", "1",
                           "--warm", "6", "--past", "8"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "ep, 1 layer(s):" in out and "ms a step" in out, out
    # Past and present share each buffer: the compiled steps update the mirrors in place.
    assert "mirror(s) updated in place" in out and " 0 mirror(s) updated in place" not in out, out
