"""Fuzzer findings of wrong answers from claimed nodes (issue #13), each rebuilt from its trigger:
the MLX-first session (fallback disabled) runs every node, twice (eager, then compiled), and
matches ORT's CPU EP where it has a kernel, else the op's own formula."""

import math
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))

MS = [("com.microsoft", 1)]


def mlx_runs(model, feeds, times=2):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    Run(model, feeds).assert_all_on_mlx()
    return [session.run(None, feeds) for _ in range(times)]


def assert_runs_match(model, feeds, want, rtol=0.0, atol=0.0):
    for outputs in mlx_runs(model, feeds):
        for got, expected in zip(outputs, want):
            np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected, np.float64),
                                       rtol=rtol, atol=atol, equal_nan=True)


def test_celu_alpha_negative_zero_survives_compilation():
    # s1-Celu-12-24: mx.compile merged the -0.0 alpha with a 0.0 constant, so compiled runs
    # divided by +0 (x > 0 gave NaN, x < 0 gave 0). x / -0 is -inf for x > 0: y = x; for x < 0
    # it is +inf and -0 * inf is NaN.
    model = make_model([helper.make_node("Celu", ["X"], ["Y"], alpha=-0.0)], [tensor("X")], [tensor("Y")], opset=12)
    x = np.array([1.0, 1e-30, 65504.0, 3e38, -1.0, -65504.0], np.float32)
    want = np.array([1.0, 1e-30, 65504.0, 3e38, np.nan, np.nan], np.float32)
    assert_runs_match(model, {"X": x}, [want])


@pytest.mark.parametrize("elem, dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_a_negative_zero_initializer_keeps_its_sign_when_compiled(elem, dtype, shape):
    # s29-QuantizeLinear-10..18-4: a y_scale initializer of -0.0 divided x by +0 in compiled runs
    # (uint8 0 where ORT saturates to 255). mx.compile writes one-element constants into its
    # kernels as literals, which lose -0.0's sign; the plan makes such a constant as an op.
    div = helper.make_node("Div", ["X", "c"], ["Y"])
    mul = helper.make_node("Mul", ["X", "zero"], ["Z"])  # a +0.0 constant beside it
    constants = [numpy_helper.from_array(np.full(shape, -0.0, dtype), "c"),
                 numpy_helper.from_array(np.full(shape, 0.0, dtype), "zero")]
    model = make_model([div, mul], [tensor("X", elem, [2])], [tensor("Y", elem), tensor("Z", elem)], opset=13,
                       initializers=constants)
    x = np.array([1.5, -2.0], dtype)
    for quotient, product in [cpu_outputs(model, {"X": x})] + mlx_runs(model, {"X": x}, times=3):
        np.testing.assert_array_equal(quotient.reshape(-1), [-np.inf, np.inf])
        np.testing.assert_array_equal(np.signbit(product.reshape(-1)), [False, True])


def test_a_negative_zero_in_a_scan_body_keeps_its_sign_when_compiled():
    # The same for a control-flow body's own initializer (lowered from its host copy; a Scan's
    # body is compiled once for its steps).
    body = helper.make_graph(
        [helper.make_node("Div", ["x_i", "c"], ["y_i"])], "body",
        [tensor("x_i", shape=[2])], [tensor("y_i", shape=[2])],
        [numpy_helper.from_array(np.array(-0.0, np.float32), "c")])
    node = helper.make_node("Scan", ["X"], ["Y"], body=body, num_scan_inputs=1)
    model = make_model([node], [tensor("X", shape=[3, 2])], [tensor("Y", shape=[3, 2])], opset=16)
    x = np.array([[1.5, -2.0], [3.0, -1.0], [-4.0, 0.5]], np.float32)
    for (got,) in [cpu_outputs(model, {"X": x})] + mlx_runs(model, {"X": x}, times=3):
        np.testing.assert_array_equal(got, np.where(x > 0, -np.inf, np.inf))


@pytest.mark.parametrize("op, attrs, opset", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2**31, 2], "pads": [1, 1, 1, 0], "ceil_mode": 1}, 10),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2**31, 2]}, 12),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2**31], "pads": [1, 1, 1, 1], "count_include_pad": 1}, 11),
    ("LpPool", {"kernel_shape": [2, 2], "strides": [2**31, 2**31]}, 18),
])
def test_a_pool_stride_past_32_bits_takes_its_one_window(op, attrs, opset):
    # s31-MaxPool-8..11-1: a stride of 2^31 (ORT's int64 arithmetic takes it) leaves one window
    # on that axis, but reached MLX's 32-bit strided view and left none: shape (2, 3, 0, 4).
    model = make_model([helper.make_node(op, ["X"], ["Y"], **attrs)], [tensor("X")], [tensor("Y")], opset=opset)
    x = np.random.default_rng(31).standard_normal((2, 3, 7, 8)).astype(np.float32)
    (want,) = cpu_outputs(model, {"X": x})
    for (got,) in mlx_runs(model, {"X": x}):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_max_roi_pool_over_nan_matches_cpu_and_the_reference_follows_it():
    # s29-MaxRoiPool-1-5: at opset 26 (no ORT kernel) the oracle is the op suite's numpy
    # reference, which took a NaN-propagating max where ORT's running maximum lets a NaN through
    # only as a bin's last pixel. The EP follows ORT; so must the reference.
    from specs.detection import _max_roi_pool

    rng = np.random.default_rng(29)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    x[rng.random(x.shape) < 0.25] = np.nan
    x[rng.random(x.shape) < 0.05] = -np.inf
    rois = np.array([[0, 0, 0, 6, 5], [1, 1.2, 0.4, 4.6, 3.9], [0, -1, 2, 3, 9], [1, 2, 2, 2, 2]], np.float32)
    node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], pooled_shape=[2, 3], spatial_scale=1.0)
    model = make_model([node], [tensor("X"), tensor("rois")], [tensor("Y")], opset=13)
    feeds = {"X": x, "rois": rois}
    (want,) = cpu_outputs(model, feeds)
    assert np.isnan(want).any() and not np.isnan(want).all()
    reference = _max_roi_pool([x, rois], {"pooled_shape": [2, 3], "spatial_scale": 1.0})
    np.testing.assert_array_equal(reference, want)
    for (got,) in mlx_runs(model, feeds):
        np.testing.assert_array_equal(got, want)


