"""Fuzzer findings in the numeric families (recurrent, normalisation, Clip, Sum/Mean/Max/Min, MatMul,
ConvTranspose): where ORT's CPU EP refuses an attribute, a shape or a value, the MLX-first session
fails as well (an attribute is declined, a shape fails the lowering, a value fails a run-time check
naming the node); inputs ORT accepts still run on MLX and match it."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor

MS = [("com.microsoft", 1)]


def mlx_session(model):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()  # else ORT's binding retries a failed run on the CPU EP
    assert session.get_providers()[0] == MLX
    return session


def assert_both_fail(model, feeds, words=None, node_name=None):
    """ORT's CPU EP and the MLX-first session both fail, at session creation or at run time."""
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)
    with pytest.raises(Exception) as mlx_error:
        mlx_session(model).run(None, feeds)
    message = str(mlx_error.value)
    if node_name is not None:
        assert f"node '{node_name}'" in message, message
    if words is not None:
        assert words in message, message


def assert_matches_cpu_on_mlx(model, feeds, rtol=1e-5, atol=1e-6):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def rng():
    return np.random.default_rng(7)


# --- RNN, GRU, LSTM: sequence_lens outside [0, seq_length] -------------------------------------


def recurrent_model(op, opset, hidden=3, input_size=2, **attrs):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    node = helper.make_node(op, ["X", "W", "R", "B", "lens"], ["Y", "Y_h"], name="cell",
                            hidden_size=hidden, **attrs)
    model = make_model([node], [tensor("X"), tensor("W"), tensor("R"), tensor("B"),
                                tensor("lens", TensorProto.INT32)],
                       [tensor("Y"), tensor("Y_h")], opset=opset)
    r = rng()
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    weights = {
        "W": r.standard_normal((dirs, gates * hidden, input_size)).astype(np.float32),
        "R": r.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32),
        "B": r.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32),
    }
    return model, weights


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("opset", [13, 14])
@pytest.mark.parametrize("bad", [4, -1])
def test_recurrent_sequence_lens_out_of_range_fails_the_run(op, opset, bad):
    model, feeds = recurrent_model(op, opset, direction="bidirectional")
    feeds["X"] = rng().standard_normal((3, 2, 2)).astype(np.float32)  # seq_length 3, batch 2
    feeds["lens"] = np.array([2, bad], np.int32)
    assert_both_fail(model, feeds, "sequence_lens", "cell")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_sequence_lens_at_the_bounds_still_run_on_mlx(op):
    model, feeds = recurrent_model(op, 14, direction="bidirectional")
    feeds["X"] = rng().standard_normal((3, 2, 2)).astype(np.float32)
    feeds["lens"] = np.array([0, 3], np.int32)
    assert_matches_cpu_on_mlx(model, feeds, rtol=1e-4, atol=1e-5)


# --- com.microsoft EmbedLayerNormalization, SkipLayerNormalization ------------------------------


def embed_model(**attrs):
    node = helper.make_node("EmbedLayerNormalization",
                            ["ids", "segments", "word", "position", "segment", "gamma", "beta"],
                            ["out", "mask_index"], name="embed", domain="com.microsoft", **attrs)
    inputs = [tensor("ids", TensorProto.INT32), tensor("segments", TensorProto.INT32)] + [
        tensor(n) for n in ["word", "position", "segment", "gamma", "beta"]]
    model = make_model([node], inputs, [tensor("out"), tensor("mask_index", TensorProto.INT32)], domains=MS)
    r = rng()
    feeds = {
        "ids": np.array([[0, 1, 4]], np.int32),
        "segments": np.array([[0, 1, 1]], np.int32),
        "word": r.standard_normal((5, 4)).astype(np.float32),
        "position": r.standard_normal((3, 4)).astype(np.float32),
        "segment": r.standard_normal((2, 4)).astype(np.float32),
        "gamma": r.standard_normal(4).astype(np.float32),
        "beta": r.standard_normal(4).astype(np.float32),
    }
    return model, feeds


@pytest.mark.parametrize("what, ids", [
    ("ids", [[0, 5, 1]]), ("ids", [[0, -1, 1]]), ("segments", [[0, 2, 1]]), ("segments", [[-1, 0, 0]]),
])
def test_embed_layer_norm_ids_out_of_range_fail_the_run(what, ids):
    model, feeds = embed_model(epsilon=1e-5)
    feeds[what] = np.array(ids, np.int32)
    assert_both_fail(model, feeds, "out of range", "embed")


def test_embed_layer_norm_in_range_runs_on_mlx():
    model, feeds = embed_model(epsilon=1e-5)
    assert_matches_cpu_on_mlx(model, feeds, rtol=1e-4, atol=1e-5)


