"""scripts/bench_overhead.py, which takes a small model's run time apart (docs/PERFORMANCE.md):
every runner runs, and the EP's own sessions ran on MLX (the script asserts it)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_overhead.py"


@pytest.mark.parametrize("model", ["trivial", "encoder"])
def test_every_runner_is_timed(model):
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", model, "--runs", "2"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    timed = re.findall(rf"^{model}\s+(.+?)\s+([\d.]+) µs$", done.stdout, re.MULTILINE)
    assert [label for label, _ in timed] == [
        "EP, bound in its memory", "EP, bound, output copied after (no_cuda_kernels)", "EP, numpy in and out",
        "ORT's CPU EP alone, bound", "ORT's CPU EP, MLX EP registered but disabled", "direct MLX, resident",
        "direct MLX + one elementwise primitive"], done.stdout
    assert all(float(us) > 0 for _, us in timed), done.stdout
