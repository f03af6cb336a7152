"""ai.onnx QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear on MLX against ORT's CPU
EP, bit for bit: every quantised type, per-tensor / per-axis / blocked parameters, zero points
present or not, fed or constant, and the values where rounding and saturation differ (ties,
NaN, ±inf, out of range). Then a QDQ model (what ORT's quantisation tool emits around a Conv
and a MatMul) that must run as one MLX cluster with graph optimisations off; at ORT's default
level ORT fuses the Q/DQ patterns into QLinearConv / QLinearMatMul first, which is checked and
reported as it is.

The op-suite cases (tests/ops/families/qdq.py) cover the table's dtype combinations through the
op harness; this file covers the value-level edge cases and the graph-level behaviour."""

from __future__ import annotations

import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor

CPU = "CPUExecutionProvider"
ELEM = {
    np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int8: TensorProto.INT8,
    np.uint8: TensorProto.UINT8, np.int16: TensorProto.INT16, np.uint16: TensorProto.UINT16,
    np.int32: TensorProto.INT32,
}
QTYPES = [np.int8, np.uint8, np.int16, np.uint16]


def _opset(qtype, block):
    if block:
        return 21
    return 21 if qtype in (np.int16, np.uint16) else 19


def _param_shape(x_shape, mode, axis, block):
    if mode == "tensor":
        return []
    if mode == "tensor1":
        return [1]
    if mode == "axis":
        return [x_shape[axis]]
    shape = list(x_shape)
    shape[axis] = -(-shape[axis] // block)
    return shape


def _model(op, x, scale, zp, attrs, out_elem, opset, const_params):
    names = ["x", "scale"] + (["zp"] if zp is not None else [])
    feeds = {"x": x}
    inits, inputs = [], [tensor("x", ELEM[x.dtype.type], list(x.shape))]
    for name, value in (("scale", scale), ("zp", zp)):
        if value is None:
            continue
        if const_params:
            inits.append(numpy_helper.from_array(value, name))
        else:
            inputs.append(tensor(name, ELEM[value.dtype.type], list(value.shape)))
            feeds[name] = value
    node = helper.make_node(op, names, ["y"], **attrs)
    model = make_model([node], inputs, [tensor("y", out_elem)], inits, opset=opset)
    return model, feeds


def _compare(model, feeds):
    expected = cpu_outputs(model, feeds)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


MODES = [("tensor", 1, 0), ("tensor1", 1, 0), ("axis", 1, 0), ("axis", 0, 0), ("axis", -1, 0),
         ("block", 1, 2), ("block", 2, 3), ("block", 0, 4)]


@pytest.mark.parametrize("mode,axis,block", MODES, ids=lambda v: str(v))
@pytest.mark.parametrize("qtype", QTYPES + [np.int32], ids=lambda t: t.__name__)
@pytest.mark.parametrize("stype", [np.float32, np.float16], ids=lambda t: t.__name__)
@pytest.mark.parametrize("with_zp", [True, False], ids=["zp", "no_zp"])
def test_dequantize_linear(mode, axis, block, qtype, stype, with_zp):
    rng = np.random.default_rng(zlib.crc32(repr((mode, axis, block, qtype.__name__)).encode()))
    x_shape = [3, 7, 5]
    info = np.iinfo(qtype)
    lo, hi = (max(info.min, -(2**31)), min(info.max, 2**31 - 1))
    x = rng.integers(lo, hi, x_shape, endpoint=True).astype(qtype)
    x.flat[:4] = [info.min, info.max, 0, 1] if qtype != np.uint8 else [0, 255, 1, 2]
    pshape = _param_shape(x_shape, mode, axis, block)
    scale = rng.uniform(0.001, 2.0, pshape).astype(stype)
    zp = None
    if with_zp:
        zlo, zhi = (0, 0) if qtype == np.int32 else (lo, hi)  # int32 zero points are 0 in ONNX
        zp = rng.integers(zlo, zhi, pshape, endpoint=True).astype(qtype)
    attrs = {"axis": axis} if mode == "axis" or mode == "block" else {}
    if block:
        attrs["block_size"] = block
    opset = 21 if block or qtype in (np.int16, np.uint16) or stype == np.float16 else 13
    for const in (True, False):
        model, feeds = _model("DequantizeLinear", x, scale, zp, attrs, ELEM[stype], opset, const)
        _compare(model, feeds)


def _hard_values(rng, shape, scale_hint, qtype):
    """Random values with exact ties of the scale, NaN, ±inf and out-of-range ones."""
    info = np.iinfo(qtype)
    x = rng.uniform(-1.2, 1.2, shape) * scale_hint * max(abs(info.min), info.max)
    flat = x.reshape(-1)
    n = flat.size
    idx = rng.permutation(n)
    ties = (rng.integers(-40, 40, n) + 0.5) * scale_hint
    flat[idx[: n // 4]] = ties[: n // 4]
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30]
    flat[idx[n // 4: n // 4 + len(specials)]] = specials
    return x


@pytest.mark.parametrize("mode,axis,block", MODES, ids=lambda v: str(v))
@pytest.mark.parametrize("qtype", QTYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("xtype", [np.float32, np.float16], ids=lambda t: t.__name__)
@pytest.mark.parametrize("with_zp", [True, False], ids=["zp", "no_zp"])
def test_quantize_linear(mode, axis, block, qtype, xtype, with_zp):
    if not with_zp and qtype != np.uint8:
        pytest.skip("without a zero point the output is uint8 (covered by qtype uint8)")
    rng = np.random.default_rng(zlib.crc32(repr((mode, axis, block, qtype.__name__, xtype.__name__)).encode()))
    x_shape = [3, 7, 5]
    pshape = _param_shape(x_shape, mode, axis, block)
    # Scales that are powers of two make exact ties; others make near-ties.
    scale = np.where(rng.random(pshape) < 0.5, 2.0 ** rng.integers(-6, 2, pshape),
                     rng.uniform(0.002, 0.5, pshape)).astype(xtype)
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
        x = _hard_values(rng, x_shape, float(np.max(scale)), qtype).astype(xtype)
    zp = None
    if with_zp:
        info = np.iinfo(qtype)
        zp = rng.integers(info.min, info.max, pshape, endpoint=True).astype(qtype)
    attrs = {"axis": axis} if mode in ("axis", "block") else {}
    if block:
        attrs["block_size"] = block
    opset = 21 if block or qtype in (np.int16, np.uint16) else (19 if xtype == np.float16 else 13)
    for const in (True, False):
        model, feeds = _model("QuantizeLinear", x, scale, zp, attrs, ELEM[qtype], opset, const)
        _compare(model, feeds)


@pytest.mark.parametrize("zp", [-128, -5, -1, 0, 1, 127])
def test_quantize_linear_int32_loop_wraps(zp):
    """ORT's int32 loops (float16 x; float32 blocked along an outer axis): NaN, ±inf and
    quotients past int32 become INT32_MIN and the zero point wraps it, as on x86."""
    near = [2147483520 * 0.5, 2147483648.0 * 0.5, -2147483648.0 * 0.5, -2147483904 * 0.5]
    specials = [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, 1.0, 63.75]
    x = np.array(near + specials, np.float32).reshape(12, 1).repeat(2, 1)
    scale, zps = np.full((6, 2), 0.5, np.float32), np.full((6, 2), zp, np.int8)
    attrs = {"axis": 0, "block_size": 2}
    model, feeds = _model("QuantizeLinear", x, scale, zps, attrs, TensorProto.INT8, 21, True)
    _compare(model, feeds)
    with np.errstate(over="ignore"):
        x16 = np.array(specials * 2, np.float16)
    model, feeds = _model("QuantizeLinear", x16, np.array(0.5, np.float16), np.array(zp, np.int8), {},
                          TensorProto.INT8, 21, True)
    _compare(model, feeds)


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23, 24, 25])
def test_quantize_dequantize_every_opset(opset):
    rng = np.random.default_rng(opset)
    x = _hard_values(rng, [4, 6], 0.05, np.int8).astype(np.float32)
    scale, zp = np.array(0.05, np.float32), np.array(-3, np.int8)
    model, feeds = _model("QuantizeLinear", x, scale, zp, {}, TensorProto.INT8, opset, True)
    _compare(model, feeds)
    q = rng.integers(-128, 127, [4, 6]).astype(np.int8)
    model, feeds = _model("DequantizeLinear", q, scale, zp, {}, TensorProto.FLOAT, opset, True)
    _compare(model, feeds)


@pytest.mark.parametrize("opset", [23, 24, 25])
def test_output_dtype_saturate_precision(opset):
    """output_dtype picks the type without a zero point; saturate and precision change nothing
    in ORT (saturate is for float8, precision is not read)."""
    rng = np.random.default_rng(0)
    x = _hard_values(rng, [5, 8], 0.01, np.int16).astype(np.float32)
    scale = np.array(0.01, np.float32)
    for attrs, elem in [({"output_dtype": TensorProto.INT16}, TensorProto.INT16),
                        ({"output_dtype": TensorProto.INT8, "saturate": 0}, TensorProto.INT8),
                        ({"precision": TensorProto.FLOAT16}, TensorProto.UINT8)]:
        model, feeds = _model("QuantizeLinear", x, scale, None, attrs, elem, opset, True)
        _compare(model, feeds)
    q = rng.integers(-128, 127, [5, 8]).astype(np.int8)
    model, feeds = _model("DequantizeLinear", q, scale, None, {"output_dtype": TensorProto.FLOAT},
                          TensorProto.FLOAT, opset, True)
    _compare(model, feeds)


def _dql(x):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    outs = [tensor("y", TensorProto.UINT8), tensor("s"), tensor("z", TensorProto.UINT8)]
    return make_model([node], [tensor("x", TensorProto.FLOAT, list(x.shape))], outs, opset=11)


NAN, INF = np.nan, np.inf
DQL_CASES = {
    "zeros": [0.0, 0.0, 0.0], "one_positive": [2.5], "one_negative": [-2.5],
    "nan_last": [1.0, 2.0, NAN], "nan_first": [NAN, 1.0, 2.0], "all_nan": [NAN, NAN, NAN],
    "nan_long": [1.0, NAN, -1.0] + [0.5] * 40, "inf": [INF, 1.0], "minus_inf": [-INF, 1.0, 2.0],
    "both_inf": [INF, -INF], "huge_range": [3e38, -3e38], "subnormal": [1e-40, 0.0],
    "tie_zero_point": [1.0, -1.0], "small": [0.1, 0.2, -0.3], "negative_only": [-1.0, -0.5, -3.0],
}


@pytest.mark.parametrize("values", DQL_CASES.values(), ids=DQL_CASES.keys())
def test_dynamic_quantize_linear_edges(values):
    x = np.array(values, np.float32)
    _compare(_dql(x), {"x": x})


@pytest.mark.parametrize("shape", [[0], [2, 0, 3], [1], [257], [3, 5, 64]], ids=str)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dynamic_quantize_linear_random(shape, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 100) + rng.uniform(-3, 3)).astype(np.float32)
    _compare(_dql(x), {"x": x})


def _q_dq(elem, zp_value, saturate=None):
    """x -> QuantizeLinear to ``elem`` -> DequantizeLinear: the narrow tensor is an edge inside
    the MLX cluster."""
    attrs = {} if saturate is None else {"saturate": saturate}
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
             helper.make_tensor("zp", elem, [], [zp_value])]
    return nodes, inits


@pytest.mark.parametrize("elem,zp", [(TensorProto.INT4, 1), (TensorProto.UINT4, 3)], ids=["int4", "uint4"])
def test_int4_edge_runs_on_mlx(elem, zp):
    """A Q -> DQ pair through int4/uint4 (odd element count: the last byte half used) is one
    MLX cluster, bit for bit with ORT, NaN/±inf/out of range included."""
    x = np.linspace(-3, 3, 15, dtype=np.float32).reshape(3, 5)
    x.flat[:4] = [np.nan, np.inf, -np.inf, 1e30]
    nodes, inits = _q_dq(elem, zp)
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [3, 5])], [tensor("y")], inits, opset=21)
    _compare(model, {"x": x})