def test_pow_mixed_float_types_raise_in_float32():
    # s1-Pow-7-36 / -16: the exponent was rounded to the base's bfloat16 first.
    cast_in = helper.make_node("Cast", ["Xf"], ["X"], to=TensorProto.BFLOAT16)
    cast_out = helper.make_node("Cast", ["Z"], ["Zf"], to=TensorProto.FLOAT)
    pow_node = helper.make_node("Pow", ["X", "Y"], ["Z"])
    model = make_model([cast_in, pow_node, cast_out], [tensor("Xf"), tensor("Y", TensorProto.FLOAT16)],
                       [tensor("Zf")], opset=13)
    x = np.array([65536.0, 2.3125], np.float32)
    y = np.array([1.666015625, 1.666015625], np.float16)
    exact = np.float64(x) ** np.float64(y)
    for (got,) in mlx_runs(model, {"Xf": x, "Y": y}):
        np.testing.assert_allclose(got, exact, rtol=2**-8)  # bfloat16's rounding, not 2.5%
    # A float32 exponent of -1e-45 is not -0: (-inf)^y is 0, not 1.
    pow_f32 = helper.make_node("Pow", ["X", "Yf"], ["Z"])
    model = make_model([cast_in, pow_f32, cast_out], [tensor("Xf"), tensor("Yf")], [tensor("Zf")], opset=13)
    feeds = {"Xf": np.array([-np.inf, 2.0], np.float32), "Yf": np.array([-1.4e-45, 1.0], np.float32)}
    assert_runs_match(model, feeds, [np.array([0.0, 2.0], np.float32)])


