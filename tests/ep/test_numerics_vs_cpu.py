"""Edge-case numerics (NaN, inf, overflow, saturation, empty axes) where MLX's own rule differs
from ORT's CPU EP: each claimed node must give ORT's answer, and what cannot be matched stays
on the CPU EP with the EP's reason. Each case is a trigger a fuzz against ORT 1.31.1 found."""

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor

F16 = TensorProto.FLOAT16
ELEM = {np.float32: TensorProto.FLOAT, np.float16: F16, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64,
        np.uint64: TensorProto.UINT64}


def single_node_model(op, feeds, attrs=None, opset=17, constants=(), out_elem=None, domain=""):
    """`op` over the feeds (graph inputs, in order) and then the constants (initializers)."""
    names = list(feeds) + [c.name for c in constants]
    inputs = [tensor(n, ELEM[v.dtype.type], list(v.shape)) for n, v in feeds.items()]
    first = next(iter(feeds.values()))
    out = out_elem if out_elem is not None else ELEM[first.dtype.type]
    node = helper.make_node(op, names, ["y"], name="n", domain=domain, **(attrs or {}))
    domains = [(domain, 1)] if domain else ()
    return make_model([node], inputs, [tensor("y", out)], constants, opset=opset, domains=domains)


def constant(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype), name)


def assert_like_cpu_on_mlx(model, feeds, rtol=1e-6, atol=0.0):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    expected = cpu_outputs(model, feeds)
    for got, want in zip(run.outputs, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    return run.outputs


def assert_declined(model, feeds, monkeypatch, tmp_path, words):
    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    run = Run(model, feeds)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}, run.kernels
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    reason = {line["node"]: line for line in lines}["n"]
    assert not reason["claimed"] and words in reason["reason"], reason


# 1. Sign(NaN) is NaN in ORT; MLX's sign gives 0.
def test_sign_keeps_nan():
    feeds = {"x": np.array([np.nan, -2, 0, 3, -np.inf], np.float32)}
    out = assert_like_cpu_on_mlx(single_node_model("Sign", feeds), feeds)
    assert np.isnan(out[0][0])


def test_float16_sign_of_nan_is_zero_like_cpu():
    feeds = {"x": np.array([np.nan, -2, 0, 3], np.float16)}
    out = assert_like_cpu_on_mlx(single_node_model("Sign", feeds), feeds)
    assert out[0][0] == 0


# e^x up to float32's last finite value: MLX's kernel overflows from about 88.1.
def test_exp_reaches_the_top_of_the_float32_range():
    feeds = {"x": np.array([88.0, 88.3, 88.7, 88.72, 88.73, 89.0, np.nan, -np.inf, 1.0, -87.0], np.float32)}
    out = assert_like_cpu_on_mlx(single_node_model("Exp", feeds), feeds, rtol=1e-5)
    assert np.isfinite(out[0][:4]).all()


