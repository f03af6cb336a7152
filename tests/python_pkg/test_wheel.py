"""The wheel: built from the checkout, installed into a fresh venv outside it (nothing of the
checkout on its path), where it finds its library and MLX by itself and runs a model on MLX."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]

# Runs in the fresh venv: a 2-node model, the MLX EP first, ORT's profile says where it ran.
CHECK = """
import json, sys, tempfile
import numpy as np, onnxruntime as ort, onnxruntime_ep_mlx as mlx_ep
from onnx import TensorProto, helper
nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
mlx_ep.register_execution_provider_library()
so = ort.SessionOptions(); so.enable_profiling = True; so.profile_file_prefix = tempfile.mkdtemp() + "/p"
session = ort.InferenceSession(model.SerializeToString(), so, providers=mlx_ep.providers())
x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
np.testing.assert_array_equal(session.run(None, {"x": x})[0], -np.maximum(x, 0))
events = json.load(open(session.end_profiling()))
ran = {e["args"].get("provider") for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
print("providers", session.get_providers()[0], sorted(ran), mlx_ep.library_path())
if sys.platform.startswith("linux"):  # which libmlx the library's runpath found
    print("libmlx", next(line.split()[-1] for line in open("/proc/self/maps") if "libmlx.so" in line))
"""


def _clean_env() -> dict[str, str]:
    """The environment without anything pointing into the checkout."""
    drop = ("PYTHONPATH", "ORT_MLX_EP_LIBRARY", "MLX_LIB_DIR", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
                    "-w", str(out), str(ROOT)], check=True, timeout=1200, cwd=out)
    (built,) = out.glob("onnxruntime_ep_mlx-*.whl")
    return built


def test_the_wheel_carries_the_library_and_the_package_at_the_cargo_version(wheel):
    assert wheel.name.startswith(f"onnxruntime_ep_mlx-{VERSION}-cp310-abi3-"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("onnxruntime_ep_mlx/libonnxruntime_mlx_ep") and n.endswith(".so") for n in names), names
    assert "onnxruntime_ep_mlx/cli.py" in names


def test_installed_outside_the_checkout_it_runs_a_model_on_mlx(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # The checkout's pins as constraints: the same ORT, MLX and numpy as the dev environment.
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel),
                    "-c", str(ROOT / "scripts" / "requirements.txt")], check=True, timeout=900, env=_clean_env())
    env, cwd = _clean_env(), tmp_path  # not the checkout: nothing of it on sys.path
    info = subprocess.run([str(python), "-m", "onnxruntime_ep_mlx", "info"], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)
    assert info.returncode == 0, info.stdout + info.stderr
    assert str(venv) in info.stdout and "mlx           0.32.4" in info.stdout and "mlx_device=" in info.stdout, info.stdout
    run = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "providers MLXExecutionProvider ['MLXExecutionProvider']" in run.stdout, run.stdout
    assert f"{mlx_ep_dir(venv)}" in run.stdout, run.stdout
    if sys.platform.startswith("linux"):
        assert f"libmlx {mlx_ep_dir(venv).parent / 'mlx' / 'lib'}" in run.stdout, run.stdout


def mlx_ep_dir(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site / "onnxruntime_ep_mlx"