def test_bfloat16_uint4_blocked_along_an_outer_axis_saturates_as_float32_does():
    """bfloat16 has no ORT kernel; its 4-bit outputs follow float32's: blocked along an outer
    axis, ORT's int32 loop turns ±inf (out of int32) into INT32_MIN, so uint4 0, where its float
    loop would clamp +inf to 15 (fuzz s1-QuantizeLinear-21-46)."""
    x = np.full((3, 4, 5), 0.75, np.float32)
    x[0, 1, 4], x[2, 3, 0] = np.inf, -np.inf
    scale = np.full((3, 2, 5), 0.5, np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["scale"], ["sb"], to=TensorProto.BFLOAT16),
             helper.make_node("QuantizeLinear", ["xb", "sb"], ["q"], axis=1, block_size=2,
                              output_dtype=TensorProto.UINT4),
             helper.make_node("DequantizeLinear", ["q", "scale"], ["y"], axis=1, block_size=2)]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [3, 4, 5])], [tensor("y")],
                       [numpy_helper.from_array(scale, "scale")], opset=21)
    run = Run(model, {"x": x})
    run.assert_all_on_mlx()
    want = np.full(x.shape, 1.0, np.float32)  # rint(0.75 / 0.5) = 2, dequantised: 2 * 0.5
    want[0, 1, 4] = want[2, 3, 0] = 0.0
    np.testing.assert_array_equal(run.outputs[0], want)


