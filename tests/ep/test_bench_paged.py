"""scripts/bench_paged.py, the paged-attention benchmark: a small run on the CPU backend, where all
three ways must agree with the numpy reference (on the GPU the same script measures the kernel;
see docs/PERFORMANCE.md)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_paged.py"


@pytest.mark.parametrize("case", ["decode", "prefill"])
def test_every_variant_runs_and_matches_the_reference(case):
    done = subprocess.run([sys.executable, str(SCRIPT), "--case", case, "--quick", "--runs", "2"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 3, done.stdout
    for row in rows:
        assert "failed" not in row, row
        diff = float(re.findall(r"\| ([0-9.e+-]+) \|$", row)[0])
        assert diff <= 1e-2, row
