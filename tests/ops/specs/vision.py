"""GridSample and AffineGrid (op-specs/src/vision.rs).

The references follow ORT's CPU kernels (grid_sample.cc, affine_grid.cc) in float32: the oracle
is ORT's CPU EP wherever it has a kernel; the references serve bfloat16 (GridSample-22), which
ORT does not run."""

from __future__ import annotations

import itertools

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep
from op_table import np_dtype

F = np.float32


def _grid(low, high):
    def make(dtype, shape, rng, dtypes):
        return rng.uniform(low, high, size=shape).astype(np_dtype(dtype))

    return make


def _denormalise(g, size, align):
    if align:
        return ((g + F(1)) / F(2) * F(size - 1)).astype(F)
    return (((g + F(1)) * F(size) - F(1)) / F(2)).astype(F)


def _reflect(x, lo, hi):
    lo, hi = F(lo), F(hi)
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi).astype(F)
    n = np.floor(dx / rng)
    r = (dx - n * rng).astype(F)
    even = (n % 2) == 0
    folded = np.where(even == below, lo + r, hi - r).astype(F)
    return np.where(below | above, folded, x).astype(F)


def _cubic(t):
    a = F(-0.75)

    def outer(u):
        return ((a * u - F(5) * a) * u + F(8) * a) * u - F(4) * a

    def inner(u):
        return ((a + F(2)) * u - (a + F(3))) * u * u + F(1)

    return [outer(t + F(1)), inner(t), inner(F(1) - t), outer(F(2) - t)]


def _grid_sample(xs, a):
    x, grid = xs[0].astype(F), xs[1].astype(F)
    align = a.get("align_corners", 0) != 0
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(a.get("mode", "linear"), a.get("mode", "linear"))
    padding = a.get("padding_mode", "zeros")
    n, c, *sizes = x.shape
    r = len(sizes)
    out_spatial = grid.shape[1:-1]
    pts = grid.reshape(n, -1, r)
    image = x.reshape(n, c, -1)
    taps_per_axis = []
    for axis, size in enumerate(sizes):
        coord = _denormalise(pts[..., r - 1 - axis], size, align)
        if mode == "nearest":
            coord = np.rint(coord).astype(F)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            taps = [(np.trunc(coord), None)]
        elif mode == "linear":
            x1 = np.floor(coord)
            taps = [(x1, (x1 + F(1) - coord).astype(F)), (x1 + F(1), (coord - x1).astype(F))]
        else:
            fl = np.floor(coord)
            taps = [(fl + F(k - 1), w.astype(F)) for k, w in enumerate(_cubic(np.abs(coord - fl).astype(F)))]
        fixed = []
        for at, w in taps:
            if padding == "zeros":
                inside = (at >= 0) & (at <= size - 1)
                idx = np.clip(at, 0, size - 1)
            elif padding == "border":
                inside, idx = None, np.clip(at, 0, size - 1)
            else:
                inside, idx = None, np.clip(np.trunc(_reflect(at.astype(F), lo, hi)), 0, size - 1)
            fixed.append((idx.astype(np.int64), inside, w))
        taps_per_axis.append(fixed)

    def read(picked):
        flat = np.zeros(pts.shape[:2], np.int64)
        inside = np.ones(pts.shape[:2], bool)
        for (idx, ins, _), stride in zip(picked, np.cumprod([1] + sizes[::-1])[:-1][::-1]):
            flat += idx * stride
            if ins is not None:
                inside &= ins
        v = np.take_along_axis(image, flat[:, None, :].repeat(c, 1), 2)
        return np.where(inside[:, None, :], v, F(0)).astype(F)

    def combine(depth, picked):
        if depth == r:
            return read(picked)
        total = None
        for tap in taps_per_axis[depth]:
            inner = combine(depth + 1, picked + [tap])
            term = inner if tap[2] is None else (tap[2][:, None, :] * inner).astype(F)
            total = term if total is None else (total + term).astype(F)
        return total

    return combine(0, []).reshape((n, c) + tuple(out_spatial))


_PAD = ["zeros", "border", "reflection"]

