"""Integer quantised ops (op-specs/src/quantized_int.rs): MatMulInteger, QLinearMatMul, ConvInteger,
QLinearConv, com.microsoft MatMulIntegerToFloat and DynamicQuantizeMatMul. Weights, scales, zero
points and biases are initializers; results are exact but for the float outputs of the
com.microsoft ops."""

from __future__ import annotations

import zlib

import numpy as np

from op_specs import SPECS, OpSpec, Variant, round_to
from specs.qdq import _range, dynamic_quantize_ref


def _rng(case, what: str):
    return np.random.default_rng(zlib.crc32(f"{case.id}/{what}".encode()))


def _np(dtype: str):
    from op_table import np_dtype

    return np_dtype(dtype)


# MatMulInteger and QLinearMatMul: exact int32 sums. int8 B under uint8 A stays in [-64, 63],
# where ORT's x86 u8s8 kernel (vpmaddubsw, int16 pair sums) is exact; full-range B is checked
# against an exact reference in tests/ep/test_qdq.py.

_MM_SCHEME = {"basic": [[3, 4], [4, 5]], "empty": [[0, 4], [4, 5]],
              "dynamic": [[[3, 4], [4, 5]], [[1, 4], [4, 5]], [[6, 4], [4, 5]]]}
_MM_SHAPES = [[2, 3, 4], [4, 5]]


def _int_operand(a_var: str):
    def make(dtype, shape, rng, dtypes):
        if dtype == "int8" and dtypes[a_var] == "uint8":
            return rng.integers(-64, 63, size=shape, endpoint=True).astype(np.int8)
        info = np.iinfo(_np(dtype))
        return rng.integers(int(info.min), int(info.max), size=shape, endpoint=True).astype(_np(dtype))

    return make


def _int_zp(port_type: str, per_column=False):
    def make(case):
        info = np.iinfo(_np(case.dtypes[port_type]))
        shape = [5] if per_column else []
        return _rng(case, f"zp/{port_type}/{per_column}").integers(
            int(info.min), int(info.max), shape, endpoint=True).astype(_np(case.dtypes[port_type]))

    return make


def _exact_product(a, b, a_zp, b_zp):
    a64 = np.asarray(a).astype(np.int64) - (0 if a_zp is None else np.asarray(a_zp).astype(np.int64))
    b64 = np.asarray(b).astype(np.int64) - (0 if b_zp is None else np.asarray(b_zp).astype(np.int64))
    return (a64 @ b64).astype(np.int32)


def matmul_integer_ref(xs, a):
    xs = list(xs) + [None] * (4 - len(xs))
    return _exact_product(xs[0], xs[1], xs[2], xs[3])


def qlinear_matmul_ref(xs, a):
    acc = _exact_product(xs[0], xs[3], xs[2], xs[5])
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    scale = f32(f32(xs[1]) * f32(xs[4])) / f32(xs[6])
    y_zp = np.asarray(xs[7])
    low, high = _range(y_zp.dtype)
    v = np.rint(acc.astype(np.float32) * scale) + y_zp.astype(np.float32)
    return np.where(np.isnan(v), low, np.clip(v, low, high)).astype(y_zp.dtype)


_MMI_VARIANTS = [
    Variant("default", constants={"a_zero_point": _int_zp("T1"), "b_zero_point": _int_zp("T2")}),
    Variant("no_zero_points", constants={"a_zero_point": None, "b_zero_point": None}),
    Variant("per_column", constants={"a_zero_point": _int_zp("T1"), "b_zero_point": _int_zp("T2", True)}),
    Variant("batched", constants={"a_zero_point": _int_zp("T1"), "b_zero_point": _int_zp("T2")},
            shapes=_MM_SHAPES),
    Variant("b_constant", constants={"B": lambda case: _int_operand("T1")(
        case.dtypes["T2"], [4, 5], _rng(case, "B"), case.dtypes), "a_zero_point": _int_zp("T1"),
        "b_zero_point": _int_zp("T2", True)}, shapes=[[3, 4]]),
]

SPECS[("", "MatMulInteger")] = OpSpec(
    ref=matmul_integer_ref,
    exact=True,
    domains={"A": _int_operand("T1"), "B": _int_operand("T1")},
    scheme=_MM_SCHEME,
    variants=_MMI_VARIANTS,
    note="zero points are initializers; full-range u8 x s8, long K and int32 wrap in tests/ep/test_qdq.py",
)


def _f32_const(lo, hi, what, per_column=False):
    def make(case):
        return _rng(case, what).uniform(lo, hi, [5] if per_column else []).astype(np.float32)

    return make


def _qmm_constants(per_column=False):
    return {"a_scale": _f32_const(0.01, 0.1, "a_scale"), "a_zero_point": _int_zp("T1"),
            "b_scale": _f32_const(0.01, 0.1, "b_scale", per_column), "b_zero_point": _int_zp("T2", per_column),
            "y_scale": _f32_const(0.5, 4.0, "y_scale"), "y_zero_point": _int_zp("T3")}