NARROW = {"int4": TensorProto.INT4, "uint4": TensorProto.UINT4, "e4m3fn": TensorProto.FLOAT8E4M3FN,
          "e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ, "e5m2": TensorProto.FLOAT8E5M2,
          "e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ}


@pytest.mark.parametrize("elem", NARROW.values(), ids=NARROW.keys())
def test_narrow_tensors_cross_to_ort_and_back(elem):
    """Q -> Transpose -> DQ: the EP declines Transpose on a narrow type, so ORT's CPU EP runs it
    between two MLX plans: the first encodes its output into ORT's packed bytes, the second
    decodes them (an odd count: a half-used last byte for the 4-bit types)."""
    x = np.linspace(-40, 40, 15, dtype=np.float32).reshape(3, 5)
    x.flat[:3] = [np.nan, -0.0, 1e-6]
    zp = 0 if elem not in (TensorProto.INT4, TensorProto.UINT4) else 2
    nodes, inits = _q_dq(elem, zp)
    nodes.insert(1, helper.make_node("Transpose", ["q"], ["q_cpu"]))
    nodes[2].input[0] = "q_cpu"
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [3, 5])], [tensor("y")], inits, opset=21)
    run = Run(model, {"x": x}, optimize=False)
    assert run.providers_of_kernels() == {MLX, CPU}, run.kernels
    expected = cpu_outputs(model, {"x": x})[0]
    got = run.outputs[0]
    # NaN payloads may differ (ORT's float8 NaN widens to 0x7FC00000, float16's keeps its bits).
    np.testing.assert_array_equal(got, expected)
    assert (np.signbit(got) == np.signbit(expected))[~np.isnan(expected)].all()