def test_mean_variance_normalization_divides_the_sum_by_the_count():
    # s1-MeanVarianceNormalization-9-2: -3 * 2^-149 / 6 is -0 by division (ORT) but -2^-149 by
    # MLX's multiply-by-reciprocal mean, which turned the zeros' NaN into inf.
    model = make_model([helper.make_node("MeanVarianceNormalization", ["X"], ["Y"], axes=[1, 3])],
                       [tensor("X")], [tensor("Y")], opset=13)
    d = np.float32(1.4e-45)
    x = np.array([0, 0, -d, -d, -d, 0], np.float32).reshape(1, 3, 1, 2)
    want = cpu_outputs(model, {"X": x})
    assert np.isnan(want[0]).sum() == 3  # the zeros: 0 / 0
    assert_runs_match(model, {"X": x}, want)


def test_float16_mean_variance_normalization_follows_orts_float32_kernel():
    # s20261201-MeanVarianceNormalization-9-8: float16 over axis 0 of signed zeros, denormals and
    # 65504. ORT runs float16 MVN only from opset 22 (its float32 kernel between Casts; below 22 the
    # function body fails to build), and a constant block is 0 / 0 = NaN there, as for float32;
    # the numpy reference added an epsilon instead. Every opset follows ORT's float32 kernel.
    tiny, big = np.float16(2**-24), np.float16(65504)
    x = np.array([[-0.0, -0.0, tiny, big, tiny, -0.0],
                  [-0.0, 0.0, tiny, -big, -tiny, tiny]], np.float16).reshape(2, 6, 1, 1)
    node = helper.make_node("MeanVarianceNormalization", ["X"], ["Y"], axes=[0])
    io = ([tensor("X", TensorProto.FLOAT16)], [tensor("Y", TensorProto.FLOAT16)])
    want = cpu_outputs(make_model([node], *io, opset=22), {"X": x})
    assert np.isnan(want[0][:, :3]).all() and not np.isnan(want[0][:, 3:]).any()
    for opset in (9, 13, 22):
        assert_runs_match(make_model([node], *io, opset=opset), {"X": x}, want)


@pytest.mark.parametrize("op, opset, domains", [("RMSNormalization", 23, ()), ("SimplifiedLayerNormalization", 17, ()),
                                                ("LayerNormalization", 17, ())])
def test_float16_norms_round_once_after_the_scale(op, opset, domains):
    # s20261201-RMSNormalization-23-1: MLX's fused kernels round x / rms (x - mean) / std to
    # float16 before the weight, so 6e-8 / 70 underflowed to 0 there; ORT multiplies by the scale
    # (65504) in float32 and rounds once, keeping ~5.6e-5.
    x = np.array([[2**-24, 100, -100, 50, -50, 25, -25, 0]], np.float16)
    scale = np.array([65504, 1, 1, 1, 1, 1, 1, 1], np.float16)
    node = helper.make_node(op, ["X", "scale"], ["Y"])
    half = TensorProto.FLOAT16
    model = make_model([node], [tensor("X", half), tensor("scale", half)], [tensor("Y", half)], opset=opset,
                       domains=domains)
    want = cpu_outputs(model, {"X": x, "scale": scale})
    assert 1e-5 < abs(float(want[0][0, 0])) < 1e-4
    assert_runs_match(model, {"X": x, "scale": scale}, want, rtol=2**-10)


