"""NonMaxSuppression, RoiAlign, MaxRoiPool (op-specs/src/detection.rs); the oracle is ORT's CPU EP."""

from __future__ import annotations

import itertools

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _i64, _rep
from op_table import np_dtype


def _iou_exceeds(a, b, iou, center):
    if center:
        ax, ay = (a[0] - a[2] / 2, a[0] + a[2] / 2), (a[1] - a[3] / 2, a[1] + a[3] / 2)
        bx, by = (b[0] - b[2] / 2, b[0] + b[2] / 2), (b[1] - b[3] / 2, b[1] + b[3] / 2)
    else:
        ax, ay = sorted((a[1], a[3])), sorted((a[0], a[2]))
        bx, by = sorted((b[1], b[3])), sorted((b[0], b[2]))
    w = min(ax[1], bx[1]) - max(ax[0], bx[0])
    h = min(ay[1], by[1]) - max(ay[0], by[0])
    if w <= 0 or h <= 0:
        return False
    inter = w * h
    a1, a2 = (ax[1] - ax[0]) * (ay[1] - ay[0]), (bx[1] - bx[0]) * (by[1] - by[0])
    union = a1 + a2 - inter
    return a1 > 0 and a2 > 0 and union > 0 and inter / union > iou


def _nms(xs, a):
    boxes, scores = xs[0].astype(np.float32), xs[1].astype(np.float32)
    limit = max(int(np.asarray(xs[2]).reshape(-1)[0]), 0) if len(xs) > 2 and xs[2] is not None else 0
    iou = float(np.asarray(xs[3]).reshape(-1)[0]) if len(xs) > 3 and xs[3] is not None else 0.0
    floor = float(np.asarray(xs[4]).reshape(-1)[0]) if len(xs) > 4 and xs[4] is not None else None
    center = a.get("center_point_box", 0) == 1
    out = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            row = scores[b, c]
            order = [i for i in np.argsort(-row, kind="stable") if floor is None or row[i] > floor]
            kept = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not any(_iou_exceeds(boxes[b, k], boxes[b, i], iou, center) for k in kept):
                    kept.append(i)
            out += [[b, c, k] for k in kept]
    return np.array(out, np.int64).reshape(-1, 3)


def _boxes(dtype, shape, rng, dtypes):
    """Corners around a few centres, so that many boxes overlap."""
    centre = rng.choice([1.0, 1.5, 4.0], size=tuple(shape[:-1]) + (2,))
    size = rng.uniform(0.5, 2.0, size=tuple(shape[:-1]) + (2,))
    lo, hi = centre - size / 2, centre + size / 2
    return np.stack([lo[..., 1], lo[..., 0], hi[..., 1], hi[..., 0]], axis=-1).astype(np.float32)


def _centre_boxes(dtype, shape, rng, dtypes):
    centre = rng.choice([1.0, 1.5, 4.0], size=tuple(shape[:-1]) + (2,))
    size = rng.uniform(0.5, 2.0, size=tuple(shape[:-1]) + (2,))
    return np.concatenate([centre, size], axis=-1).astype(np.float32)


def _scores(dtype, shape, rng, dtypes):
    """Distinct scores: among equal scores ORT's order is its heap's (see the entry's numerics)."""
    return (rng.permutation(np.prod(shape)).reshape(shape) / np.prod(shape)).astype(np.float32)


_F = np.float32
SPECS[("", "NonMaxSuppression")] = OpSpec(
    ref=_nms, exact=True,
    domains={"boxes": _boxes, "scores": _scores},
    constants={"max_output_boxes_per_class": _i64(3), "iou_threshold": np.array([0.5], _F),
               "score_threshold": np.array([0.2], _F)},
    scheme={"basic": [[2, 7, 4], [2, 3, 7]],
            "dynamic": [[[2, 7, 4], [2, 3, 7]], [[1, 5, 4], [1, 2, 5]], [[3, 9, 4], [3, 1, 9]]]},
    variants=[
        Variant(),
        _rep(Variant("center_point_box", {"center_point_box": 1}, domains={"boxes": _centre_boxes})),
        _rep(Variant("no_score_threshold", constants={"score_threshold": None})),
        _rep(Variant("one_a_class", constants={"max_output_boxes_per_class": _i64(1)})),
        _rep(Variant("any_overlap_suppresses", constants={"iou_threshold": np.array([0.0], _F)})),
        _rep(Variant("scalar_thresholds", constants={"iou_threshold": np.array(0.3, _F),
                                                     "score_threshold": np.array(0.1, _F),
                                                     "max_output_boxes_per_class": np.array(4, np.int64)})),
        _rep(Variant("no_limit_means_none", constants={"max_output_boxes_per_class": None, "iou_threshold": None,
                                                       "score_threshold": None})),
        _rep(Variant("negative_limit", constants={"max_output_boxes_per_class": _i64(-2)})),
    ],
)