def test_embed_layer_norm_negative_epsilon_is_refused_as_on_cpu():
    model, feeds = embed_model(epsilon=-1.0)
    assert_both_fail(model, feeds)


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_layer_norm_negative_epsilon_is_refused_as_on_cpu(op):
    names = ["x", "skip", "gamma"] + (["beta"] if op == "SkipLayerNormalization" else [])
    node = helper.make_node(op, names, ["out"], domain="com.microsoft", epsilon=-0.5)
    model = make_model([node], [tensor(n) for n in names], [tensor("out")], domains=MS)
    r = rng()
    feeds = {n: r.standard_normal((2, 3, 4) if n in ("x", "skip") else (4,)).astype(np.float32)
             for n in names}
    assert_both_fail(model, feeds)


# --- LRN ---------------------------------------------------------------------------------------


def lrn_model(**attrs):
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn", **attrs)
    return make_model([node], [tensor("x")], [tensor("y")])


@pytest.mark.parametrize("attrs", [{"size": 2}, {"size": 3, "alpha": -1e-4}, {"size": 3, "beta": 0.0}])
def test_lrn_attributes_ort_refuses_are_declined(attrs):
    feeds = {"x": rng().standard_normal((1, 4, 2, 2)).astype(np.float32)}
    assert_both_fail(lrn_model(**attrs), feeds)


@pytest.mark.parametrize("shape", [(1, 4, 5), (1, 4, 2, 2, 2)])
def test_lrn_input_of_rank_other_than_4_fails(shape):
    feeds = {"x": rng().standard_normal(shape).astype(np.float32)}
    assert_both_fail(lrn_model(size=3), feeds, node_name="lrn")


# --- Dropout: ratio -----------------------------------------------------------------------------


def dropout_model(opset, ratio=None, initializer=False):
    """Dropout with its ratio as an input (opset 12+: fed, or an initializer) or an attribute."""
    if ratio is None or opset < 12:
        attrs = {} if ratio is None else {"ratio": float(ratio)}
        node = helper.make_node("Dropout", ["x"], ["y"], name="drop", **attrs)
        return make_model([node], [tensor("x")], [tensor("y")], opset=opset)
    node = helper.make_node("Dropout", ["x", "ratio"], ["y"], name="drop")
    value = np.asarray(ratio, np.float32)
    inits = [helper.make_tensor("ratio", TensorProto.FLOAT, value.shape, value.ravel())] if initializer else []
    inputs = [tensor("x")] + ([] if initializer else [tensor("ratio")])
    return make_model([node], inputs, [tensor("y")], opset=opset, initializers=inits)


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5, np.nan, np.inf])
@pytest.mark.parametrize("opset, initializer", [(12, False), (13, True), (22, False)])
def test_dropout_ratio_input_outside_0_1_fails_the_run(ratio, opset, initializer):
    model = dropout_model(opset, ratio, initializer)
    feeds = {"x": np.ones((2, 3), np.float32)} | ({} if initializer else {"ratio": np.array(ratio, np.float32)})
    assert_both_fail(model, feeds, "ratio must be in the range [0, 1)", "drop")


@pytest.mark.parametrize("shape", [(2,), (0,)])
def test_dropout_ratio_input_of_other_than_one_value_fails(shape):
    feeds = {"x": np.ones((2, 3), np.float32), "ratio": np.full(shape, 0.5, np.float32)}
    assert_both_fail(dropout_model(13, 0.5), feeds, "single value", "drop")


@pytest.mark.parametrize("ratio", [0.0, -0.0, 0.99999994, [0.5], [[0.25]]])
def test_dropout_ratio_input_in_0_1_runs_on_mlx(ratio):
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "ratio": np.asarray(ratio, np.float32)}
    assert_matches_cpu_on_mlx(dropout_model(13, 0.5), feeds, rtol=0, atol=0)


@pytest.mark.parametrize("opset", [7, 10])
def test_dropout_ratio_attribute_is_not_checked_as_on_cpu(opset):
    # Before opset 12 ORT's kernel does not look at the ratio attribute: 1.5 runs there too.
    assert_matches_cpu_on_mlx(dropout_model(opset, 1.5), {"x": np.ones((2, 3), np.float32)}, rtol=0, atol=0)


# --- Clip-6 ------------------------------------------------------------------------------------


def test_clip_6_with_min_above_max_is_refused_as_on_cpu():
    node = helper.make_node("Clip", ["x"], ["y"], min=1.0, max=0.0)
    model = make_model([node], [tensor("x")], [tensor("y")], opset=10)
    assert_both_fail(model, {"x": np.zeros(3, np.float32)})


def test_clip_6_with_equal_bounds_runs_on_mlx():
    node = helper.make_node("Clip", ["x"], ["y"], min=0.5, max=0.5)
    model = make_model([node], [tensor("x")], [tensor("y")], opset=10)
    assert_matches_cpu_on_mlx(model, {"x": np.array([-1, 0.5, 2], np.float32)})


