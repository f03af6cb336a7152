"""com.microsoft GroupQueryAttention: prefill, decode with a growing past, ragged batches
(seqlens_k differing per row), the shared past/present buffer, packed QKV, kv_num_heads ratios
1, 2 and 4, rotary embedding (halves or interleaved, partial rotary dims, position_ids), local
windows, softcap, scale, smooth_softmax and head_sink, attention_bias, causal 0 and output_qk.

ORT's CPU EP is the oracle. total_sequence_length is an initializer (the entry reads it on the
host); seqlens_k, the rotary caches and position ids are fed, with values consistent with the
shapes. The numpy reference repeats ORT 1.31.1's semantics (checked in self-check mode): present
rows at each row's own offset with zeros after them, padded query rows of a ragged first prompt
seeing every valid key, and the two placements of the local window (ORT's float32 flash kernel
counts it from the query's position, its other path from the last visible key). output_qk is only
compared with equal row lengths: ORT leaves the columns past a shorter row uninitialised.
"""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep, round_to

_PORTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
          "sin_cache", "position_ids", "attention_bias", "head_sink"]


def _rotate(x, cos, sin, interleaved):
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def _gqa(xs, a):
    x = dict(zip(_PORTS, list(xs) + [None] * len(_PORTS)))
    query = x["query"]
    # float16 inputs are exactly representable in float16 (the harness feeds rounded values).
    fp16 = bool(np.all(query.astype(np.float16).astype(np.float64) == query))
    hq, hkv = a["num_heads"], a["kv_num_heads"]
    b_, s_, hidden = query.shape
    if x["key"] is None:
        d = hidden // (hq + 2 * hkv)
        q, k, v = query[..., :hq * d], query[..., hq * d:(hq + hkv) * d], query[..., (hq + hkv) * d:(hq + 2 * hkv) * d]
    else:
        d = hidden // hq
        q, k, v = query, x["key"], x["value"]
    heads = lambda t, n: t.reshape(b_, s_, n, d).transpose(0, 2, 1, 3)
    q, k, v = heads(q, hq), heads(k, hkv), heads(v, hkv)
    t = int(np.asarray(x["total_sequence_length"]).reshape(-1)[0])
    past_k, past_v = x["past_key"], x["past_value"]
    length = past_k.shape[2] if past_k is not None else 0
    p = max(t, length)
    total = np.asarray(x["seqlens_k"]).astype(np.int64) + 1
    first = s_ == t
    past = np.zeros(b_, np.int64) if first or past_k is None else total - s_
    if a.get("do_rotary", 0):
        if x["position_ids"] is not None:
            flat = np.asarray(x["position_ids"]).astype(np.int64).reshape(-1)
            pos = np.broadcast_to(flat[0] + np.arange(s_), (b_, s_)) if first else flat[: b_ * s_].reshape(b_, s_)
        elif first:
            pos = np.broadcast_to(np.arange(s_), (b_, s_))
        else:
            pos = (total - s_)[:, None] + np.arange(s_)[None]
        rd = x["cos_cache"].shape[1] * 2
        cos, sin = x["cos_cache"][pos][:, None], x["sin_cache"][pos][:, None]

        def rot(t_):
            r = np.concatenate([_rotate(t_[..., :rd], cos, sin, a.get("rotary_interleaved", 0)), t_[..., rd:]], -1)
            return round_to(r, "float16" if fp16 else "float").astype(np.float64)

        q, k = rot(q), rot(k)
    pk, pv = np.zeros((b_, hkv, p, d)), np.zeros((b_, hkv, p, d))
    for b in range(b_):
        o = past[b]
        pk[b, :, :o], pv[b, :, :o] = past_k[b, :, :o] if o else 0, past_v[b, :, :o] if o else 0
        pk[b, :, o:o + s_], pv[b, :, o:o + s_] = k[b], v[b]
    scale = a.get("scale", 0.0) or 1.0 / np.sqrt(d)
    g = hq // hkv
    scores = scale * q @ np.repeat(pk, g, axis=1).transpose(0, 1, 3, 2)
    softcap, lws = a.get("softcap", 0.0), a.get("local_window_size", -1)
    sink = x["head_sink"] is not None or a.get("smooth_softmax", 0)
    flash = not fp16 and not softcap and not sink and not a.get("qk_output", 0) and t > 1
    keep = np.zeros((b_, 1, s_, p), bool)
    j = np.arange(p)
    for b in range(b_):
        for s in range(s_):
            end = past[b] + s + 1 if a.get("causal", 1) else total[b]
            eff = min(end, total[b])
            lo = max((end if flash else eff) - lws, 0) if lws >= 0 else 0
            keep[b, 0, s] = (j >= lo) & (j < eff)
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    if x["attention_bias"] is not None:
        bias = x["attention_bias"]
        scores = scores + np.pad(bias, [(0, 0)] * 3 + [(0, p - bias.shape[3])])
    before = np.where(keep, scores, 0.0)
    sinks = None
    if x["head_sink"] is not None:
        sinks = np.asarray(x["head_sink"]).reshape(1, hq, 1, 1)
    elif a.get("smooth_softmax", 0):
        sinks = np.zeros((1, hq, 1, 1))
    seen = keep.any(-1, keepdims=True)
    m = np.where(keep, scores, -np.inf).max(-1, keepdims=True)
    m = np.where(seen, m, 0.0)
    if sinks is not None:
        m = np.maximum(m, sinks)
    e = np.where(keep, np.exp(scores - m), 0.0)
    den = e.sum(-1, keepdims=True) + (np.exp(sinks - m) if sinks is not None else 0.0)
    # ORT's kernels (float32 and float16; bfloat16 has none) never compute the scores outside a
    # row's window: its probabilities stay 0 there even when a NaN score makes the window's NaN.
    probs = np.where(keep, e / np.where(den == 0, 1.0, den), 0.0)
    out = (probs @ np.repeat(pv, g, axis=1)).transpose(0, 2, 1, 3).reshape(b_, s_, hq * d)
    res = [out, pk, pv]
    if a.get("qk_output", 0):
        res.append((before if a["qk_output"] == 1 else probs)[..., :t])
    return res


