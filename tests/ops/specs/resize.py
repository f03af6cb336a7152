"""Resize and Upsample (op-specs/src/resize/, one spec file for the folder).

The reference is written from ONNX's Resize description, separable per axis, in float64
except where ORT (the oracle) fixes the arithmetic: output lengths and source coordinates
are float32 (nearest picks flip on one-ulp differences), `align_corners` and
`tf_crop_and_resize` use the floored output length (ONNX's reference uses the unfloored one
with scales; ORT fails those two conformance cases), an axis whose scale is exactly 1 (or,
antialiased, whose length does not change) is copied, and Resize-10/Upsample round nearest
by truncation (ceiling when an axis shrinks). Host-known scales/sizes/roi are initializers."""

from __future__ import annotations

import math

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _i64, _rep, by_opset

_F32 = np.float32


def _rz_source(transform, x, scale, n_out, n_in, roi):
    """Where output coordinate ``x`` reads the input, in float32 (float64 where ORT promotes)."""
    x, scale, n_out, n_in = _F32(x), _F32(scale), _F32(n_out), _F32(n_in)
    half, one = _F32(0.5), _F32(1)
    if transform == "asymmetric":
        return x / scale
    if transform == "half_pixel":
        return (x + half) / scale - half
    if transform == "tf_half_pixel_for_nn":
        return (x + half) / scale
    if transform == "pytorch_half_pixel":
        return (x + half) / scale - half if n_out > 1 else _F32(0)
    if transform == "align_corners":
        return _F32(0) if n_out == 1 else x * (n_in - one) / (n_out - one)
    if transform == "tf_crop_and_resize":
        start, end = _F32(roi[0]), _F32(roi[1])
        if n_out > 1:
            return start * (n_in - one) + (x * (end - start) * (n_in - one)) / (n_out - one)
        return _F32(0.5 * float(start + end) * float(n_in - one))
    if transform == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        offset = (n_in / _F32(2)) * (one - adjustment)
        return _F32(float(offset) + (float(x) + 0.5) / float(scale) - 0.5)
    raise ValueError(transform)


def _rz_round(rule, c, shrinking):
    c = float(c)
    if rule == "legacy":
        return math.ceil(c) if shrinking else int(c)
    if rule == "floor":
        return math.floor(c)
    if rule == "ceil":
        return math.ceil(c)
    if c - math.floor(c) == 0.5:  # a tie
        return math.floor(c) if rule == "round_prefer_floor" else math.ceil(c)
    return math.floor(c + 0.5)