# --- MeanVarianceNormalization, InstanceNormalization, GroupNormalization, LayerNormalization ----


def test_mean_variance_normalization_without_a_valid_axis_fails():
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn", axes=[4, -5])
    model = make_model([node], [tensor("x")], [tensor("y")])
    assert_both_fail(model, {"x": rng().standard_normal((2, 3, 2, 2)).astype(np.float32)}, node_name="mvn")


@pytest.mark.parametrize("scale_shape", [(2,), (1, 3)])
def test_instance_norm_scale_that_is_not_per_channel_fails(scale_shape):
    node = helper.make_node("InstanceNormalization", ["x", "scale", "b"], ["y"], name="inorm")
    model = make_model([node], [tensor("x"), tensor("scale"), tensor("b")], [tensor("y")])
    r = rng()
    feeds = {"x": r.standard_normal((2, 3, 4)).astype(np.float32),
             "scale": r.standard_normal(scale_shape).astype(np.float32),
             "b": r.standard_normal(scale_shape).astype(np.float32)}
    assert_both_fail(model, feeds, node_name="inorm")


@pytest.mark.parametrize("opset, params", [(18, 2), (21, 3)])
def test_group_norm_whose_channels_do_not_split_into_groups_fails(opset, params):
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], name="gnorm", num_groups=2)
    model = make_model([node], [tensor("x"), tensor("scale"), tensor("bias")], [tensor("y")], opset=opset)
    r = rng()
    feeds = {"x": r.standard_normal((1, 3, 2, 2)).astype(np.float32),  # 12 elements split in 2, 3 channels don't
             "scale": r.standard_normal(params).astype(np.float32),
             "bias": r.standard_normal(params).astype(np.float32)}
    assert_both_fail(model, feeds)


@pytest.mark.parametrize("op, domains", [("LayerNormalization", ()), ("SimplifiedLayerNormalization", ())])
def test_layer_norm_over_an_empty_extent_fails(op, domains):
    node = helper.make_node(op, ["x", "scale"], ["y"], name="lnorm", axis=1)
    model = make_model([node], [tensor("x"), tensor("scale")], [tensor("y")], domains=domains)
    feeds = {"x": np.zeros((2, 0, 3), np.float32), "scale": np.zeros((0, 3), np.float32)}
    assert_both_fail(model, feeds, node_name="lnorm")


# --- Sum, Mean, Max, Min before opset 8: no broadcasting ----------------------------------------


def variadic_model(op, opset):
    node = helper.make_node(op, ["a", "b"], ["y"], name="fold")
    return make_model([node], [tensor("a"), tensor("b")], [tensor("y")], opset=opset)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic_ops_before_opset_8_refuse_different_shapes(op):
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((1, 3), np.float32)}
    assert_both_fail(variadic_model(op, 7), feeds, node_name="fold")


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic_ops_broadcast_from_opset_8_and_run_equal_shapes_before(op):
    r = rng()
    a, b = r.standard_normal((2, 3)).astype(np.float32), r.standard_normal((1, 3)).astype(np.float32)
    assert_matches_cpu_on_mlx(variadic_model(op, 8), {"a": a, "b": b})
    assert_matches_cpu_on_mlx(variadic_model(op, 7), {"a": a, "b": np.broadcast_to(b, a.shape).copy()})


def test_rms_norm_over_an_empty_extent_fails():
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", axis=-1)
    model = make_model([node], [tensor("x"), tensor("scale")], [tensor("y")], opset=23)
    feeds = {"x": np.zeros((2, 0), np.float32), "scale": np.zeros(0, np.float32)}
    assert_both_fail(model, feeds, node_name="rms")


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_layer_norm_with_no_hidden_values_fails(op):
    node = helper.make_node(op, ["x", "skip", "gamma"], ["out"], name="skip", domain="com.microsoft")
    model = make_model([node], [tensor(n) for n in ["x", "skip", "gamma"]], [tensor("out")], domains=MS)
    feeds = {"x": np.zeros((2, 3, 0), np.float32), "skip": np.zeros((2, 3, 0), np.float32),
             "gamma": np.zeros(0, np.float32)}
    assert_both_fail(model, feeds, node_name="skip")


# --- Reductions: ORT's empty-tensor path, scalars, keepdims and noop_with_empty_axes as `== 1` ----


def reduce_model(op, opset, axes=None, elem=TensorProto.FLOAT, **attrs):
    inputs, inits = ["x"], []
    if axes is not None and (opset >= 18 or (op == "ReduceSum" and opset >= 13)):
        inputs.append("axes")
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes))
    elif axes is not None:
        attrs["axes"] = axes
    node = helper.make_node(op, inputs, ["y"], **attrs)
    return make_model([node], [tensor("x", elem)], [tensor("y", elem)], inits, opset=opset)


