"""scripts/first_run.py, the first-run measurement: on the CPU backend a new process with empty
caches compiles its fused kernels' C++ at the second (compiled) run, and one that finds the
first process's caches does not (on the GPU the same script measures NVRTC; docs/PERFORMANCE.md)."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "first_run.py"


def test_a_second_process_reuses_the_first_ones_compiled_kernels():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if re.match(r"\| \S.* \| (cold|warm) \|", line)]
    assert [r[1].strip() for r in rows] == ["cold", "warm"] * 2, done.stdout
    for cold, warm in zip(rows[::2], rows[1::2]):
        second = lambda row: float(row[4])
        # Compiling C++ takes seconds on this backend; loading what was compiled, milliseconds.
        assert second(cold) > 500 and second(warm) < second(cold) / 5, done.stdout
