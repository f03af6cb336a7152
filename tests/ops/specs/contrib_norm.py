"""ORT's fused normalisations (op-specs/src/contrib_norm.rs): SimplifiedLayerNormalization and com.microsoft
SkipLayerNormalization, SkipSimplifiedLayerNormalization, EmbedLayerNormalization, SkipGroupNorm."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep, _standardise


def _simplified_layer_norm(xs, a):
    x, scale = xs
    axes = tuple(range(a.get("axis", -1) % x.ndim, x.ndim))
    y, _, inv = _standardise(x, axes, a.get("epsilon", 1e-5), centred=False)
    return [(y * scale).astype(scale.dtype), inv.astype(np.float32)]


SPECS[("", "SimplifiedLayerNormalization")] = OpSpec(
    ref=_simplified_layer_norm,
    scheme={"basic": [[2, 3, 8], [8]], "empty": [[0, 8], [8]], "dynamic": [[[2, 3, 8], [8]], [[1, 5, 8], [8]], [[4, 1, 8], [8]]]},
    variants=[
        Variant(outputs=()),
        _rep(Variant("inv_std", {})),
        _rep(Variant("axis1", {"axis": 1, "epsilon": 1e-3}, shapes=[[2, 3, 4], [3, 4]])),
    ],
)


def _skip_norm(centred):
    def ref(xs, a):
        x, skip, gamma = xs[:3]
        rest = list(xs[3:]) + [None, None]
        beta = rest.pop(0) if centred else None
        bias = rest.pop(0)
        total = x.astype(np.float64) + skip + (0 if bias is None else bias)
        y, mean, inv = _standardise(total, (-1,), a.get("epsilon", 1e-12), centred)
        y = y * gamma + (0 if beta is None else beta)
        mean = np.broadcast_to(mean, inv.shape)
        return [y, mean.astype(np.float32), inv.astype(np.float32), total.astype(x.dtype)]

    return ref


_SKIP_SCHEME = {"basic": [[2, 3, 8], [2, 3, 8], [8], [8], [8]],
                "dynamic": [[[2, 3, 8], [2, 3, 8], [8], [8], [8]], [[1, 5, 8], [1, 5, 8], [8], [8], [8]], [[3, 1, 8], [3, 1, 8], [8], [8], [8]]]}
SPECS[("com.microsoft", "SkipLayerNormalization")] = OpSpec(
    ref=_skip_norm(centred=True), tolerance_scale=4.0, scheme=_SKIP_SCHEME,
    variants=[
        Variant(outputs=()),
        _rep(Variant("all_outputs", {"epsilon": 1e-5})),
        _rep(Variant("no_beta_no_bias", {}, present=(), outputs=("input_skip_bias_sum",))),
        _rep(Variant("skip_2d", {}, shapes=[[2, 3, 8], [3, 8], [8], [8], [8]], outputs=("inv_std_var",))),
    ],
)
SPECS[("com.microsoft", "SkipSimplifiedLayerNormalization")] = OpSpec(
    ref=_skip_norm(centred=False), tolerance_scale=4.0,
    scheme={"basic": [[2, 3, 8], [2, 3, 8], [8], [8]],
            "dynamic": [[[2, 3, 8], [2, 3, 8], [8], [8]], [[1, 5, 8], [1, 5, 8], [8], [8]], [[3, 1, 8], [3, 1, 8], [8], [8]]]},
    variants=[
        Variant(outputs=()),
        _rep(Variant("inv_and_sum", {"epsilon": 1e-5}, outputs=("inv_std_var", "input_skip_bias_sum"))),
        _rep(Variant("no_bias", {}, present=(), outputs=("input_skip_bias_sum",))),
    ],
)


def _embed_layer_norm(xs, a):
    ids, seg, word, pos, seg_table, gamma, beta, mask, pos_ids = (list(xs) + [None] * 9)[:9]
    total = word[ids].astype(np.float64)
    total = total + (pos[pos_ids] if pos_ids is not None else pos[: ids.shape[1]])
    if seg is not None and seg_table is not None:
        total = total + seg_table[seg]
    y = _standardise(total, (-1,), a.get("epsilon", 1e-12))[0] * gamma + beta
    mask_index = (mask == 1).sum(axis=1).astype(np.int32) if mask is not None else np.zeros(ids.shape[0], np.int32)
    return [y, mask_index, total.astype(word.dtype)]


SPECS[("com.microsoft", "EmbedLayerNormalization")] = OpSpec(
    ref=_embed_layer_norm, tolerance_scale=4.0,
    domains={"input_ids": "row", "segment_ids": "row", "position_ids": "row", "mask": "exponent"},
    # Fed inputs in port order: ids, segment ids, word, position, segment tables, gamma, beta,
    # mask, position ids (as present). No dynamic layout: ORT's shape inference needs the
    # tables' dims.
    scheme={"basic": [[2, 4], [2, 4], [5, 8], [6, 8], [3, 8], [8], [8], [2, 4]]},
    variants=[
        Variant("all", {}, present=("segment_ids", "segment_embedding", "mask")),
        _rep(Variant("no_segment_no_mask", {"epsilon": 1e-5}, present=(), shapes=[[2, 4], [5, 8], [6, 8], [8], [8]])),
        _rep(Variant("position_ids", {}, present=("segment_ids", "segment_embedding", "mask", "position_ids"),
                     shapes=[[2, 4], [2, 4], [5, 8], [6, 8], [3, 8], [8], [8], [2, 4], [2, 4]])),
        _rep(Variant("broadcast_position_ids", {}, present=("mask", "position_ids"),
                     shapes=[[3, 5], [5, 8], [6, 8], [8], [8], [3, 5], [1, 5]])),
    ],
)


def _skip_group_norm(xs, a):
    x, gamma, beta, skip = xs[:4]
    bias = xs[4] if len(xs) > 4 and xs[4] is not None else 0
    if skip.ndim == 2:
        skip = skip[:, None, None, :]
    # The residual sum in float32, as the kernel adds it: in float64, a 6e-8 input beside a bias
    # of 2.58 survives that float32 rounds away, and a group of near-equal sums normalises it up.
    f32 = np.float32
    total = (x.astype(f32) + np.asarray(skip, f32) + np.asarray(bias, f32)).astype(np.float64)
    n, h, w, c = total.shape
    g = a["groups"]
    grouped = total.reshape(n, h * w, g, c // g)
    y = _standardise(grouped, (1, 3), a.get("epsilon", 1e-5))[0].reshape(total.shape) * gamma + beta
    if a.get("activation") == 1:
        y = y / (1 + np.exp(-y))
    return [y, total.astype(x.dtype)]


SPECS[("com.microsoft", "SkipGroupNorm")] = OpSpec(
    ref=_skip_group_norm, tolerance_scale=4.0,
    scheme={"basic": [[2, 3, 2, 8], [8], [8], [2, 3, 2, 8], [8]],
            "dynamic": [[[2, 3, 2, 8], [8], [8], [2, 3, 2, 8], [8]], [[1, 2, 5, 8], [8], [8], [1, 2, 5, 8], [8]],
                        [[3, 1, 1, 8], [8], [8], [3, 1, 1, 8], [8]]]},
    variants=[
        Variant("silu", {"activation": 1, "groups": 4}),
        _rep(Variant("plain_no_bias", {"activation": 0, "groups": 2}, present=())),
        _rep(Variant("skip_nc", {"activation": 1, "groups": 8}, shapes=[[2, 3, 2, 8], [8], [8], [2, 8], [8]], outputs=())),
        _rep(Variant("skip_n11c", {"activation": 0, "groups": 1}, shapes=[[2, 3, 2, 8], [8], [8], [2, 1, 1, 8], [8]])),
    ],
)