# float16 activations that ORT computes in float32 and rounds once (Softplus: stably). At
# opset 18 exactly ORT runs float16 Softplus and HardSwish through their ONNX function bodies
# in float16 (Softplus(89) is inf there), which a lowering cannot see; not matched.
@pytest.mark.parametrize("op, attrs", [("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("HardSwish", {}), ("Softplus", {})])
def test_float16_activations_like_cpu(op, attrs):
    values = [np.nan, np.inf, -np.inf, 0, -2.5, -3, 0.5, 2.5, 20, -20, 88.7, 89, -10, 3e4, -3e4]
    feeds = {"x": np.array(values, np.float16)}
    assert_like_cpu_on_mlx(single_node_model(op, feeds, attrs, opset=20), feeds, rtol=1e-3)


# 2. float16 reductions accumulate in float32 in ORT: a sum that overflows float16 on the way
# still gives a finite mean, norm or log.
@pytest.mark.parametrize("op, row", [
    ("ReduceMean", [6e4, 6e4, 6e4, -10]),
    ("ReduceL2", [200, 200, 200, 1]),
    ("ReduceLogSum", [6e4, 6e4, 6e4, -10]),
    ("ReduceSum", [6e4, 6e4, -6e4, -5e4]),
    ("ReduceLogSumExp", [11, 11, 11, 11]),
])
def test_float16_reductions_accumulate_wider(op, row):
    feeds = {"x": np.array([row], np.float16)}
    model = single_node_model(op, feeds, {"keepdims": 0}, opset=18, constants=[constant("axes", [1], np.int64)])
    out = assert_like_cpu_on_mlx(model, feeds, rtol=1e-3)
    assert np.isfinite(out[0]).all()


def test_float16_global_average_pool_accumulates_wider():
    feeds = {"x": np.array([6e4, 6e4, 6e4, -10], np.float16).reshape(1, 1, 2, 2)}
    out = assert_like_cpu_on_mlx(single_node_model("GlobalAveragePool", feeds), feeds, rtol=1e-3)
    assert np.isfinite(out[0]).all()


# 3. BatchNormalization folds scale / sqrt(var + eps) first, as ORT does; normalising first
# overflows float32.
def test_batch_normalization_in_orts_order_does_not_overflow():
    feeds = {"x": np.array([3e38, -3e38, 1.0], np.float32).reshape(1, 3, 1, 1)}
    params = [constant("scale", [0.5] * 3), constant("b", [0.0] * 3), constant("mean", [0.0] * 3), constant("var", [0.25] * 3)]
    out = assert_like_cpu_on_mlx(single_node_model("BatchNormalization", feeds, constants=params, opset=15), feeds, rtol=1e-5)
    assert np.isfinite(out[0]).all()


# 4. Clip: ORT keeps a NaN input, ignores a NaN bound, gives max where min > max, and clips to
# the type's finite range when a bound is absent.
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("low, high", [(-1, 1), (np.nan, 1), (-1, np.nan), (np.nan, np.nan), (2, -2), (np.inf, None), (None, -np.inf)])
def test_clip_nan_and_absent_bounds_like_cpu(dtype, low, high):
    x = np.array([np.nan, -5, 0, 5, np.inf, -np.inf, 0.5] * 3, dtype)
    bounds = []
    for name, value in (("lo", low), ("hi", high)):
        if value is not None:
            bounds.append(constant(name, value, dtype))
    names = ["x"] + (["lo"] if low is not None else [""]) + (["hi"] if high is not None else [])
    node = helper.make_node("Clip", names, ["y"], name="n")
    model = make_model([node], [tensor("x", ELEM[dtype], [x.size])], [tensor("y", ELEM[dtype])], bounds, opset=13)
    assert_like_cpu_on_mlx(model, {"x": x})


def test_clip_6_attributes_like_cpu():
    feeds = {"x": np.array([np.nan, -5, 0, 5, np.inf, -np.inf], np.float32)}
    assert_like_cpu_on_mlx(single_node_model("Clip", feeds, {"min": -1.0, "max": 2.0}, opset=10), feeds)


def test_integer_clip_still_exact():
    feeds = {"x": np.array([-7, 0, 3, 100], np.int32)}
    model = single_node_model("Clip", feeds, constants=[constant("lo", -2, np.int32), constant("hi", 5, np.int32)], opset=13)
    assert_like_cpu_on_mlx(model, feeds)


# 5. int32 sums saturate in ORT (it sums in a wider type); int64 sums and integer products go
# through floating point there, which MLX cannot repeat: declined, except int64 sums within the
# range where doubles are exact (checked at run time).
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceSumSquare", "ReduceL1"])
def test_int32_sums_saturate_like_cpu(op):
    big, small = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    x = np.array([[big, 1, 5], [small, -1, 0], [big, big, -big], [3, -7, 46341], [big, 1, -5]], np.int32)
    feeds = {"x": x}
    if op == "ReduceSum":
        model = single_node_model(op, feeds, opset=13, constants=[constant("axes", [1], np.int64)])
    else:
        model = single_node_model(op, feeds, {"axes": [1]}, opset=13)
    assert_like_cpu_on_mlx(model, feeds)
    everything = single_node_model(op, feeds, {"keepdims": 0}, opset=11)
    assert_like_cpu_on_mlx(everything, feeds)


@pytest.mark.parametrize("op, dtype", [
    ("ReduceSumSquare", np.int64), ("ReduceL1", np.int64), ("ReduceProd", np.int64), ("ReduceProd", np.int32),
])
def test_integer_reductions_orts_cpu_does_in_floating_point_are_declined(op, dtype, monkeypatch, tmp_path):
    feeds = {"x": np.array([[2**30, 2**30, 7]], dtype)}
    model = single_node_model(op, feeds, {"axes": [1]}, opset=11)
    assert_declined(model, feeds, monkeypatch, tmp_path, "floating point")


def test_int64_sums_where_doubles_are_exact_run_on_mlx_like_cpu():
    """ORT's double sum is exact while every term is within 2^53 / n: what LLM decoders sum
    (attention masks into sequence lengths), and far beyond."""
    n = 3
    x = np.array([[1, 0, 1], [2**53 // n, 2**53 // n, 2**53 // n], [-(2**53 // n), 5, -7]], np.int64)
    feeds = {"x": x}
    model = single_node_model("ReduceSum", feeds, opset=13, constants=[constant("axes", [1], np.int64)])
    assert_like_cpu_on_mlx(model, feeds)


def test_int64_sums_past_the_exact_range_fail_the_run_with_the_reason():
    """Past 2^53 / n ORT's double sum rounds; the EP fails the run with the reason rather than
    return the exact sum, which would differ from ORT's."""
    n = 3
    x = np.array([[2**53 // n + 1, 0, 0]], np.int64)
    feeds = {"x": x}
    model = single_node_model("ReduceSum", feeds, opset=13, constants=[constant("axes", [1], np.int64)])
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="double precision") as error:
        session.run(None, feeds)
    # ORT's CPU EP answers this input (rounded): the error must not blame the data.
    assert "rejects this input" not in str(error.value), error.value
    assert "ONNXRUNTIME_EP_MLX_DISABLE=1" in str(error.value), error.value
    cpu_outputs(model, feeds)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_integer_fmod_runs_on_mlx_like_cpu_within_2_pow_53_and_fails_past_it(dtype):
    """s66-Mod-10-0: ORT computes Mod's fmod=1 on integers with std::fmod, in doubles: 2^64 - 1
    rounds to 2^64 there (mod 9: 7, not 6). Within 2^53 its answer is exact and the EP's equals
    it; past 2^53 the EP fails the run with the reason rather than differ."""
    top = 2**53
    feeds = {"a": np.array([top, 7, 20, 0], dtype), "b": np.array([3, top, 9, 5], dtype)}
    model = single_node_model("Mod", feeds, {"fmod": 1}, opset=13)
    assert_like_cpu_on_mlx(model, feeds)
    past = {"a": np.array([top + 1, 7, 1, 2], dtype), "b": np.array([2, 3, 4, 5], dtype)}
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="double precision") as error:
        session.run(None, past)
    assert "ONNXRUNTIME_EP_MLX_DISABLE=1" in str(error.value), error.value
    assert cpu_outputs(model, past)[0].tolist() == [0, 1, 1, 2]  # ORT's rounding (exact: 1, 1, ...)


# 6. FusedMatMul with transA and a 1-D B: ORT's kernel departs from numpy's rule; declined.
def test_fused_matmul_trans_a_with_1d_b_is_declined(monkeypatch, tmp_path):
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(3, 2), "b": np.arange(3, dtype=np.float32)}
    model = single_node_model("FusedMatMul", feeds, {"transA": 1}, domain="com.microsoft")
    assert_declined(model, feeds, monkeypatch, tmp_path, "transA with a 1-D")


def test_fused_matmul_trans_a_with_2d_b_still_runs_on_mlx():
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(3, 2), "b": np.arange(6, dtype=np.float32).reshape(3, 2)}
    assert_like_cpu_on_mlx(single_node_model("FusedMatMul", feeds, {"transA": 1}, domain="com.microsoft"), feeds, rtol=1e-5)


# 7. ConvTranspose with SAME padding and a kernel shorter than the stride: ORT floors the
# negative total padding at 0 (input 5, kernel 1, stride 3: 13 outputs, where ONNX says 15).
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("kernel, stride, extra", [(1, 3, 0), (2, 4, 1), (3, 3, 0), (2, 3, 0)])
def test_conv_transpose_same_with_kernel_shorter_than_stride_like_cpu(auto_pad, kernel, stride, extra):
    rng = np.random.default_rng(kernel * 10 + stride)
    feeds = {"x": rng.standard_normal((1, 2, 5)).astype(np.float32)}
    w = constant("w", rng.standard_normal((2, 3, kernel)))
    attrs = {"auto_pad": auto_pad, "strides": [stride]}
    if extra:
        attrs["output_padding"] = [extra]
    assert_like_cpu_on_mlx(single_node_model("ConvTranspose", feeds, attrs, constants=[w]), feeds, rtol=1e-5, atol=1e-6)


# 8. LayerNormalization with a scale or bias broadcast from shape [1].
@pytest.mark.parametrize("scale, bias", [([2.0], None), ([2.0], [0.5]), ([1.0, 2.0, 3.0], [0.5]), ([2.0], [0.1, 0.2, 0.3])])
def test_layer_normalization_broadcasts_a_size_one_scale_or_bias(scale, bias):
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    params = [constant("scale", scale)] + ([constant("bias", bias)] if bias is not None else [])
    assert_like_cpu_on_mlx(single_node_model("LayerNormalization", feeds, {"axis": -1}, constants=params), feeds, rtol=1e-5, atol=1e-6)


# 9. ArgMax/ArgMin of a tensor that is empty along another axis: an empty result, as ORT
# returns (over an empty axis ORT fails, and so does the EP).
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_extreme_of_a_tensor_empty_elsewhere(op, keepdims):
    feeds = {"x": np.zeros((0, 3), np.float32)}
    model = single_node_model(op, feeds, {"axis": 1, "keepdims": keepdims}, out_elem=TensorProto.INT64)
    out = assert_like_cpu_on_mlx(model, feeds)
    assert out[0].shape == ((0, 1) if keepdims else (0,))


def test_arg_max_over_an_empty_axis_fails_like_cpu():
    feeds = {"x": np.zeros((2, 0), np.float32)}
    model = single_node_model("ArgMax", feeds, {"axis": 1}, out_elem=TensorProto.INT64)
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="node 'n'.*empty tensor"):
        session.run(None, feeds)


# Gemm at the float range's edge: ORT scales C by beta first, then adds it to alpha * A·B in
# one fused multiply-add, and never skips the product when alpha is 0.
@pytest.mark.parametrize("a, c, alpha, beta", [
    (3e38, -np.inf, 2.0, 1.0),   # alpha * A·B overflows, C = -inf: -inf, not NaN
    (3e38, -3e38, 2.0, 1.0),     # the fused sum is back in range: 3e38
    (-3e38, 3e38, 1.0, 2.0),     # beta * C overflows on its own: inf
    (np.inf, 1.0, 0.0, 1.0),     # 0 * inf in the product: NaN
    (1.0, np.nan, 1.0, 0.0),     # beta = 0 ignores C
    (3e38, 1.0, 1.0, 1.0),
    # |alpha| <= 1 skips the guard: the plain sum must already be the fused one
    (3e38, 3e38, 1.0, 1.0),      # the sum overflows: inf
    (3e38, 3e38, 0.5, 1.0),      # 1.5e38 + 3e38: inf
    (3e38, -np.inf, 1.0, 1.0),   # -inf
    (np.inf, -np.inf, 1.0, 1.0), # inf - inf: NaN
    (-3e38, 3e38, -1.0, -1.0),   # 3e38 - 3e38: 0
    (3e38, 3e38, -1.0, -1.0),    # -3e38 - 3e38: -inf
])
def test_gemm_overflow_edge_like_cpu(a, c, alpha, beta):
    feeds = {"a": np.array([[a, 0.5]], np.float32), "b": np.array([[1.0], [0.0]], np.float32), "c": np.array([[c]], np.float32)}
    assert_like_cpu_on_mlx(single_node_model("Gemm", feeds, {"alpha": alpha, "beta": beta}, opset=13), feeds)


def test_gemm_in_range_still_matches_cpu():
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal((4, 5)).astype(np.float32), "b": rng.standard_normal((6, 5)).astype(np.float32),
             "c": rng.standard_normal((6,)).astype(np.float32)}
    model = single_node_model("Gemm", feeds, {"alpha": 0.7, "beta": -1.5, "transB": 1}, opset=13)
    assert_like_cpu_on_mlx(model, feeds, rtol=1e-5, atol=1e-6)


# MeanVarianceNormalization: ORT subtracts the mean first and divides by the root of the mean
# square (no epsilon: a constant block is NaN), and drops axes outside the rank.
@pytest.mark.parametrize("case", ["offset", "constant", "rank3_default_axes", "huge", "negative_axes"])
def test_mean_variance_normalization_like_cpu(case):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4, 2)).astype(np.float32)
    attrs = {}
    if case == "offset":
        x += 1000  # E[x²] - E[x]² in float32 loses every digit here
    elif case == "constant":
        x[:] = 5.0
    elif case == "rank3_default_axes":
        x = x[:, :, :, 0].copy()
    elif case == "huge":
        x[0, 0, 0, 0] = 3e38
    else:
        attrs = {"axes": [-1, 1]}
    feeds = {"x": x}
    # At an offset of 1000 one float32 ulp of x is 6e-5: the summation orders differ by that.
    atol = 3e-4 if case == "offset" else 1e-5
    assert_like_cpu_on_mlx(single_node_model("MeanVarianceNormalization", feeds, attrs, opset=13), feeds, rtol=1e-4, atol=atol)


# Pools whose pads reach the kernel's size: ORT's CPU EP refuses the node when the session is
# created (it compares with the undilated kernel), so the EP leaves them to it.
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("pads, dilations", [([2, 0], None), ([0, 2], None), ([2, 0], [3])])
def test_pools_with_pads_as_large_as_the_kernel_are_left_to_ort(op, pads, dilations, monkeypatch, tmp_path):
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(1, 1, 8)}
    attrs = {"kernel_shape": [2], "pads": pads} | ({"dilations": dilations} if dilations else {})
    model = single_node_model(op, feeds, attrs, opset=19)
    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    with pytest.raises(Exception, match="Pad should be smaller than kernel"):
        ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    records = {r["node"]: r for r in map(json.loads, report.read_text().splitlines())}
    assert not records["n"]["claimed"] and "not all smaller than kernel_shape" in records["n"]["reason"]


