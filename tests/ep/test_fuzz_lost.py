"""Lost fallbacks and CPU-only errors found by fuzzing (issue 13): nodes the EP claimed and then
failed where ORT's CPU EP answers, and inputs ORT's CPU EP refuses that the EP used to answer.
Each test is built from the fuzz case that found it (ids `s1-<entry>-<k>`, `make fuzz` seed 1)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor


def assert_same_as_cpu(model, feeds):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    return run


def mlx_session(model):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()  # else ORT's binding retries a failed run on the CPU EP
    return session


def assert_both_fail(model, feeds, cpu_says, mlx_says):
    with pytest.raises(Exception, match=cpu_says):
        cpu_outputs(model, feeds)
    with pytest.raises(Exception, match=mlx_says):
        mlx_session(model).run(None, feeds)


# --- Pools: an empty batch lets any other axis be 0 (s1-MaxPool-1..7-43) -----------------------


@pytest.mark.parametrize("op,opset", [("MaxPool", 7), ("MaxPool", 12), ("AveragePool", 19), ("LpPool", 18)])
@pytest.mark.parametrize("shape", [(0, 3, 7, 0), (0, 0, 7, 8), (0, 3, 0, 8)])
def test_pool_with_empty_batch_and_another_zero_axis(op, opset, shape):
    # ORT's rule is `Size() > 0 || N == 0`; the EP refused any zero axis but N.
    attrs = {"kernel_shape": [2, 3], "strides": [1, 2], "auto_pad": "SAME_LOWER"}
    model = make_model(
        [helper.make_node(op, ["x"], ["y"], name="pool", **attrs)],
        [tensor("x", shape=["n", "c", "h", "w"])],
        [tensor("y")],
        opset=opset,
    )
    assert_same_as_cpu(model, {"x": np.zeros(shape, np.float32)})


def test_global_lp_pool_with_empty_batch_and_empty_spatial_axis():
    model = make_model(
        [helper.make_node("GlobalLpPool", ["x"], ["y"], name="pool")],
        [tensor("x", shape=["n", "c", "h", "w"])],
        [tensor("y")],
    )
    assert_same_as_cpu(model, {"x": np.zeros((0, 3, 7, 0), np.float32)})


def test_pool_with_a_batch_and_a_zero_axis_fails_as_ort():
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 3])],
        [tensor("x", shape=["n", "c", "h", "w"])],
        [tensor("y")],
        opset=12,
    )
    assert_both_fail(model, {"x": np.zeros((1, 3, 7, 0), np.float32)}, "Only N can be zero", "only N may be 0")