def _lengths(values):
    """seqlens_k: the given total lengths − 1 (cycled to the batch of the shape)."""
    def make(dtype, shape, rng, dtypes):
        return np.array([values[i % len(values)] - 1 for i in range(shape[0])], np.int32)
    return make


def _rotary(kind):
    def make(dtype, shape, rng, dtypes):
        rows, half = shape
        inv = 1.0 / (10000.0 ** (np.arange(half) / half))
        angle = np.arange(rows)[:, None] * inv[None]
        return round_to(np.cos(angle) if kind == "cos" else np.sin(angle), dtype)
    return make


def _positions(limit):
    def make(dtype, shape, rng, dtypes):
        return rng.integers(0, limit, size=shape).astype(np.int64)
    return make


def _variant(name, *, B=2, S=4, Hq=4, Hkv=2, D=16, past=0, T=None, lens=None, packed=False, rotary=0, pos=False,
             bias=None, sink=False, qk=0, attrs=None, rep=False):
    T = T if T is not None else past + S
    lens = lens or [T] * B
    shapes = [[B, S, (Hq + 2 * Hkv) * D]] if packed else [[B, S, Hq * D], [B, S, Hkv * D], [B, S, Hkv * D]]
    present = () if packed else ("key", "value")
    if past:
        shapes += [[B, Hkv, past, D], [B, Hkv, past, D]]
        present += ("past_key", "past_value")
    shapes.append([B])
    attrs = dict({"num_heads": Hq, "kv_num_heads": Hkv}, **(attrs or {}))
    if rotary:
        shapes += [[T + 4, rotary // 2], [T + 4, rotary // 2]]
        present += ("cos_cache", "sin_cache")
        attrs["do_rotary"] = 1
    if pos:
        shapes.append([B, S])
        present += ("position_ids",)
    if bias:
        shapes.append([B if bias == "batch" else 1, 1 if bias == "batch" else Hq, S, T])
        present += ("attention_bias",)
    if sink:
        shapes.append([Hq])
        present += ("head_sink",)
    if qk:
        attrs["qk_output"] = qk
    v = Variant(
        name, attrs, present=present, shapes=shapes,
        outputs=("present_key", "present_value") + (("output_qk",) if qk else ()),
        constants={"total_sequence_length": np.array(T, np.int32)},
        domains={"seqlens_k": _lengths(lens), "cos_cache": _rotary("cos"), "sin_cache": _rotary("sin"),
                 "position_ids": _positions(T)},
    )
    return _rep(v) if rep else v


_VARIANTS = [
    _variant("prefill"),
    _variant("prefill_ragged", lens=[4, 2]),
    _variant("prefill_packed", packed=True, Hkv=1, lens=[4, 3]),
    _variant("kv_heads_equal", Hkv=4),
    _variant("kv_heads_one", Hkv=1, lens=[3, 4]),
    _variant("prompt_over_past_buffer", past=6, T=4, lens=[4, 3]),
    _variant("decode", S=1, past=5),
    _variant("decode_ragged", S=1, past=5, lens=[6, 3]),
    _variant("decode_shared_buffer", S=1, past=8, T=6, lens=[6, 3]),
    _variant("decode_shared_buffer_full", S=1, past=8, T=8, lens=[8, 2]),
    _variant("decode_packed_ratio4", S=1, past=5, packed=True, Hkv=1, lens=[6, 4]),
    _variant("subsequent_prompt", B=1, S=3, past=4, T=7),
    _variant("subsequent_prompt_shared_buffer", B=1, S=3, past=10, T=7, lens=[6]),
    _variant("local_window", attrs={"local_window_size": 2}, lens=[4, 2]),
    _variant("local_window_one", attrs={"local_window_size": 1}, lens=[4, 1], rep=True),
    _variant("local_window_zero", attrs={"local_window_size": 0}, rep=True),
    _variant("local_window_decode", S=1, past=6, attrs={"local_window_size": 3}, lens=[7, 2]),
    _variant("local_window_softcap_ragged", attrs={"local_window_size": 2, "softcap": 5.0}, lens=[4, 2]),
    _variant("local_window_subsequent_prompt", B=1, S=3, past=4, T=7, attrs={"local_window_size": 2}),
    _variant("softcap", attrs={"softcap": 2.0}, lens=[4, 3]),
    _variant("scale", attrs={"scale": 0.3}),
    _variant("smooth_softmax", attrs={"smooth_softmax": 1}, lens=[4, 2]),
    _variant("head_sink", sink=True, S=1, past=5, lens=[6, 3]),
    _variant("attention_bias", bias="batch", lens=[4, 3]),
    _variant("attention_bias_heads_softcap", bias="heads", attrs={"softcap": 1.5}),
    _variant("attention_bias_shared_buffer", bias="batch", S=1, past=8, T=6, lens=[6, 4]),
    _variant("rotary", rotary=16),
    _variant("rotary_interleaved", rotary=16, attrs={"rotary_interleaved": 1}),
    _variant("rotary_partial", D=32, rotary=16, lens=[4, 3]),
    _variant("rotary_partial_interleaved", D=32, rotary=16, attrs={"rotary_interleaved": 1}),
    _variant("rotary_decode_ragged", rotary=16, S=1, past=5, lens=[6, 2]),
    _variant("rotary_position_ids", rotary=16, pos=True),
    _variant("rotary_position_ids_decode", rotary=16, pos=True, S=1, past=5),
    _variant("rotary_packed", rotary=16, packed=True),
    _variant("rotary_subsequent_prompt", rotary=16, B=1, S=3, past=4, T=7, attrs={"rotary_interleaved": 1}),
    _variant("qk_before_softmax", qk=1),
    _variant("qk_after_softmax", qk=2, attrs={"local_window_size": 2}),
    _variant("qk_before_softcap_decode", qk=1, S=1, past=5, attrs={"softcap": 2.0}),
    _variant("qk_after_bias_sink", qk=2, bias="heads", sink=True),
    _variant("non_causal", attrs={"causal": 0}, lens=[4, 2]),
    _variant("non_causal_decode", attrs={"causal": 0, "softcap": 3.0}, S=1, past=5, lens=[6, 3]),
    _variant("non_causal_subsequent_prompt", attrs={"causal": 0}, B=1, S=3, past=4, T=7),
]

_Q, _KV = [4, 4, 64], [4, 32]
SPECS[("com.microsoft", "GroupQueryAttention")] = OpSpec(
    ref=_gqa, tolerance_scale=2.0,
    scheme={
        "basic": _VARIANTS[0].shapes,
        # Batches of 2, 1 and 3 rows through one session (ragged lengths from the domain).
        "dynamic": [[[b, 4, 64], [b, 4, 32], [b, 4, 32], [b]] for b in (2, 1, 3)],
    },
    variants=_VARIANTS,
    note="total_sequence_length is an initializer; seqlens_k, caches and position ids are fed",
)
# The default variant's ragged lengths for the dynamic layout.
_VARIANTS[0].domains["seqlens_k"] = _lengths([4, 2, 3])
