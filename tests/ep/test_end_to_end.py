"""The EP loaded by ORT: claims, fuses, runs on MLX, and answers like ORT's CPU EP."""

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor


def test_add_runs_on_mlx_and_matches_cpu():
    model = make_model([helper.make_node("Add", ["a", "b"], ["c"])], [tensor("a", shape=[2, 3]), tensor("b", shape=[3])], [tensor("c")])
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2, 3], np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert len(run.kernels) == 1 and run.kernels[0][0].startswith("MLXExecutionProvider_")
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


def test_a_chain_with_initializers_and_several_outputs_is_one_subgraph():
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["m"]),
        helper.make_node("Tanh", ["m"], ["t"]),
        helper.make_node("Sigmoid", ["m"], ["s"]),
        helper.make_node("Add", ["t", "s"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=["batch", 4])], [tensor("y"), tensor("t")], [w])
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert len(run.kernels) == 1, run.kernels
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_an_unclaimed_node_in_the_middle_splits_into_convex_subgraphs():
    # a = x + x; a -> Cast(double) -> Cast(float) (float64: declined, CPU) -> c; b = a - x;
    # y = c + b. The path through the CPU casts keeps `y`'s Add out of `a`'s subgraph.
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"]),
        helper.make_node("Cast", ["a"], ["a64"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["a64"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["a", "x"], ["b"]),
        helper.make_node("Add", ["c", "b"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[2, 2])], [tensor("y")])
    feeds = {"x": np.array([[1, 2], [3, 4]], np.float32)}
    run = Run(model, feeds, optimize=False)  # else ORT removes the Cast pair
    # Two MLX subgraphs: {a, b} and {y} (ORT's profile does not list the CPU Cast kernels).
    providers = [p for _, p in run.kernels]
    assert providers.count(MLX) == 2, run.kernels
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0])


def test_absent_optional_inputs_and_zero_size_tensors():
    clip = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    model = make_model([clip], [tensor("x", shape=[0, 3]), tensor("hi", shape=[])], [tensor("y")], opset=13)
    feeds = {"x": np.zeros((0, 3), np.float32), "hi": np.array(1.0, np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert run.outputs[0].shape == (0, 3)
    feeds = {"x": np.array([[-5, 0.5, 5]], np.float32), "hi": np.array(1.0, np.float32)}
    model = make_model([clip], [tensor("x", shape=[1, 3]), tensor("hi", shape=[])], [tensor("y")], opset=13)
    np.testing.assert_array_equal(Run(model, feeds).outputs[0], [[-5, 0.5, 1]])


def test_declined_nodes_stay_on_cpu_with_a_reason(capfd, monkeypatch):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_CLAIM_DEBUG", "1")
    model = make_model(
        [helper.make_node("Add", ["a", "a"], ["b"], name="double_add")],
        [tensor("a", TensorProto.DOUBLE, [2])],
        [tensor("b", TensorProto.DOUBLE)],
    )
    run = Run(model, {"a": np.array([1, 2], np.float64)})
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}
    err = capfd.readouterr().err
    assert "declined 'double_add' (Add): 'A' is f64" in err


def test_runtime_mlx_errors_surface_as_ort_errors_and_the_process_lives_on():
    model = make_model([helper.make_node("Add", ["a", "b"], ["c"], name="bad_add")], [tensor("a", shape=["n"]), tensor("b", shape=["m"])], [tensor("c")])
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()  # else ORT's Python binding silently retries on CPU
    with pytest.raises(Exception) as failure:
        session.run(None, {"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)})
    message = str(failure.value)
    assert "node 'bad_add' (Add)" in message and "broadcast" in message, message
    ok = session.run(None, {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)})
    np.testing.assert_array_equal(ok[0], [2, 2])


def test_explain_report_lists_every_node(tmp_path, monkeypatch):
    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    # com.microsoft Inverse has no MLX lowering.
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r"),
             helper.make_node("Inverse", ["r"], ["y"], name="mm", domain="com.microsoft")]
    model = make_model(nodes, [tensor("x", shape=[2, 2])], [tensor("y")], domains=[("com.microsoft", 1)])
    ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    import json

    lines = [json.loads(line) for line in report.read_text().splitlines()]
    by_node = {line["node"]: line for line in lines}
    assert by_node["r"]["claimed"] and by_node["r"]["cluster"] == 0
    assert not by_node["mm"]["claimed"] and "no MLX lowering" in by_node["mm"]["reason"]


def test_verbose_summary_at_teardown(capfd, monkeypatch):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [tensor("x", shape=[4])], [tensor("y")])
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.run(None, {"x": np.ones(4, np.float32)})
    del session
    import gc

    gc.collect()
    err = capfd.readouterr().err
    assert "session summary: 1/1 nodes claimed in 1 subgraph(s)" in err and "1 run(s)" in err, err


def test_per_op_profile_in_the_summary_counts_runs_after_the_first(capfd, monkeypatch):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROFILE_OPS", "1")
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Exp", ["n"], ["e"]),
             helper.make_node("Neg", ["e"], ["y"])]
    model = make_model(nodes, [tensor("x", shape=[4])], [tensor("y")])
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    x = np.linspace(-1, 1, 4).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(session.run(None, {"x": x})[0], -np.exp(-x), rtol=1e-6)
    del session
    import gc

    gc.collect()
    err = capfd.readouterr().err
    assert "per-op profile" in err, err
    # Three runs, the first left out: each Neg node twice, the Exp node twice; never compiled.
    # One MLX array (primitive) per Neg: what a lowering costs on the GPU is counted too.
    assert re.search(r"\] {3}Neg: 4 node run\(s\), lowering [\d.]+ ms, MLX [\d.]+ ms \([\d.]+%\), 1\.0 arrays a node", err), err
    assert re.search(r"\] {3}Exp: 2 node run\(s\)", err), err
    assert "eager path, 0 trace(s)" in err, err


def test_multi_output_nodes_feed_several_consumers_and_graph_outputs():
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3),
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Neg", ["c"], ["nc"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[2, 7])], [tensor("ab"), tensor("nc"), tensor("b")], opset=18)
    feeds = {"x": np.arange(14, dtype=np.float32).reshape(2, 7)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        np.testing.assert_array_equal(got, want)
    assert [o.shape for o in run.outputs] == [(2, 3), (2, 1), (2, 3)]