@pytest.mark.parametrize("op, opset, shape, axes, keepdims", [
    ("ReduceSum", 13, (0, 3, 4), [-3], 0),  # ORT's empty path ignores negative axes: (0, 3, 4)
    ("ReduceSum", 13, (0, 3), [1, -1], 1),
    ("ReduceMean", 18, (0, 3, 4), [0], 0),  # the mean of nothing is 0 there
    ("ReduceMax", 18, (2, 0, 4), [1], 1),
    ("ReduceL2", 11, (0, 3), None, 0),
    ("ReduceSum", 13, (0, 3), [5], 0),  # an out-of-range axis of an empty tensor is ignored too
])
def test_reductions_of_empty_tensors_match_ort(op, opset, shape, axes, keepdims):
    model = reduce_model(op, opset, axes, keepdims=keepdims)
    assert_matches_cpu_on_mlx(model, {"x": np.zeros(shape, np.float32)})
    assert Run(model, {"x": np.zeros(shape, np.float32)}).outputs[0].shape == \
        cpu_outputs(model, {"x": np.zeros(shape, np.float32)})[0].shape


@pytest.mark.parametrize("op, axes", [("ReduceSum", [0]), ("ReduceL2", [-1]), ("ReduceLogSumExp", [1]), ("ReduceMax", None)])
def test_reductions_of_a_scalar_ignore_the_axes(op, axes):
    model = reduce_model(op, 11, axes)
    assert_matches_cpu_on_mlx(model, {"x": np.array(-3.0, np.float32)})


def assert_left_to_cpu(model, feeds):
    run = Run(model, feeds)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}, run.kernels
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("keepdims", [2, -1])
def test_reduce_keepdims_other_than_0_or_1_is_left_to_ort(keepdims):
    # ORT's kernels read it as `== 1`, its references as nonzero: the EP declines, ORT decides.
    x = rng().standard_normal((2, 3)).astype(np.float32)
    assert_left_to_cpu(reduce_model("ReduceSum", 13, [1], keepdims=keepdims), {"x": x})
    assert_left_to_cpu(reduce_model("ReduceMean", 11, [0], keepdims=keepdims), {"x": x})
    assert_left_to_cpu(reduce_model("ReduceMean", 11, [1], keepdims=keepdims), {"x": np.zeros((0, 3), np.float32)})


def test_reduce_noop_with_empty_axes_other_than_0_or_1_is_left_to_ort():
    model = reduce_model("ReduceL1", 18, keepdims=0, noop_with_empty_axes=-1)
    assert_left_to_cpu(model, {"x": rng().standard_normal((2, 3, 4)).astype(np.float32)})


def test_reduce_sum_square_noop_saturates_int32():
    model = reduce_model("ReduceSumSquare", 18, elem=TensorProto.INT32, noop_with_empty_axes=1)
    x = np.array([[-2**31, 2**31 - 1, 46341, -3]], np.int32)
    assert_matches_cpu_on_mlx(model, {"x": x})


# --- Softmax, LogSoftmax, Hardmax: a 32-bit axis; no scalars ------------------------------------


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [2**63 - 1, 2**32 + 1, -(2**32) + 1])
def test_softmax_family_reads_the_axis_in_32_bits(op, opset, axis):
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    model = make_model([node], [tensor("x")], [tensor("y")], opset=opset)
    assert_matches_cpu_on_mlx(model, {"x": rng().standard_normal((2, 3, 4)).astype(np.float32)})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family_of_a_scalar_fails(op, opset):
    node = helper.make_node(op, ["x"], ["y"], name="sm")
    model = make_model([node], [tensor("x")], [tensor("y")], opset=opset)
    assert_both_fail(model, {"x": np.array(1.0, np.float32)}, node_name="sm")


# --- Clip-11 of bfloat16 without bounds --------------------------------------------------------


def test_bfloat16_clip_without_bounds_keeps_infinities():
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16), helper.make_node("Clip", ["xb"], ["yb"]),
             helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, [tensor("x")], [tensor("y")], opset=13)
    feeds = {"x": np.array([-np.inf, np.inf, 1.0, 3e38], np.float32)}
    run = Run(model, feeds)
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])
    assert MLX in run.providers_of_kernels()


# --- MatMul and FusedMatMul: the batch shapes ORT's helper refuses -----------------------------


def matmul_model(op="MatMul", a=None, b=None, **attrs):
    """A (Fused)MatMul; the operands' shapes declared when given (FusedMatMul with transA is claimed
    only for a B of known rank)."""
    domain = "com.microsoft" if op == "FusedMatMul" else ""
    node = helper.make_node(op, ["a", "b"], ["y"], name="mm", domain=domain, **attrs)
    return make_model([node], [tensor("a", shape=a), tensor("b", shape=b)], [tensor("y")],
                      domains=MS if domain else ())