def reduce_log_sum_exp(opset, dtype=TensorProto.FLOAT16):
    if opset >= 18:
        node = helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)
        axes = [helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    else:
        node = helper.make_node("ReduceLogSumExp", ["x"], ["y"], keepdims=0, axes=[1])
        axes = []
    return make_model([node], [tensor("x", dtype)], [tensor("y", dtype)], initializers=axes, opset=opset)


def test_reduce_log_sum_exp_18_float16_follows_the_double_function_body():
    # s1-ReduceLogSumExp-18-21: ORT runs ONNX's function body for float16 at opset 18,
    # log(sum(exp(double(x)))), unshifted: inf past ln(DBL_MAX), -inf when every exp is 0.
    x = np.array([[65504, 65504], [700, 700], [710, 0], [11, 11], [-800, -800], [-700, -700],
                  [np.nan, 0], [-np.inf, -np.inf]], np.float16)
    model = reduce_log_sum_exp(18)
    want = cpu_outputs(model, {"x": x})
    np.testing.assert_array_equal(want[0][[0, 2, 4]], [np.inf, np.inf, -np.inf])
    assert_runs_match(model, {"x": x}, want, rtol=1e-3)


def test_reduce_log_sum_exp_before_18_is_shifted():
    # s1-ReduceLogSumExp-1..17-2: the numpy reference overflowed; the float32 kernels shift.
    x = np.array([[65504, 65504], [-800, -800], [60000, 0]], np.float16)
    model = reduce_log_sum_exp(13)
    want = [np.array([65504, -799.5, 60000], np.float16)]
    np.testing.assert_allclose(cpu_outputs(model, {"x": x})[0], want[0])
    assert_runs_match(model, {"x": x}, want, rtol=1e-3)


def test_bias_softmax_float16_adds_in_float32():
    # s1-com.microsoft.BiasSoftmax-1-7: rounding 65504 + -2.33 to float16 before the softmax
    # moved it by a float16 step (ORT's kernels add in float32 accumulators).
    node = helper.make_node("BiasSoftmax", ["data", "bias"], ["y"], domain="com.microsoft", axis=1,
                            is_inner_broadcast=0)
    model = make_model([node], [tensor("data", TensorProto.FLOAT16), tensor("bias", TensorProto.FLOAT16)],
                       [tensor("y", TensorProto.FLOAT16)], opset=17, domains=MS)
    data = np.array([[65504, 65504 - 32]], np.float16)
    bias = np.array([[-2.33203125, 29.0]], np.float16)
    total = data.astype(np.float64) + bias.astype(np.float64)
    e = np.exp(total - total.max())
    assert_runs_match(model, {"data": data, "bias": bias}, [(e / e.sum()).astype(np.float16)], atol=1e-3)


def test_bias_split_gelu_float16_keeps_the_tail():
    # s1-com.microsoft.BiasSplitGelu-1-45: 1 + erf(-3.5 / sqrt 2) is 4.65e-4, which float16
    # (spacing 4.9e-4 below 1) cannot hold; ORT's kernel computes the GELU in float32.
    node = helper.make_node("BiasSplitGelu", ["X", "bias"], ["Y"], domain="com.microsoft")
    model = make_model([node], [tensor("X", TensorProto.FLOAT16), tensor("bias", TensorProto.FLOAT16)],
                       [tensor("Y", TensorProto.FLOAT16)], opset=17, domains=MS)
    x = np.array([[-1000.0, 1.0, -3.0, 0.5]], np.float16)
    bias = np.array([0.0, 0.0, -0.5, 0.0], np.float16)
    total = (x + bias).astype(np.float64)
    right = total[:, 2:]
    gelu = 0.5 * right * (1 + np.vectorize(math.erf)(right / math.sqrt(2)))
    want = (total[:, :2] * gelu).astype(np.float16)
    assert abs(want[0, 0] - 0.81) < 0.01
    assert_runs_match(model, {"X": x, "bias": bias}, [want], rtol=2e-3)


def test_group_query_attention_ignores_value_rows_past_each_total_length():
    # s1-GroupQueryAttention-1-37: rows of a shared KV buffer past a sequence's total length may
    # hold anything (NaN, inf); ORT mixes only the first seqlens_k[b] + 1 value rows, so they never
    # reach the output. The EP multiplied them by a zero probability: 0 * NaN = NaN.
    batch, seq, max_len, heads, kv_heads, head = 2, 1, 6, 4, 2, 8
    rng = np.random.default_rng(37)
    f = np.float32
    q = rng.standard_normal((batch, seq, heads * head)).astype(f)
    k = rng.standard_normal((batch, seq, kv_heads * head)).astype(f)
    v = rng.standard_normal((batch, seq, kv_heads * head)).astype(f)
    past_k = rng.standard_normal((batch, kv_heads, max_len, head)).astype(f)
    past_v = rng.standard_normal((batch, kv_heads, max_len, head)).astype(f)
    seqlens = np.array([2, 4], np.int32)  # totals 3 and 5 of 6 rows
    for b, total in enumerate(seqlens + 1):
        past_v[b, :, total:] = np.nan  # the unused tail (the new row is written at total - 1)
        past_k[b, :, total:] = np.inf
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    node = helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value"],
                            domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, smooth_softmax=1)
    total = helper.make_tensor("total_sequence_length", TensorProto.INT32, [], [max_len])
    inputs = [tensor("query"), tensor("key"), tensor("value"), tensor("past_key"), tensor("past_value"),
              tensor("seqlens_k", TensorProto.INT32)]
    model = make_model([node], inputs, [tensor("out"), tensor("present_key"), tensor("present_value")],
                       opset=17, domains=MS, initializers=[total])
    feeds = {"query": q, "key": k, "value": v, "past_key": past_k, "past_value": past_v, "seqlens_k": seqlens}
    want = cpu_outputs(model, feeds)
    assert np.isfinite(want[0]).all()
    assert_runs_match(model, feeds, want, rtol=1e-5, atol=1e-6)