SPECS[("", "GridSample")] = OpSpec(
    ref=_grid_sample,
    domains={"grid": _grid(-1.3, 1.3)},
    scheme={"basic": [[2, 3, 4, 5], [2, 3, 6, 2]],
            "dynamic": [[[2, 3, 4, 5], [2, 3, 6, 2]], [[1, 2, 5, 3], [1, 4, 4, 2]], [[1, 1, 1, 7], [1, 2, 3, 2]]]},
    variants=[Variant()]
    + [_rep(Variant(f"{mode}_{pad}_align{align}", {"mode": mode, "padding_mode": pad, "align_corners": align},
                    max_opset=None if mode == "nearest" else 19))
       for mode, pad, align in itertools.product(["bilinear", "nearest", "bicubic"], _PAD, [0, 1])]
    + [_rep(Variant(f"{mode}_opset20_{pad}", {"mode": mode, "padding_mode": pad, "align_corners": 1}, min_opset=20))
       for mode, pad in [("linear", "reflection"), ("cubic", "border"), ("cubic", "zeros")]]
    + [_rep(Variant(f"far_{mode}_{pad}_align{align}", {"mode": mode, "padding_mode": pad, "align_corners": align},
                    domains={"grid": _grid(-4.0, 4.0)}, max_opset=None if mode == "nearest" else 19))
       for mode, pad, align in [("bilinear", "reflection", 0), ("bicubic", "reflection", 1), ("nearest", "reflection", 0),
                                ("bicubic", "border", 0), ("bilinear", "zeros", 1)]]
    + [_rep(Variant(f"volumetric_{mode}_{pad}_align{align}", {"mode": mode, "padding_mode": pad, "align_corners": align},
                    shapes=[[1, 2, 3, 4, 5], [1, 2, 3, 4, 3]], min_opset=20))
       for mode, pad, align in itertools.product(["linear", "nearest"], _PAD, [0, 1])]
    + [_rep(Variant("one_pixel_rows_reflection", {"padding_mode": "reflection", "align_corners": 1},
                    shapes=[[1, 2, 1, 5], [1, 3, 3, 2]]))],
    note="bfloat16 (opset 22): ORT has no kernel; the reference follows ORT's float kernel",
)


def _linspace(n, align):
    if n == 1:
        points = np.array([1.0], F)
    else:
        step = F(2) / F(n - 1)
        points = np.array([F(-1) + F(i) * step for i in range(n - 1)] + [F(1)], F)
    return points if align else (points * F(n - 1) / F(n)).astype(F)


def _affine_grid(xs, a):
    theta, size = xs[0].astype(F), [int(v) for v in xs[1]]
    align = a.get("align_corners", 0) != 0
    spatial = size[2:]
    r = len(spatial)
    axes = np.meshgrid(*[_linspace(n, align) for n in spatial], indexing="ij")  # outermost first
    coords = [axes[r - 1 - col] for col in range(r)]  # x (the last axis) first
    out = []
    for row in range(r):
        acc = None
        for col in range(r):
            term = coords[col][None] * theta[:, row, col].reshape((-1,) + (1,) * r)
            acc = term if acc is None else (acc + term).astype(F)
        out.append((acc + theta[:, row, r].reshape((-1,) + (1,) * r)).astype(F))
    return np.stack(out, axis=-1)


def _theta(dtype, shape, rng, dtypes):
    return rng.uniform(-1.5, 1.5, size=shape).astype(np_dtype(dtype))


SPECS[("", "AffineGrid")] = OpSpec(
    ref=_affine_grid,
    domains={"theta": _theta},
    constants={"size": np.array([2, 3, 4, 5], np.int64)},
    scheme={"basic": [[2, 2, 3]]},
    variants=[
        Variant(),
        _rep(Variant("align_corners", {"align_corners": 1})),
        _rep(Variant("one_row", {"align_corners": 1}, constants={"size": np.array([2, 1, 1, 6], np.int64)})),
        _rep(Variant("volumetric", constants={"size": np.array([2, 1, 3, 4, 5], np.int64)}, shapes=[[2, 3, 4]])),
        _rep(Variant("volumetric_align_corners", {"align_corners": 1},
                     constants={"size": np.array([1, 2, 2, 1, 3], np.int64)}, shapes=[[1, 3, 4]])),
    ],
)
