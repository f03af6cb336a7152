"""TopK, ReverseSequence, Compress, NonZero, CenterCropPad (op-specs/src/select.rs)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _i64, _rep, by_opset
from op_table import np_dtype


def _top_k(xs, a):
    x = xs[0]
    k = int(np.asarray(xs[1]).reshape(-1)[0]) if len(xs) > 1 else a["k"]
    axis = a.get("axis", -1) % x.ndim
    key = -x if a.get("largest", 1) else x
    order = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(order, range(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def _ties(dtype, shape, rng, dtypes):
    """Few distinct values, so equal values (and their index order) are exercised."""
    return rng.integers(-3, 4, size=shape).astype(np_dtype(dtype))


def _reverse_sequence(xs, a):
    x, lens = xs[0].copy(), xs[1]
    b_ax, t_ax = a.get("batch_axis", 1), a.get("time_axis", 0)
    out = x.copy()
    for b, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[b_ax] = b
        src[t_ax] = slice(0, int(n))
        dst = list(src)
        out[tuple(dst)] = np.flip(x[tuple(src)], axis=t_ax - (1 if b_ax < t_ax else 0))
    return out


def _center_crop_pad(xs, a):
    x, shape = xs[0], [int(v) for v in xs[1]]
    axes = [v % x.ndim for v in a.get("axes", range(x.ndim))]
    for axis, target in zip(axes, shape):
        dim = x.shape[axis]
        if target <= dim:
            start = (dim - target) // 2
            x = np.take(x, range(start, start + target), axis=axis)
        else:
            widths = [(0, 0)] * x.ndim
            before = (target - dim) // 2
            widths[axis] = (before, target - dim - before)
            x = np.pad(x, widths)
    return x


TOPK_LEGACY = OpSpec(  # TopK-1..9: k as an attribute
    ref=_top_k, exact=True, domains={"X": _ties}, scheme={"basic": [[3, 8]]}, variants=[Variant(attrs={"k": 3})])
TOPK = OpSpec(  # TopK-10+: K as an input
    ref=_top_k, exact=True, domains={"X": _ties}, constants={"K": _i64(3)},
    scheme={"basic": [[3, 8]], "dynamic": [[[3, 8]], [[2, 5]], [[4, 3]]]},
    variants=[Variant(), _rep(Variant("smallest_axis0", {"largest": 0, "axis": 0}, min_opset=11, constants={"K": _i64(2)}))],
)
SPECS[("", "TopK")] = by_opset(TOPK, (9, TOPK_LEGACY))
SPECS[("", "ReverseSequence")] = OpSpec(
    ref=_reverse_sequence, exact=True, scheme={"basic": [[4, 3, 2], [3]]},
    domains={"sequence_lens": lambda dtype, shape, rng, d: np.array([4, 2, 1])[: shape[0]].astype(np_dtype(dtype))},
    variants=[Variant()],
)
SPECS[("", "Compress")] = OpSpec(
    ref=lambda xs, a: np.compress(xs[1], xs[0], axis=a.get("axis")), exact=True, scheme={"basic": [[4, 3, 2], [3]]},
    variants=[Variant(attrs={"axis": 1})],
)
SPECS[("", "CenterCropPad")] = OpSpec(
    ref=_center_crop_pad, exact=True, scheme={"basic": [[4, 3, 2]]}, constants={"shape": _i64(3, 5, 2)},
    variants=[Variant(), _rep(Variant("axes", {"axes": [-1, 0]}, constants={"shape": _i64(5, 1)}))],
)


def _non_zero(xs, a):
    x = xs[0]
    return np.array(np.nonzero(x.reshape(1) if x.ndim == 0 else x), dtype=np.int64).reshape(max(x.ndim, 1), -1)


SPECS[("", "NonZero")] = OpSpec(
    ref=_non_zero, exact=True, domains={"X": _ties},
    scheme={"basic": [[3, 4]], "scalar": [[]], "empty": [[0, 3]],
            "dynamic": [[[3, 4]], [[2, 5]], [[1, 1]]]},
    variants=[Variant(), _rep(Variant("rank3", shapes=[[2, 3, 4]])), _rep(Variant("vector", shapes=[[7]]))],
)