@pytest.mark.parametrize("a, b", [((1, 3, 4), (0, 4, 5)), ((0, 3), (3,)), ((3,), (0, 3, 5)), ((2, 3), (0, 3, 4))])
def test_matmul_zero_batch_shapes_ort_refuses_fail(a, b):
    feeds = {"a": np.ones(a, np.float32), "b": np.ones(b, np.float32)}
    assert_both_fail(matmul_model(), feeds, "cannot broadcast", "mm")


@pytest.mark.parametrize("a, b", [((0, 3, 4), (1, 4, 5)), ((0, 3, 4), (0, 4, 5)), ((1, 2, 3), (4, 3, 2))])
def test_matmul_shapes_ort_accepts_still_run_on_mlx(a, b):
    r = rng()
    feeds = {"a": r.standard_normal(a).astype(np.float32), "b": r.standard_normal(b).astype(np.float32)}
    assert_matches_cpu_on_mlx(matmul_model(), feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a, b, attrs", [
    ((0, 4, 3), (5, 4), {"transA": 1, "transB": 1}),
    ((3, 2, 4, 5), (4, 5, 6), {"transBatchA": 1}),  # transBatch needs one rank >= 3 on both sides
    ((2, 3), (3, 4), {"transBatchB": 1}),
])
def test_fused_matmul_shapes_ort_refuses_fail(a, b, attrs):
    feeds = {"a": np.ones(a, np.float32), "b": np.ones(b, np.float32)}
    assert_both_fail(matmul_model("FusedMatMul", list(a), list(b), **attrs), feeds, node_name="mm")


def test_fused_matmul_float16_alpha_scales_before_rounding():
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", alpha=0.5)
    model = make_model([node], [tensor("a", TensorProto.FLOAT16), tensor("b", TensorProto.FLOAT16)],
                       [tensor("y", TensorProto.FLOAT16)], domains=MS)
    feeds = {"a": np.full((2, 3, 4), 200, np.float16), "b": np.full((4, 5), -100, np.float16)}  # A.B = -80000
    assert_matches_cpu_on_mlx(model, feeds, rtol=2e-3, atol=0)


# --- com.microsoft BiasGelu / FastGelu: a bias of the last axis only ----------------------------


@pytest.mark.parametrize("op", ["BiasGelu", "FastGelu"])
@pytest.mark.parametrize("x_shape, bias_shape", [((2, 3), (1,)), ((2, 3), (2, 3)), ((), (1,))])
def test_bias_gelu_bias_not_of_the_last_axis_fails(op, x_shape, bias_shape):
    node = helper.make_node(op, ["x", "bias"], ["y"], name="gelu", domain="com.microsoft")
    model = make_model([node], [tensor("x"), tensor("bias")], [tensor("y")], domains=MS)
    feeds = {"x": np.ones(x_shape, np.float32), "bias": np.ones(bias_shape, np.float32)}
    assert_both_fail(model, feeds, node_name="gelu")


# --- GroupNormalization of an empty tensor; Einsum ellipses -------------------------------------


@pytest.mark.parametrize("opset, params", [(18, 3), (21, 6)])
@pytest.mark.parametrize("shape", [(0, 6, 2), (2, 6, 0)])
def test_group_norm_of_an_empty_tensor_fails(opset, params, shape):
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], name="gnorm", num_groups=3)
    model = make_model([node], [tensor("x"), tensor("scale"), tensor("bias")], [tensor("y")], opset=opset)
    feeds = {"x": np.zeros(shape, np.float32), "scale": np.ones(params, np.float32),
             "bias": np.zeros(params, np.float32)}
    assert_both_fail(model, feeds, node_name="gnorm")


@pytest.mark.parametrize("equation, shapes", [("...i->i", [(1, 3)]), ("...ij,jk->ik", [(5, 2, 3), (3, 4)])])
def test_einsum_output_without_the_inputs_ellipsis_fails(equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], name="es", equation=equation)
    model = make_model([node], [tensor(n) for n in names], [tensor("y")], opset=13)
    assert_both_fail(model, {n: np.ones(s, np.float32) for n, s in zip(names, shapes)}, "ellipsis", "es")


def test_einsum_ellipsis_over_no_axes_still_runs_on_mlx():
    node = helper.make_node("Einsum", ["x"], ["y"], equation="...i->i")
    model = make_model([node], [tensor("x")], [tensor("y")], opset=13)
    assert_matches_cpu_on_mlx(model, {"x": np.arange(3, dtype=np.float32)})


# --- Conv / FusedConv bias, ConvTranspose spatial dims, BatchNormalization parameters -----------


@pytest.mark.parametrize("op, domains", [("Conv", ()), ("FusedConv", MS)])
def test_conv_bias_not_one_per_output_channel_fails(op, domains):
    domain = "com.microsoft" if domains else ""
    node = helper.make_node(op, ["x", "w", "b"], ["y"], name="conv", domain=domain)
    model = make_model([node], [tensor("x"), tensor("w"), tensor("b")], [tensor("y")], domains=domains)
    r = rng()
    feeds = {"x": r.standard_normal((1, 3, 5, 5)).astype(np.float32),
             "w": r.standard_normal((2, 3, 3, 3)).astype(np.float32), "b": np.ones(4, np.float32)}
    assert_both_fail(model, feeds, node_name="conv")