def gqa_with_probabilities(elem):
    """A causal GQA prompt (3 tokens) with output_qk = 2, fed float32 through Casts to ``elem``."""
    names = ["query", "key", "value", "", "", "seqlens_k", "total_sequence_length"]
    cast_in = [helper.make_node("Cast", [f"{n}_f32"], [n], to=elem) for n in names[:3]]
    node = helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value", "qk"],
                            domain="com.microsoft", num_heads=2, kv_num_heads=1, qk_output=2)
    cast_out = helper.make_node("Cast", ["qk"], ["qk_f32"], to=TensorProto.FLOAT)
    total = helper.make_tensor("total_sequence_length", TensorProto.INT32, [], [3])
    inputs = [tensor(f"{n}_f32") for n in names[:3]] + [tensor("seqlens_k", TensorProto.INT32)]
    return make_model(cast_in + [node, cast_out], inputs, [tensor("qk_f32")], opset=17, domains=MS,
                      initializers=[total])


def test_bfloat16_gqa_probabilities_outside_a_rows_window_are_zero():
    # s1-com.microsoft.GroupQueryAttention-1-6: a NaN in key 0 makes every row's visible
    # probabilities NaN; ORT's kernels (float32, float16) never score the keys outside a row's
    # causal window and leave 0 there. bfloat16, which ORT has no kernel for, follows the same rule
    # (the numpy reference had spread the NaN over the whole row).
    rng = np.random.default_rng(6)
    as_bf16 = lambda x: (x.view(np.uint32) & 0xFFFF0000).view(np.float32)  # exact in bfloat16
    q, k, v = (as_bf16(rng.standard_normal((1, 3, d)).astype(np.float32)) for d in (16, 8, 8))
    k[0, 0, 3] = np.nan
    feeds = {"query_f32": q, "key_f32": k, "value_f32": v, "seqlens_k": np.array([2], np.int32)}
    want = cpu_outputs(gqa_with_probabilities(TensorProto.FLOAT), feeds)
    causal = np.tril(np.ones((3, 3), bool))
    assert np.isnan(want[0][0, :, causal]).all() and (want[0][0, :, ~causal] == 0).all()
    assert_runs_match(gqa_with_probabilities(TensorProto.BFLOAT16), feeds, want)


