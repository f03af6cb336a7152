"""The `precision` option: float32 graphs computed in float16 or bfloat16, with the ops the table
marks `precision = Float32` (reductions, most normalisations...) kept in float32 and those it marks
`Widens` (Softmax, LayerNormalization) taking the half type and accumulating in float32."""

import gc
import re

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, cpu_outputs, kernel_placements, make_model, mlx_devices, profile_prefix, tensor

F = TensorProto.FLOAT


def run(model, feeds, precision, runs=3, **extra):
    """Outputs of `runs` runs (eager, then compiled) of an MLX-first session with `precision`,
    checked to be all on MLX."""
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = profile_prefix("mlx_ep_precision")
    so.add_provider_for_devices(mlx_devices(), {"precision": precision, "verbose": "1", **extra})
    session = ort.InferenceSession(model, so)
    assert session.get_providers()[0] == MLX
    outputs = [session.run(None, feeds) for _ in range(runs)]
    assert {p for _, p in kernel_placements(session)} == {MLX}
    for later in outputs[1:]:
        for a, b in zip(outputs[0], later):
            np.testing.assert_array_equal(a, b)
    return outputs[0]


def summary_of_precision(capfd):
    """(name, nodes in the half type, nodes, constants rounded) from the session summary,
    printed when the session is released."""
    gc.collect()
    summary = capfd.readouterr().err
    found = re.search(r"precision (\w+): (\d+) of (\d+) node\(s\) in \w+, (\d+) constant\(s\) rounded", summary)
    assert found, summary
    name, *counts = found.groups()
    return (name, *(int(n) for n in counts))


def scaled_sum(through_mul):
    """ReduceSum(x) or ReduceSum(x · 1): x's 1 + 2^-12 rounds to 1 in float16."""
    nodes = [helper.make_node("ReduceSum", ["m" if through_mul else "x"], ["y"], keepdims=0)]
    inits = []
    if through_mul:
        nodes.insert(0, helper.make_node("Mul", ["x", "one"], ["m"]))
        inits = [numpy_helper.from_array(np.ones([1], np.float32), "one")]
    return make_model(nodes, [tensor("x", shape=[4096])], [tensor("y")], initializers=inits, opset=13)


def test_float32_ops_read_float32_and_the_rest_compute_in_half(capfd):
    x = np.full(4096, 1 + 2**-12, np.float32)
    # ReduceSum computes in float32 (the table says so): the input reaches it unrounded.
    (direct,) = run(scaled_sum(False), {"x": x}, "fp16")
    assert direct.dtype == np.float32 and direct == 4097.0
    assert summary_of_precision(capfd) == ("fp16", 0, 1, 0)
    # The Mul before it computes in float16, whose x is 1 and whose product it hands on.
    (rounded,) = run(scaled_sum(True), {"x": x}, "fp16")
    assert rounded == 4096.0
    assert summary_of_precision(capfd) == ("fp16", 1, 2, 1)
    # As the graph says without the option.
    (exact,) = run(scaled_sum(True), {"x": x}, "fp32")
    assert exact == np.float32(4097.0)


@pytest.mark.parametrize("compile_after", ["1", "0"], ids=["eager_first", "traced_first"])
@pytest.mark.parametrize("precision, want", [("fp16", np.inf), ("bf16", 90112.0), ("fp32", 90000.0)])
def test_the_half_type_is_the_one_asked_for(precision, want, compile_after):
    """300 · 300: beyond float16's range (65504), bfloat16's nearest is 90112; the constant
    rounded at an eager first run, or inside the trace when the first run compiles."""
    inits = [numpy_helper.from_array(np.array([300.0], np.float32), "k")]
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Mul", ["a", "k"], ["y"])]
    model = make_model(nodes, [tensor("x", shape=[2])], [tensor("y")], initializers=inits)
    (y,) = run(model, {"x": np.ones(2, np.float32)}, precision, compile_after=compile_after)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [want, want])


LOWEST = float(np.finfo(np.float32).min)
BF16_LARGEST = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


@pytest.mark.parametrize(
    "precision, k, want",
    [
        ("fp16", [LOWEST, 7e4, 3.4e38, np.inf, -np.inf, np.nan, 1.5], [-0.0, 65504, 65504, np.inf, -np.inf, np.nan, 1.5]),
        ("bf16", [LOWEST, 3.4e38, np.inf, -np.inf, np.nan, 1.5], [-0.0, BF16_LARGEST, np.inf, -np.inf, np.nan, 1.5]),
    ],
)
def test_constants_past_the_half_range_are_clamped_not_infinite(precision, k, want):
    """A finite constant past the half type's range rounds to its largest finite value of the
    same sign (an exported mask fill of float32's lowest times 0 stays 0, not NaN); infinities
    and NaN stay what they are."""
    inits = [numpy_helper.from_array(np.array(k, np.float32), "k")]
    model = make_model([helper.make_node("Mul", ["x", "k"], ["y"])], [tensor("x", shape=[len(k)])], [tensor("y")],
                       initializers=inits)
    x = np.ones(len(k), np.float32)
    x[0] = 0
    (y,) = run(model, {"x": x}, precision)
    np.testing.assert_array_equal(y, np.array(want, np.float32))