def test_int4_weight_dequantized_into_matmul():
    """An int4 weight, blocked along K as ORT's quantiser writes it for MatMul, stays an
    initializer (decoded once into int8) and the DQ -> MatMul runs as one MLX cluster."""
    rng = np.random.default_rng(3)
    k, n, block = 37, 6, 16  # K not a multiple of the block; an odd element count
    w_q = rng.integers(-8, 8, (k, n))
    scale = rng.uniform(0.01, 0.1, (-(-k // block), n)).astype(np.float32)
    zp = rng.integers(-2, 3, scale.shape)
    inits = [helper.make_tensor("w", TensorProto.INT4, [k, n], w_q.reshape(-1).tolist()),
             numpy_helper.from_array(scale, "scale"),
             helper.make_tensor("zp", TensorProto.INT4, list(scale.shape), zp.reshape(-1).tolist())]
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "zp"], ["w_dq"], axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "w_dq"], ["y"])]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [4, k])], [tensor("y")], inits, opset=21)
    x = rng.standard_normal((4, k)).astype(np.float32)
    run = Run(model, {"x": x}, optimize=False)
    run.assert_all_on_mlx()
    assert len(run.kernels) == 1, run.kernels
    w = (w_q - np.repeat(zp, block, axis=0)[:k]) * np.repeat(scale, block, axis=0)[:k]
    np.testing.assert_allclose(run.outputs[0], x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    # ORT's default level fuses DQ -> MatMul into MatMulNBits with int8 activations (~1% off):
    # its unoptimised graph is the exact one.
    want = _cpu(model, {"x": x}, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0]
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("saturate", [0, 1])
def test_float8_codes_leave_the_ep_bit_for_bit(saturate):
    """QuantizeLinear to float8e4m3fn as a graph output: the EP encodes its float16 carrier into
    ORT's codes (Python fetches them as uint8), NaN's sign and ORT's overflow rules included."""
    x = np.array([0.0, -0.0, 1.0, 1.0625, 470.0, 485.0, 500.0, 1e-3, -1e-30, 2.0**-10, 3 * 2.0**-11,
                  np.inf, -np.inf, np.nan, -np.nan, 1e30], np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["y"], saturate=saturate)
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "scale"),
             helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0])]
    model = make_model([node], [tensor("x", TensorProto.FLOAT, [x.size])],
                       [tensor("y", TensorProto.FLOAT8E4M3FN)], inits, opset=21)
    _compare(model, {"x": x})


def test_float8_dequantize_nonzero_zero_point_fails_as_ort():
    """ORT's DequantizeLinear fails on a float8 zero point other than 0; so does the EP."""
    inits = [helper.make_tensor("w", TensorProto.FLOAT8E4M3FN, [3], [1.0, 2.0, 3.0]),
             numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
             helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [2.0])]
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "zp"], ["w_dq"]),
             helper.make_node("Add", ["x", "w_dq"], ["y"])]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [3])], [tensor("y")], inits, opset=21)
    feeds = {"x": np.zeros(3, np.float32)}
    with pytest.raises(Exception, match="zero"):
        cpu_outputs(model, feeds)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=[MLX, CPU])
    session.disable_fallback()
    with pytest.raises(Exception, match="float8 x_zero_point must be \\+0"):
        session.run(None, feeds)


# --------------------------------------------------------------------------------------------
# A QDQ model, as ORT's quantisation tool writes it (QOperator-free, QDQ format): activations
# quantised to uint8 per tensor, weights to int8 per output channel, biases to int32.


def _qdq_model():
    rng = np.random.default_rng(7)
    c_in, c_out, hw, n_out = 3, 8, 6, 5
    w = rng.uniform(-0.5, 0.5, (c_out, c_in, 3, 3)).astype(np.float32)
    w_scale = (np.abs(w).reshape(c_out, -1).max(1) / 127).astype(np.float32)
    w_q = np.clip(np.rint(w / w_scale[:, None, None, None]), -127, 127).astype(np.int8)
    x_scale, x_zp = np.float32(2.0 / 255), np.uint8(128)
    b = rng.uniform(-0.1, 0.1, c_out).astype(np.float32)
    b_scale = (x_scale * w_scale).astype(np.float32)
    b_q = np.rint(b / b_scale).astype(np.int32)
    a_scale, a_zp = np.float32(0.05), np.uint8(100)
    m = rng.uniform(-0.3, 0.3, (c_out * 4 * 4, n_out)).astype(np.float32)
    m_scale = np.float32(np.abs(m).max() / 127)
    m_q = np.clip(np.rint(m / m_scale), -127, 127).astype(np.int8)
    o_scale, o_zp = np.float32(0.1), np.uint8(128)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v), name)  # noqa: E731
    inits = [c("x_scale", x_scale), c("x_zp", x_zp), c("w_q", w_q), c("w_scale", w_scale),
             c("w_zp", np.zeros(c_out, np.int8)), c("b_q", b_q), c("b_scale", b_scale),
             c("a_scale", a_scale), c("a_zp", a_zp), c("m_q", m_q), c("m_scale", m_scale),
             c("m_zp", np.int8(0)), c("o_scale", o_scale), c("o_zp", o_zp),
             c("shape", np.array([1, -1], np.int64))]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zp"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w_dq"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale"], ["b_dq"], axis=0),
        helper.make_node("Conv", ["x_dq", "w_dq", "b_dq"], ["conv"], pads=[0, 0, 0, 0]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("QuantizeLinear", ["relu", "a_scale", "a_zp"], ["a_q"]),
        helper.make_node("DequantizeLinear", ["a_q", "a_scale", "a_zp"], ["a_dq"]),
        helper.make_node("Reshape", ["a_dq", "shape"], ["flat"]),
        helper.make_node("QuantizeLinear", ["flat", "a_scale", "a_zp"], ["f_q"]),
        helper.make_node("DequantizeLinear", ["f_q", "a_scale", "a_zp"], ["f_dq"]),
        helper.make_node("DequantizeLinear", ["m_q", "m_scale", "m_zp"], ["m_dq"]),
        helper.make_node("MatMul", ["f_dq", "m_dq"], ["mm"]),
        helper.make_node("QuantizeLinear", ["mm", "o_scale", "o_zp"], ["o_q"]),
        helper.make_node("DequantizeLinear", ["o_q", "o_scale", "o_zp"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [1, c_in, hw, hw])],
                       [tensor("y", TensorProto.FLOAT, [1, n_out])], inits, opset=13)
    x = rng.uniform(-1, 1, (1, c_in, hw, hw)).astype(np.float32)
    return model, {"x": x}, o_scale