# Resize's interpolating modes on layouts ORT's CPU kernel refuses at run time (its
# ScalesValidation): the EP fails the run as well, naming the reason, instead of answering.
@pytest.mark.parametrize("mode, scales, shape", [
    ("linear", [1.8, 1.8, 1.8, 1.8], (1, 2, 3, 4)),   # 4-D with N and C scaled
    ("linear", [2.0], (5,)),                            # 1-D
    ("cubic", [1.0, 1.0, 1.0, 2.0, 2.0], (1, 1, 2, 3, 4)),  # cubic beyond 4-D
])
def test_resize_layouts_orts_kernel_refuses_fail_the_run_on_both(mode, scales, shape):
    feeds = {"x": np.arange(np.prod(shape), dtype=np.float32).reshape(shape)}
    model = single_node_model("Resize", feeds, {"mode": mode}, opset=19,
                              constants=[constant("roi", []), constant("scales", scales)])
    # ORT's CPU EP checks constant scales when it creates the kernel; the EP, which sees no
    # values when it claims, fails the first run.
    with pytest.raises(Exception, match="ScalesValidation"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="ORT's CPU EP interpolates only"):
        session.run(None, feeds)


# Elu and Selu in ORT's arithmetic: e^x - 1 (not expm1, which a huge alpha or gamma turns from
# ORT's 0 into -1e28 at x = -1e-10: fuzz s53-Selu-6-1), Selu's (gamma * alpha) taken first and -0
# on its curve (+0 there); non-finite parameters then give ORT's NaNs too (they were declined).
@pytest.mark.parametrize("op, attrs", [
    ("Elu", {"alpha": 1e38}), ("Elu", {}), ("Selu", {"gamma": 1e38}), ("Selu", {"alpha": 1e30, "gamma": 1.0}),
    ("Selu", {"alpha": float("inf")}), ("Selu", {"gamma": float("-inf")}), ("Selu", {"alpha": float("nan")}),
    ("Selu", {"alpha": float("inf"), "gamma": 0.0}),
])
def test_elu_and_selu_follow_orts_arithmetic(op, attrs):
    feeds = {"x": np.array([[-1e-10, -1e-3, -0.5, -1.4e-45, 0.0, -0.0, 2.0, -20.0, -1e30]], np.float32)}
    (got,) = assert_like_cpu_on_mlx(single_node_model(op, feeds, attrs), feeds)
    (want,) = cpu_outputs(single_node_model(op, feeds, attrs), feeds)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
