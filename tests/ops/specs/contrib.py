"""com.microsoft elementwise ops (op-specs/src/contrib.rs): Gelu, QuickGelu, FastGelu, BiasGelu, BiasAdd,
BiasSplitGelu."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _erf, _f32, _gelu, _gelu_tanh, _sigmoid, _unary

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
def _bias_add(xs, a):
    """(X + bias) + skip in float32, the kernel's order and precision: in float64, 2.1 + 65504 -
    65504 keeps the 2.1 that float32 rounds to 2.10546875."""
    x, bias, skip = (np.asarray(v, np.float32) for v in xs[:3])
    return (x + bias) + skip


SPECS[("com.microsoft", "BiasAdd")] = OpSpec(ref=_bias_add, scheme="bias")


def _bias_split_gelu(xs, a):
    """ORT's kernel: X + bias, then left * 0.5 * right * (1 + erf(right / sqrt 2)) in float32.
    The float32 `1 + erf` of a large negative `right` cancels (to 0 below about -5.4), which a
    float64 reference does not, and a left half near the float limits scales that up."""
    with np.errstate(all="ignore"):
        total = np.asarray(xs[0], np.float32) + np.asarray(xs[1], np.float32)
        left, right = np.split(total, 2, axis=-1)
        erf = _erf(right * np.float32(1 / np.sqrt(2.0))).astype(np.float32)
        gelu = (np.float32(0.5) * right) * (np.float32(1.0) + erf)
        return left * gelu


SPECS[("com.microsoft", "BiasSplitGelu")] = OpSpec(
    ref=_bias_split_gelu,
    scheme={"basic": [[2, 3, 8], [8]], "dynamic": [[[2, 3, 8], [8]], [[1, 5, 8], [8]], [[3, 1, 8], [8]]]},
)