SPECS[("", "QLinearMatMul")] = OpSpec(
    ref=qlinear_matmul_ref,
    exact=True,
    domains={"a": _int_operand("T1"), "b": _int_operand("T1")},
    scheme=_MM_SCHEME,
    combos=lambda d: (d["T1"], d["T2"], d["T3"]) in
    (("uint8", "uint8", "uint8"), ("uint8", "int8", "uint8"), ("int8", "int8", "int8")),
    variants=[Variant("default", constants=_qmm_constants()),
              Variant("per_column", constants=_qmm_constants(True)),
              Variant("batched", constants=_qmm_constants(), shapes=_MM_SHAPES)],
    note="scales and zero points are initializers",
)


# --------------------------------------------------------------------------------------------
# ConvInteger and QLinearConv: exact int32 convolutions (2-D, as Conv's scheme).

_CONV_SCHEME = {"basic": [[1, 3, 6, 6]], "dynamic": [[[1, 3, 6, 6]], [[2, 3, 5, 7]], [[1, 3, 4, 4]]]}


def _weights(shape, a_var="T1", w_var="T2"):
    def make(case):
        return _int_operand(a_var)(case.dtypes[w_var], shape, _rng(case, "w"), case.dtypes)

    return make


def _conv_ref(x, w, attrs):
    """int64 cross-correlation with Conv's 2-D attributes (zero padding, groups)."""
    x, w = np.asarray(x, np.int64), np.asarray(w, np.int64)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group = attrs.get("group", 1)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    xp = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    oh = (xp.shape[2] - (dh * (kh - 1) + 1)) // sh + 1
    ow = (xp.shape[3] - (dw * (kw - 1) + 1)) // sw + 1
    y = np.zeros([n, m, oh, ow], np.int64)
    per = m // group
    for o in range(m):
        g = o // per
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    return y


def conv_integer_ref(xs, a):
    xs = list(xs) + [None] * (4 - len(xs))
    x, w, x_zp, w_zp = xs
    xc = np.asarray(x).astype(np.int64) - (0 if x_zp is None else np.int64(np.asarray(x_zp)))
    wc = np.asarray(w).astype(np.int64) - (0 if w_zp is None else np.int64(np.asarray(w_zp)))
    return _conv_ref(xc, wc, a).astype(np.int32)


def qlinear_conv_ref(xs, a):
    xs = list(xs) + [None] * (9 - len(xs))
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b = xs
    xc = np.asarray(x).astype(np.int64) - np.int64(np.asarray(x_zp))
    w_zp = np.asarray(w_zp).astype(np.int64).reshape(-1)
    wc = np.asarray(w).astype(np.int64) - (w_zp.reshape(-1, 1, 1, 1) if w_zp.size > 1 else w_zp[0])
    acc = _conv_ref(xc, wc, a)
    if b is not None:
        acc = acc + np.asarray(b, np.int64).reshape(1, -1, 1, 1)
    acc = acc.astype(np.int32)
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    w_s = f32(w_s).reshape(-1)
    scale = (f32(x_s) * (w_s.reshape(1, -1, 1, 1) if w_s.size > 1 else w_s[0])) / f32(y_s)
    y_zp = np.asarray(y_zp)
    low, high = _range(y_zp.dtype)
    v = np.rint(acc.astype(np.float32) * f32(scale)) + y_zp.astype(np.float32)
    return np.where(np.isnan(v), low, np.clip(v, low, high)).astype(y_zp.dtype)


_CONV_VARIANTS = {
    "default": ({}, [4, 3, 3, 3]),
    "pads_strides": ({"pads": [1, 0, 2, 1], "strides": [2, 1]}, [4, 3, 3, 2]),
    "dilations": ({"dilations": [2, 1], "pads": [1, 1, 1, 1]}, [2, 3, 2, 3]),
    "depthwise": ({"group": 3, "pads": [1, 1, 1, 1]}, [3, 1, 3, 3]),
}


def _per_channel_zp(port_type: str, m: int):
    def make(case):
        info = np.iinfo(_np(case.dtypes[port_type]))
        if case.dtypes[port_type] == "int8":
            return np.zeros([m], np.int8)
        return _rng(case, "w_zp").integers(0, int(info.max), [m], endpoint=True).astype(np.uint8)

    return make


SPECS[("", "ConvInteger")] = OpSpec(
    ref=conv_integer_ref,
    exact=True,
    domains={"x": _int_operand("T1")},
    scheme=_CONV_SCHEME,
    # ORT's int8 x / uint8 w path saturates int16 pair sums on x86 (tests/ep/test_qdq.py).
    combos=lambda d: (d["T1"], d["T2"]) != ("int8", "uint8"),
    variants=[Variant(name, attrs, constants={"w": _weights(shape), "x_zero_point": _int_zp("T1"),
                                              "w_zero_point": _int_zp("T2")})
              for name, (attrs, shape) in _CONV_VARIANTS.items()]
    + [Variant("no_zero_points", {}, constants={"w": _weights([4, 3, 3, 3]), "x_zero_point": None,
                                                "w_zero_point": None})],
    note="weights and zero points are initializers; full-range and int8 x / uint8 w in tests/ep/test_qdq.py",
)


