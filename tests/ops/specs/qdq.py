"""ai.onnx QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear: scales and zero points as
initializers (per tensor, per axis, blocked), x fed, against ORT's CPU EP (numpy for bfloat16,
which ORT has no kernel for). Every result is exact.

int4, uint4 and float8 ports cross the Python boundary through the harness's Q/DQ helpers (scale
1); DequantizeLinear also reads them as initializers (the ``weight`` variants, as QDQ models and
int4 LLMs ship them). float8 QuantizeLinear follows ORT's conversion (``float8_ref``): round to
nearest even on the grid, ``saturate`` clamping, and ORT's two non-saturating quirks.

The references follow ORT's float32 loop (MLAS's QuantizeLinear: clamp in float32, NaN to the
lowest value). ORT's int32 loops (float16 x; float32 blocked along an outer axis) saturate NaN,
±inf and quotients past int32 differently: those inputs are kept out of the cases the
reference could meet there, and tests/ep/test_qdq.py holds them against ORT bit for bit. For
int4/uint4 the reference follows ORT's mix of the two loops (``_half_byte_ends``)."""

from __future__ import annotations

import zlib

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _sprinkle, gen, round_to

SHAPE = [3, 4, 5]
QUANTISED = ("int8", "uint8", "int16", "uint16")
NARROW_INTS = ("int4", "uint4")
FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
NARROW = NARROW_INTS + FLOAT8
SCALE = 0.0625  # a power of two: exact ties in every float type


def _rng(case, what: str):
    return np.random.default_rng(zlib.crc32(f"{case.id}/{what}".encode()))


def _np(dtype: str):
    from op_table import np_dtype

    return np_dtype(dtype)