# ---------------------------------------------------------------------------------------------
# RoiAlign and MaxRoiPool: references in float32 arithmetic, as ORT's kernels compute.

_f = np.float32


def _bilinear_taps(y, x, h, w):
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return [(0, 0, _f(0))] * 4
    y, x = max(y, _f(0)), max(x, _f(0))
    yl, xl = min(int(y), h - 1), min(int(x), w - 1)
    yh, xh = (yl, _f(yl)) if yl >= h - 1 else (yl + 1, y), (xl, _f(xl)) if xl >= w - 1 else (xl + 1, x)
    (yh, y), (xh, x) = yh, xh
    ly, lx = _f(y - _f(yl)), _f(x - _f(xl))
    hy, hx = _f(1) - ly, _f(1) - lx
    return [(yl, xl, hy * hx), (yl, xh, hy * lx), (yh, xl, ly * hx), (yh, xh, ly * lx)]


def _roi_align(xs, a):
    x, rois, batch = xs[0].astype(_f), xs[1].astype(_f), xs[2]
    _, c, h, w = x.shape
    oh, ow = a.get("output_height", 1), a.get("output_width", 1)
    ratio, scale = a.get("sampling_ratio", 0), _f(a.get("spatial_scale", 1.0))
    half = a.get("coordinate_transformation_mode", "half_pixel") == "half_pixel" and a["_opset"] >= 16
    shift = _f(0.5) if half else _f(0)
    out = np.zeros([len(rois), c, oh, ow], _f)
    for r, box in enumerate(rois):
        start = [box[1] * scale - shift, box[0] * scale - shift]
        extent = [(box[3] * scale - shift) - start[0], (box[2] * scale - shift) - start[1]]
        if not half:
            extent = [max(e, _f(1)) for e in extent]
        bins = [_f(extent[0] / _f(oh)), _f(extent[1] / _f(ow))]
        grid = [ratio or int(np.ceil(extent[0] / _f(oh))), ratio or int(np.ceil(extent[1] / _f(ow)))]
        img = x[batch[r]]
        for ph, pw in itertools.product(range(oh), range(ow)):
            total, best = np.zeros(c, _f), None
            for iy, ix in itertools.product(range(grid[0]), range(grid[1])):
                y = start[0] + _f(ph) * bins[0] + _f(iy + 0.5) * bins[0] / _f(grid[0])
                xx = start[1] + _f(pw) * bins[1] + _f(ix + 0.5) * bins[1] / _f(grid[1])
                terms = [wt * img[:, yy, xc] for yy, xc, wt in _bilinear_taps(_f(y), _f(xx), h, w)]
                if a.get("mode", "avg") == "max":
                    value = np.maximum.reduce(terms)
                    best = value if best is None else np.maximum(best, value)
                else:
                    total = total + ((terms[0] + terms[1]) + terms[2]) + terms[3]
            count = _f(max(grid[0] * grid[1], 1))
            out[r, :, ph, pw] = (best if best is not None else np.zeros(c, _f)) if a.get("mode") == "max" \
                else total / count
    return out.astype(xs[0].dtype)