def _qconv_constants(shape, per_channel=False, bias=False):
    m = shape[0]
    return {"x_scale": _f32_const(0.02, 0.1, "x_scale"), "x_zero_point": _int_zp("T1"),
            "w": _weights(shape), "w_scale": lambda case: _rng(case, "w_scale").uniform(
                0.002, 0.02, [m] if per_channel else []).astype(np.float32),
            "w_zero_point": _per_channel_zp("T2", m) if per_channel else (
                lambda case: np.zeros([], _np(case.dtypes["T2"]))),
            "y_scale": _f32_const(0.05, 0.5, "y_scale"), "y_zero_point": _int_zp("T3"),
            "B": (lambda case: _rng(case, "B").integers(-5000, 5000, [m]).astype(np.int32)) if bias else None}


SPECS[("", "QLinearConv")] = OpSpec(
    ref=qlinear_conv_ref,
    exact=True,
    domains={"x": _int_operand("T1")},
    scheme=_CONV_SCHEME,
    combos=lambda d: (d["T1"], d["T2"], d["T3"]) in
    (("uint8", "uint8", "uint8"), ("uint8", "int8", "uint8"), ("int8", "int8", "int8")),
    variants=[Variant(name, attrs, constants=_qconv_constants(shape))
              for name, (attrs, shape) in _CONV_VARIANTS.items()]
    + [Variant("per_channel_bias", {}, constants=_qconv_constants([4, 3, 3, 3], True, True))],
    note="weights, scales, zero points and bias are initializers",
)


# --------------------------------------------------------------------------------------------
# com.microsoft MatMulIntegerToFloat and DynamicQuantizeMatMul (float outputs: one FMA apart
# from ORT's output stage at most, so float32 tolerances).


def matmul_integer_to_float_ref(xs, a):
    xs = list(xs) + [None] * (7 - len(xs))
    A, B, a_s, b_s, a_zp, b_zp, bias = xs
    acc = _exact_product(A, B, a_zp, b_zp).astype(np.float32)
    y = acc * (np.float32(np.asarray(a_s, np.float32)) * np.asarray(b_s, np.float32))
    return y + np.asarray(bias, np.float32) if bias is not None else y


def dynamic_quantize_matmul_ref(xs, a):
    xs = list(xs) + [None] * (5 - len(xs))
    A, B, b_s, b_zp, bias = xs
    y, a_s, a_zp = dynamic_quantize_ref([np.asarray(A, np.float32)], {})
    return matmul_integer_to_float_ref([y, B, a_s, b_s, a_zp, b_zp, bias], a)


def _bias(case):
    return _rng(case, "bias").uniform(-1, 1, [5]).astype(np.float32)


def _mitf_constants(per_column=False, bias=False, zp=True):
    return {"B": lambda case: _int_operand("T1")(case.dtypes["T2"], [4, 5], _rng(case, "B"), case.dtypes),
            "a_scale": _f32_const(0.01, 0.1, "a_scale"), "b_scale": _f32_const(0.01, 0.1, "b_scale", per_column),
            "a_zero_point": _int_zp("T1") if zp else None,
            "b_zero_point": _int_zp("T2", per_column) if zp else None, "bias": _bias if bias else None}


SPECS[("com.microsoft", "MatMulIntegerToFloat")] = OpSpec(
    ref=matmul_integer_to_float_ref,
    domains={"A": _int_operand("T1")},
    scheme={"basic": [[3, 4]], "empty": [[0, 4]], "dynamic": [[[3, 4]], [[1, 4]], [[6, 4]]]},
    variants=[Variant("default", constants=_mitf_constants()),
              Variant("per_column_bias", constants=_mitf_constants(True, True)),
              Variant("no_zero_points", constants=_mitf_constants(zp=False))],
    note="B, scales, zero points and bias are initializers",
)


def _dqmm_constants(per_column=False, bias=False, zp=True):
    c = _mitf_constants(per_column, bias, zp)
    return {"B": lambda case: _int_operand("T2")(case.dtypes["T2"], [4, 5], _rng(case, "B"),
                                                 dict(case.dtypes, T2="uint8")),
            "b_scale": c["b_scale"], "b_zero_point": c["b_zero_point"], "bias": c["bias"]}


SPECS[("com.microsoft", "DynamicQuantizeMatMul")] = OpSpec(
    ref=dynamic_quantize_matmul_ref,
    domains={"A": lambda d, s, r, t: round_to(r.normal(0.3, 2.0, s), d)},
    scheme={"basic": [[3, 4]], "empty": [[0, 4]], "dynamic": [[[3, 4]], [[1, 4]], [[6, 4]]]},
    variants=[Variant("default", constants=_dqmm_constants()),
              Variant("per_column_bias", constants=_dqmm_constants(True, True)),
              Variant("no_zero_point", constants=_dqmm_constants(zp=False))],
    note="B, scales, zero points and bias are initializers",
)
