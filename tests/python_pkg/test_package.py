"""The onnxruntime_ep_mlx package: pure-Python pieces on ORT's CPU EP, and the CLI end to end
through the built library once it exports the plugin entry point."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxruntime_ep_mlx as mlx_ep
from onnxruntime_ep_mlx import cli, sessions
from onnxruntime_ep_mlx.compare import compare_outputs, max_abs_difference
from onnxruntime_ep_mlx.explain import EXPLAIN_ENV, format_explanation, read_explain_records
from onnxruntime_ep_mlx.feeds import concrete_shape, make_feeds, parse_dims
from onnxruntime_ep_mlx.library import workspace_version
from onnxruntime_ep_mlx.profiling import NodePlacement, by_provider, node_providers

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "python"
FUSED = "MLXExecutionProvider_MLXExecutionProvider_12345678_0_0"
# The ops the demo may use: all claimed by the EP for float32.
DEMO_OPS = {
    "Add", "Sub", "Mul", "Div", "Sqrt", "Pow", "Tanh", "Sigmoid", "Erf", "Softmax", "Where",
    "Greater", "Clip", "Relu", "Exp", "Neg", "Max", "Identity", "Cast",
}


def load_demo_script():
    spec = importlib.util.spec_from_file_location("make_demo_model", REPO_ROOT / "scripts" / "make_demo_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory) -> Path:
    return load_demo_script().write_demo_model(tmp_path_factory.mktemp("demo") / "demo.onnx")


# ------------------------------------------------------------------------------- package API


def test_names_and_provider_list():
    assert mlx_ep.EP_NAME == mlx_ep.ep_name() == "MLXExecutionProvider"
    assert mlx_ep.providers() == ["MLXExecutionProvider", "CPUExecutionProvider"]


def test_workspace_version_is_semver_like_ort_requires():
    # ORT parses the factory's version strictly (major.minor.patch); Cargo.toml is its source.
    assert re.fullmatch(r"\d+\.\d+\.\d+", workspace_version())


# --------------------------------------------------------------------------------- profiling


def kernel_event(name: str, provider: str, op: str) -> dict:
    return {"cat": "Node", "ph": "X", "name": f"{name}_kernel_time", "dur": 3, "ts": 1,
            "args": {"op_name": op, "provider": provider}}


def test_node_providers_reads_kernels_once_each_in_run_order(tmp_path):
    run = [
        kernel_event("add_1", "CPUExecutionProvider", "Add"),
        kernel_event(FUSED, "MLXExecutionProvider", FUSED),
        {"cat": "Node", "ph": "X", "name": "add_1_fence_before", "args": {"op_name": "Add"}},
        kernel_event("identity_out", "CPUExecutionProvider", "Identity"),
    ]
    events = [{"cat": "Session", "name": "session_initialization", "args": {}}] + run + run  # two runs
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(events))

    placements = node_providers(profile)

    assert placements == [
        NodePlacement("add_1", "CPUExecutionProvider", "Add"),
        NodePlacement(FUSED, "MLXExecutionProvider", FUSED),
        NodePlacement("identity_out", "CPUExecutionProvider", "Identity"),
    ]
    groups = by_provider(placements)
    assert [p.node for p in groups["CPUExecutionProvider"]] == ["add_1", "identity_out"]
    assert [p.node for p in groups["MLXExecutionProvider"]] == [FUSED]


def test_node_providers_reads_a_real_cpu_profile(demo_model, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "cpu")
    session = ort.InferenceSession(str(demo_model), so, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((2, 4096), np.float32)})
    placements = node_providers(session.end_profiling())
    assert placements and {p.provider for p in placements} == {"CPUExecutionProvider"}
    assert "identity_gate" in {p.node for p in placements}


# ----------------------------------------------------------------------------------- explain


def explain_line(node: str, op: str, claimed: bool, reason: str | None = None, cluster: int | None = None) -> str:
    return json.dumps({"node": node, "op": op, "domain": "", "opset": 17, "claimed": claimed,
                       "reason": reason, "cluster": cluster})


def test_explain_records_keep_the_last_decision_per_node(tmp_path):
    path = tmp_path / "explain.jsonl"
    path.write_text("\n".join([
        explain_line("a", "Add", True, cluster=0),
        explain_line("m", "MatMul", False, "no op-table entry for ai.onnx MatMul"),
        explain_line("a", "Add", True, cluster=1),  # a second GetCapability pass
        explain_line("r", "ReduceMean", False, "no op-table entry for ai.onnx ReduceMean"),
        explain_line("n", "Neg", True, cluster=1),
    ]) + "\n")

    records = read_explain_records(path)
    text = format_explanation(records, ["a", "m", "r", "n", "folded_away"])

    assert [r.node for r in records] == ["a", "m", "r", "n"]
    assert records[0].cluster == 1
    assert "claimed 2/4 nodes in 1 cluster(s)" in text
    assert "no op-table entry for ai.onnx MatMul" in text
    assert "folded_away" in text


def test_explain_rejects_garbage_with_the_line_number(tmp_path):
    path = tmp_path / "explain.jsonl"
    path.write_text(explain_line("a", "Add", True, cluster=0) + "\nnot json\n")
    with pytest.raises(ValueError, match="explain.jsonl:2"):
        read_explain_records(path)


def test_explain_command_points_the_ep_at_a_file_during_session_creation(demo_model, monkeypatch, capsys):
    """Stand in for the EP: write one record per node to the file the variable names."""
    def fake_mlx_session(model, ep_options=None, optimization="all", profile_prefix=None):
        nodes = onnx.load(str(model)).graph.node
        with open(os.environ[EXPLAIN_ENV], "a") as file:
            for node in nodes:
                claimed = node.op_type != "Softmax"
                file.write(explain_line(node.name, node.op_type, claimed, None if claimed else "test decline",
                                        0 if claimed else None) + "\n")

    monkeypatch.setattr(cli, "_register", lambda: None)
    monkeypatch.setattr(cli, "mlx_session", fake_mlx_session)
    monkeypatch.delenv(EXPLAIN_ENV, raising=False)

    assert cli.main(["explain", str(demo_model)]) == 0
    out = capsys.readouterr().out
    assert "claimed 43/44 nodes in 1 cluster(s)" in out
    assert "test decline" in out
    assert EXPLAIN_ENV not in os.environ  # restored


# ------------------------------------------------------------------------- feeds and compare


def test_dims_and_shapes():
    assert parse_dims(["batch=4", "seq=7"]) == {"batch": 4, "seq": 7}
    with pytest.raises(ValueError):
        parse_dims(["batch"])
    assert concrete_shape(["batch", None, 3, "other"], {"batch": 4}) == [4, 1, 3, 1]


def test_feeds_match_declared_types_and_take_npz_arrays(demo_model, tmp_path):
    inputs = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"]).get_inputs()
    random = make_feeds(inputs, {"batch": 3}, seed=1)
    assert random["x"].shape == (3, 4096) and random["x"].dtype == np.float32
    np.testing.assert_array_equal(random["x"], make_feeds(inputs, {"batch": 3}, seed=1)["x"])

    given = np.full((2, 4096), 0.5, np.float32)
    np.savez(tmp_path / "inputs.npz", x=given)
    np.testing.assert_array_equal(make_feeds(inputs, npz=tmp_path / "inputs.npz")["x"], given)


def test_a_difference_is_also_given_against_the_outputs_scale():
    """What `run --ep-option precision=fp16` is read by: max |diff| over the largest finite
    |expected|; nothing to scale by for booleans or all-infinite outputs."""
    want = [np.array([-400.0, 2.0, np.inf], np.float32), np.array([True]), np.array([np.inf], np.float32)]
    got = [np.array([-399.0, 2.0, np.inf], np.float32), np.array([True]), np.array([np.inf], np.float32)]
    scaled, boolean, infinite = compare_outputs(["a", "b", "c"], want, got)
    assert (scaled.max_abs_diff, scaled.relative) == (1.0, 1.0 / 400.0)
    assert np.isnan(boolean.relative) and np.isnan(infinite.relative)


def test_max_abs_difference_treats_matching_nans_and_infs_as_equal():
    a = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert max_abs_difference(a, a.copy()) == 0.0
    assert max_abs_difference(a, np.array([1.5, np.nan, np.inf, -2.0], np.float32)) == 0.5
    assert max_abs_difference(a, np.array([1.0, 0.0, np.inf, -2.0], np.float32)) == float("inf")
    assert max_abs_difference(a, a[:3]) == float("inf")
    assert max_abs_difference(np.array([True, False]), np.array([True, True])) == 1.0


# -------------------------------------------------------------------------------- demo model


def test_demo_model_is_deterministic_valid_and_runs_on_cpu(tmp_path):
    script = load_demo_script()
    first = script.write_demo_model(tmp_path / "a" / "demo.onnx")
    second = script.write_demo_model(tmp_path / "b" / "demo.onnx")
    assert first.read_bytes() == second.read_bytes()

    model = onnx.load(str(first))
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert 30 <= len(model.graph.node) <= 60
    assert {node.op_type for node in model.graph.node} <= DEMO_OPS
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"

    session = ort.InferenceSession(str(first), providers=["CPUExecutionProvider"])
    y, gate = session.run(None, {"x": np.random.default_rng(0).standard_normal((3, 4096), dtype=np.float32)})
    assert y.shape == gate.shape == (3, 4096)
    assert np.isfinite(y).all() and np.abs(y).max() <= 3.0  # the Clip at the end
    assert ((gate > 0) & (gate < 1)).all()  # a sigmoid


# ------------------------------------------------------------- run, without the EP available


def cpu_standing_in_for_mlx(model, ep_options=None, optimization="all", profile_prefix=None):
    so = sessions._session_options(optimization)
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def test_run_refuses_a_session_that_fell_back_to_cpu(demo_model, monkeypatch, capsys):
    """ORT only warns about an unknown provider; the CLI must fail loudly instead."""
    monkeypatch.setattr(cli, "_register", lambda: None)
    monkeypatch.setattr(cli, "mlx_session", cpu_standing_in_for_mlx)
    assert cli.main(["run", str(demo_model), "--runs", "1"]) == cli.EXIT_NOT_MLX
    assert "MLXExecutionProvider is not first" in capsys.readouterr().err


def test_run_reports_placement_differences_and_latency(demo_model, monkeypatch, capsys):
    """The whole report, with the CPU EP playing the MLX EP's part."""
    monkeypatch.setattr(cli, "_register", lambda: None)
    monkeypatch.setattr(cli, "mlx_session", cpu_standing_in_for_mlx)
    monkeypatch.setattr(cli, "EP_NAME", "CPUExecutionProvider")
    assert cli.main(["run", str(demo_model), "--runs", "2", "--dim", "batch=2", "--atol", "0"]) == 0
    out = capsys.readouterr().out
    assert "x float[batch, 4096] = [2, 4096]" in out
    assert re.search(r"y\s+\[2, 4096\]\s+float32\s+0\b", out)
    assert "median of 2 warm runs" in out and "second run (trace + compile)" in out
    assert re.search(r"MLX \(\w+\) took [0-9.e+-]+ ms, ORT's CPU EP [0-9.e+-]+ ms: [0-9.]+x (faster|slower) here", out)


