"""A linear layer spelled out as MatMul then Add of a bias runs as one MLX addmm (a GPU product
whose epilogue adds the bias) where the MatMul's answer has no other reader and the plan's shapes
are fixed: the session summary counts it, and it answers as ORT's CPU EP does, eager, traced and
replayed. Where either condition fails (the product also read elsewhere or handed out, a bias
that is not one row, a plan that may replay shapeless) the nodes run as they are, and right."""

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import COMPILE_MODES, make_model, summary_of_runs, tensor

RNG = np.random.default_rng(23)
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def linear(dtype=np.float32, bias_shape=(12,), bias_first=False, product_out=False, product_read_twice=False,
           reshaped=True):
    """x [2, 5, 8] · W [8, 12] + bias, then (when `reshaped`) a Reshape to heads, which makes the
    plan shape-keyed; with `product_out` the product is a graph output too, with
    `product_read_twice` a Relu reads it as well. (ORT's own optimizer turns a 2-D MatMul and
    its Add into a Gemm before the EP sees them.)"""
    n = helper.make_node
    elem = ELEM[dtype]
    inits = [numpy_helper.from_array(RNG.standard_normal([8, 12]).astype(dtype), "w"),
             numpy_helper.from_array(RNG.standard_normal(bias_shape).astype(dtype), "bias")]
    nodes = [n("MatMul", ["x", "w"], ["product"]),
             n("Add", ["bias", "product"] if bias_first else ["product", "bias"], ["sum"])]
    outputs = []
    if reshaped:
        inits.append(numpy_helper.from_array(np.array([0, 0, 3, 4], np.int64), "heads"))
        nodes.append(n("Reshape", ["sum", "heads"], ["y"]))
    else:
        nodes.append(n("Relu", ["sum"], ["y"]))
    outputs.append(tensor("y", elem))
    if product_out:
        outputs.append(tensor("product", elem))
    if product_read_twice:
        nodes.append(n("Relu", ["product"], ["also"]))
        outputs.append(tensor("also", elem))
    model = make_model(nodes, [tensor("x", elem, ["batch", 5, 8])], outputs, initializers=inits)
    return model, {"x": RNG.standard_normal([2, 5, 8]).astype(dtype)}


def fused_count(model, feeds_list, tolerance, monkeypatch, capfd, mode="eager_then_compiled"):
    """Runs each feeds of `feeds_list` (3 times) all on MLX, each as ORT's CPU EP answers;
    returns how many lowerings the session summary says fused a bias into its MatMul."""
    summary = summary_of_runs(model, feeds_list, tolerance, monkeypatch, capfd, COMPILE_MODES[mode])
    return sum(int(c) for c in re.findall(r"(\d+) bias add\(s\) fused into their MatMul", summary))


@pytest.mark.parametrize("mode", sorted(COMPILE_MODES))
@pytest.mark.parametrize("bias_first", [False, True], ids=["product_first", "bias_first"])
def test_a_linear_layer_runs_as_one_biased_product(mode, bias_first, monkeypatch, capfd):
    model, feeds = linear(bias_first=bias_first)
    # Eager runs lower every time; a compiled plan lowers once to trace, then replays.
    want = {"eager_only": 3, "eager_then_compiled": 2, "traced_first": 1}[mode]
    assert fused_count(model, [feeds], 1e-5, monkeypatch, capfd, mode) == want


@pytest.mark.parametrize(
    "case",
    [dict(dtype=np.float16), dict(bias_shape=(1, 12)), dict(bias_shape=(1, 1, 12))],
    ids=["float16", "bias-1xN", "bias-1x1xN"],
)
def test_linear_variants_fuse(case, monkeypatch, capfd):
    model, feeds = linear(**case)
    tolerance = 2e-2 if case.get("dtype") == np.float16 else 1e-5
    assert fused_count(model, [feeds], tolerance, monkeypatch, capfd) == 2


def test_a_new_batch_size_is_a_new_trace_and_right(monkeypatch, capfd):
    """The bias is broadcast to the rows of the shapes traced: another batch size retraces."""
    model, feeds = linear()
    other = {"x": RNG.standard_normal([7, 5, 8]).astype(np.float32)}
    # Eager then traced for each shape: two fused lowerings a shape.
    assert fused_count(model, [feeds, other, feeds], 1e-5, monkeypatch, capfd) == 4


@pytest.mark.parametrize(
    "case",
    [
        dict(product_out=True),  # the product is handed out: computed anyway
        dict(product_read_twice=True),  # another node reads the product
        dict(bias_shape=(5, 12)),  # a bias per row, not one row
        dict(reshaped=False),  # MatMul, Add and Relu alone: a plan that may replay shapeless
    ],
    ids=["product-is-an-output", "product-read-twice", "bias-per-row", "shapeless-plan"],
)
def test_what_is_not_fused_runs_as_it_is(case, monkeypatch, capfd):
    model, feeds = linear(**case)
    other = {"x": RNG.standard_normal([3, 5, 8]).astype(np.float32)}
    assert fused_count(model, [feeds, other], 1e-5, monkeypatch, capfd) == 0