def _cpu(model, feeds, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(model, options, providers=[CPU]).run(None, feeds)


def test_qdq_model_one_cluster_without_optimizations():
    model, feeds, o_scale = _qdq_model()
    run = Run(model, feeds, optimize=False)
    run.assert_all_on_mlx()
    assert len(run.kernels) == 1, run.kernels  # one fused MLX node: the whole graph
    want = _cpu(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0]
    # Conv and MatMul sum in another order than ORT's: a requantised output may move by one
    # step where the float sum lands within an ulp of a rounding boundary.
    assert np.max(np.abs(run.outputs[0] - want)) <= o_scale * 1.001


def test_qdq_model_default_optimizations():
    """At ORT's default level (ORT_ENABLE_ALL) ORT's QDQ transformers run before the EP sees
    the graph: what is left for MLX is recorded here, and the answer still matches ORT's."""
    model, feeds, o_scale = _qdq_model()
    run = Run(model, feeds)
    want = _cpu(model, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)[0]
    assert np.max(np.abs(run.outputs[0] - want)) <= o_scale * 1.001
    print("kernels at ORT_ENABLE_ALL:", run.kernels)
    assert MLX in run.providers_of_kernels()


# --------------------------------------------------------------------------------------------
# Integer matrix products: exact int32 sums (wrapping past 2^31), as ORT's.

INT8S = {"u8": np.uint8, "i8": np.int8}
MATMUL_SHAPES = [([3, 4], [4, 5]), ([2, 3, 4], [4, 5]), ([4], [4, 5]), ([2, 3, 4], [2, 4, 5]),
                 ([3, 4], [4]), ([3, 1, 3, 6], [2, 6, 2]), ([2, 0], [0, 3]), ([0, 4], [4, 2])]


def _full(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def _int_model(op, names, values, out_elem, opset=10, const=()):
    inits, inputs, feeds = [], [], {}
    for name, value in zip(names, values):
        if value is None:
            continue
        if name in const:
            inits.append(numpy_helper.from_array(value, name))
        else:
            inputs.append(tensor(name, ELEM[value.dtype.type], list(value.shape)))
            feeds[name] = value
    node = helper.make_node(op, [n if v is not None else "" for n, v in zip(names, values)], ["y"])
    return make_model([node], inputs, [tensor("y", out_elem)], inits, opset=opset), feeds


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("ta,tb", [("u8", "u8"), ("u8", "i8"), ("i8", "i8"), ("i8", "u8")])
@pytest.mark.parametrize("zps", ["none", "scalar", "per_column"])
def test_matmul_integer(a_shape, b_shape, ta, tb, zps):
    if zps == "per_column" and len(b_shape) < 2:
        pytest.skip("a 1-D B has no columns")
    rng = np.random.default_rng(zlib.crc32(repr((a_shape, b_shape, ta, tb, zps)).encode()))
    ta, tb = INT8S[ta], INT8S[tb]
    a, b = _full(rng, ta, a_shape), _b_values(rng, ta, tb, b_shape)
    a_zp = b_zp = None
    if zps != "none":
        a_zp = _full(rng, ta, [])
        b_zp = _full(rng, tb, [] if zps == "scalar" else _column_shape(b_shape))
    names = ["a", "b", "a_zp", "b_zp"]
    for const in ((), ("b", "a_zp", "b_zp")):
        model, feeds = _int_model("MatMulInteger", names, [a, b, a_zp, b_zp], TensorProto.INT32, const=const)
        if 0 in a_shape[-1:]:
            # ORT leaves a sum over K = 0 uninitialised; the EP's is 0.
            run = Run(model, feeds)
            run.assert_all_on_mlx()
            assert not run.outputs[0].any()
            continue
        _compare(model, feeds)
        got = Run(model, feeds).outputs[0]
        np.testing.assert_array_equal(got, _exact(a, b, a_zp, b_zp))


def _column_shape(b_shape):
    """A per-column parameter of B as ORT takes it: [N] for a 2-D B, else B's shape with K = 1."""
    return [b_shape[-1]] if len(b_shape) == 2 else list(b_shape[:-2]) + [1, b_shape[-1]]


def _b_values(rng, ta, tb, shape):
    """B's values; int8 B under uint8 A stays in [-64, 63], where ORT's x86 u8s8 kernel
    (vpmaddubsw, int16 pair sums) is exact."""
    if ta == np.uint8 and tb == np.int8:
        return rng.integers(-64, 63, shape, endpoint=True).astype(np.int8)
    return _full(rng, tb, shape)


def _exact(a, b, a_zp=None, b_zp=None):
    a64 = a.astype(np.int64) - (0 if a_zp is None else np.int64(a_zp))
    b64 = b.astype(np.int64) - (0 if b_zp is None else b_zp.astype(np.int64))
    return (a64 @ b64).astype(np.int32)  # wraps past 2^31, as int32 accumulation


def test_matmul_integer_u8s8_full_range_is_exact():
    """Full-range int8 B under uint8 A: ORT's x86 kernel may saturate; the EP's sum is exact."""
    rng = np.random.default_rng(3)
    a, b = _full(rng, np.uint8, [4, 64]), _full(rng, np.int8, [64, 6])
    model, feeds = _int_model("MatMulInteger", ["a", "b"], [a, b], TensorProto.INT32)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], _exact(a, b))


