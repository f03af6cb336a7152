"""Pad, depth/space moves, EyeLike, GatherElements (op-specs/src/layout.rs)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _by_layout, _i64, _rep, by_opset
from op_table import np_dtype


def _pad(xs, a):
    x = xs[0]
    pads = [int(v) for v in (xs[1] if len(xs) > 1 and not isinstance(xs[1], type(None)) and "pads" not in a else a["pads"])]
    value = xs[2] if len(xs) > 2 and xs[2] is not None else a.get("value", 0)
    axes = [int(v) % x.ndim for v in xs[3]] if len(xs) > 3 and xs[3] is not None else list(range(x.ndim))
    n = len(axes)
    mode = a.get("mode", "constant")
    for i, axis in enumerate(axes):
        lo, hi = pads[i], pads[i + n]
        index = [slice(None)] * x.ndim
        index[axis] = slice(max(-lo, 0), x.shape[axis] - max(-hi, 0))
        x = x[tuple(index)]
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        np_mode = {"edge": "edge", "reflect": "reflect", "wrap": "wrap"}.get(mode, "constant")
        x = np.pad(x, widths, mode=np_mode, **({"constant_values": np.asarray(value).item()} if np_mode == "constant" else {}))
    return x


def _depth_to_space(xs, a):
    x, b = xs[0], a["blocksize"]
    n, c, h, w = x.shape
    if a.get("mode", "DCR") == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(xs, a):
    x, b = xs[0], a["blocksize"]
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


def _gather_elements(xs, a):
    data, idx = xs[0], xs[1].astype(np.int64)
    axis = a.get("axis", 0) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return np.take_along_axis(data, idx, axis=axis)


def _in_range_indices(dtype, shape, rng, dtypes):
    """Indices valid for axis 1 of the [2, 3, 4] data, negatives included."""
    return rng.integers(-3, 3, size=shape).astype(np_dtype(dtype))


_PAD_SCHEME = {"basic": [[2, 3, 4]], "transposed": [[3, 4]], "dynamic": [[[2, 3, 4]], [[3, 5, 2]], [[2, 2, 3]]]}
_PAD_PADS = _by_layout(default=_i64(0, 1, 2, 1, 1, 1), transposed=_i64(1, 2, 0, 1))
PAD_LEGACY = OpSpec(  # Pad-2..10: pads and value as attributes
    ref=_pad, exact=True, scheme={"basic": [[2, 3, 4]]},
    variants=[Variant(attrs={"pads": [0, 1, 2, 1, 1, 1], "value": 1.5}), _rep(Variant("edge", {"pads": [0, 1, 1, 0, 1, 1], "mode": "edge"})),
              _rep(Variant("reflect", {"pads": [0, 1, 1, 0, 1, 2], "mode": "reflect"}))],
)
PAD = OpSpec(  # Pad-11+: pads (and constant_value, axes) as inputs
    ref=_pad, exact=True, scheme=_PAD_SCHEME, constants={"pads": _PAD_PADS, "constant_value": None, "axes": None},
    variants=[
        Variant(),
        _rep(Variant("edge", {"mode": "edge"})),
        _rep(Variant("reflect", {"mode": "reflect"})),
        _rep(Variant("crop", constants={"pads": _i64(0, -1, 1, 1, 0, -2), "constant_value": None, "axes": None}, shapes=[[2, 3, 4]])),
    ],
)
SPECS[("", "Pad")] = by_opset(PAD, (10, PAD_LEGACY))
SPECS[("", "DepthToSpace")] = OpSpec(
    ref=_depth_to_space, exact=True, scheme={"basic": [[2, 8, 2, 3]], "dynamic": [[[2, 8, 2, 3]], [[1, 8, 3, 1]], [[3, 8, 1, 2]]]},
    variants=[Variant(attrs={"blocksize": 2}), _rep(Variant("crd", {"blocksize": 2, "mode": "CRD"}, min_opset=11))],
)
SPECS[("", "SpaceToDepth")] = OpSpec(
    ref=_space_to_depth, exact=True, scheme={"basic": [[2, 3, 4, 6]], "dynamic": [[[2, 3, 4, 6]], [[1, 2, 2, 2]], [[3, 1, 6, 4]]]},
    variants=[Variant(attrs={"blocksize": 2})],
)
SPECS[("", "EyeLike")] = OpSpec(
    ref=lambda xs, a: np.eye(xs[0].shape[0], xs[0].shape[1], k=a.get("k", 0)), exact=True,
    combos=lambda d: d["T1"] == d["T2"],
    scheme={"basic": [[3, 5]], "dynamic": [[[3, 5]], [[4, 2]], [[1, 1]]]},
    variants=[Variant(), _rep(Variant("k", {"k": -1}))],
)
SPECS[("", "GatherElements")] = OpSpec(
    ref=_gather_elements, exact=True, domains={"indices": _in_range_indices},
    scheme={"basic": [[2, 3, 4], [2, 2, 4]], "dynamic": [[[2, 3, 4], [2, 2, 4]], [[2, 3, 4], [2, 5, 4]], [[2, 3, 4], [2, 1, 4]]]},
    variants=[Variant(attrs={"axis": 1})],
)
