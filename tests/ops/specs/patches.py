"""Col2Im and DeformConv (op-specs/src/patches.rs): the oracle is ORT's CPU EP (float32), the reference for the rest."""

from __future__ import annotations

import itertools

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _i64, _rep


def _col2im(xs, a):
    x, image, block = xs[0].astype(np.float64), [int(v) for v in xs[1]], [int(v) for v in xs[2]]
    r = len(image)
    dil = a.get("dilations", [1] * r)
    strides = a.get("strides", [1] * r)
    pads = a.get("pads", [0] * (2 * r))
    grid = [(image[d] + pads[d] + pads[r + d] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1 for d in range(r)]
    n, rows, _ = x.shape
    k = int(np.prod(block))
    c = rows // k
    out = np.zeros([n, c] + image)
    cols = x.reshape(n, c, k, -1)
    for ki, offset in enumerate(itertools.product(*[range(b) for b in block])):
        for li, origin in enumerate(itertools.product(*[range(g) for g in grid])):
            pos = [origin[d] * strides[d] - pads[d] + offset[d] * dil[d] for d in range(r)]
            if all(0 <= pos[d] < image[d] for d in range(r)):
                out[(slice(None), slice(None)) + tuple(pos)] += cols[:, :, ki, li]
    return out.astype(xs[0].dtype)


SPECS[("", "Col2Im")] = OpSpec(
    ref=_col2im,
    constants={"image_shape": _i64(4, 5), "block_shape": _i64(2, 3)},
    scheme={"basic": [[2, 12, 9]]},  # C = 2 channels of 2x3 blocks over 3x3 positions
    variants=[
        Variant(),
        _rep(Variant("strides", {"strides": [2, 1]}, shapes=[[2, 12, 6]])),
        _rep(Variant("pads", {"pads": [1, 0, 1, 2]}, shapes=[[1, 6, 25]])),
        _rep(Variant("dilations", {"dilations": [2, 1]}, shapes=[[1, 6, 6]])),
        _rep(Variant("volumetric", constants={"image_shape": _i64(3, 4, 3), "block_shape": _i64(2, 2, 2)},
                     shapes=[[1, 16, 12]])),
    ],
)


def _bilinear(img, y, x):
    """ORT's tap read: 0 outside (-1, H) x (-1, W), and 0 for each corner outside the image."""
    h, w = img.shape[-2:]
    if not (-1 < y < h and -1 < x < w):
        return np.zeros(img.shape[:-2])
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    ly, lx = y - y0, x - x0
    total = np.zeros(img.shape[:-2])
    for dy, dx, weight in [(0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)]:
        r, c = y0 + dy, x0 + dx
        if 0 <= r < h and 0 <= c < w:
            total = total + weight * img[..., r, c]
    return total


def _deform_conv(xs, a):
    x, w, offset = (v.astype(np.float64) for v in xs[:3])
    b = xs[3] if len(xs) > 3 else None
    mask = xs[4] if len(xs) > 4 else None
    n, c, _, _ = x.shape
    m, cg, kh, kw = w.shape
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    pt, pl = a.get("pads", [0, 0, 0, 0])[:2]
    group, og = a.get("group", 1), a.get("offset_group", 1)
    oh, ow = offset.shape[2:]
    cols = np.zeros([n, c, kh * kw, oh * ow])
    for b_i, g_i, i, j, oy, ox in itertools.product(range(n), range(og), range(kh), range(kw), range(oh), range(ow)):
        k = i * kw + j
        y = oy * sh - pt + i * dh + offset[b_i, g_i * 2 * kh * kw + 2 * k, oy, ox]
        xx = ox * sw - pl + j * dw + offset[b_i, g_i * 2 * kh * kw + 2 * k + 1, oy, ox]
        chans = slice(g_i * c // og, (g_i + 1) * c // og)
        value = _bilinear(x[b_i, chans], y, xx)
        if mask is not None:
            value = value * mask[b_i, g_i * kh * kw + k, oy, ox]
        cols[b_i, chans, k, oy * ow + ox] = value
    cols = cols.reshape(n, group, c // group * kh * kw, oh * ow)
    y = np.matmul(w.reshape(group, m // group, cg * kh * kw), cols).reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.reshape(1, m, 1, 1)
    return y.astype(np.float32)


def _offsets(dtype, shape, rng, dtypes):
    """Shifts of up to 2.5 pixels: taps land between pixels, on edges and outside the image."""
    return rng.uniform(-2.5, 2.5, size=shape).astype(np.float32)


def _mask(dtype, shape, rng, dtypes):
    return rng.uniform(0.0, 1.0, size=shape).astype(np.float32)


SPECS[("", "DeformConv")] = OpSpec(
    ref=_deform_conv, domains={"offset": _offsets, "mask": _mask},
    # X [1, 2, 4, 5], W [3, 2, 2, 2]: a 3x4 output, 4 taps.
    scheme={"basic": [[1, 2, 4, 5], [3, 2, 2, 2], [1, 8, 3, 4], [3], [1, 4, 3, 4]]},
    variants=[
        Variant(),
        _rep(Variant("no_bias_no_mask", present=("X", "W", "offset"), shapes=[[1, 2, 4, 5], [3, 2, 2, 2], [1, 8, 3, 4]])),
        _rep(Variant("strides_pads_dilations", {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]},
                     shapes=[[2, 2, 5, 5], [3, 2, 3, 2], [2, 12, 3, 5], [3], [2, 6, 3, 5]])),
        _rep(Variant("groups", {"group": 2, "offset_group": 2},
                     shapes=[[1, 4, 4, 4], [4, 2, 2, 2], [1, 16, 3, 3], [4], [1, 8, 3, 3]])),
        _rep(Variant("offset_groups_only", {"offset_group": 2, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
                     shapes=[[1, 4, 3, 3], [2, 4, 3, 3], [1, 36, 3, 3], [2], [1, 18, 3, 3]])),
        _rep(Variant("empty_batch", shapes=[[0, 2, 4, 5], [3, 2, 2, 2], [0, 8, 3, 4], [3], [0, 4, 3, 4]])),
    ],
)
