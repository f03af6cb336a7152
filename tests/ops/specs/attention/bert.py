"""com.microsoft Attention, BERT-style (op-specs/src/attention/bert.rs): each input form and flag
ORT's CPU kernel accepts, float32 and float16, with ORT's CPU EP as the oracle.

Shapes: batch 2, 2 heads of size 4 (hidden 8), 3 query positions unless a variant says
otherwise. Masks are int32 with values ORT reads as intended (end/start positions, 0/1
entries)."""

from __future__ import annotations

from op_specs import SPECS, OpSpec, Variant, _rep
from specs.attention import _H, _SMALL, _bits, _ends, _ints

# Attention ports: input, weights, bias, mask_index, past, attention_bias (past_sequence_length
# only matters to the declined shared buffer). Input hidden 6, Q/K/V hidden 8 each.
_X, _W, _B = [2, 3, 6], [6, 24], [24]
_WB = ("bias",)
_SMALLW = {"weights": _SMALL}

SPECS[("com.microsoft", "Attention")] = OpSpec(
    ref=None, tolerance_scale=4.0,
    scheme={"basic": [_X, _W, _B]},
    domains=_SMALLW,
    variants=[
        Variant("plain", _H, present=_WB, outputs=()),
        Variant("present", _H, present=_WB),
        Variant("unidirectional", dict(_H, unidirectional=1), present=_WB, outputs=()),
        Variant("past", dict(_H, unidirectional=1), present=_WB + ("past",),
                shapes=[_X, _W, _B, [2, 2, 2, 2, 4]]),
        _rep(Variant("past_mask_keys", _H, present=_WB + ("mask_index", "past"),
                     shapes=[_X, _W, _B, [2, 5], [2, 2, 2, 2, 4]],
                     domains=dict(_SMALLW, mask_index=_bits()))),
        Variant("decode", dict(_H, unidirectional=1), present=_WB + ("mask_index", "past"),
                shapes=[[2, 1, 6], _W, _B, [2], [2, 2, 2, 3, 4]],
                domains=dict(_SMALLW, mask_index=_ends(4))),
        Variant("mask_end", _H, present=_WB + ("mask_index",), shapes=[_X, _W, _B, [2]], outputs=(),
                domains=dict(_SMALLW, mask_index=_ends(3))),
        # [2B]: end positions, then start positions (clamped; beyond the keys masks nothing).
        _rep(Variant("mask_end_start", _H, present=_WB + ("mask_index",), shapes=[_X, _W, _B, [4]], outputs=(),
                     domains=dict(_SMALLW, mask_index=_ints([3, 2, 1, 0])))),
        _rep(Variant("mask_end_start_out_of_range", _H, present=_WB + ("mask_index",), shapes=[_X, _W, _B, [4]],
                     outputs=(), domains=dict(_SMALLW, mask_index=_ints([9, 0, -2, 7])))),
        Variant("mask_keys", _H, present=_WB + ("mask_index",), shapes=[_X, _W, _B, [2, 3]], outputs=(),
                domains=dict(_SMALLW, mask_index=_bits())),
        # [B, 1]: one column broadcast over the keys, which ORT reads as no mask.
        _rep(Variant("mask_one_column", _H, present=_WB + ("mask_index",), shapes=[_X, _W, _B, [2, 1]], outputs=(),
                     domains=dict(_SMALLW, mask_index=_ints([[0], [1]])))),
        Variant("mask_positions_causal", dict(_H, unidirectional=1), present=_WB + ("mask_index",),
                shapes=[_X, _W, _B, [2, 3, 3]], outputs=(), domains=dict(_SMALLW, mask_index=_bits())),
        _rep(Variant("qkv_hidden_sizes", dict(_H, qkv_hidden_sizes=[8, 8, 12]), present=_WB,
                     shapes=[_X, [6, 28], [28]], outputs=())),
        Variant("attention_bias", _H, present=_WB + ("attention_bias",), shapes=[_X, _W, _B, [1, 2, 3, 3]],
                outputs=()),
        _rep(Variant("scale_mask_filter_value", dict(_H, scale=0.6, mask_filter_value=-20.0),
                     present=_WB + ("mask_index",), shapes=[_X, _W, _B, [2, 3]], outputs=(),
                     domains=dict(_SMALLW, mask_index=_bits(0.5, full_rows=(0,))))),
    ],
)