def encoder_block(rng, width=64, tokens=16):
    """MatMul + bias, attention scores, Softmax, residual, LayerNormalization, Gelu-like MLP."""
    w = lambda *shape: numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))
    inits = [w(width, width), w(width, width), w(width, 4 * width), w(4 * width, width)]
    for init, name in zip(inits, ["wq", "wk", "w1", "w2"]):
        init.name = name
    inits += [numpy_helper.from_array(np.ones(width, np.float32), "gamma"),
              numpy_helper.from_array(np.zeros(width, np.float32), "beta"),
              numpy_helper.from_array(np.array(1 / np.sqrt(width), np.float32), "scale")]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["a"]),
        helper.make_node("Add", ["a", "x"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "w1"], ["h"]),
        helper.make_node("Sigmoid", ["h"], ["g"]),
        helper.make_node("Mul", ["h", "g"], ["hg"]),
        helper.make_node("MatMul", ["hg", "w2"], ["y"]),
    ]
    return make_model(nodes, [tensor("x", shape=[2, tokens, width])], [tensor("y")], initializers=inits)


def conv_block(rng, channels=16):
    """Conv, BatchNormalization, Relu, MaxPool, GlobalAveragePool, Gemm."""
    arr = lambda name, a: numpy_helper.from_array(a.astype(np.float32), name)
    inits = [
        arr("w", rng.standard_normal((channels, 3, 3, 3)) / 5),
        arr("b", rng.standard_normal(channels) / 10),
        arr("bn_scale", rng.uniform(0.5, 1.5, channels)),
        arr("bn_bias", rng.standard_normal(channels) / 10),
        arr("bn_mean", rng.standard_normal(channels) / 10),
        arr("bn_var", rng.uniform(0.5, 1.5, channels)),
        arr("fc", rng.standard_normal((10, channels)) / 4),
        arr("fc_b", np.zeros(10)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["m"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], transB=1),
    ]
    return make_model(nodes, [tensor("x", shape=[2, 3, 32, 32])], [tensor("y")], initializers=inits)


@pytest.mark.parametrize("precision, tolerance", [("fp16", 1e-2), ("bf16", 6e-2)])
@pytest.mark.parametrize("block", [encoder_block, conv_block])
def test_models_in_half_precision_stay_close_to_float32(block, precision, tolerance, capfd):
    """Whole blocks: within the half type's rounding of ORT's float32 answer, not equal to it
    (so the half type really ran), every float32 node but the table's float32 ones in half."""
    rng = np.random.default_rng(3)
    model = block(rng)
    shape = [2, 16, 64] if block is encoder_block else [2, 3, 32, 32]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    (want,) = cpu_outputs(model, feeds)
    capfd.readouterr()
    (got,) = run(model, feeds, precision)
    assert got.dtype == np.float32
    scale = np.abs(want).max()
    difference = np.abs(got - want).max() / scale
    assert 0 < difference < tolerance, difference
    name, computing, nodes, rounded = summary_of_precision(capfd)
    # Every node: LayerNormalization and Softmax take the half type and accumulate in float32.
    assert (name, computing) == (precision, nodes)
    assert rounded > 0


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_softmax_takes_the_half_type_and_accumulates_in_float32(precision, capfd):
    """Softmax is marked `precision = Widens`: its input arrives in the half type, it sums in
    float32 and rounds once, so it answers the exact softmax of the rounded input, rounded,
    within one unit in the last place (4,096 terms summed in the half type would be far off)."""
    x = np.random.default_rng(8).standard_normal([2, 4096]).astype(np.float32) * 3
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [tensor("x", F, [2, 4096])],
                       [tensor("y", F)])
    (got,) = run(model, {"x": x}, precision)
    half = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}[precision]
    rounded = x.astype(half).astype(np.float64)
    exact = np.exp(rounded - rounded.max(-1, keepdims=True))
    exact /= exact.sum(-1, keepdims=True)
    ulp = {"fp16": 2.0**-10, "bf16": 2.0**-7}[precision]
    subnormal = float(ml_dtypes.finfo(half).smallest_subnormal)  # where ulps are absolute
    np.testing.assert_allclose(got, exact.astype(half).astype(np.float32), rtol=ulp, atol=subnormal)
    assert summary_of_precision(capfd)[:3] == (precision, 1, 1)


