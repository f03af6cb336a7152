"""Elementwise arithmetic (op-specs/src/arithmetic.rs): Add, Sub, Mul, Div, Mod, Pow, Max, Min, Sum, Mean."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _binary, _float_only, _ints_only
from op_table import FLOATS


def int_trunc_div(a, b):
    """C-style integer quotient (toward zero); 0 where ``b == 0``; ``MIN / -1`` wraps to MIN."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    with np.errstate(all="ignore"):
        safe = np.where(b == 0, 1, b).astype(b.dtype)
        q = a // safe
        r = a - q * safe
        if a.dtype.kind == "i":
            adjust = (r != 0) & ((a < 0) != (safe < 0))
            q = q + adjust.astype(q.dtype)
            q = np.where(safe == -1, (0 - a.astype(q.dtype)).astype(q.dtype), q)
        return np.where(b == 0, 0, q).astype(a.dtype)


def int_mod(a, b, fmod: int):
    """ONNX integer Mod: divisor's sign (fmod=0) or dividend's (fmod=1); 0 where ``b == 0``."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    with np.errstate(all="ignore"):
        safe = np.where((b == 0) | ((b == -1) if a.dtype.kind == "i" else False), 1, b).astype(b.dtype)
        r = np.mod(a, safe) if fmod == 0 else np.fmod(a, safe)
        return np.where(b == 0, 0, r).astype(a.dtype)


def _fold(f):
    def ref(xs, attrs):
        out = xs[0]
        for x in xs[1:]:
            out = f(out, x)
        return np.broadcast_to(out, np.broadcast_shapes(*[np.shape(x) for x in xs])).copy()

    return ref


SPECS[("", "Add")] = OpSpec(ref=_binary(np.add), exact=True)
SPECS[("", "Sub")] = OpSpec(ref=_binary(np.subtract), exact=True)
SPECS[("", "Mul")] = OpSpec(ref=_binary(np.multiply), exact=True, domains={"*": "small"})
SPECS[("", "Div")] = OpSpec(
    ref=lambda xs, a: int_trunc_div(xs[0], xs[1]) if xs[0].dtype.kind in "iu" else xs[0] / xs[1],
    exact=True, domains={"B": "nonzero"},
    note="MIN / -1 is checked separately (test_documented_*): ORT's CPU EP traps; a zero divisor fails the run on both EPs",
)
SPECS[("", "Mod")] = OpSpec(
    ref=lambda xs, a: int_mod(xs[0], xs[1], a.get("fmod", 0)) if xs[0].dtype.kind in "iu" else np.fmod(xs[0], xs[1]),
    exact=True, domains={"B": "nonzero"},
    variants=[
        Variant("fmod1", {"fmod": 1}),
        Variant("fmod0", {"fmod": 0}, when=_ints_only),
        Variant("fmod_default", {}, when=_ints_only),
    ],
    note="fmod=0 on floats is invalid ONNX (declined); integer remainder by zero is checked separately",
)
def _pow(x, y):
    if x.dtype == np.float32 and y.dtype.kind == "i":  # ORT: std::pow in double, rounded once
        return np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    return np.power(x, y)


SPECS[("", "Pow")] = OpSpec(
    ref=_binary(_pow),
    domains={"X": "base", "Y": "exponent"},
    combos=lambda d: (d["T"] == d["T1"] and d["T"] != "int64") or (d["T"] in FLOATS and d["T1"] in FLOATS)
    or (d["T"] == "float" and d["T1"] in ("int32", "int64")),
    note="an integer base with a float exponent and an int64 base (ORT raises both through double) are declined "
         "by the entry; test_int64_pow_is_left_to_ort and test_int32_base_float_exponent_is_left_to_ort check that",
)
for _op, _f in (("Max", np.maximum), ("Min", np.minimum)):
    SPECS[("", _op)] = OpSpec(
        ref=_fold(_f), exact=True,
        variants=[
            # min_opset 8: the dynamic layout's last run broadcasts, which opsets 6-7 refuse.
            Variant(min_opset=8),
            Variant("one_input", n_variadic=1, sweep=False),
            Variant("three_inputs", n_variadic=3, sweep=False),
            Variant("nan", when=_float_only, domains={"*": "nan_mix"}),
        ],
        broadcast_since=8,
    )
for _op, _f in (("Sum", lambda xs, a: _fold(np.add)(xs, a)), ("Mean", lambda xs, a: _fold(np.add)(xs, a) / len(xs))):
    SPECS[("", _op)] = OpSpec(
        # min_opset 8: the dynamic layout's last run broadcasts, which opsets 6-7 refuse.
        ref=_f, variants=[Variant(min_opset=8), Variant("one_input", n_variadic=1), Variant("three_inputs", n_variadic=3)],
        broadcast_since=8,
    )
