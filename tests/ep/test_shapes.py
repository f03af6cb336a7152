"""Graphs whose shapes flow through Shape -> Gather -> Concat -> Reshape (the pattern exporters
emit for dynamic batch and sequence) run as one MLX subgraph, eagerly and compiled."""

import gc

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor


def dynamic_reshape_model():
    # x: [batch, seq, 8] -> [batch, seq, 2, 4] with batch and seq read from x's shape.
    nodes = [
        helper.make_node("Shape", ["x"], ["dims"]),
        helper.make_node("Gather", ["dims", "i0"], ["batch"], axis=0),
        helper.make_node("Gather", ["dims", "i1"], ["seq"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        helper.make_node("Unsqueeze", ["seq", "axis0"], ["seq1"]),
        helper.make_node("Concat", ["batch1", "seq1", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(0, np.int64), "i0"),
        numpy_helper.from_array(np.array(1, np.int64), "i1"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([2, 4], np.int64), "heads"),
    ]
    return make_model(nodes, [tensor("x", shape=["batch", "seq", 8])], [tensor("y", shape=None)], constants, opset=14)


def test_shape_gather_concat_reshape_is_one_mlx_subgraph():
    model = dynamic_reshape_model()
    for shape in [(2, 3, 8), (1, 5, 8)]:
        feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        run = Run(model, feeds, optimize=False)
        run.assert_all_on_mlx()
        assert len(run.kernels) == 1, run.kernels
        np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


def test_shape_derived_values_compile_per_shape(monkeypatch, capfd):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_COMPILE_AFTER", "0")
    model = dynamic_reshape_model()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=[MLX, "CPUExecutionProvider"])
    for shape in [(2, 3, 8), (2, 3, 8), (4, 1, 8)]:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        want = np.maximum(x.reshape(shape[0], shape[1], 2, 4).transpose(0, 2, 1, 3), 0)
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], want)
    del session
    gc.collect()
    summary = capfd.readouterr().err
    assert "shape-keyed path, 2 trace(s), 1 cache hit(s)" in summary, summary