def layer_norm_model(rows, params, weights):
    """A LayerNormalization over [rows, width] float32 X with `params` (Scale, then B if there)
    as initializers or as fed inputs (`weights`); the model and the feeds besides X."""
    width = len(params["scale"])
    node = helper.make_node("LayerNormalization", ["x", *params], ["y"], axis=-1)
    if weights == "initializers":
        inits, inputs, feeds = [numpy_helper.from_array(v, k) for k, v in params.items()], [], {}
    else:
        inits, inputs, feeds = [], [tensor(k, F, [width]) for k in params], params
    model = make_model([node], [tensor("x", F, [rows, width]), *inputs], [tensor("y", F)], initializers=inits,
                       opset=17)
    return model, feeds


@pytest.mark.parametrize("weights", ["initializers", "inputs"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_layer_norm_takes_the_half_type_with_float32_weights(precision, with_bias, weights, capfd):
    """LayerNormalization widens: X arrives in the half type, Scale and B stay float32 (not
    rounded, whether initializers or fed), the statistics and the affine step run in float32 and
    Y is rounded once, so it answers the exact layer norm of the rounded input, rounded, within
    one unit in the last place. An offset mean (a variance that would cancel) and 3,000 terms a
    row."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal([4, 3000]) * 2 + 30).astype(np.float32)
    scale = (rng.standard_normal(3000) + 1 + 2.0**-13).astype(np.float32)
    bias = rng.standard_normal(3000).astype(np.float32) / 7
    model, feeds = layer_norm_model(4, {"scale": scale} | ({"b": bias} if with_bias else {}), weights)
    (got,) = run(model, {"x": x, **feeds}, precision)
    half = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}[precision]
    rounded = x.astype(half).astype(np.float64)
    mean = rounded.mean(-1, keepdims=True)
    normalised = (rounded - mean) / np.sqrt(((rounded - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    exact = normalised * scale.astype(np.float64) + (bias.astype(np.float64) if with_bias else 0)
    ulp = {"fp16": 2.0**-10, "bf16": 2.0**-7}[precision]
    np.testing.assert_allclose(got, exact.astype(half).astype(np.float32), rtol=ulp, atol=ulp / 64)
    # The node in the half type, and no constant rounded: the weights stay float32.
    assert summary_of_precision(capfd) == (precision, 1, 1, 0)


@pytest.mark.parametrize("weights", ["initializers", "inputs"])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_layer_norm_weights_the_half_type_cannot_hold_stay_exact(precision, weights):
    """Scale 1000.25 is 1000 in float16 and bfloat16. Over rows of ±1 (normalised to ±1, up
    to epsilon) with B -1000, Y is 0.2449... where the scale stays float32 and -0.005 where it
    was rounded: the weights reach the norm unrounded, as initializers and as fed inputs."""
    x = np.tile(np.array([1.0, -1.0], np.float32), [2, 64])
    params = {"scale": np.full(128, 1000.25, np.float32), "b": np.full(128, -1000.0, np.float32)}
    model, feeds = layer_norm_model(2, params, weights)
    (got,) = run(model, {"x": x, **feeds}, precision)
    normalised = 1 / np.sqrt(1 + 1e-5)
    half = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}[precision]
    want = np.array([1000.25 * normalised - 1000, -1000.25 * normalised - 1000]).astype(half).astype(np.float32)
    ulp = {"fp16": 2.0**-10, "bf16": 2.0**-7}[precision]
    np.testing.assert_allclose(got, np.tile(want, [2, 64]), rtol=ulp, atol=ulp)


def test_without_the_option_nothing_changes(capfd):
    rng = np.random.default_rng(4)
    model = conv_block(rng)
    feeds = {"x": rng.standard_normal([2, 3, 32, 32]).astype(np.float32)}
    (want,) = cpu_outputs(model, feeds)
    (got,) = run(model, feeds, "fp32")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    gc.collect()
    assert "precision" not in capfd.readouterr().err


def test_ops_whose_meaning_is_the_source_type_keep_float32():
    """BitCast reinterprets its input's bytes and CastLike converts its input's values: rounded
    to float16 first, BitCast to int32 would halve the last axis (found running the op suite
    under `precision=fp16`)."""
    x = np.array([[1.5, -2.25, 3.0e-8, 70000.0]], np.float32)
    nodes = [helper.make_node("BitCast", ["x"], ["bits"], to=TensorProto.INT32),
             helper.make_node("CastLike", ["x", "like"], ["same"])]
    model = make_model(nodes, [tensor("x", shape=[1, 4]), tensor("like", TensorProto.INT64, [1])],
                       [tensor("bits", TensorProto.INT32), tensor("same", TensorProto.INT64)], opset=26)
    bits, same = run(model, {"x": x, "like": np.zeros(1, np.int64)}, "fp16")
    np.testing.assert_array_equal(bits, x.view(np.int32))
    np.testing.assert_array_equal(same, x.astype(np.int64))
