"""Compiled capture: traced once, compiled by MLX, replayed; eager fallback and kill switch."""

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import helper

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