def deconv_model(**attrs):
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="deconv", **attrs)
    return make_model([node], [tensor("x"), tensor("w"), tensor("b")], [tensor("y")])


@pytest.mark.parametrize("attrs", [{"output_shape": [4, 4]}, {"strides": [2, 2]}, {"pads": [1, 1, 1, 1]},
                                   {"auto_pad": "SAME_UPPER"}])
def test_conv_transpose_of_an_empty_spatial_input_fails_where_ort_does(attrs):
    feeds = {"x": np.zeros((1, 2, 0, 3), np.float32), "w": np.ones((2, 1, 2, 2), np.float32),
             "b": np.ones(1, np.float32)}
    assert_both_fail(deconv_model(**attrs), feeds, node_name="deconv")


@pytest.mark.parametrize("x_shape", [(1, 2, 0, 3), (1, 2, 0)])
def test_conv_transpose_of_an_empty_spatial_input_is_the_bias_where_ort_computes_it(x_shape):
    spatial = len(x_shape) - 2
    feeds = {"x": np.zeros(x_shape, np.float32), "w": np.ones((2, 1) + (2,) * spatial, np.float32),
             "b": np.array([0.5], np.float32)}
    assert_matches_cpu_on_mlx(deconv_model(), feeds)


def test_conv_transpose_whose_pads_leave_no_output_fails():
    feeds = {"x": np.ones((1, 1, 1, 1), np.float32), "w": np.ones((1, 1, 1, 1), np.float32),
             "b": np.ones(1, np.float32)}
    assert_both_fail(deconv_model(pads=[1, 0, 0, 0]), feeds, node_name="deconv")


def test_batch_norm_parameters_not_per_channel_fail():
    node = helper.make_node("BatchNormalization", ["x", "scale", "b", "mean", "var"], ["y"], name="bn")
    model = make_model([node], [tensor(n) for n in ["x", "scale", "b", "mean", "var"]], [tensor("y")], opset=9)
    feeds = {"x": np.ones((2, 3, 2), np.float32), "scale": np.ones(3, np.float32), "b": np.ones(3, np.float32),
             "mean": np.ones(1, np.float32), "var": np.ones(3, np.float32)}
    assert_both_fail(model, feeds, node_name="bn")


# --- LRN in ORT's running-sum order --------------------------------------------------------------


@pytest.mark.parametrize("attrs, shape", [
    ({"size": 3}, (2, 5, 3, 4)),
    ({"size": 5, "alpha": 0.5, "beta": 0.6, "bias": 2.0}, (3, 6, 1, 5)),
    ({"size": 11, "alpha": 2.0}, (1, 4, 2, 2)),  # the window reaches past every channel
    ({"size": 3, "alpha": float("inf")}, (2, 5, 3, 4)),  # inf - inf in the running sum: NaN, as ORT
])
def test_lrn_follows_ort_to_the_last_ulp_or_two(attrs, shape):
    model = lrn_model(**attrs)
    feeds = {"x": (rng().standard_normal(shape) * 40).astype(np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    # pow itself differs by an ulp between MLX and Eigen; the sums are ORT's, NaNs included.
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0], rtol=3e-7, atol=0)


def test_fast_gelu_of_a_scalar_fails():
    node = helper.make_node("FastGelu", ["x"], ["y"], name="gelu", domain="com.microsoft")
    model = make_model([node], [tensor("x")], [tensor("y")], domains=MS)
    assert_both_fail(model, {"x": np.array(1.0, np.float32)}, node_name="gelu")


# --- Pow of int32: ORT's double power, truncated, INT32_MIN out of range -------------------------


def test_int32_pow_matches_ort_at_the_edges():
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    model = make_model([node], [tensor("x", TensorProto.INT32), tensor("y", TensorProto.INT32)],
                       [tensor("z", TensorProto.INT32)], opset=13)
    x = np.array([2147483647, -2147483648, 2, 2, -2, 0, 0, 3, 46341, -46341, 1, -1, -1, 2, 7, 2, -3, 46340], np.int32)
    y = np.array([3, 3, -1, 31, 31, 0, -1, 20, 2, 2, -5, -5, 7, 62, 2, 30, 19, 2], np.int32)
    run = Run(model, {"x": x, "y": y})
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, {"x": x, "y": y})[0])


def test_int64_pow_is_left_to_ort():
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    model = make_model([node], [tensor("x", TensorProto.INT64), tensor("y", TensorProto.INT64)],
                       [tensor("z", TensorProto.INT64)], opset=13)
    feeds = {"x": np.array([3, 2], np.int64), "y": np.array([39, 3], np.int64)}  # 3^39 is inexact in double
    run = Run(model, feeds)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


