"""Elementwise math of one tensor (op-specs/src/math.rs), plus IsNaN and IsInf."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _erf, _ints_only, _unary

# op -> (reference, input domain, exact)
UNARY = {
    "Abs": (np.abs, "any", True),
    "Neg": (np.negative, "any", True),
    "Sign": (np.sign, "any", True),
    "Reciprocal": (lambda x: 1.0 / x, "nonzero", False),
    "Sqrt": (np.sqrt, "positive", False),
    "Exp": (np.exp, "any", False),
    "Log": (np.log, "positive", False),
    "Ceil": (np.ceil, "halves", True),
    "Floor": (np.floor, "halves", True),
    "Round": (np.round, "halves", True),
    "Erf": (_erf, "any", False),
    "Sin": (np.sin, "any", False),
    "Cos": (np.cos, "any", False),
    "Tan": (np.tan, "tan", False),
    "Asin": (np.arcsin, "unit", False),
    "Acos": (np.arccos, "unit", False),
    "Atan": (np.arctan, "any", False),
    "Sinh": (np.sinh, "any", False),
    "Cosh": (np.cosh, "any", False),
    "Asinh": (np.arcsinh, "any", False),
    "Acosh": (np.arccosh, "gt1", False),
    "Atanh": (np.arctanh, "unit", False),
}

for _op, (_f, _dom, _exact) in UNARY.items():
    SPECS[("", _op)] = OpSpec(ref=_unary(_f), exact=_exact, scheme="unary", domains={"*": _dom})


def _is_inf(x, attrs):
    neg, pos = attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    return (np.isneginf(x) & bool(neg)) | (np.isposinf(x) & bool(pos))


# Integer wrap at the minimum (Abs/Neg): compared with ORT's CPU EP on extreme values too.
for _op in ("Abs", "Neg"):
    SPECS[("", _op)].variants = [Variant(), Variant("extremes", when=_ints_only, domains={"*": "extremes"})]

SPECS[("", "IsNaN")] = OpSpec(ref=_unary(np.isnan), exact=True, scheme="unary", domains={"*": "special"})
SPECS[("", "IsInf")] = OpSpec(
    ref=lambda xs, a: _is_inf(xs[0], a), exact=True, scheme="unary", domains={"*": "special"},
    variants=[Variant()] + [
        Variant(f"neg{n}_pos{p}", {"detect_negative": n, "detect_positive": p})
        for n, p in ((1, 1), (1, 0), (0, 1), (0, 0))
    ],
)
