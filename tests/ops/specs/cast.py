"""Cast, CastLike and Identity (op-specs/src/cast.rs)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _sprinkle, round_to
from op_table import FLOATS, UNSIGNED_INTS, np_dtype, tensor_type


def cast_source(dtype, shape, rng, dtypes):
    """Cast/CastLike input: values valid for both the source (T1) and the target (T2): integers
    in [-100, 100] (non-negative when either side is unsigned), fractions when the source is a
    float (truncation), zeros (to-bool), and NaN/inf/overflow when both sides are floats."""
    src, dst = dtypes["T1"], dtypes["T2"]
    if src == "bool":
        return rng.random(shape) < 0.5
    unsigned = src in UNSIGNED_INTS or dst in UNSIGNED_INTS
    lo = 0 if unsigned else -100
    if src in FLOATS:
        x = rng.uniform(lo, 100, shape)
        specials = [0.0, 0.5, 0.75 if unsigned else -0.75, 1.0, 2.5]
        if dst in FLOATS:
            specials += [np.nan, np.inf, -np.inf, 70000.0, 1e-8, 1.00048828125]  # f16 overflow/underflow, a tie
        return round_to(_sprinkle(x, rng, specials, 0.4), src)
    x = rng.integers(lo, 100, size=shape, endpoint=True)
    return round_to(_sprinkle(x, rng, [0, 1, 0, 100], 0.3), src)


_CAST_REP = ("float", "bfloat16")


def _to(dtype: str) -> int:
    return tensor_type(dtype)


def _cast_like_combos(d):
    return d["T1"] == d["T2"] or d["T1"] in _CAST_REP or d["T2"] in _CAST_REP


def _nibble(x, signed):
    """ORT's cast to int4/uint4: floats rounded half away from zero, then the low four bits."""
    if x.dtype.kind == "f":
        whole = np.where(np.isfinite(x), np.trunc(x + np.copysign(0.5, x)), 0)
        whole = np.where(np.abs(whole) < 2**31, whole, 0).astype(np.int64)
    else:
        whole = x.astype(np.int64)
    low = whole & 15
    return np.where(low >= 8, low - 16, low) if signed else low


def _cast(xs, a):
    """The input, read as the target type (the harness rounds it there), except for 4-bit targets."""
    four_bit = {tensor_type("int4"): "int4", tensor_type("uint4"): "uint4"}
    target = four_bit.get(a["to"]) if "to" in a else str(xs[1].dtype)
    if target in ("int4", "uint4"):
        return _nibble(np.asarray(xs[0]), target == "int4")
    return xs[0]


def _target(dtype, shape, rng, dtypes):
    """CastLike's target_type: only its type matters."""
    return round_to(np.zeros(shape), dtype)


SPECS[("", "Cast")] = OpSpec(
    ref=_cast, exact=True, scheme="unary", domains={"input": cast_source},
    variants=[
        Variant(attrs=lambda d: {"to": _to(d["T2"])}),
        Variant("saturate", attrs=lambda d: {"to": _to(d["T2"]), "saturate": 1}, sweep=False),
    ],
)
SPECS[("", "CastLike")] = OpSpec(
    ref=_cast, exact=True, scheme="castlike", domains={"input": cast_source, "target_type": _target},
    combos=_cast_like_combos,
    variants=[Variant(), Variant("saturate", {"saturate": 1}, sweep=False)],
    note="representative matrix: every pair with a float/bfloat16 side, plus T1 == T2",
)
SPECS[("", "Identity")] = OpSpec(ref=lambda xs, a: xs[0], exact=True, scheme="unary", domains={"*": "full"})


def _same_width(d):
    return np_dtype(d["T1"]).itemsize == np_dtype(d["T2"]).itemsize


def _bits_source(dtype, shape, rng, dtypes):
    """BitCast input: any bits of the source type, NaN payloads and signed zeros included."""
    raw = rng.integers(0, 256, size=tuple(shape) + (np_dtype(dtype).itemsize,), dtype=np.uint8)
    return raw.view(np_dtype(dtype)).reshape(shape)


SPECS[("", "BitCast")] = OpSpec(
    ref=None, exact=True, scheme="unary", domains={"input": _bits_source}, combos=_same_width,
    variants=[Variant(attrs=lambda d: {"to": _to(d["T2"])})],
    note="ORT's CPU EP is the oracle; every pair of equal widths",
)