def test_unidirectional_mha_adds_the_causal_mask_as_ort_does():
    # s1-MultiHeadAttention-1-40: ORT adds its causal mask to the scores, so a hidden key whose
    # score is infinite still turns its row to NaN; MLX's causal kernel skipped the key instead.
    batch, seq, heads, head = 1, 3, 2, 4
    rng = np.random.default_rng(40)
    q = rng.standard_normal((batch, seq, heads * head)).astype(np.float32)
    k = rng.standard_normal((batch, seq, heads * head)).astype(np.float32)
    v = rng.standard_normal((batch, seq, heads * head)).astype(np.float32)
    k[0, 2, :] = np.inf  # hidden from query rows 0 and 1
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["out"], domain="com.microsoft",
                            num_heads=heads, unidirectional=1)
    model = make_model([node], [tensor("q"), tensor("k"), tensor("v")], [tensor("out")], opset=17, domains=MS)
    feeds = {"q": q, "k": k, "v": v}
    want = cpu_outputs(model, feeds)
    assert np.isnan(want[0][0, 0]).any()
    assert_runs_match(model, feeds, want, rtol=1e-5, atol=1e-6)


def test_arg_extremes_of_empty_tensors_keep_orts_shapes():
    # s3-ArgMin-1-8: ORT's CPU EP reduces an empty input along the axis as written (a negative
    # one is ignored: ArgMin axis=-1 of (0, 3, 4) is (0, 3, 4)) and fails where the result would
    # not be empty; the EP normalised the axis and gave (0, 3, 1).
    for op, opset, attrs in [("ArgMin", 11, {}), ("ArgMax", 13, {"select_last_index": 1})]:
        for axis, keepdims in [(-1, 1), (-1, 0), (1, 0), (2, 1)]:
            node = helper.make_node(op, ["data"], ["out"], axis=axis, keepdims=keepdims, **attrs)
            model = make_model([node], [tensor("data", shape=["a", "b", "c"])],
                               [tensor("out", TensorProto.INT64)], opset=opset)
            for shape in [(0, 3, 4), (0, 1, 4), (0, 4, 4), (2, 3, 0)]:
                feeds = {"data": np.zeros(shape, np.float32)}
                try:
                    want = cpu_outputs(model, feeds)
                except Exception:  # noqa: BLE001 - ORT fails: so must the EP
                    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
                    session.disable_fallback()
                    with pytest.raises(Exception, match=op):
                        session.run(None, feeds)
                    continue
                for (got,) in mlx_runs(model, feeds):
                    assert got.shape == want[0].shape, (op, axis, keepdims, shape)
                    assert got.dtype == np.int64


