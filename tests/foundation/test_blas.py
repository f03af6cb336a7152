"""MLX's CPU matmuls must run on OpenBLAS, not the reference BLAS bundled with mlx-cpu."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from onnxruntime_ep_mlx import library_path

SELFTEST = Path(__file__).with_name("selftest.py")


def run_selftest(tmp_path, *dims, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    out = subprocess.run(
        [sys.executable, str(SELFTEST), library_path(), *map(str, dims)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    description, median_ms = out.stdout.strip().splitlines()
    return description, float(median_ms)


@pytest.mark.skipif(sys.platform != "linux", reason="macOS MLX uses Accelerate")
def test_mlx_sgemm_binds_to_openblas_when_loaded_locally(tmp_path):
    """The dynamic loader's own record (LD_DEBUG=bindings) of where libmlx's cblas_sgemm went."""
    log = tmp_path / "ld"
    description, _ = run_selftest(tmp_path, 64, 64, 64, 1, env_extra={"LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(log)})
    assert description.startswith("OpenBLAS"), description
    bindings = [
        line
        for path in tmp_path.glob("ld.*")
        for line in path.read_text().splitlines()
        if "normal symbol `cblas_sgemm'" in line and "/libmlx." in line.split(" to ")[0]
    ]
    assert bindings, "libmlx never bound cblas_sgemm: did the matmul run?"
    for line in bindings:
        target = line.split(" to ")[1]
        assert "openblas" in target.lower(), f"MLX's cblas_sgemm bound to the slow BLAS: {line.strip()}"