def test_int32_base_float_exponent_is_left_to_ort():
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    model = make_model([node], [tensor("x", TensorProto.INT32), tensor("y")],
                       [tensor("z", TensorProto.INT32)], opset=15)
    feeds = {"x": np.array([16777217, 7], np.int32), "y": np.array([1.0, 2.5], np.float32)}  # 2^24 + 1
    run = Run(model, feeds)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("exponent_type", [TensorProto.INT32, TensorProto.INT64])
def test_float_base_integer_exponent_keeps_the_exponents_parity(exponent_type):
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    model = make_model([node], [tensor("x"), tensor("y", exponent_type)], [tensor("z")], opset=15)
    big = 2**53 + 1 if exponent_type == TensorProto.INT64 else 2**30 + 1
    # Odd exponents past 2^24 round to even ones in float32; ORT's double keeps them odd (up to 2^53).
    x = np.array([-1.0, -1.0, -0.0, -0.0, -2.0, 1.5, -np.inf, np.nan, -1.0], np.float32)
    y = np.array([2**25 + 1, big, -3, 3, 3, -2, 5, 0, -(2**25 + 1)])
    feeds = {"x": x, "y": y.astype(np.int64 if exponent_type == TensorProto.INT64 else np.int32)}
    assert_matches_cpu_on_mlx(model, feeds, rtol=0, atol=0)


# --- Celu's exp(x / alpha) - 1; float16 Gemm in float32; FastGelu's 16-bit broadcast ------------


def test_celu_with_a_huge_alpha_follows_ort():
    node = helper.make_node("Celu", ["x"], ["y"], alpha=1e38)
    model = make_model([node], [tensor("x")], [tensor("y")], opset=12)
    assert_matches_cpu_on_mlx(model, {"x": np.array([-2.25, -1e-3, -50, 3], np.float32)}, rtol=0, atol=0)


@pytest.mark.parametrize("alpha, beta", [(0.0, 1.0), (0.5, 1.0), (1.0, 0.5)])
def test_float16_gemm_products_past_the_range_come_back(alpha, beta):
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=alpha, beta=beta)
    model = make_model([node], [tensor(n, TensorProto.FLOAT16) for n in "abc"], [tensor("y", TensorProto.FLOAT16)],
                       opset=13)
    feeds = {"a": np.full((3, 4), 200, np.float16), "b": np.full((4, 5), 100, np.float16),  # A.B = 80000
             "c": np.full(5, -30000, np.float16)}
    assert_matches_cpu_on_mlx(model, feeds, rtol=2e-3, atol=0)


@pytest.mark.parametrize("x_shape, bias_shape", [((), (4,)), ((2, 3), (1,))])
def test_float16_fast_gelu_broadcasts_as_ort_function_body(x_shape, bias_shape):
    node = helper.make_node("FastGelu", ["x", "bias"], ["y"], domain="com.microsoft")
    model = make_model([node], [tensor("x", TensorProto.FLOAT16), tensor("bias", TensorProto.FLOAT16)],
                       [tensor("y", TensorProto.FLOAT16)], domains=MS)
    feeds = {"x": np.full(x_shape, 0.5, np.float16), "bias": np.full(bias_shape, 0.25, np.float16)}
    assert_matches_cpu_on_mlx(model, feeds, rtol=2e-3, atol=1e-3)


# --- Conv: output extents ORT refuses, an empty input padded to a kernel, auto_pad with pads -----


def conv_model(op="Conv", **attrs):
    node = helper.make_node(op, ["x", "w", "b"], ["y"], name="conv", **attrs)
    return make_model([node], [tensor("x"), tensor("w"), tensor("b")], [tensor("y")])


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 3, 0, 5), (4, 3, 1, 1), {}),
    ((1, 3, 2, 5), (4, 3, 3, 1), {}),
    ((1, 3, 0, 5), (4, 3, 1, 1), {"auto_pad": "SAME_UPPER"}),
    ((1, 3, 0, 5), (4, 3, 1, 1), {"auto_pad": "VALID"}),
])
def test_conv_leaving_no_output_fails(x_shape, w_shape, attrs):
    feeds = {"x": np.ones(x_shape, np.float32), "w": np.ones(w_shape, np.float32), "b": np.ones(4, np.float32)}
    assert_both_fail(conv_model(**attrs), feeds, node_name="conv")