@pytest.mark.parametrize("k", [65536, 70001])
def test_matmul_integer_long_k_wraps(k):
    """K past one exact float32 chunk, and sums past int32 (ORT wraps them)."""
    rng = np.random.default_rng(k)
    a = np.full([2, k], 255, np.uint8)
    a[1] = rng.integers(0, 255, k)
    b = np.full([k, 3], 255, np.uint8)
    b[:, 1] = rng.integers(0, 255, k)
    b[:, 2] = 7
    model, feeds = _int_model("MatMulInteger", ["a", "b"], [a, b], TensorProto.INT32)
    _compare(model, feeds)
    got = Run(model, feeds).outputs[0][0, 0]
    assert got == _exact(a, b)[0, 0] and (k < 33026 or got != 65025 * k)  # wrapped past 2^31
    a8 = np.full([1, k], -128, np.int8)
    model, feeds = _int_model("MatMulInteger", ["a", "b"], [a8, b.astype(np.int8) | np.int8(-128)],
                              TensorProto.INT32)
    _compare(model, feeds)


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES[:5], ids=str)
@pytest.mark.parametrize("types", [("u8", "u8"), ("u8", "i8"), ("i8", "i8")], ids=str)
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("opset,stype", [(10, np.float32), (21, np.float32), (21, np.float16)], ids=str)
def test_qlinear_matmul(a_shape, b_shape, types, per_column, opset, stype):
    if per_column and len(b_shape) < 2:
        pytest.skip("a 1-D B has no columns")
    rng = np.random.default_rng(zlib.crc32(repr((a_shape, b_shape, types, per_column)).encode()))
    ta, tb = INT8S[types[0]], INT8S[types[1]]
    a, b = _full(rng, ta, a_shape), _b_values(rng, ta, tb, b_shape)
    pc = _column_shape(b_shape) if per_column else []
    values = [a, np.array(rng.uniform(0.01, 0.1), stype), _full(rng, ta, []),
              b, rng.uniform(0.01, 0.1, pc).astype(stype), _full(rng, tb, pc),
              np.array(rng.uniform(0.5, 4), stype), _full(rng, ta, [])]
    names = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
    model, feeds = _int_model("QLinearMatMul", names, values, ELEM[ta], opset=opset,
                              const=names[1:])
    _compare(model, feeds)


