"""com.microsoft elementwise ops (op-specs/src/contrib.rs): Gelu, QuickGelu, FastGelu, BiasGelu, BiasAdd, BiasSplitGelu."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _f32, _gelu, _gelu_tanh, _sigmoid, _unary

SPECS[("com.microsoft", "Gelu")] = OpSpec(ref=_unary(_gelu), scheme="unary")
SPECS[("com.microsoft", "QuickGelu")] = OpSpec(
    ref=lambda xs, a: xs[0] * _sigmoid(_f32(a.get("alpha", 1.702)) * xs[0]), scheme="unary",
    variants=[Variant(), Variant("alpha", {"alpha": 1.0})],
)
SPECS[("com.microsoft", "FastGelu")] = OpSpec(
    ref=lambda xs, a: _gelu_tanh(xs[0] + xs[1] if len(xs) > 1 and xs[1] is not None else xs[0]),
    scheme="bias", variants=[Variant("bias"), Variant("no_bias", present=())],
)
SPECS[("com.microsoft", "BiasGelu")] = OpSpec(ref=lambda xs, a: _gelu(xs[0] + xs[1]), scheme="bias")
SPECS[("com.microsoft", "BiasAdd")] = OpSpec(ref=lambda xs, a: xs[0] + xs[1] + xs[2], scheme="bias")


def _bias_split_gelu(xs, a):
    total = xs[0] + xs[1]
    left, right = np.split(total, 2, axis=-1)
    return left * _gelu(right)


SPECS[("com.microsoft", "BiasSplitGelu")] = OpSpec(
    ref=_bias_split_gelu,
    scheme={"basic": [[2, 3, 8], [8]], "dynamic": [[[2, 3, 8], [8]], [[1, 5, 8], [8]], [[3, 1, 8], [8]]]},
)