def test_conv_of_an_empty_input_padded_to_the_kernel_is_the_bias():
    feeds = {"x": np.ones((1, 3, 0, 5), np.float32), "w": np.ones((4, 3, 1, 1), np.float32),
             "b": np.arange(4, dtype=np.float32)}
    assert_matches_cpu_on_mlx(conv_model(pads=[1, 1, 1, 1]), feeds)


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_conv_with_auto_pad_and_pads_is_refused_as_on_cpu(op):
    feeds = {"x": np.ones((1, 2, 5), np.float32), "w": np.ones((2, 2, 3), np.float32), "b": np.ones(2, np.float32)}
    assert_both_fail(conv_model(op, auto_pad="SAME_LOWER", pads=[0, 1]), feeds)


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceMax"])
def test_bool_extreme_of_an_empty_set_fails(op):
    model = reduce_model(op, 20, None, elem=TensorProto.BOOL)
    assert_both_fail(model, {"x": np.zeros((0, 3, 4), bool)})


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceMax"])
def test_bool_extreme_with_an_empty_result_runs(op):
    model = reduce_model(op, 20, [1], elem=TensorProto.BOOL)
    assert_matches_cpu_on_mlx(model, {"x": np.zeros((0, 3, 4), bool)})


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_layer_norm_of_rank_4_fails(op):
    node = helper.make_node(op, ["x", "skip", "gamma"], ["out"], name="skip", domain="com.microsoft")
    model = make_model([node], [tensor(n) for n in ["x", "skip", "gamma"]], [tensor("out")], domains=MS)
    feeds = {"x": np.ones((1, 2, 3, 4), np.float32), "skip": np.ones((1, 2, 3, 4), np.float32),
             "gamma": np.ones(4, np.float32)}
    assert_both_fail(model, feeds, node_name="skip")


@pytest.mark.parametrize("attrs", [{"output_padding": [1, 0]}, {"output_padding": [2, 0], "strides": [2, 2]},
                                   {"output_padding": [0, 2], "dilations": [1, 2]}])
def test_conv_transpose_output_padding_of_a_stride_or_more_fails(attrs):
    feeds = {"x": np.ones((1, 2, 3, 3), np.float32), "w": np.ones((2, 1, 2, 2), np.float32),
             "b": np.ones(1, np.float32)}
    assert_both_fail(deconv_model(**attrs), feeds, "output_padding", "deconv")


def test_conv_transpose_output_padding_below_the_stride_runs_on_mlx():
    feeds = {"x": rng().standard_normal((1, 2, 3, 3)).astype(np.float32), "w": np.ones((2, 1, 2, 2), np.float32),
             "b": np.ones(1, np.float32)}
    assert_matches_cpu_on_mlx(deconv_model(output_padding=[1, 1], strides=[2, 2]), feeds)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": 1}, {"axis": -1, "keepdims": 0}])
def test_arg_extreme_of_a_scalar_is_index_zero(op, attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    model = make_model([node], [tensor("x")], [tensor("y", TensorProto.INT64)], opset=13)
    assert_matches_cpu_on_mlx(model, {"x": np.array(3.0, np.float32)})


@pytest.mark.parametrize("exponent", [2, 3, 4])
def test_int32_pow_by_a_one_element_exponent_takes_ort_shortcut(exponent):
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    model = make_model([node], [tensor("x", TensorProto.INT32), tensor("y", TensorProto.INT32)],
                       [tensor("z", TensorProto.INT32)], opset=13)
    feeds = {"x": np.array([-2147483647, 2147483647, 46341, -5, 0, 1300], np.int32),
             "y": np.array([exponent], np.int32)}  # 2 and 3 wrap as x * x (* x); others saturate
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


# alpha = -0 or inf makes the curve NaN, which ORT's min(curve, 0) keeps or drops by SIMD lane: not
# compared.
@pytest.mark.parametrize("alpha", [0.0, 1e-38])
def test_celu_with_degenerate_alpha_follows_ort(alpha):
    node = helper.make_node("Celu", ["x"], ["y"], alpha=alpha)
    model = make_model([node], [tensor("x")], [tensor("y")], opset=12)
    x = np.array([-2.9, -0.5, 0.0, 1.5], np.float32)
    run = Run(model, {"x": x})
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, {"x": x})[0])


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_float16_clip_without_bounds_clips_infinities_from_opset_13(opset):
    node = helper.make_node("Clip", ["x"], ["y"])
    model = make_model([node], [tensor("x", TensorProto.FLOAT16)], [tensor("y", TensorProto.FLOAT16)], opset=opset)
    feeds = {"x": np.array([-np.inf, np.inf, 1.0], np.float16)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


def test_float16_bias_gelu_adds_in_float32():
    node = helper.make_node("BiasGelu", ["a", "b"], ["c"], domain="com.microsoft")
    model = make_model([node], [tensor("a", TensorProto.FLOAT16), tensor("b", TensorProto.FLOAT16)],
                       [tensor("c", TensorProto.FLOAT16)], domains=MS)
    feeds = {"a": np.array([[-65504, 1.0, 65504]], np.float16), "b": np.array([-65504, 0.5, -65504], np.float16)}
    assert_matches_cpu_on_mlx(model, feeds, rtol=2e-3, atol=1e-3)