def _recurrent_model(op, gates, with_bias, **attrs):
    inputs = ["X", "W", "R"] + (["B"] if with_bias else [])
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, inputs, outputs, hidden_size=1, **attrs)
    return make_model([node], [tensor(n) for n in inputs], [tensor(n) for n in outputs], opset=14), gates


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("op,gates,attrs", [
    ("LSTM", 4, {}),
    ("LSTM", 4, {"activations": ["Relu", "Affine", "HardSigmoid"], "activation_alpha": [1.0, 0.5],
                 "activation_beta": [0.0, 0.25]}),
    ("GRU", 3, {"activations": ["Affine", "Softplus"], "activation_alpha": [1.0], "activation_beta": [0.0]}),
    ("GRU", 3, {"clip": 5.0}),
])
def test_recurrent_gate_inputs_are_bounded_as_orts_kernels_bound_them(op, gates, attrs, with_bias):
    # s1-LSTM-7-0 and 20 more: ORT's GRU/LSTM kernels clamp every gate input to [-clip, clip]
    # (float32's max without clip), and while adding the bias a NaN becomes +clip; their Relu and
    # HardSigmoid give 0 for NaN and their Softplus is log(1 + e^x). The EP propagated NaN and inf.
    model, gates = _recurrent_model(op, gates, with_bias, **attrs)
    specials = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 100.0, -100.0, 0.5], np.float32)
    batch = specials.size
    rng = np.random.default_rng(13)
    # Gate inputs are X * 1 + B: every special reaches every gate of some batch entry.
    feeds = {"X": np.stack([specials, np.roll(specials, 3)]).reshape(2, batch, 1),
             "W": np.ones((1, gates, 1), np.float32),
             "R": np.zeros((1, gates, 1), np.float32)}
    if with_bias:
        feeds["B"] = rng.choice(np.array([0.0, 1.0, -1.0, np.nan, 2.0], np.float32), (1, 2 * gates))
    want = cpu_outputs(model, feeds)
    # Propagating NaN/inf (the EP's old answer) would leave those batch entries non-finite.
    assert np.isfinite(want[0][0, 0, ~np.isfinite(specials)]).any()
    assert_runs_match(model, feeds, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_scatter_extremes_take_nan_in_update_order(op, reduction):
    # s1-ScatterElements-11-41 (H200): ORT folds each element's updates in order with
    # acc = (u < acc) ? acc : u, so a NaN sticks only when nothing follows it; MLX's GPU scatter
    # combined in no fixed order and dropped it. Elements: NaN update first, data NaN, NaN between
    # two updates, NaN last, data and update NaN, untouched NaN, plain.
    nan = np.nan
    data = np.array([1, nan, 1, 1, nan, nan, 1], np.float32)
    index = np.array([0, 0, 1, 2, 2, 2, 3, 3, 4, 6, 6], np.int64)
    updates = np.array([nan, 4, 2, 5, nan, 3, 5, nan, nan, 7, -7], np.float32)
    if op == "ScatterElements":
        node = helper.make_node(op, ["D", "I", "U"], ["Y"], axis=0, reduction=reduction)
        feeds_index = index
    else:
        node = helper.make_node(op, ["D", "I", "U"], ["Y"], reduction=reduction)
        feeds_index = index.reshape(-1, 1)
    model = make_model([node], [tensor("D"), tensor("I", TensorProto.INT64), tensor("U")], [tensor("Y")], opset=18)
    feeds = {"D": data, "I": feeds_index, "U": updates}
    want = cpu_outputs(model, feeds)
    # The fold's answer, written out: NaN only where the last word is NaN.
    extreme = max if reduction == "max" else min
    expected = [4, 2, 3, nan, nan, nan, extreme(1, 7, -7)]
    np.testing.assert_array_equal(want[0], np.array(expected, np.float32))
    assert_runs_match(model, feeds, want)


@pytest.mark.parametrize("op, attrs, x", [
    # s32-HardSigmoid-6-1: alpha 1e-45 rounded to float16 is 0, and 0 * inf is NaN (ORT: 1).
    ("HardSigmoid", {"alpha": 1e-45}, [np.inf, -np.inf, 1.0]),
    # A threshold between two float16 values rounded up to the x above it: x > x is false.
    ("ThresholdedRelu", {"alpha": 1.0006}, [1.0009765625, 1.0, 2.0]),
    ("LeakyRelu", {"alpha": 1e-8}, [-np.inf, -65504.0, 3.0]),
    # 1e5 is past float16's range: inf * expm1(-1e-6) would be -inf (ORT: -0.1).
    ("Elu", {"alpha": 1e5}, [-1e-6, -1.0, 2.0]),
    ("Selu", {"alpha": 1e5, "gamma": 1e-8}, [-1e-6, -1.0, 2.0]),
])
def test_float16_activations_keep_their_float32_attributes(op, attrs, x):
    model = make_model([helper.make_node(op, ["X"], ["Y"], **attrs)], [tensor("X", TensorProto.FLOAT16, [3])],
                       [tensor("Y", TensorProto.FLOAT16)], opset=13)
    feeds = {"X": np.array(x, np.float16)}
    assert_runs_match(model, feeds, cpu_outputs(model, feeds))


def test_one_hot_float_indices_match_cpu_and_the_reference_follows_it():
    # s32-OneHot-9-4: with uint8 values (no ORT kernel) the oracle is the op suite's numpy
    # reference, which truncated float indices (6e-8 hot at 0). ORT's kernel compares them as
    # they are; the EP follows ORT, and so must the reference.
    from specs.generate import _one_hot

    node = helper.make_node("OneHot", ["indices", "depth", "values"], ["out"])
    model = make_model([node], [tensor("indices", shape=[5]), tensor("depth", TensorProto.INT64, []),
                                tensor("values", TensorProto.INT64, [2])], [tensor("out", TensorProto.INT64)], opset=11)
    feeds = {"indices": np.array([6e-8, 2.7, -0.5, 1.0, -3.0], np.float32), "depth": np.array(4, np.int64),
             "values": np.array([5, 9], np.int64)}
    (want,) = cpu_outputs(model, feeds)
    assert (want == 9).sum() == 2  # only the whole numbers 1.0 and -3.0 are hot
    np.testing.assert_array_equal(_one_hot(list(feeds.values()), {}), want)
    for (got,) in mlx_runs(model, feeds):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_tf_idf_weight_of_an_unseen_ngram_adds_nothing_even_when_infinite(special):
    # s90-TfIdfVectorizer-9-0: TFIDF multiplied each n-gram's count by its weight, so an unseen
    # n-gram of weight inf gave 0 * inf = NaN; ORT adds the weight once a match, giving 0.
    weights = [0.5, 2.0, 1.0, float(special), 0.25]
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], mode="TFIDF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=0, ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3, 4],
                            pool_int64s=[1, 2, 3, 1, 2, 2, 3], weights=weights)
    model = make_model([node], [tensor("X", TensorProto.INT64, [2, 6])], [tensor("Y")], opset=9)
    x = np.array([[1, 2, 9, 9, 3, 1], [2, 3, 3, 9, 1, 1]], np.int64)  # (1, 2) seen in row 0 only
    want = cpu_outputs(model, {"X": x})
    assert np.isfinite(want[0][1]).all()  # the unseen special-weight n-gram's slot is 0 there
    assert_runs_match(model, {"X": x}, want)


