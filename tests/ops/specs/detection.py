"""NonMaxSuppression (op-specs/src/detection.rs); the oracle is ORT's CPU EP (float32)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _i64, _rep


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
