"""Logic and bitwise ops (op-specs/src/logic.rs): And, Or, Xor, Not, BitwiseAnd/Or/Xor/Not, BitShift."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _binary, _unary


def bit_shift(x, y, direction: str):
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    bits = x.dtype.itemsize * 8
    too_far = y >= bits
    ys = np.where(too_far, 0, y).astype(x.dtype)
    r = np.left_shift(x, ys) if direction == "LEFT" else np.right_shift(x, ys)
    return np.where(too_far, 0, r).astype(x.dtype)


for _op, _f in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
    SPECS[("", _op)] = OpSpec(ref=_binary(_f), exact=True)
SPECS[("", "Not")] = OpSpec(ref=_unary(np.logical_not), exact=True, scheme="unary")
for _op, _f in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
    SPECS[("", _op)] = OpSpec(ref=_binary(_f), exact=True, domains={"*": "full"})
SPECS[("", "BitwiseNot")] = OpSpec(ref=_unary(np.invert), exact=True, scheme="unary", domains={"*": "full"})
SPECS[("", "BitShift")] = OpSpec(
    ref=lambda xs, a: bit_shift(xs[0], xs[1], a["direction"]), exact=True,
    domains={"X": "shiftable", "Y": "shift"},
    variants=[Variant("LEFT", {"direction": "LEFT"}), Variant("RIGHT", {"direction": "RIGHT"})],
    note="shifts by the bit width or more are checked separately (C leaves them undefined)",
)
