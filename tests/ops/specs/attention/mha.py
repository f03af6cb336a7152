"""com.microsoft MultiHeadAttention (op-specs/src/attention/mha.rs): each input form and flag ORT's
CPU kernel accepts, float32 and float16, with ORT's CPU EP as the oracle.

Shapes: batch 2, 2 heads of size 4 (hidden 8), 3 query positions, 4 key positions unless a
variant says otherwise. Masks are int32 with values ORT reads as intended (end/start positions,
0/1 entries)."""

from __future__ import annotations

from op_specs import SPECS, OpSpec, Variant, _rep
from specs.attention import _H, _bits, _ends, _ints

# MultiHeadAttention ports: query, key, value, bias, key_padding_mask, attention_bias, past_key,
# past_value (past_sequence_length and cache_indirection are declined). Shapes list the present
# inputs in port order.
_Q, _K, _V = [2, 3, 8], [2, 4, 8], [2, 4, 8]
_QKV = ("key", "value")
_PRESENT = ("present_key", "present_value")

SPECS[("com.microsoft", "MultiHeadAttention")] = OpSpec(
    ref=None, tolerance_scale=4.0,
    combos=lambda d: d["QK"] == d["T"],
    scheme={"basic": [_Q, _K, _V]},
    variants=[
        # No mask, no scores: MLX's fused attention.
        Variant("plain", _H, present=_QKV, outputs=()),
        Variant("bias", _H, present=_QKV + ("bias",), shapes=[_Q, _K, _V, [24]], outputs=()),
        Variant("bias_presents_qk", _H, present=_QKV + ("bias",), shapes=[_Q, _K, _V, [24]]),
        Variant("value_hidden_12", _H, present=_QKV + ("bias",), shapes=[_Q, _K, [2, 4, 12], [28]],
                outputs=("qk",)),
        Variant("mask_end", _H, present=_QKV + ("key_padding_mask",), shapes=[_Q, _K, _V, [2]],
                outputs=(), domains={"key_padding_mask": _ends(4)}),
        _rep(Variant("mask_end_beyond", _H, present=_QKV + ("key_padding_mask",), shapes=[_Q, _K, _V, [2]],
                     outputs=("qk",), domains={"key_padding_mask": _ints([7, 2])})),
        # [3B + 2]: ORT reads the first B entries as end positions.
        _rep(Variant("mask_3b_plus_2", _H, present=_QKV + ("key_padding_mask",), shapes=[_Q, _K, _V, [8]],
                     outputs=(), domains={"key_padding_mask": _ints([3, 1, 0, 2, 4, 4, 9, -1])})),
        Variant("mask_keys", _H, present=_QKV + ("key_padding_mask",), shapes=[_Q, _K, _V, [2, 4]],
                outputs=("qk",), domains={"key_padding_mask": _bits()}),
        _rep(Variant("mask_keys_row_masked", _H, present=_QKV + ("key_padding_mask",),
                     shapes=[_Q, _K, _V, [2, 4]], outputs=(),
                     domains={"key_padding_mask": _bits(full_rows=(1,))})),
        _rep(Variant("mask_keys_values", _H, present=_QKV + ("key_padding_mask",), shapes=[_Q, _K, _V, [2, 4]],
                     outputs=(), domains={"key_padding_mask": _ints([[1, 2, -1, 0], [0, 3, 1, -5]])})),
        Variant("mask_positions", _H, present=_QKV + ("key_padding_mask",), shapes=[_Q, _K, _V, [2, 3, 4]],
                outputs=(), domains={"key_padding_mask": _bits()}),
        Variant("attention_bias", _H, present=_QKV + ("attention_bias",), shapes=[_Q, _K, _V, [2, 2, 3, 4]],
                outputs=("qk",)),
        _rep(Variant("attention_bias_1n", _H, present=_QKV + ("attention_bias",), shapes=[_Q, _K, _V, [1, 2, 3, 4]],
                     outputs=())),
        _rep(Variant("attention_bias_b1", _H, present=_QKV + ("attention_bias",), shapes=[_Q, _K, _V, [2, 1, 3, 4]],
                     outputs=())),
        _rep(Variant("attention_bias_11_mask", dict(_H, mask_filter_value=-50.0),
                     present=_QKV + ("key_padding_mask", "attention_bias"),
                     shapes=[_Q, _K, _V, [2, 4], [1, 1, 3, 4]], outputs=("qk",),
                     domains={"key_padding_mask": _bits()})),
        # Causal self-attention: MLX's fused causal attention.
        Variant("unidirectional", dict(_H, unidirectional=1), present=_QKV, shapes=[_Q, _Q, _Q], outputs=()),
        # Causal cross-attention (3 queries, 4 keys): ORT aligns to the first key and leaves the
        # last query row unmasked.
        Variant("unidirectional_cross", dict(_H, unidirectional=1), present=_QKV, outputs=("qk",)),
        _rep(Variant("unidirectional_mask", dict(_H, unidirectional=1), present=_QKV + ("key_padding_mask",),
                     shapes=[_Q, _K, _V, [2, 4]], outputs=(), domains={"key_padding_mask": _bits()})),
        Variant("scale", dict(_H, scale=0.3), present=_QKV, outputs=()),
        _rep(Variant("scale_mask_filter_value", dict(_H, scale=0.7, mask_filter_value=-3.0),
                     present=_QKV + ("key_padding_mask",), shapes=[_Q, _K, _V, [2, 4]], outputs=("qk",),
                     domains={"key_padding_mask": _bits(0.5)})),
        # Past keys and values (P = 2), concatenated into the present outputs.
        Variant("past", _H, present=_QKV + ("past_key", "past_value"),
                shapes=[_Q, [2, 3, 8], [2, 3, 8], [2, 2, 2, 4], [2, 2, 2, 4]], outputs=_PRESENT),
        _rep(Variant("past_causal_mask_qk", dict(_H, unidirectional=1),
                     present=_QKV + ("bias", "key_padding_mask", "past_key", "past_value"),
                     shapes=[_Q, [2, 3, 8], [2, 3, 8], [24], [2, 5], [2, 2, 2, 4], [2, 2, 2, 4]],
                     domains={"key_padding_mask": _bits()})),
        Variant("decode", dict(_H, unidirectional=1),
                present=_QKV + ("bias", "key_padding_mask", "past_key", "past_value"),
                shapes=[[2, 1, 8], [2, 1, 8], [2, 1, 8], [24], [2], [2, 2, 4, 4], [2, 2, 4, 4]],
                outputs=_PRESENT, domains={"key_padding_mask": _ends(5)}),
        # Keys and values already split into heads (cross-attention): the bias reaches Q only.
        Variant("bnsh", _H, present=_QKV + ("bias",), shapes=[_Q, [2, 2, 4, 4], [2, 2, 4, 4], [24]]),
        _rep(Variant("bnsh_plain", _H, present=_QKV, shapes=[_Q, [2, 2, 4, 4], [2, 2, 4, 4]], outputs=())),
        _rep(Variant("bnsh_past", _H, present=_QKV + ("past_key", "past_value"),
                     shapes=[_Q, [2, 2, 4, 4], [2, 2, 4, 4], [2, 2, 2, 4], [2, 2, 2, 4]], outputs=_PRESENT)),
        # No key positions: ORT's output is zeros.
        _rep(Variant("no_keys", _H, present=_QKV, shapes=[_Q, [2, 0, 8], [2, 0, 8]])),
    ],
)
