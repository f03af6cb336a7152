"""Compiled capture: traced once, compiled by MLX, replayed; eager fallback and kill switch."""

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, make_model, tensor

CHAIN = make_model(
    [
        helper.make_node("Mul", ["x", "y"], ["m"]),
        helper.make_node("Tanh", ["m"], ["t"]),
        helper.make_node("Sub", ["t", "x"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["z"]),
    ],
    [tensor("x", shape=["n"]), tensor("y", shape=["n"])],
    [tensor("z")],
)
LEGACY_SOFTMAX = make_model(  # opset 11 Softmax flattens at `axis`: shape-keyed
    [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [tensor("x", shape=["a", "b", "c"])], [tensor("y")], opset=11
)


def feeds(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(n).astype(np.float32), "y": rng.standard_normal(n).astype(np.float32)}


def run_all(model, feed_list, monkeypatch, capfd, **env):
    """Runs every feed through one MLX session; returns outputs and the EP's summary."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    outputs = [session.run(None, f)[0] for f in feed_list]
    del session
    gc.collect()
    return outputs, capfd.readouterr().err


def test_compiled_matches_eager_and_replays(monkeypatch, capfd):
    feed_list = [feeds(1000, seed) for seed in range(4)]
    eager, summary = run_all(CHAIN, feed_list, monkeypatch, capfd, ONNXRUNTIME_EP_MLX_NO_COMPILE="1")
    assert "eager path" in summary, summary
    compiled, summary = run_all(CHAIN, feed_list, monkeypatch, capfd, ONNXRUNTIME_EP_MLX_NO_COMPILE="0", ONNXRUNTIME_EP_MLX_COMPILE_AFTER="0")
    assert "shapeless path, 1 trace(s), 3 cache hit(s)" in summary, summary
    for e, c in zip(eager, compiled):
        # Same backend, same kernels: the fused kernel computes the same float operations.
        np.testing.assert_allclose(c, e, rtol=2e-7, atol=0)


def test_shapeless_plans_do_not_retrace_for_a_new_length(monkeypatch, capfd):
    feed_list = [feeds(n) for n in (10, 10, 20, 30)]
    outputs, summary = run_all(CHAIN, feed_list, monkeypatch, capfd, ONNXRUNTIME_EP_MLX_COMPILE_AFTER="0")
    assert "shapeless path, 1 trace(s), 3 cache hit(s)" in summary, summary
    for f, out in zip(feed_list, outputs):
        want = 1 / (1 + np.exp(-(np.tanh(f["x"] * f["y"]) - f["x"])))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_shape_keyed_plans_retrace_per_shape_in_a_bounded_cache(monkeypatch, capfd):
    shapes = [(2, 3, 4), (2, 3, 4), (3, 2, 2), (2, 3, 4), (5, 1, 2)]
    feed_list = [{"x": np.random.default_rng(i).standard_normal(s).astype(np.float32)} for i, s in enumerate(shapes)]
    outputs, summary = run_all(
        LEGACY_SOFTMAX, feed_list, monkeypatch, capfd,
        ONNXRUNTIME_EP_MLX_COMPILE_AFTER="0", ONNXRUNTIME_EP_MLX_COMPILE_CACHE="2",
    )
    # (2,3,4) traced, hit; (3,2,2) traced; (2,3,4) hit; (5,1,2) traced and evicts (3,2,2).
    assert "shape-keyed path, 3 trace(s), 2 cache hit(s)" in summary, summary
    for f, out in zip(feed_list, outputs):
        x = f["x"].reshape(f["x"].shape[0], -1)
        want = np.exp(x - x.max(1, keepdims=True))
        want /= want.sum(1, keepdims=True)
        np.testing.assert_allclose(out, want.reshape(f["x"].shape), rtol=1e-5, atol=1e-7)


def test_first_run_of_a_shape_is_eager_by_default(monkeypatch, capfd):
    outputs, summary = run_all(CHAIN, [feeds(8)], monkeypatch, capfd)
    assert "shapeless path, 0 trace(s), 0 cache hit(s)" in summary, summary


def test_compile_failure_falls_back_to_eager_once_with_the_reason(monkeypatch, capfd):
    feed_list = [feeds(16, seed) for seed in range(3)]
    outputs, summary = run_all(
        CHAIN, feed_list, monkeypatch, capfd, ONNXRUNTIME_EP_MLX_COMPILE_AFTER="0", ONNXRUNTIME_EP_MLX_FAULT="compile"
    )
    assert "eager path, 0 trace(s), 0 cache hit(s); fell back to eager: compile failed: injected" in summary, summary
    for f, out in zip(feed_list, outputs):
        want = 1 / (1 + np.exp(-(np.tanh(f["x"] * f["y"]) - f["x"])))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_bad_inputs_do_not_disable_compilation(monkeypatch, capfd):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_COMPILE_AFTER", "0")
    session = ort.InferenceSession(CHAIN, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    session.run(None, feeds(4))
    try:
        session.run(None, {"x": np.ones(2, np.float32), "y": np.ones(3, np.float32)})
        raise AssertionError("mismatched shapes must fail")
    except Exception as e:
        assert "broadcast" in str(e)
    session.run(None, feeds(4))
    del session
    gc.collect()
    summary = capfd.readouterr().err
    assert "shapeless path" in summary and "fell back" not in summary, summary


def test_a_shapeless_replay_never_reuses_a_trace_whose_broadcasts_no_longer_hold(monkeypatch):
    # x[n] * w[4]: traced with n = 4; n = 1 broadcasts, n = 5 must fail (not read past w).
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    model = make_model([helper.make_node("Mul", ["x", "w"], ["y"])], [tensor("x", shape=["n"])], [tensor("y")], [w])
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_COMPILE_AFTER", "0")
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    np.testing.assert_array_equal(session.run(None, {"x": np.full(4, 2, np.float32)})[0], [0, 2, 4, 6])
    np.testing.assert_array_equal(session.run(None, {"x": np.full(1, 3, np.float32)})[0], [0, 3, 6, 9])
    try:
        session.run(None, {"x": np.ones(5, np.float32)})
        raise AssertionError("x[5] * w[4] must fail")
    except Exception as e:
        assert "broadcast" in str(e), e


FUSION_PROBE = """
import sys, numpy as np, onnxruntime as ort
sys.path.insert(0, {python!r})
import onnxruntime_ep_mlx as mlx_ep
mlx_ep.register_execution_provider_library()
session = ort.InferenceSession({model!r}, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
session.disable_fallback()
x = np.linspace(-1, 1, 64, dtype=np.float32)
for _ in range(3):  # eager, traced + compiled, replayed
    session.run(None, {{"x": x, "y": x[::-1].copy()}})
"""


def test_no_fuse_traces_without_generating_kernels(tmp_path):
    """On the CPU backend a fused kernel is C++-compiled into MLX's cache under $TMPDIR at first
    use; ONNXRUNTIME_EP_MLX_NO_FUSE=1 compiles the closure without generating one."""
    model = tmp_path / "chain.onnx"
    model.write_bytes(CHAIN)
    python = str(Path(__file__).resolve().parents[2] / "python")
    generated = {}
    for fuse in ("0", "1"):
        tmp = tmp_path / f"tmp-nofuse-{fuse}"
        tmp.mkdir()
        env = {**os.environ, "TMPDIR": str(tmp), "ONNXRUNTIME_EP_MLX_NO_FUSE": fuse, "ONNXRUNTIME_EP_MLX_DEVICE": "cpu"}
        subprocess.run([sys.executable, "-c", FUSION_PROBE.format(python=python, model=str(model))],
                       env=env, check=True, timeout=300)
        generated[fuse] = list(tmp.rglob("*.so"))
    assert generated["0"], "with fusion, MLX's CPU backend generates a kernel for the chain"
    assert not generated["1"], generated["1"]


# x [2, 12] and a mask m [1, T] whose length changes run to run, as an LLM's attention mask:
# the nodes reading m alone (the prologue) run eagerly, the rest replays compiled. y reshapes x
# to [-1, T], so the compiled rest depends on the value of Shape(m)[1], and a replay must never
# reuse a trace made for another T; z scales x by m's sum.
PROLOGUE = make_model(
    [
        helper.make_node("Shape", ["m"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["length"], axis=0),
        helper.make_node("Concat", ["minus_one", "length"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("ReduceSum", ["m", "axes"], ["total"], keepdims=1),
        helper.make_node("Cast", ["total"], ["scale"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "scale"], ["z"]),
    ],
    [tensor("x", shape=[2, 12]), tensor("m", TensorProto.INT64, shape=[1, "T"])],
    [tensor("y"), tensor("z")],
    initializers=[
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ],
)


def prologue_feeds(lengths):
    rng = np.random.default_rng(5)
    return [{"x": rng.standard_normal((2, 12)).astype(np.float32), "m": rng.integers(0, 3, (1, t))} for t in lengths]


def run_split_model(model, feed_list, monkeypatch, capfd):
    """Every feed through one compiling MLX session; all outputs, and the EP's summary."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.delenv("ONNXRUNTIME_EP_MLX_NO_COMPILE", raising=False)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    outputs = [session.run(None, f) for f in feed_list]
    del session
    gc.collect()
    return outputs, capfd.readouterr().err


def test_inputs_that_reach_only_a_prologue_change_length_without_a_new_trace_per_shape(monkeypatch, capfd):
    lengths = [3, 4, 6, 3, 4, 6, 6, 3]
    feed_list = prologue_feeds(lengths)
    outputs, summary = run_split_model(PROLOGUE, feed_list, monkeypatch, capfd)
    for f, (y, z) in zip(feed_list, outputs):
        np.testing.assert_array_equal(y, f["x"].reshape(-1, f["m"].shape[1]))
        np.testing.assert_allclose(z, f["x"] * f["m"].sum(), rtol=1e-6)
    # Run 1 is a first sighting (eager); run 2 changes m's length: a split, its body's key
    # first seen (eager); runs 3-5 trace the body once per value of Shape(m)[1], which y's
    # shape depends on; run 6 replays T=6's trace; run 7 repeats run 6's shapes (not a split:
    # its key is first seen, eager); run 8 replays T=3's.
    assert "shape-keyed path, 3 trace(s), 2 cache hit(s) (5 with an eager prologue)" in summary, summary


def test_a_node_reading_the_changed_input_with_others_keeps_shape_keys(monkeypatch, capfd):
    """m is read by a node that also reads n: nothing can be split off, every length is a new key."""
    model = make_model(
        [helper.make_node("Mul", ["m", "n"], ["y"]), helper.make_node("ReduceSum", ["m", "axes"], ["s"], keepdims=1)],
        [tensor("m", TensorProto.INT64, shape=[1, "T"]), tensor("n", TensorProto.INT64, shape=[1, 1])],
        [tensor("y", TensorProto.INT64), tensor("s", TensorProto.INT64)],
        initializers=[numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    feed_list = [{"m": np.arange(t, dtype=np.int64)[None], "n": np.array([[t]], np.int64)} for t in (3, 4, 4, 4, 5)]
    outputs, summary = run_split_model(model, feed_list, monkeypatch, capfd)
    for f, (y, s) in zip(feed_list, outputs):
        np.testing.assert_array_equal(y, f["m"] * f["n"])
        np.testing.assert_array_equal(s, f["m"].sum(1, keepdims=True))
    assert "shape-keyed path, 1 trace(s), 1 cache hit(s);" in summary, summary