def _rz_keys(t, a):
    """Keys' cubic convolution kernel at distance ``t``."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def _rz_rows(a, legacy, n_in, n_out, scale, roi):
    """Per output position: ([(input index, weight)], outside?)."""
    mode = a.get("mode", "nearest")
    transform = "asymmetric" if legacy else a.get("coordinate_transformation_mode", "half_pixel")
    rule = "legacy" if legacy else a.get("nearest_mode", "round_prefer_floor")
    cubic_a, exclude = a.get("cubic_coeff_a", -0.75), a.get("exclude_outside", 0)
    antialias = a.get("antialias", 0) and mode != "nearest"
    last = n_in - 1
    rows = []
    for j in range(n_out):
        c = float(_rz_source(transform, j, scale, n_out, n_in, roi))
        outside = transform == "tf_crop_and_resize" and not (0 <= c <= last)
        if mode == "nearest":
            taps = [(min(max(_rz_round(rule, c, scale < 1), 0), last), 1.0)]
        elif antialias:
            # The kernel widened by the downsampling factor, normalised over its taps.
            stretch = min(float(scale), 1.0)
            support = (2.0 if mode == "cubic" else 1.0) / stretch
            kernel = (lambda t: _rz_keys(t, cubic_a)) if mode == "cubic" else (lambda t: max(0.0, 1 - abs(t)))
            ks = range(math.floor(c - support), math.ceil(c + support) + 1)
            taps = [(k, kernel((k - c) * stretch)) for k in ks if not exclude or 0 <= k <= last]
            total = sum(w for _, w in taps) or 1.0
            taps = [(min(max(k, 0), last), w / total) for k, w in taps]
        elif mode == "linear":
            v = min(max(c, 0.0), last)
            lo = min(int(math.floor(v)), last)
            frac = v - lo
            taps = [(lo, 1 - frac), (min(lo + 1, last), frac)]
        else:
            base = math.floor(c)
            taps = [(k, _rz_keys(k - c, cubic_a)) for k in range(base - 1, base + 3)]
            if exclude:
                taps = [(k, w) for k, w in taps if 0 <= k <= last]
                total = sum(w for _, w in taps)
                taps = [(k, w / total) for k, w in taps]
            taps = [(min(max(k, 0), last), w) for k, w in taps]
        rows.append((taps, outside))
    return rows


def _rz_geometry(x_shape, scales, sizes, a):
    """Output dims and per-axis float32 scales, as ORT computes them."""
    rank = len(x_shape)
    axes = [int(v) % rank for v in a["axes"]] if "axes" in a else list(range(rank))
    if scales is not None and np.size(scales):
        full = [_F32(1)] * rank
        for i, s in zip(axes, np.asarray(scales).reshape(-1)):
            full[i] = _F32(s)
        return [int(full[i] * _F32(d)) for i, d in enumerate(x_shape)], full
    out = list(x_shape)
    for i, s in zip(axes, np.asarray(sizes).reshape(-1)):
        out[i] = int(s)
    full = [_F32(o) / _F32(d) if d else _F32(1) for o, d in zip(out, x_shape)]
    policy = a.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        s = pick(full[i] for i in axes)
        for i in range(rank):
            full[i] = s if i in axes else _F32(1)
            out[i] = int(math.floor(float(s * _F32(x_shape[i])) + 0.5)) if i in axes else x_shape[i]
    return out, full


def _resize_ref(legacy=False):
    def ref(xs, a):
        x = xs[0]
        if legacy:  # Resize-10 [X, scales], Upsample-9 [X, scales], Upsample-7 (attribute)
            scales, sizes, roi = (xs[1] if len(xs) > 1 else np.array(a["scales"])), None, None
        else:
            roi, scales, sizes = (list(xs[1:]) + [None] * 3)[:3]
        out, full = _rz_geometry(x.shape, scales, sizes, a)
        rank = x.ndim
        full_roi = [0.0] * rank + [1.0] * rank
        if roi is not None and np.size(roi):
            axes = [int(v) % rank for v in a["axes"]] if "axes" in a else list(range(rank))
            roi = np.asarray(roi, dtype=np.float32).reshape(-1)
            for k, i in enumerate(axes):
                full_roi[i], full_roi[rank + i] = roi[k], roi[len(axes) + k]
        if list(out) == list(x.shape):
            return x
        if 0 in out:
            return np.zeros(out, dtype=x.dtype)
        y = x.astype(np.float64) if a.get("mode", "nearest") != "nearest" else x
        outside = np.zeros([1] * rank, dtype=bool)
        for i in range(rank):
            if full[i] == 1 or (a.get("antialias", 0) and out[i] == x.shape[i]):
                continue
            rows = _rz_rows(a, legacy, x.shape[i], out[i], full[i], (full_roi[i], full_roi[rank + i]))
            picked = [sum(w * np.take(y, k, axis=i) for k, w in taps) if len(taps) > 1 or taps[0][1] != 1.0
                      else np.take(y, taps[0][0], axis=i) for taps, _ in rows]
            y = np.stack(picked, axis=i)
            mask_shape = [1] * rank
            mask_shape[i] = out[i]
            outside = outside | np.array([o for _, o in rows]).reshape(mask_shape)
        if outside.any():
            fill = a.get("extrapolation_value", 0.0)
            if x.dtype.kind in "iu":  # ORT's static_cast: truncate, then wrap
                fill = np.array(math.trunc(fill), dtype=np.int64).astype(x.dtype)
            y = np.where(outside, fill, y)
        return y.astype(x.dtype) if x.dtype.kind in "iub" else y

    return ref


def _f32s(*v):
    return np.array(v, dtype=np.float32)


_RESIZE_SCHEME = {"basic": [[1, 2, 4, 5]], "empty": [[0, 2, 4, 5]],
                  "dynamic": [[[1, 2, 4, 5]], [[2, 1, 3, 6]], [[1, 3, 5, 2]]]}
_UP_DOWN = _f32s(1, 1, 1.6, 0.7)  # one axis grows, one shrinks
_TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
_ROUNDINGS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_variants():
    sc = {"roi": None, "sizes": None}
    by_sizes = {"roi": None, "scales": None}
    v = [Variant(constants=dict(sc, scales=_f32s(1, 1, 2, 0.6)))]
    v += [_rep(Variant(f"nearest_{t}_{r}", {"mode": "nearest", "coordinate_transformation_mode": t, "nearest_mode": r},
                       constants=dict(sc, scales=_UP_DOWN))) for t in _TRANSFORMS for r in _ROUNDINGS]
    for mode in ("linear", "cubic"):
        v += [_rep(Variant(f"{mode}_{t}", {"mode": mode, "coordinate_transformation_mode": t},
                           constants=dict(sc, scales=_UP_DOWN))) for t in _TRANSFORMS]
        v += [_rep(Variant(f"{mode}_sizes", {"mode": mode}, constants=dict(by_sizes, sizes=_i64(1, 2, 7, 3)))),
              _rep(Variant(f"{mode}_downsample", {"mode": mode}, constants=dict(sc, scales=_f32s(1, 1, 0.5, 0.4)),
                           shapes=[[1, 2, 8, 10]]))]
    for mode in ("nearest", "linear", "cubic"):
        v += [_rep(Variant(f"{mode}_half_pixel_symmetric", {"mode": mode, "coordinate_transformation_mode": "half_pixel_symmetric"},
                           constants=dict(sc, scales=_UP_DOWN), min_opset=19)),
              _rep(Variant(f"{mode}_tf_crop_and_resize", {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
                                                          "extrapolation_value": 2.5},
                           constants={"roi": _f32s(0, 0, -0.2, 0.3, 1, 1, 0.9, 1.25), "scales": None, "sizes": _i64(1, 2, 6, 4)}))]
    v += [
        _rep(Variant("nearest_sizes", {}, constants=dict(by_sizes, sizes=_i64(1, 2, 9, 2)))),
        _rep(Variant("cubic_a_exclude_outside", {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
                     constants=dict(sc, scales=_UP_DOWN))),
        _rep(Variant("nearest_tf_half_pixel_for_nn", {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
                     constants=dict(sc, scales=_UP_DOWN))),
        _rep(Variant("linear_3d", {"mode": "linear"}, constants=dict(sc, scales=_f32s(1.5, 0.5, 2)), shapes=[[3, 4, 5]])),
        _rep(Variant("linear_5d", {"mode": "linear"}, constants=dict(sc, scales=_f32s(1, 1, 2, 0.5, 1.5)), shapes=[[1, 2, 3, 4, 4]])),
        _rep(Variant("cubic_2d", {"mode": "cubic"}, constants=dict(sc, scales=_f32s(2.2, 0.45)), shapes=[[5, 9]])),
        _rep(Variant("linear_nhwc", {"mode": "linear"}, constants=dict(sc, scales=_f32s(1, 1.5, 0.5, 1)), shapes=[[1, 4, 6, 3]])),
        _rep(Variant("nearest_rank1", {}, constants=dict(sc, scales=_f32s(2.5)), shapes=[[5]])),
        _rep(Variant("nearest_to_empty", {}, constants=dict(sc, scales=_f32s(1, 1, 0.2, 1)))),
        # Opset 18: axes, keep_aspect_ratio_policy, antialias.
        _rep(Variant("axes_scales", {"axes": [3, 2]}, constants=dict(sc, scales=_f32s(0.6, 1.5)))),
        _rep(Variant("axes_negative_sizes", {"mode": "linear", "axes": [-1]}, constants=dict(by_sizes, sizes=_i64(8)))),
        _rep(Variant("axes_tf_crop_and_resize", {"axes": [2, 3], "coordinate_transformation_mode": "tf_crop_and_resize",
                                                 "extrapolation_value": -1.0},
                     constants={"roi": _f32s(0.1, -0.1, 0.8, 1.2), "scales": None, "sizes": _i64(5, 6)})),
    ]
    for policy in ("not_larger", "not_smaller"):
        v += [_rep(Variant(f"{policy}_axes", {"keep_aspect_ratio_policy": policy, "axes": [2, 3]},
                           constants=dict(by_sizes, sizes=_i64(7, 7)))),
              # One scale over every axis: not_smaller scales N and C too, a layout ORT's linear
              # kernel refuses (ScalesValidation), so that policy is checked in nearest mode.
              _rep(Variant(f"{policy}_all_axes", {"mode": "linear" if policy == "not_larger" else "nearest",
                                                  "keep_aspect_ratio_policy": policy},
                           constants=dict(by_sizes, sizes=_i64(1, 2, 6, 9))))]
    for mode in ("linear", "cubic"):
        for exclude in (0, 1):
            v += [_rep(Variant(f"antialias_{mode}_exclude{exclude}", {"mode": mode, "antialias": 1, "exclude_outside": exclude},
                               constants=dict(sc, scales=_f32s(1, 1, 0.4, 0.3)), shapes=[[1, 2, 10, 13]]))]
        v += [_rep(Variant(f"antialias_{mode}_sizes_align_corners",
                           {"mode": mode, "antialias": 1, "coordinate_transformation_mode": "align_corners"},
                           constants=dict(by_sizes, sizes=_i64(1, 2, 3, 5)), shapes=[[1, 2, 10, 13]])),
              _rep(Variant(f"antialias_{mode}_upsample", {"mode": mode, "antialias": 1},
                           constants=dict(sc, scales=_UP_DOWN)))]
    v += [_rep(Variant("antialias_tf_crop_and_resize", {"mode": "linear", "antialias": 1, "extrapolation_value": 4.0,
                                                        "coordinate_transformation_mode": "tf_crop_and_resize"},
                       constants={"roi": _f32s(0, 0, 0.1, -0.2, 1, 1, 1.1, 0.9), "scales": None, "sizes": _i64(1, 2, 4, 5)},
                       shapes=[[1, 2, 12, 13]]))]
    return v


RESIZE = OpSpec(  # Resize-13+
    ref=_resize_ref(), scheme=_RESIZE_SCHEME, variants=_resize_variants(),
    combos=lambda d: d.get("T2", "float") == "float",  # roi is absent or float32 in every variant
    tolerance_scale=4.0,  # cubic sums of 16 float32 products can cancel to near zero
)
# Resize-11/12: roi and scales are required inputs (empty when unused).
RESIZE_11 = OpSpec(
    ref=_resize_ref(), scheme=_RESIZE_SCHEME, combos=lambda d: d.get("T2", "float") == "float", tolerance_scale=4.0,
    constants={"roi": np.zeros(0, np.float32), "sizes": None},
    variants=[
        Variant(constants={"scales": _f32s(1, 1, 2, 0.6)}),
        _rep(Variant("linear_sizes", {"mode": "linear"}, constants={"scales": np.zeros(0, np.float32), "sizes": _i64(1, 2, 7, 3)})),
        _rep(Variant("cubic_align_corners", {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
                     constants={"scales": _UP_DOWN})),
        _rep(Variant("nearest_tf_half_pixel_for_nn_ceil", {"coordinate_transformation_mode": "tf_half_pixel_for_nn", "nearest_mode": "ceil"},
                     constants={"scales": _UP_DOWN})),
        _rep(Variant("tf_crop_and_resize", {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                                            "extrapolation_value": 1.5},
                     constants={"roi": _f32s(0, 0, -0.2, 0.3, 1, 1, 0.9, 1.25), "scales": _UP_DOWN})),
    ],
)
RESIZE_10 = OpSpec(
    ref=_resize_ref(legacy=True), scheme=_RESIZE_SCHEME, constants={"scales": _f32s(1, 1, 2, 0.6)},
    variants=[Variant(), _rep(Variant("nearest_down", {}, constants={"scales": _f32s(1, 1, 0.6, 0.4)})),
              _rep(Variant("linear", {"mode": "linear"}, constants={"scales": _UP_DOWN}))],
)
UPSAMPLE_7 = OpSpec(
    ref=_resize_ref(legacy=True), scheme=_RESIZE_SCHEME,
    variants=[Variant(attrs={"scales": [1.0, 1.0, 2.0, 3.0]}),
              _rep(Variant("linear", {"mode": "linear", "scales": [1.0, 1.0, 1.5, 2.5]}))],
)
UPSAMPLE = OpSpec(  # Upsample-9: scales as an input
    ref=_resize_ref(legacy=True), scheme=_RESIZE_SCHEME, constants={"scales": _f32s(1, 1, 2, 1.5)},
    variants=[Variant(), _rep(Variant("linear", {"mode": "linear"}, constants={"scales": _f32s(1, 1, 1.5, 2.5)}))],
)
SPECS[("", "Resize")] = by_opset(RESIZE, (10, RESIZE_10), (12, RESIZE_11))
SPECS[("", "Upsample")] = by_opset(UPSAMPLE, (8, UPSAMPLE_7))
