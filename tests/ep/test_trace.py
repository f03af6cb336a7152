"""The Chrome/Perfetto trace (`trace` option, ONNXRUNTIME_EP_MLX_TRACE): written when the session
ends, spans nested by time per thread, per-op spans with shapes, MLX memory counters."""

import gc
import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from conftest import MLX, make_model, mlx_devices, tensor

MODEL = make_model(
    [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Mul", ["r", "r"], ["m"], name="square"),
     helper.make_node("ReduceSum", ["m"], ["y"], name="total", keepdims=1)],
    [tensor("x", shape=["batch", 4])], [tensor("y")])


def traced_runs(path, options, runs=3):
    so = ort.SessionOptions()
    so.add_provider_for_devices(mlx_devices(), {"trace": str(path), **options})
    session = ort.InferenceSession(MODEL, so)
    assert session.get_providers()[0] == MLX
    for i in range(runs):
        session.run(None, {"x": np.full((2 + i % 2, 4), 1.5, np.float32)})
    assert not path.exists(), "the trace is written when the session ends, not before"
    del session
    gc.collect()
    return json.loads(path.read_text())


def spans(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def inside(inner, outer):
    return (inner["tid"] == outer["tid"] and inner["ts"] >= outer["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3)


@pytest.mark.parametrize("compile_after", ["0", "1"])
def test_each_run_holds_its_copies_and_execution_and_ops_hold_their_shapes(tmp_path, compile_after):
    trace = traced_runs(tmp_path / "trace.json", {"compile_after": compile_after})
    assert trace["displayTimeUnit"] == "ms"
    events = spans(trace)
    runs = [e for e in events if e["cat"] == "run"]
    assert len(runs) == 3
    for run in runs:
        parts = [e["name"] for e in events if e is not run and inside(e, run) and e["cat"] in ("copy", "execute")]
        assert parts == ["copy in", "execute", "copy out"], parts
    # Every other span lies inside a run.
    for event in events:
        assert event["cat"] == "run" or any(inside(event, run) for run in runs), event
    ops = [e for e in events if e["cat"] == "op"]
    assert {e["name"] for e in ops} == {"Relu", "Mul", "ReduceSum"}
    relu = next(e for e in ops if e["name"] == "Relu")
    assert relu["args"]["node"] == "relu" and "F32[2, 4]" in relu["args"]["inputs"], relu
    names = {e["name"] for e in events}
    if compile_after == "0":
        # Traced at the first run: ops are built inside the first replay, the compile before it.
        assert {"compile", "replay"} <= names
        first_replay = next(e for e in events if e["name"] == "replay")
        assert any(inside(op, first_replay) for op in ops)
    else:
        assert {"lower", "mlx eval"} <= names
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == 3 and {"active", "peak"} <= set(counters[0]["args"])


def test_the_environment_variable_writes_one_too(tmp_path, monkeypatch):
    path = tmp_path / "env-trace.json"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_TRACE", str(path))
    assert any(e["cat"] == "run" for e in spans(traced_runs(path, {}, runs=1)))


def test_the_cli_writes_a_trace(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(MODEL)
    path = tmp_path / "cli-trace.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(p) for p in sys.path if p]))
    done = subprocess.run([sys.executable, "-m", "onnxruntime_ep_mlx", "run", str(model), "--dim", "batch=2",
                           "--runs", "2", "--trace", str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trace of the MLX session" in done.stdout
    assert any(e["cat"] == "op" for e in spans(json.loads(path.read_text())))