CONV_CASES = {
    "2d": ([1, 3, 6, 7], [4, 3, 3, 3], {}),
    "2d_pads_strides": ([2, 3, 7, 6], [4, 3, 3, 2], {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    "2d_dilations": ([1, 2, 8, 8], [3, 2, 3, 3], {"dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    "2d_same_upper": ([1, 2, 5, 6], [2, 2, 3, 3], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "2d_same_lower": ([1, 2, 5, 6], [2, 2, 2, 3], {"auto_pad": "SAME_LOWER"}),
    "2d_groups": ([1, 4, 5, 5], [6, 2, 3, 3], {"group": 2, "pads": [1, 1, 1, 1]}),
    "2d_depthwise": ([1, 4, 5, 5], [4, 1, 3, 3], {"group": 4, "pads": [1, 1, 1, 1]}),
    "1d": ([2, 3, 9], [2, 3, 4], {"pads": [2, 1], "strides": [2]}),
    "3d": ([1, 2, 4, 5, 3], [2, 2, 2, 3, 2], {"pads": [1, 0, 1, 0, 1, 0]}),
    "1x1": ([1, 8, 4, 4], [5, 8, 1, 1], {}),
}


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("tx,tw", [("u8", "u8"), ("u8", "i8"), ("i8", "i8"), ("i8", "u8")])
@pytest.mark.parametrize("with_zp", [True, False], ids=["zp", "no_zp"])
def test_conv_integer(case, tx, tw, with_zp):
    x_shape, w_shape, attrs = CONV_CASES[case]
    rng = np.random.default_rng(zlib.crc32(repr((case, tx, tw, with_zp)).encode()))
    tx, tw = INT8S[tx], INT8S[tw]
    x, w = _full(rng, tx, x_shape), _b_values(rng, tx, tw, w_shape)
    if tx == np.int8 and tw == np.uint8:  # ORT's s8 x u8 path saturates too (int16 pair sums)
        x = rng.integers(-64, 63, x_shape, endpoint=True).astype(np.int8)
        w = rng.integers(0, 127, w_shape, endpoint=True).astype(np.uint8)
    zps = [_full(rng, tx, []), _full(rng, tw, [])] if with_zp else [None, None]
    names = ["x", "w", "x_zp", "w_zp"]
    inits, inputs, feeds = [], [tensor("x", ELEM[tx], x_shape)], {"x": x}
    for name, value in zip(names[1:], [w] + zps):
        if value is not None:
            inits.append(numpy_helper.from_array(value, name))
    node = helper.make_node("ConvInteger", [n for n, v in zip(names, [x, w] + zps) if v is not None],
                            ["y"], **attrs)
    model = make_model([node], inputs, [tensor("y", TensorProto.INT32)], inits, opset=10)
    _compare(model, feeds)


def test_conv_integer_s8u8_full_range_is_exact():
    """int8 x under uint8 w past [-64, 63]: ORT's x86 kernel saturates int16 pair sums; the
    EP's sum is exact."""
    rng = np.random.default_rng(5)
    x, w = _full(rng, np.int8, [1, 2, 4, 4]), _full(rng, np.uint8, [3, 2, 3, 3])
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"])
    model = make_model([node], [tensor("x", TensorProto.INT8, [1, 2, 4, 4])], [tensor("y", TensorProto.INT32)],
                       [numpy_helper.from_array(w, "w")], opset=10)
    run = Run(model, {"x": x})
    run.assert_all_on_mlx()
    x64, w64 = x.astype(np.int64), w.astype(np.int64)
    want = np.zeros([1, 3, 2, 2], np.int64)
    for m in range(3):
        for i in range(2):
            for j in range(2):
                want[0, m, i, j] = (x64[0, :, i:i + 3, j:j + 3] * w64[m]).sum()
    np.testing.assert_array_equal(run.outputs[0], want.astype(np.int32))


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("types", [("u8", "u8"), ("u8", "i8"), ("i8", "i8")], ids=str)
@pytest.mark.parametrize("params", ["per_tensor", "per_channel", "bias"])
def test_qlinear_conv(case, types, params):
    x_shape, w_shape, attrs = CONV_CASES[case]
    rng = np.random.default_rng(zlib.crc32(repr((case, types, params)).encode()))
    tx, tw = INT8S[types[0]], INT8S[types[1]]
    x, w = _full(rng, tx, x_shape), _b_values(rng, tx, tw, w_shape)
    m = w_shape[0]
    per_channel = params != "per_tensor"
    w_scale = rng.uniform(0.002, 0.02, [m] if per_channel else []).astype(np.float32)
    w_zp = np.full([m] if per_channel else [], _full(rng, tw, []), tw)
    if tw == np.int8:
        w_zp[...] = 0  # ORT's quantiser makes int8 weights symmetric
    values = {"x_scale": np.array(0.05, np.float32), "x_zp": _full(rng, tx, []), "w": w, "w_scale": w_scale,
              "w_zp": w_zp, "y_scale": np.array(rng.uniform(0.05, 0.5), np.float32), "y_zp": _full(rng, tx, [])}
    if params == "bias":
        values["B"] = rng.integers(-5000, 5000, [m]).astype(np.int32)
    names = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"] + (["B"] if "B" in values else [])
    inits = [numpy_helper.from_array(np.asarray(values[n]), n) for n in names[1:]]
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    model = make_model([node], [tensor("x", ELEM[tx], x_shape)], [tensor("y", ELEM[tx])], inits, opset=10)
    _compare(model, {"x": x})


def test_qlinear_conv_per_channel_w_zero_points():
    """Different zero points per output channel (uint8 weights), as ORT 1.31.1 takes them."""
    rng = np.random.default_rng(11)
    x = _full(rng, np.uint8, [1, 2, 5, 5])
    names = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
    values = [np.array(0.1, np.float32), np.uint8(9), _full(rng, np.uint8, [3, 2, 3, 3]),
              np.array([0.01, 0.02, 0.005], np.float32), np.array([1, 200, 77], np.uint8),
              np.array(0.7, np.float32), np.uint8(100)]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names[1:], values)]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])
    model = make_model([node], [tensor("x", TensorProto.UINT8, [1, 2, 5, 5])], [tensor("y", TensorProto.UINT8)],
                       inits, opset=10)
    _compare(model, {"x": x})


# --------------------------------------------------------------------------------------------
# com.microsoft MatMulIntegerToFloat and DynamicQuantizeMatMul: exact int32 products, then
# float(acc) * (a_scale * b_scale) + bias (ORT may fuse the last two into one FMA: 1 ulp).


def _contrib_model(op, names, values, const):
    inits, inputs, feeds = [], [], {}
    for name, value in zip(names, values):
        if value is None:
            continue
        if name in const:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        else:
            inputs.append(tensor(name, ELEM[value.dtype.type], list(value.shape)))
            feeds[name] = value
    node = helper.make_node(op, [n if v is not None else "" for n, v in zip(names, values)], ["y"],
                            domain="com.microsoft")
    model = make_model(nodes=[node], inputs=inputs, outputs=[tensor("y")], initializers=inits,
                       domains=[("com.microsoft", 1)])
    return model, feeds


