"""Col2Im (op-specs/src/patches.rs): the oracle is ORT's CPU EP (float32), the reference for the rest."""

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
