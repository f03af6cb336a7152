"""ai.onnx QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear: scales and zero points as
initializers (per tensor, per axis, blocked), x fed, against ORT's CPU EP (numpy for bfloat16,
which ORT has no kernel for). Every result is exact.

The references follow ORT's float32 loop (MLAS's QuantizeLinear: clamp in float32, NaN to the
lowest value). ORT's int32 loops (float16 x; float32 blocked along an outer axis) saturate NaN,
±inf and quotients past int32 differently: those inputs are kept out of the cases the
reference could meet there, and tests/ep/test_qdq.py holds them against ORT bit for bit."""

from __future__ import annotations

import zlib

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _sprinkle, round_to

SHAPE = [3, 4, 5]
QUANTISED = ("int8", "uint8", "int16", "uint16")
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


def _zero_point(port_type: str):
    def make(case):
        info = np.iinfo(_np(case.dtypes[port_type]))
        lo, hi = max(int(info.min), -100), min(int(info.max), 200)
        if case.dtypes[port_type] == "int32":
            lo = hi = 0
        return _rng(case, "zp").integers(lo, hi, _param_shape(case), endpoint=True).astype(
            _np(case.dtypes[port_type]))

    return make


def _q_input(specials: bool):
    def make(dtype, shape, rng, dtypes):
        x = rng.integers(-320, 320, size=shape) * (SCALE / 2)  # ties, and past int8's range
        x = x + rng.uniform(-0.01, 0.01, shape) * (rng.random(shape) < 0.5)
        if specials and dtype != "float16":  # float16 takes ORT's int32 loop (see the module doc)
            x = _sprinkle(x, rng, [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0], 0.2)
        return round_to(x, dtype)

    return make


def _q_input_wide(dtype, shape, rng, dtypes):
    """Values across int16's range for the 16-bit types."""
    x = rng.integers(-70000, 70000, size=shape) * (SCALE / 2)
    return round_to(x, dtype)


def _range(dtype) -> tuple[float, float]:
    info = np.iinfo(dtype)
    return float(info.min), float(info.max)


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
        from onnx import helper

        out = helper.tensor_dtype_to_np_dtype(a["output_dtype"])
    else:
        out = np.dtype(np.uint8)
    low, high = _range(out)
    q = np.rint(x.astype(np.float32) / _broadcast(scale, x, a).astype(np.float32))
    if zp is not None:
        q = q + _broadcast(zp, x, a).astype(np.float32)
    q = np.where(np.isnan(q), low, np.clip(q, low, high))
    return q.astype(out)


def dequantize_ref(xs, a):
    """``float32(int32(x) - int32(zp)) * float32(scale)``, rounded once to the scale's type
    (the harness rounds float32 to it)."""
    x, scale = np.asarray(xs[0]), np.asarray(xs[1])
    zp = xs[2] if len(xs) > 2 and xs[2] is not None else None
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
    combos=lambda d: d["T2"] in QUANTISED,
    variants=_Q_VARIANTS,
    note="scale and zero point are initializers; NaN/inf/int32 loops also in tests/ep/test_qdq.py",
)


def _dv(name, attrs=None, zp=True, **kw):
    constants = {"x_scale": _scale("T2"), "x_zero_point": _zero_point("T1") if zp else None}
    return Variant(name, attrs or {}, constants=constants, **kw)


SPECS[("", "DequantizeLinear")] = OpSpec(
    ref=dequantize_ref,
    exact=True,
    domains={"x": "full"},
    scheme={"basic": [SHAPE], "scalar": [[]], "empty": [[0, 3]], "transposed": [[4, 6]],
            "dynamic": [[SHAPE], [[2, 7, 1]], [[1, 1, 5]]]},
    combos=lambda d: d["T1"] in QUANTISED + ("int32",),
    variants=[
        _dv("default"),
        _dv("no_zero_point", zp=False),
        _dv("per_axis", {"axis": 1}, shapes=[SHAPE]),
        _dv("per_axis_first", {"axis": 0}, shapes=[SHAPE]),
        _dv("blocked", {"axis": 1, "block_size": 3}, shapes=[SHAPE], min_opset=21),
        _dv("blocked_last", {"axis": -1, "block_size": 2}, shapes=[SHAPE], min_opset=21),
        _dv("output_dtype", lambda d: {"output_dtype": _tensor_type(d["T2"])}, min_opset=23),
    ],
    note="scale and zero point are initializers",
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