def _param_shape(case):
    a = case.attrs
    if "block_size" in a:
        shape = list(SHAPE)
        axis = a.get("axis", 1) % len(SHAPE)
        shape[axis] = -(-shape[axis] // a["block_size"])
        return shape
    if "axis" in a:
        return [SHAPE[a["axis"] % len(SHAPE)]]
    return []


def _scale(port_type: str):
    def make(case):
        shape = _param_shape(case)
        if not shape:
            return np.array(SCALE, _np(case.dtypes[port_type]))
        picks = np.array([SCALE, 0.125, 0.3, 0.5, 0.0078125])
        return picks[_rng(case, "scale").integers(0, len(picks), shape)].astype(_np(case.dtypes[port_type]))

    return make


def _iinfo(dtype):
    """``np.iinfo``, which does not know int4/uint4 (ml_dtypes does)."""
    import ml_dtypes

    return ml_dtypes.iinfo(dtype) if np.dtype(dtype) in (_np("int4"), _np("uint4")) else np.iinfo(dtype)


def _zero_point(port_type: str):
    def make(case):
        if case.dtypes[port_type] in FLOAT8:  # ORT: a float8 zero point is 0 (Q ignores it)
            return np.zeros(_param_shape(case), _np(case.dtypes[port_type]))
        info = _iinfo(_np(case.dtypes[port_type]))
        lo, hi = max(int(info.min), -100), min(int(info.max), 200)
        if case.dtypes[port_type] == "int32":
            lo = hi = 0
        return _rng(case, "zp").integers(lo, hi, _param_shape(case), endpoint=True).astype(
            _np(case.dtypes[port_type]))

    return make


def _q_input(specials: bool):
    def make(dtype, shape, rng, dtypes):
        with_specials = specials
        if dtypes["T2"] in FLOAT8:
            return _float8_input(dtype, shape, rng, with_specials)
        x = rng.integers(-320, 320, size=shape) * (SCALE / 2)  # ties, and past int8's range
        x = x + rng.uniform(-0.01, 0.01, shape) * (rng.random(shape) < 0.5)
        if with_specials and dtype != "float16":  # float16 takes ORT's int32 loop (see the module doc)
            x = _sprinkle(x, rng, [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0], 0.2)
        return round_to(x, dtype)

    return make


def _float8_input(dtype, shape, rng, specials: bool):
    """Magnitudes from below float8's subnormals to past its largest values (2^-14..2^17, times
    the scales' 2^-7..0.5), half of them exact halves of a float8 quantum (ties)."""
    magnitude = np.exp2(rng.uniform(-20, 17, shape))
    tie = np.exp2(np.floor(np.log2(magnitude)) - 3) * (rng.integers(16, 32, shape) + 0.5)
    x = np.where(rng.random(shape) < 0.5, magnitude, tie) * rng.choice([-1.0, 1.0], shape)
    if specials:
        x = _sprinkle(x, rng, [np.nan, np.inf, -np.inf, 0.0, -0.0, 470.0, 485.0, 61500.0], 0.2)
    return round_to(x, dtype)


def _q_input_wide(dtype, shape, rng, dtypes):
    """Values across int16's range for the 16-bit types."""
    x = rng.integers(-70000, 70000, size=shape) * (SCALE / 2)
    return round_to(x, dtype)


def _range(dtype) -> tuple[float, float]:
    info = _iinfo(dtype)
    return float(info.min), float(info.max)


# Per float8 type: mantissa bits, smallest normal exponent, largest finite value, whether an
# overflow without saturation is inf (else NaN), and whether it has -0.
_FLOAT8 = {
    "float8e4m3fn": (3, -6, 448.0, False, True),
    "float8e4m3fnuz": (3, -7, 240.0, False, False),
    "float8e5m2": (2, -14, 57344.0, True, True),
    "float8e5m2fnuz": (2, -15, 57344.0, False, False),
}


def float8_ref(v, name: str, saturate: bool) -> np.ndarray:
    """float32 ``v`` converted as ORT 1.31.1's CPU EP does (its bit-level code, checked against it
    over every grid midpoint and 60,000 other values): round to nearest even on the grid
    (subnormals included); beyond the largest finite value ``saturate`` clamps (±inf too), else
    NaN (e5m2: ±inf), except e4m3fn |v| in [480, 496) -> ±448 and e5m2 |v| in [61440, 65536) ->
    NaN; FNUZ types have no -0."""
    mantissa, emin, top, inf, signed_zero = _FLOAT8[name]
    v = np.asarray(v, np.float32)
    e = ((v.view(np.uint32) >> 23) & 0xFF).astype(np.int32) - 127
    quantum = ((np.maximum(e, emin) - mantissa + 127).astype(np.uint32) << 23).view(np.float32)
    with np.errstate(all="ignore"):
        r = (np.rint(v / quantum) * quantum).astype(np.float32)
        over = np.abs(r) > top
        a = np.abs(v)
        if saturate:
            r = np.where(over, np.copysign(np.float32(top), v), r)
        else:
            r = np.where(over, np.copysign(np.float32(np.inf if inf else np.nan), v), r)
            if name == "float8e4m3fn":
                r = np.where((a >= 480) & (a < 496), np.copysign(np.float32(top), v), r)
            if name == "float8e5m2":
                r = np.where(over & (a < 65536), np.float32(np.nan), r)
    r = np.where(np.isnan(v), v, r)
    if not signed_zero:
        r = np.where(r == 0, np.float32(0), r)
    return r.astype(_np(name))


def _broadcast(param, x, attrs):
    """``param`` (per tensor, per axis or blocked) laid out against ``x``."""
    param = np.asarray(param)
    if param.size == 1 and param.ndim <= 1:
        return param.reshape(())
    axis = attrs.get("axis", 1) % x.ndim
    if attrs.get("block_size", 0):
        return np.repeat(param, attrs["block_size"], axis=axis).take(range(x.shape[axis]), axis=axis)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return param.reshape(shape)


def quantize_ref(xs, a):
    """ORT's float32 loop: ``clamp(nearbyint(x / scale) + zp)`` in float32, NaN to the lowest."""
    x, scale = np.asarray(xs[0]), np.asarray(xs[1])
    zp = xs[2] if len(xs) > 2 and xs[2] is not None else None
    if zp is not None:
        out = np.asarray(zp).dtype
    elif "output_dtype" in a:
        from op_table import DTYPES

        out = next(np_t for code, np_t in DTYPES.values() if code == a["output_dtype"])
    else:
        out = np.dtype(np.uint8)
    float8 = [n for n in FLOAT8 if _np(n) == out]
    if float8:
        quotient = x.astype(np.float32) / _broadcast(scale, x, a).astype(np.float32)
        return float8_ref(quotient, float8[0], a.get("saturate", 1) != 0)
    low, high = _range(out)
    q = np.rint(x.astype(np.float32) / _broadcast(scale, x, a).astype(np.float32))
    float_loop = q + _broadcast(zp, x, a).astype(np.float32) if zp is not None else q
    float_loop = np.where(np.isnan(float_loop), low, np.clip(float_loop, low, high))
    if out in (_np("int4"), _np("uint4")):
        zp32 = _broadcast(zp, x, a).astype(np.int64) if zp is not None else 0
        with np.errstate(invalid="ignore"):
            # int32(q) on x86: INT32_MIN for NaN and anything outside int32; the sum wraps.
            i = np.where(np.isnan(q) | (q >= 2.0**31) | (q < -(2.0**31)), -(2**31), np.nan_to_num(q)).astype(np.int64)
        wrapped = (i + zp32 + 2**31) % 2**32 - 2**31
        int32_loop = np.clip(wrapped, low, high)
        float_loop = np.where(_half_byte_ends(x.shape, np.asarray(scale), a), int32_loop, float_loop)
    return float_loop.astype(out)


def _half_byte_ends(shape, scale, a):
    """Where ORT's 4-bit QuantizeLinear (float32 x) takes its int32 loop: the first element of a
    run of one scale at an odd flat index, and its last before an odd end; blocked along an
    outer axis, everywhere. Elsewhere MLAS packs whole bytes with the float32 loop."""
    n = int(np.prod(shape))
    i = np.arange(n)
    if scale.size == 1 and scale.ndim <= 1:
        start, end = np.zeros(n, np.int64), np.full(n, n)
    else:
        axis = a.get("axis", 1) % len(shape)
        inner = int(np.prod(shape[axis + 1:]))
        if a.get("block_size", 0) and inner > 1:
            return np.ones(shape, bool)
        if a.get("block_size", 0):
            row, block = shape[axis], a["block_size"]
            row_start = i // row * row
            start = row_start + (i - row_start) // block * block
            end = np.minimum(start + block, row_start + row)
        else:
            start = i // inner * inner
            end = start + inner
    return (((i == start) & (start % 2 == 1)) | ((i + 1 == end) & (end % 2 == 1))).reshape(shape)


def dequantize_ref(xs, a):
    """``float32(int32(x) - int32(zp)) * float32(scale)``, rounded once to the scale's type
    (the harness rounds float32 to it)."""
    x, scale = np.asarray(xs[0]), np.asarray(xs[1])
    zp = xs[2] if len(xs) > 2 and xs[2] is not None else None
    if x.dtype in [_np(n) for n in FLOAT8]:  # float8: ORT requires the zero point to be 0
        return x.astype(np.float32) * _broadcast(scale, x, a).astype(np.float32)
    q = x.astype(np.int32)
    if zp is not None:
        with np.errstate(over="ignore"):
            q = q - _broadcast(zp, x, a).astype(np.int32)
    return q.astype(np.float32) * _broadcast(scale, x, a).astype(np.float32)


def dynamic_quantize_ref(xs, a):
    x = np.asarray(xs[0], np.float32)
    clean = np.where(np.isnan(x), np.float32(0), x)
    low = np.float32(min(float(clean.min()) if clean.size else 0.0, 0.0))
    high = np.float32(max(float(clean.max()) if clean.size else 0.0, 0.0))
    with np.errstate(all="ignore"):
        scale = np.float32(1.0) if high == low else np.float32((high - low) / np.float32(255))
        initial = np.float32(0) - low / scale
        bounded = initial if initial < 255 else np.float32(255)
        bounded = bounded if bounded > 0 else np.float32(0)
        zp = np.float32(np.rint(bounded))
        y = quantize_ref([x, np.array(scale), np.array(zp, np.uint8)], {})
    return [y, np.array(scale, np.float32), np.array(zp, np.uint8)]


def _v(name, attrs=None, zp=True, when=None, specials=True, **kw):
    constants = {"y_scale": _scale("T1"), "y_zero_point": _zero_point("T2") if zp else None}
    domains = {"x": _q_input(specials)}
    return Variant(name, attrs or {}, constants=constants, when=when, domains=domains, **kw)


_Q_VARIANTS = [
    _v("default"),
    _v("no_zero_point", zp=False, when=lambda d: d["T2"] == "uint8"),
    _v("per_axis", {"axis": 1}, shapes=[SHAPE]),
    _v("per_axis_last", {"axis": -1}, shapes=[SHAPE]),
    # Blocked along axis 1 of [3, 4, 5] takes ORT's int32 loop for float32: no NaN/inf there.
    _v("blocked", {"axis": 1, "block_size": 3}, shapes=[SHAPE], specials=False, min_opset=21),
    _v("blocked_last", {"axis": -1, "block_size": 2}, shapes=[SHAPE], min_opset=21),
    _v("output_dtype", lambda d: {"output_dtype": _tensor_type(d["T2"])}, zp=False, min_opset=23),
    _v("saturate_precision", lambda d: {"saturate": 0, "precision": _tensor_type(d["T1"])}, min_opset=23),
    Variant("wide", {}, constants={"y_scale": _scale("T1"), "y_zero_point": _zero_point("T2")},
            domains={"x": _q_input_wide}, when=lambda d: d["T2"] in ("int16", "uint16")),
]


def _tensor_type(dtype: str) -> int:
    from op_table import tensor_type

    return tensor_type(dtype)


SPECS[("", "QuantizeLinear")] = OpSpec(
    ref=quantize_ref,
    exact=True,
    scheme={"basic": [SHAPE], "scalar": [[]], "empty": [[0, 3]], "transposed": [[4, 6]],
            "dynamic": [[SHAPE], [[2, 7, 1]], [[1, 1, 5]]]},
    combos=lambda d: d["T2"] in QUANTISED + NARROW,
    variants=_Q_VARIANTS,
    note="scale and zero point are initializers; NaN/inf/int32 loops also in tests/ep/test_qdq.py",
)


def _dv(name, attrs=None, zp=True, **kw):
    constants = {"x_scale": _scale("T2"), "x_zero_point": _zero_point("T1") if zp else None}
    return Variant(name, attrs or {}, constants=constants, **kw)


def _dq_input(dtype, shape, rng, dtypes):
    """Every value of a narrow type (float8: every finite one, NaN and, for e5m2, ±inf);
    the full range of the others."""
    if dtype in NARROW_INTS:
        info = _iinfo(_np(dtype))
        return rng.integers(int(info.min), int(info.max), size=shape, endpoint=True).astype(_np(dtype))
    if dtype in FLOAT8:
        codes = rng.integers(0, 256, size=shape).astype(np.uint8)
        return codes.view(_np(dtype)).reshape(shape)
    return gen("full", dtype, shape, rng, dtypes)


def _dq_weight(case):
    """x as an initializer (an int4 weight, a float8 activation table): SHAPE of every value."""
    return _dq_input(case.dtypes["T1"], SHAPE, _rng(case, "x"), case.dtypes)


def _weight(name, attrs=None, **kw):
    """A variant with x an initializer, for the narrow types (the models that ship them)."""
    constants = {"x": _dq_weight, "x_scale": _scale("T2"), "x_zero_point": _zero_point("T1")}
    return Variant(name, attrs or {}, constants=constants, when=lambda d: d["T1"] in NARROW, **kw)


SPECS[("", "DequantizeLinear")] = OpSpec(
    ref=dequantize_ref,
    exact=True,
    domains={"x": _dq_input},
    scheme={"basic": [SHAPE], "scalar": [[]], "empty": [[0, 3]], "transposed": [[4, 6]],
            "dynamic": [[SHAPE], [[2, 7, 1]], [[1, 1, 5]]]},
    combos=lambda d: d["T1"] in QUANTISED + ("int32",) + NARROW,
    variants=[
        _dv("default"),
        _dv("no_zero_point", zp=False),
        _dv("per_axis", {"axis": 1}, shapes=[SHAPE]),
        _dv("per_axis_first", {"axis": 0}, shapes=[SHAPE]),
        _dv("blocked", {"axis": 1, "block_size": 3}, shapes=[SHAPE], min_opset=21),
        _dv("blocked_last", {"axis": -1, "block_size": 2}, shapes=[SHAPE], min_opset=21),
        _dv("output_dtype", lambda d: {"output_dtype": _tensor_type(d["T2"])}, min_opset=23),
        _weight("weight"),
        _weight("weight_per_axis", {"axis": 0}),
        _weight("weight_blocked", {"axis": -1, "block_size": 2}, min_opset=21),
    ],
    note="scale and zero point are initializers; the weight variants make x one too",
)


def _dql_input(dtype, shape, rng, dtypes):
    x = rng.uniform(-3, 5, shape)
    return round_to(_sprinkle(x, rng, [np.nan, 0.0, -0.0], 0.1), dtype)


SPECS[("", "DynamicQuantizeLinear")] = OpSpec(
    ref=dynamic_quantize_ref,
    exact=True,
    domains={"x": _dql_input},
    scheme={"basic": [[3, 4]], "scalar": [[]], "empty": [[0, 3]], "transposed": [[4, 6]],
            "dynamic": [[[3, 4]], [[2, 7]], [[1, 1]]]},
    variants=[
        Variant("default"),
        Variant("all_negative", domains={"x": lambda d, s, r, t: round_to(r.uniform(-4, -0.5, s), d)}),
        Variant("all_zero", domains={"x": lambda d, s, r, t: np.zeros(s, np.float32)}),
        Variant("infinite", domains={"x": lambda d, s, r, t: _sprinkle(
            r.uniform(-1, 1, s), r, [np.inf, -np.inf], 0.1).astype(np.float32)}),
    ],
)
