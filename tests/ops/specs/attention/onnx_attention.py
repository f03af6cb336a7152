"""ai.onnx Attention (opsets 23 and 24): 3-D and 4-D inputs, grouped heads, bool and float
masks (fully masked rows included), causal masking aligned as ORT aligns it, past key/value
caches, scale, soft cap, every qk_matmul_output_mode and opset 24's nonpad_kv_seqlen.

ORT's CPU EP is the oracle; the numpy reference repeats its semantics (masks added as the
type's lowest value, a row whose every key is masked is all zeros) for bfloat16, which ORT's
CPU EP has no kernel for. NaN/inf rows: tests/ep/test_attention_edges.py.
"""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep, round_to

_LOWEST = {"float": float(np.finfo(np.float32).min), "float16": -65504.0, "bfloat16": -3.3895313892515355e38}


def _heads(x, n):
    b, s, hidden = x.shape
    return x.reshape(b, s, n, hidden // n).transpose(0, 2, 1, 3)


def _attention(xs, a):
    q, k, v, mask, past_k, past_v, nonpad = (list(xs) + [None] * 7)[:7]
    rank3 = q.ndim == 3
    if rank3:
        q, k, v = _heads(q, a["q_num_heads"]), _heads(k, a["kv_num_heads"]), _heads(v, a["kv_num_heads"])
    if past_k is not None:
        k = np.concatenate([past_k, k], axis=2)
        v = np.concatenate([past_v, v], axis=2)
    b, hq, sq, d = q.shape
    hkv, total = k.shape[1], k.shape[2]
    past = 0 if past_k is None else past_k.shape[2]
    group = hq // hkv
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = a.get("scale", 1.0 / np.sqrt(d))
    scores = scale * (q @ kk.transpose(0, 1, 3, 2))
    raw = scores
    cap = a.get("softcap", 0.0)
    if cap > 0:
        scores = cap * np.tanh(scores / cap)
    capped = scores
    fill = _LOWEST["float"]
    # ORT's additive mask: a bool mask as 0 / lowest, a float mask as given, the causal
    # triangle written over it as lowest; nonpad_kv_seqlen then writes lowest over the scores.
    additive = None
    if mask is not None:
        additive = np.where(mask, 0.0, fill) if mask.dtype == bool else mask.astype(np.float64)
    if a.get("is_causal", 0) == 1 and not (sq == 1 and past > 0):
        # Aligned to the past, or with nonpad_kv_seqlen to the end of each entry's valid keys.
        offset = past if nonpad is None else (nonpad - sq)[:, None, None, None]
        causal = np.arange(total)[None, :] <= np.arange(sq)[:, None] + offset
        additive = np.where(causal, 0.0 if additive is None else additive, fill)
    hidden = np.zeros((1, 1, sq, total), bool)
    if additive is not None:
        scores = scores + additive
        hidden = hidden | (additive <= fill)
    if nonpad is not None:
        past_end = np.arange(total)[None, None, None, :] >= nonpad[:, None, None, None]
        scores = np.where(past_end, fill, scores)
        hidden = hidden | past_end
    # A row whose every key is masked is all zeros whatever its scores; others a plain softmax.
    dead = hidden.all(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = np.where(dead, 0.0, e / e.sum(axis=-1, keepdims=True))
    y = probs @ vv
    if rank3:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    qk = [raw, capped, scores, probs][a.get("qk_matmul_output_mode", 0)]
    return [y, k, v, qk]


def _bool_mask(dtype, shape, rng, dtypes):
    """Random keep-mask with the first query row fully masked."""
    m = rng.random(shape) < 0.7
    m[..., 0, :] = False
    return m


def _float_mask(dtype, shape, rng, dtypes):
    """Additive mask: small values, some -inf, the last query row all -inf."""
    m = rng.uniform(-1, 1, shape)
    m[rng.random(shape) < 0.25] = -np.inf
    m[..., -1, :] = -np.inf
    return round_to(m, dtype)


def _lengths(total):
    def make(dtype, shape, rng, dtypes):
        picks = [0, total, 1] + list(rng.integers(0, total, size=max(shape[0], 3)))
        return np.array(picks[: shape[0]], dtype=np.int64)

    return make


def _no_mask(d):
    """No mask: one case per T (the representative combination has a float U)."""
    return d["U"] == d["T"]


def _bool(d):
    return d["U"] == "bool"


def _bool_f32(d):
    """A bool-mask variant on float32 only (the representative combination has a float U)."""
    return d["U"] == "bool" and d["T"] == "float"


def _typed_mask(d):
    return d["U"] == d["T"]


# 4-D shapes: batch 2, Q heads 4 (or 2), KV heads 2, q length 3, kv length 5, head size 8.
Q4, K4, V4 = [2, 4, 3, 8], [2, 2, 5, 8], [2, 2, 5, 6]
_QKV = [Q4, K4, V4]
_PAST = [[2, 2, 4, 8], [2, 2, 4, 6]]  # past length 4: total 9
_KV = ("past_key", "past_value")


def _variants(nonpad: bool):
    both = ("Y", "present_key", "present_value")
    out = [
        Variant("default", {}, present=(), outputs=(), shapes=[[2, 2, 3, 8], [2, 2, 5, 8], [2, 2, 5, 8]], when=_no_mask),
        Variant("gqa_causal", {"is_causal": 1}, present=(), outputs=(), shapes=_QKV, when=_no_mask),
        Variant("causal_square", {"is_causal": 1}, present=(), outputs=(), shapes=[[2, 4, 5, 8], K4, V4], when=_no_mask),
        Variant("bool_mask", {}, present=("attn_mask",), outputs=(), shapes=_QKV + [[3, 5]],
                when=_bool, domains={"attn_mask": _bool_mask}),
        Variant("float_mask", {}, present=("attn_mask",), outputs=(), shapes=_QKV + [[2, 1, 3, 5]],
                when=_typed_mask, domains={"attn_mask": _float_mask}),
        Variant("bool_mask_3d_causal", {"is_causal": 1}, present=("attn_mask",), outputs=(),
                shapes=_QKV + [[4, 3, 5]], when=_bool_f32, domains={"attn_mask": _bool_mask}),
        Variant("bool_mask_4d_causal_scale", {"is_causal": 1, "scale": 0.3}, present=("attn_mask",), outputs=(),
                shapes=[[2, 4, 5, 8], K4, V4, [2, 4, 5, 5]], when=_bool_f32),
        Variant("past_causal", {"is_causal": 1}, present=_KV, outputs=("present_key", "present_value"),
                shapes=_QKV + _PAST, when=_no_mask),
        _rep(Variant("past_decode", {"is_causal": 1}, present=_KV, outputs=("present_key", "present_value"),
                     shapes=[[2, 4, 1, 8], K4, V4] + _PAST, when=_no_mask)),
        _rep(Variant("past_float_mask", {}, present=("attn_mask",) + _KV, outputs=("present_key", "present_value"),
                     shapes=_QKV + [[2, 4, 3, 9]] + _PAST, when=_typed_mask)),
        Variant("3d_causal", {"is_causal": 1, "q_num_heads": 4, "kv_num_heads": 2}, present=(), outputs=(),
                shapes=[[2, 3, 32], [2, 5, 16], [2, 5, 12]], when=_no_mask),
        Variant("3d_past_bool_mask", {"q_num_heads": 4, "kv_num_heads": 2}, present=("attn_mask",) + _KV,
                outputs=("present_key", "present_value"),
                shapes=[[2, 3, 32], [2, 5, 16], [2, 5, 12], [3, 9]] + _PAST, when=_bool_f32,
                domains={"attn_mask": _bool_mask}),
        Variant("softcap_float_mask", {"softcap": 2.0}, present=("attn_mask",), outputs=(), shapes=_QKV + [[3, 5]],
                when=_typed_mask, domains={"attn_mask": _float_mask}),
        _rep(Variant("softmax_precision", {"softmax_precision": 1, "scale": 0.5}, present=(), outputs=(),
                     shapes=_QKV, when=_no_mask)),
    ]
    for mode in range(4):
        out.append(_rep(Variant(f"qk_mode{mode}", {"qk_matmul_output_mode": mode, "softcap": 1.5, "is_causal": 1},
                                present=("attn_mask",), outputs=("qk_matmul_output",), shapes=_QKV + [[2, 4, 3, 5]],
                                when=_typed_mask, domains={"attn_mask": _float_mask})))
    out.append(Variant("qk_mode3_bool", {"qk_matmul_output_mode": 3}, present=("attn_mask",) + _KV,
                       outputs=both[1:] + ("qk_matmul_output",), shapes=_QKV + [[3, 9]] + _PAST,
                       when=lambda d: _bool(d) and d["T"] != "bfloat16", domains={"attn_mask": _bool_mask}))
    if nonpad:
        out += [
            Variant("nonpad", {}, present=("nonpad_kv_seqlen",), outputs=(), shapes=_QKV + [[2]],
                    when=_no_mask, domains={"nonpad_kv_seqlen": _lengths(5)}),
            Variant("nonpad_causal_bool_mask", {"is_causal": 1}, present=("attn_mask", "nonpad_kv_seqlen"),
                    outputs=(), shapes=_QKV + [[3, 5], [2]], when=_bool,
                    domains={"nonpad_kv_seqlen": _lengths(5)}),
            _rep(Variant("nonpad_softcap_qk", {"softcap": 1.0, "qk_matmul_output_mode": 3},
                         present=("attn_mask", "nonpad_kv_seqlen"), outputs=("qk_matmul_output",),
                         shapes=_QKV + [[3, 5], [2]], when=_typed_mask,
                         domains={"nonpad_kv_seqlen": _lengths(5)})),
        ]
    return out


_DYNAMIC = [[[2, 2, 3, 8], [2, 2, 5, 8], [2, 2, 5, 8]], [[1, 2, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8]],
            [[3, 2, 1, 8], [3, 2, 2, 8], [3, 2, 2, 8]]]


def _spec(nonpad: bool) -> OpSpec:
    return OpSpec(
        ref=_attention, tolerance_scale=4.0, variants=_variants(nonpad),
        combos=lambda d: d["U"] == "bool" or d["U"] == d["T"],
        scheme={"basic": [[2, 2, 3, 8], [2, 2, 5, 8], [2, 2, 5, 8]], "dynamic": _DYNAMIC},
    )


ATTENTION_23 = _spec(nonpad=False)
ATTENTION_24 = _spec(nonpad=True)
# Opset 24's entry has the nonpad_kv_seqlen input, and variants for it.
SPECS[("", "Attention")] = lambda entry: ATTENTION_24 if entry.since >= 24 else ATTENTION_23