def _max_roi_pool(xs, a):
    x, rois = xs[0], xs[1].astype(_f)
    _, c, h, w = x.shape
    ph_n, pw_n = a["pooled_shape"]
    scale = _f(a.get("spatial_scale", 1.0))
    out = np.zeros([len(rois), c, ph_n, pw_n], _f)
    for r, box in enumerate(rois):
        b = int(box[0])
        x1, y1, x2, y2 = (int(np.sign(v) * np.floor(abs(v) + _f(0.5))) for v in (box[1:] * scale).astype(_f))
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        bh, bw = _f(rh) / _f(ph_n), _f(rw) / _f(pw_n)
        for ph, pw in itertools.product(range(ph_n), range(pw_n)):
            hs = min(max(int(np.floor(_f(ph) * bh)) + y1, 0), h)
            he = min(max(int(np.ceil(_f(ph + 1) * bh)) + y1, 0), h)
            ws = min(max(int(np.floor(_f(pw) * bw)) + x1, 0), w)
            we = min(max(int(np.ceil(_f(pw + 1) * bw)) + x1, 0), w)
            if he > hs and we > ws:
                # ORT's running maximum, `y = v < y ? y : v` from the lowest float in scan order:
                # a NaN replaces y and the next pixel replaces the NaN.
                best = np.full(c, np.finfo(_f).min, _f)
                for v in x[b, :, hs:he, ws:we].reshape(c, -1).T.astype(_f):
                    best = np.where(v < best, best, v)
                out[r, :, ph, pw] = best
    return out


def _align_boxes(dtype, shape, rng, dtypes):
    """x1, y1, x2, y2 on a 6x7 map: mostly inside, some past an edge, one smaller than a pixel."""
    lo = rng.uniform(-1.5, 4.0, size=(shape[0], 2))
    size = rng.uniform(0.3, 4.5, size=(shape[0], 2))
    return np.concatenate([lo, lo + size], axis=1).astype(np_dtype(dtype))


def _image_of_two(dtype, shape, rng, dtypes):
    return rng.integers(0, 2, size=shape).astype(np.int64)


def _pool_boxes(dtype, shape, rng, dtypes):
    """batch, x1, y1, x2, y2 (scaled by 0.5 in the variants that set spatial_scale)."""
    lo = rng.uniform(-2.0, 5.0, size=(shape[0], 2))
    size = rng.uniform(0.0, 6.0, size=(shape[0], 2))
    batch = rng.integers(0, 2, size=(shape[0], 1)).astype(np.float64)
    return np.concatenate([batch, lo, lo + size], axis=1).astype(np.float32)


SPECS[("", "RoiAlign")] = OpSpec(
    ref=_roi_align, domains={"rois": _align_boxes, "batch_indices": _image_of_two},
    scheme={"basic": [[2, 3, 6, 7], [5, 4], [5]], "empty": [[2, 3, 6, 7], [0, 4], [0]],
            "dynamic": [[[2, 3, 6, 7], [5, 4], [5]], [[2, 1, 4, 9], [3, 4], [3]], [[2, 2, 3, 3], [1, 4], [1]]]},
    variants=[
        Variant("default", {"output_height": 2, "output_width": 3}),
        _rep(Variant("output_half_pixel", {"output_height": 2, "output_width": 2,
                                           "coordinate_transformation_mode": "output_half_pixel"}, min_opset=16)),
        _rep(Variant("max", {"mode": "max", "output_height": 3, "output_width": 2, "sampling_ratio": 2})),
        _rep(Variant("sampling_ratio_scaled", {"sampling_ratio": 3, "spatial_scale": 0.5})),
        _rep(Variant("upper_case_mode", {"mode": "AVG"})),
    ],
)


SPECS[("", "MaxRoiPool")] = OpSpec(
    ref=_max_roi_pool, exact=True, domains={"rois": _pool_boxes},
    scheme={"basic": [[2, 3, 6, 7], [5, 5]], "empty": [[2, 3, 6, 7], [0, 5]],
            "dynamic": [[[2, 3, 6, 7], [5, 5]], [[2, 1, 4, 9], [3, 5]], [[2, 2, 3, 3], [1, 5]]]},
    variants=[
        Variant("default", {"pooled_shape": [2, 3]}),
        _rep(Variant("scaled", {"pooled_shape": [3, 2], "spatial_scale": 0.5})),
        _rep(Variant("one_bin", {"pooled_shape": [1, 1]})),
    ],
)
