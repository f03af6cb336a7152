"""Activations (op-specs/src/activation.rs): Relu, Sigmoid, Tanh, the parameterised ones, Clip, PRelu, Where."""

from __future__ import annotations

import numpy as np

from op_specs import (SPECS, OpSpec, Variant, _f32, _gelu, _gelu_tanh, _sigmoid, _softplus, _unary, by_opset,
                      scalar_bound)

# op -> (reference, input domain, exact)
UNARY = {
    "Sigmoid": (_sigmoid, "any", False),
    "Tanh": (np.tanh, "any", False),
    "Softplus": (_softplus, "any", False),
    "Softsign": (lambda x: x / (1.0 + np.abs(x)), "any", False),
    "HardSwish": (lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), "any", False),
    "Mish": (lambda x: x * np.tanh(_softplus(x)), "any", False),
    "Relu": (lambda x: np.maximum(x, 0).astype(x.dtype), "any", True),
}

for _op, (_f, _dom, _exact) in UNARY.items():
    SPECS[("", _op)] = OpSpec(ref=_unary(_f), exact=_exact, scheme="unary", domains={"*": _dom})


def _shrink(x, attrs):
    bias, lambd = _f32(attrs.get("bias", 0.0)), _f32(attrs.get("lambd", 0.5))
    xf = x.astype(np.float64)
    return np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0.0))


def _clip11(xs, attrs):
    x, lo, hi = (xs + [None, None])[:3]
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


SPECS[("", "LeakyRelu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] >= 0, xs[0], _f32(a.get("alpha", 0.01)) * xs[0]),
    scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 0.2})],
)
SPECS[("", "Swish")] = OpSpec(
    ref=lambda xs, a: xs[0] * _sigmoid(_f32(a.get("alpha", 1.0)) * xs[0]),
    scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 1.702}), Variant("negative_alpha", {"alpha": -0.5})],
)
SPECS[("", "Elu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] < 0, _f32(a.get("alpha", 1.0)) * np.expm1(xs[0]), xs[0]),
    scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 0.5})],
)
SPECS[("", "Selu")] = OpSpec(
    ref=lambda xs, a: _f32(a.get("gamma", 1.0507009873554805))
    * np.where(xs[0] <= 0, _f32(a.get("alpha", 1.6732631921768188)) * np.expm1(xs[0]), xs[0]),
    scheme="unary", variants=[Variant(), Variant("alpha_gamma", {"alpha": 2.0, "gamma": 1.5})],
)
SPECS[("", "Celu")] = OpSpec(
    ref=lambda xs, a: np.maximum(xs[0], 0.0)
    + np.minimum(0.0, _f32(a.get("alpha", 1.0)) * np.expm1(xs[0] / _f32(a.get("alpha", 1.0)))),
    scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 2.0})],
)
SPECS[("", "Gelu")] = OpSpec(
    ref=lambda xs, a: _gelu_tanh(xs[0]) if a.get("approximate", "none") == "tanh" else _gelu(xs[0]),
    scheme="unary",
    variants=[Variant(), Variant("none", {"approximate": "none"}), Variant("tanh", {"approximate": "tanh"})],
)
SPECS[("", "HardSigmoid")] = OpSpec(
    ref=lambda xs, a: np.clip(_f32(a.get("alpha", 0.2)) * xs[0] + _f32(a.get("beta", 0.5)), 0.0, 1.0),
    scheme="unary", variants=[Variant(), Variant("alpha_beta", {"alpha": 0.3, "beta": 0.4})],
)
SPECS[("", "ThresholdedRelu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] > _f32(a.get("alpha", 1.0)), xs[0], 0.0),
    exact=True, scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 0.5})],
)
SPECS[("", "Shrink")] = OpSpec(
    ref=lambda xs, a: _shrink(xs[0], a), scheme="unary",
    variants=[Variant(), Variant("bias_lambd", {"bias": 1.5, "lambd": 1.5}), Variant("int_attrs", {"bias": 2.0, "lambd": 3.0})],
)
SPECS[("", "PRelu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] < 0, xs[0] * xs[1], xs[0]), exact=True, scheme="prelu",
)
CLIP = OpSpec(  # Clip-11+: bounds as optional inputs
    ref=lambda xs, a: _clip11(xs, a), exact=True, scheme="clip",
    domains={"min": scalar_bound({"float": -1.0, "signed": -3, "unsigned": 3}),
             "max": scalar_bound({"float": 1.5, "signed": 5, "unsigned": 12})},
    variants=[
        Variant("min_max"),
        Variant("min_only", present=("min",)),
        Variant("max_only", present=("max",)),
        Variant("no_bounds", present=()),
    ],
)
CLIP_LEGACY = OpSpec(  # Clip-6..10: bounds as attributes
    ref=lambda xs, a: np.clip(xs[0], _f32(a.get("min", -3.4028234663852886e38)), _f32(a.get("max", 3.4028234663852886e38))),
    exact=True, scheme="unary",
    variants=[Variant(), Variant("min_max", {"min": -1.0, "max": 1.5}), Variant("min_only", {"min": 0.25})],
)
SPECS[("", "Clip")] = by_opset(CLIP, (10, CLIP_LEGACY))
SPECS[("", "Where")] = OpSpec(ref=lambda xs, a: np.where(xs[0], xs[1], xs[2]), exact=True, scheme="nary")
