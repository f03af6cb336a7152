"""scripts/ab_compare.py, the fair comparison of EP builds: a warm-up process, then the builds in
interleaved rounds, each figure read from the command's own output."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / "ab_compare.py"), *args], capture_output=True,
                          text=True, timeout=600)


def test_two_builds_run_interleaved_after_a_warm_up():
    library = os.environ["ORT_MLX_EP_LIBRARY"]
    done = compare("--lib", f"a={library}", "--lib", f"b={library}", "--rounds", "2", "--",
                   sys.executable, str(SCRIPTS / "profile_decode.py"), "--small", "--layers", "1", "--warm", "4",
                   "--past", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    runs = [line.split(":")[0] for line in lines if line.startswith(("warm-up", "round"))]
    assert runs == ["warm-up (a)", "round 1, a", "round 1, b", "round 2, a", "round 2, b"], lines
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines if line.startswith("| a ")
            or line.startswith("| b ")}
    assert rows == {"a": "2", "b": "2"}, lines


def test_a_run_without_the_figure_counts_as_failed():
    library = os.environ["ORT_MLX_EP_LIBRARY"]
    done = compare("--lib", f"a={library}", "--rounds", "1", "--", sys.executable, "-c", "print('no figure here')")
    assert done.returncode == 1
    assert "round 1, a: - (no match for --metric)" in done.stdout
    assert "| a | 0 | - | - | - |" in done.stdout


def test_a_missing_library_is_refused_before_anything_runs():
    done = compare("--lib", "a=/nonexistent/lib.so", "--", sys.executable, "-c", "pass")
    assert done.returncode != 0 and "no library at /nonexistent/lib.so" in done.stderr