@pytest.mark.parametrize("device, mlx_ms, cpu_ms, expected", [
    ("cpu", 31.7, 3.1, "MLX (cpu) took 31.7 ms, ORT's CPU EP 3.1 ms: 10.2x slower here; on the CPU backend MLX "
                       "is for development"),
    ("gpu", 1.5, 30.0, "MLX (gpu) took 1.5 ms, ORT's CPU EP 30 ms: 20.0x faster here."),
    ("gpu", 4.0, 2.0, "MLX (gpu) took 4 ms, ORT's CPU EP 2 ms: 2.0x slower here."),
])
def test_the_speed_sentence_reads_in_one_go(device, mlx_ms, cpu_ms, expected):
    assert cli.speed_sentence(device, mlx_ms, cpu_ms).startswith(expected)


def test_a_library_ort_cannot_register_is_a_clear_error(demo_model, tmp_path):
    """A file that is no plugin: ORT's reason reaches the user, without a traceback."""
    fake = tmp_path / "libnot_an_ep.so"
    fake.write_bytes(b"not an ELF file")
    code = f"""
import os, sys
sys.path.insert(0, {str(PACKAGE_DIR)!r})
os.environ["ORT_MLX_EP_LIBRARY"] = {str(fake)!r}
from onnxruntime_ep_mlx.cli import main
sys.exit(main(["run", {str(demo_model)!r}]))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == cli.EXIT_SETUP, result.stdout + result.stderr
    assert result.stderr.startswith("error: cannot register the MLX EP library:"), result.stderr
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------- end to end through the library


def library_exports_plugin_entry_point() -> bool:
    """Checked in a child process so this one never loads the library by accident."""
    try:
        path = mlx_ep.library_path()
    except FileNotFoundError:
        return False
    probe = "import ctypes, sys; ctypes.CDLL(sys.argv[1]).CreateEpFactories"
    return subprocess.run([sys.executable, "-c", probe, path], capture_output=True, timeout=120).returncode == 0


needs_plugin = pytest.mark.skipif(
    not library_exports_plugin_entry_point(), reason="the built library does not export CreateEpFactories yet"
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    # A fresh process per call: ORT registrations and MLX state are per process.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_DIR), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "onnxruntime_ep_mlx", *args], capture_output=True, text=True,
                          env=env, timeout=600)


@needs_plugin
def test_info_reports_the_factory_version():
    result = run_cli("info")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reported by the EP factory" in result.stdout
    assert re.search(r"^\s+MLXExecutionProvider\s", result.stdout, re.M), result.stdout


@needs_plugin
def test_run_demo_model_on_mlx(demo_model):
    # The demo ends with a float16 round trip: one f16 ulp at |y| in [2, 4) is 2^-9.
    result = run_cli("run", str(demo_model), "--runs", "3", "--dim", "batch=2", "--atol", "4e-3")
    assert result.returncode == 0, result.stdout + result.stderr
    providers_line = next(line for line in result.stdout.splitlines() if line.startswith("providers"))
    assert providers_line.split()[1].rstrip(",") == "MLXExecutionProvider"
    assert re.search(r"^\s+MLXExecutionProvider\s+\d+ kernel", result.stdout, re.M), result.stdout


@needs_plugin
def test_mlx_session_puts_mlx_first(demo_model):
    code = f"""
import sys
sys.path.insert(0, {str(PACKAGE_DIR)!r})
from onnxruntime_ep_mlx.sessions import mlx_session
print(mlx_session({str(demo_model)!r}).get_providers()[0])
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "MLXExecutionProvider"