@pytest.mark.parametrize("op", ["Neg", "Abs"])
@pytest.mark.parametrize("elem,dtype", [(TensorProto.INT8, np.int8), (TensorProto.INT16, np.int16),
                                        (TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64)])
def test_negating_a_signed_minimum_wraps_when_compiled_too(op, elem, dtype):
    # s120-Sign-9-4: Neg(INT64_MIN) wraps to INT64_MIN in ORT, whose Sign is -1. Compiled, MLX
    # fused Neg and Sign into one C++ kernel, where the signed overflow let the compiler answer
    # 1 (eagerly, -1). Abs(MIN) is MIN in ORT alike.
    nodes = [helper.make_node(op, ["x"], ["y"]), helper.make_node("Sign", ["y"], ["z"])]
    model = make_model(nodes, [tensor("x", elem, [6])], [tensor("y", elem), tensor("z", elem)], opset=13)
    info = np.iinfo(dtype)
    feeds = {"x": np.array([info.min, info.max, -1, 0, 1, info.min + 1], dtype)}
    want = cpu_outputs(model, feeds)
    assert want[0][0] == info.min and want[1][0] == -1
    for got in mlx_runs(model, feeds, times=3):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("lambd,bias", [(1e38, 0.0), (1e38, 0.3), (0.5, 0.3), (-1.0, 1e-3)])
def test_float16_shrink_compares_and_shifts_in_float32(lambd, bias):
    # s147-Shrink-9-1: lambd 1e38 rounded to float16 is inf, and inf > inf is false, so the EP
    # zeroed an infinite x that ORT (which computes float16 Shrink in float32) keeps; x - bias
    # was also rounded twice.
    node = helper.make_node("Shrink", ["x"], ["y"], lambd=lambd, bias=bias)
    model = make_model([node], [tensor("x", TensorProto.FLOAT16, [10])], [tensor("y", TensorProto.FLOAT16)], opset=9)
    x = np.array([np.inf, -np.inf, 65504, -65504, 1.0, -1.0, 0.7, -0.3, 0.0, 6e-8], np.float16)
    want = cpu_outputs(model, {"x": x})
    for got in mlx_runs(model, {"x": x}):
        np.testing.assert_array_equal(got[0], want[0])