def _close(model, feeds):
    want = cpu_outputs(model, feeds)[0]
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], want, rtol=2e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES[:5], ids=str)
@pytest.mark.parametrize("ta,tb", [("u8", "u8"), ("u8", "i8"), ("i8", "i8")])
@pytest.mark.parametrize("params", ["scalar", "per_column", "per_column_bias", "no_zp"])
def test_matmul_integer_to_float(a_shape, b_shape, ta, tb, params):
    if params.startswith("per_column") and len(b_shape) < 2:
        pytest.skip("a 1-D B has no columns")
    rng = np.random.default_rng(zlib.crc32(repr((a_shape, b_shape, ta, tb, params)).encode()))
    ta, tb = INT8S[ta], INT8S[tb]
    n = b_shape[-1] if len(b_shape) > 1 else 1
    pc = _column_shape(b_shape) if params.startswith("per_column") else []
    values = [_full(rng, ta, a_shape), _b_values(rng, ta, tb, b_shape),
              np.array(rng.uniform(0.01, 0.1), np.float32), rng.uniform(0.01, 0.1, pc).astype(np.float32),
              None if params == "no_zp" else _full(rng, ta, []), None if params == "no_zp" else _full(rng, tb, pc),
              rng.uniform(-1, 1, [n]).astype(np.float32) if params.endswith("bias") else None]
    names = ["A", "B", "a_scale", "b_scale", "a_zp", "b_zp", "bias"]
    model, feeds = _contrib_model("MatMulIntegerToFloat", names, values, const=names[1:])
    _close(model, feeds)


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES[:5], ids=str)
@pytest.mark.parametrize("tb", ["u8", "i8"])
@pytest.mark.parametrize("params", ["scalar", "per_column", "per_column_bias", "no_zp"])
def test_dynamic_quantize_matmul(a_shape, b_shape, tb, params):
    if params.startswith("per_column") and len(b_shape) < 2:
        pytest.skip("a 1-D B has no columns")
    rng = np.random.default_rng(zlib.crc32(repr((a_shape, b_shape, tb, params)).encode()))
    tb = INT8S[tb]
    n = b_shape[-1] if len(b_shape) > 1 else 1
    pc = _column_shape(b_shape) if params.startswith("per_column") else []
    a = rng.normal(0.3, 2.0, a_shape).astype(np.float32)
    values = [a, _b_values(rng, np.uint8, tb, b_shape), rng.uniform(0.01, 0.1, pc).astype(np.float32),
              None if params == "no_zp" else _full(rng, tb, pc),
              rng.uniform(-1, 1, [n]).astype(np.float32) if params.endswith("bias") else None]
    names = ["A", "B", "b_scale", "b_zp", "bias"]
    model, feeds = _contrib_model("DynamicQuantizeMatMul", names, values, const=names[1:])
    _close(model, feeds)


# --------------------------------------------------------------------------------------------
# Whole quantised graphs as ORT's quantisation tool writes them: one MLX cluster each.


def test_dynamic_quantized_matmul_graph_is_one_cluster():
    """quantize_dynamic's MatMul: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scales)
    -> Add(bias)."""
    rng = np.random.default_rng(21)
    w_q = rng.integers(-64, 63, [16, 8], endpoint=True).astype(np.int8)  # ORT's u8s8 range
    inits = [numpy_helper.from_array(w_q, "w_q"), numpy_helper.from_array(np.float32(0.02), "w_scale"),
             numpy_helper.from_array(np.int8(0), "w_zp"),
             numpy_helper.from_array(rng.uniform(-1, 1, 8).astype(np.float32), "bias")]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zp"]),
        helper.make_node("MatMulInteger", ["x_q", "w_q", "x_zp", "w_zp"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scale"]),
        helper.make_node("Mul", ["acc_f", "scale"], ["y0"]),
        helper.make_node("Add", ["y0", "bias"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [4, 16])], [tensor("y")], inits, opset=13)
    x = rng.normal(0, 2, [4, 16]).astype(np.float32)
    for optimize in (False, True):
        run = Run(model, {"x": x}, optimize=optimize)
        run.assert_all_on_mlx()
        assert len(run.kernels) == 1, run.kernels
        np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_qoperator_graph_is_one_cluster():
    """QOperator format: QuantizeLinear -> QLinearConv -> Reshape -> QLinearMatMul ->
    DequantizeLinear, bit for bit as ORT."""
    rng = np.random.default_rng(22)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v), name)  # noqa: E731
    inits = [c("x_s", np.float32(0.02)), c("x_zp", np.uint8(128)),
             c("w", rng.integers(-64, 63, [4, 3, 3, 3], endpoint=True).astype(np.int8)),
             c("w_s", rng.uniform(0.002, 0.01, 4).astype(np.float32)), c("w_zp", np.zeros(4, np.int8)),
             c("c_s", np.float32(0.05)), c("c_zp", np.uint8(10)),
             c("b", rng.integers(-300, 300, 4).astype(np.int32)), c("shape", np.array([1, -1], np.int64)),
             c("m", rng.integers(-64, 63, [64, 6], endpoint=True).astype(np.int8)), c("m_s", np.float32(0.01)),
             c("m_zp", np.int8(0)), c("y_s", np.float32(0.1)), c("y_zp", np.uint8(128))]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["x_q"]),
        helper.make_node("QLinearConv", ["x_q", "x_s", "x_zp", "w", "w_s", "w_zp", "c_s", "c_zp", "b"], ["c_q"]),
        helper.make_node("Reshape", ["c_q", "shape"], ["flat"]),
        helper.make_node("QLinearMatMul", ["flat", "c_s", "c_zp", "m", "m_s", "m_zp", "y_s", "y_zp"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_zp"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [1, 3, 6, 6])], [tensor("y")], inits, opset=13)
    x = rng.uniform(-2, 2, [1, 3, 6, 6]).astype(np.float32)
    for optimize in (False, True):
        run = Run(model, {"x": x}, optimize=optimize)
        run.assert_all_on_mlx()
        assert len(run.kernels) == 1, run.kernels
        np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, {"x": x})[0])
