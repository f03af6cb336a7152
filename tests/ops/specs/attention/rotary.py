"""RotaryEmbedding, ai.onnx (opset 23) and com.microsoft: 3-D and 4-D inputs, interleaved or
half rotation, partial rotary_embedding_dim, position ids as a [batch, sequence] matrix, as one
start position (com.microsoft), or absent with per-token caches (ai.onnx)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep


def _rotate(x, cos, sin, interleaved):
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(x.shape)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _apply(x, cos_rows, sin_rows, a, num_heads, head=None):
    """``cos_rows``/``sin_rows``: [B, S, rot/2]."""
    shape = x.shape
    if x.ndim == 3:
        head = head or shape[2] // num_heads
        x4 = x.reshape(shape[0], shape[1], shape[2] // head, head)
        cos, sin = cos_rows[:, :, None, :], sin_rows[:, :, None, :]
    else:
        x4 = x
        cos, sin = cos_rows[:, None, :, :], sin_rows[:, None, :, :]
    rot = a.get("rotary_embedding_dim", 0) or x4.shape[-1]
    out = x4.copy()
    out[..., :rot] = _rotate(x4[..., :rot], cos, sin, a.get("interleaved", 0) == 1)
    return out.reshape(shape)


def _onnx_rotary(xs, a):
    x, cos, sin, pos = (list(xs) + [None])[:4]
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    return _apply(x, cos, sin, a, a.get("num_heads", 0))


def _ms_rotary(xs, a):
    x, pos, cos, sin = xs
    b, s = (x.shape[0], x.shape[1]) if x.ndim == 3 else (x.shape[0], x.shape[2])
    if pos.size == 1:
        pos = np.broadcast_to(int(pos.reshape(-1)[0]) + np.arange(s), (b, s))
    head = None if x.ndim == 4 or a.get("num_heads", 0) > 0 else 2 * cos.shape[1]
    return _apply(x, cos[pos], sin[pos], a, a.get("num_heads", 0), head)


def _positions(high):
    def make(dtype, shape, rng, dtypes):
        return rng.integers(0, high, size=shape, endpoint=True).astype(np.int64)

    return make


_ROWS = 6  # cache rows: positions in [0, 5]
_POS = {"position_ids": _positions(_ROWS - 1)}


def _cache_domain():
    return {"cos_cache": "unit", "sin_cache": "unit", **_POS}


# ai.onnx: X, cos_cache, sin_cache, position_ids (as present).
SPECS[("", "RotaryEmbedding")] = OpSpec(
    ref=_onnx_rotary, tolerance_scale=2.0, domains=_cache_domain(),
    scheme={"basic": [[2, 3, 16], [_ROWS, 4], [_ROWS, 4], [2, 3]],
            "dynamic": [[[2, 3, 16], [_ROWS, 4], [_ROWS, 4], [2, 3]], [[1, 5, 16], [_ROWS, 4], [_ROWS, 4], [1, 5]],
                        [[3, 1, 16], [_ROWS, 4], [_ROWS, 4], [3, 1]]]},
    variants=[
        Variant("position_ids", {"num_heads": 2}),
        Variant("interleaved", {"num_heads": 2, "interleaved": 1}),
        Variant("4d", {}, shapes=[[2, 2, 3, 8], [_ROWS, 4], [_ROWS, 4], [2, 3]]),
        Variant("partial", {"num_heads": 2, "rotary_embedding_dim": 4}, shapes=[[2, 3, 16], [_ROWS, 2], [_ROWS, 2], [2, 3]]),
        _rep(Variant("partial_interleaved_4d", {"rotary_embedding_dim": 6, "interleaved": 1},
                     shapes=[[2, 2, 3, 8], [_ROWS, 3], [_ROWS, 3], [2, 3]])),
        Variant("no_position_ids", {"num_heads": 2}, present=(), shapes=[[2, 3, 16], [2, 3, 4], [2, 3, 4]]),
        _rep(Variant("no_position_ids_4d_partial_interleaved", {"rotary_embedding_dim": 4, "interleaved": 1},
                     present=(), shapes=[[2, 2, 3, 8], [2, 3, 2], [2, 3, 2]])),
    ],
)

# com.microsoft: input, position_ids, cos_cache, sin_cache.
SPECS[("com.microsoft", "RotaryEmbedding")] = OpSpec(
    ref=_ms_rotary, tolerance_scale=2.0, domains=_cache_domain(),
    scheme={"basic": [[2, 3, 16], [2, 3], [_ROWS, 4], [_ROWS, 4]],
            "dynamic": [[[2, 3, 16], [2, 3], [_ROWS, 4], [_ROWS, 4]], [[1, 5, 16], [1, 5], [_ROWS, 4], [_ROWS, 4]],
                        [[3, 1, 16], [3, 1], [_ROWS, 4], [_ROWS, 4]]]},
    variants=[
        Variant("position_ids", {"num_heads": 2}),
        Variant("head_from_cache", {"interleaved": 1}),
        Variant("start_position", {"num_heads": 2}, shapes=[[2, 3, 16], [1], [_ROWS, 4], [_ROWS, 4]],
                domains={"position_ids": _positions(_ROWS - 3)}),
        _rep(Variant("scalar_start_scale", {"scale": 0.5}, shapes=[[2, 3, 16], [], [_ROWS, 4], [_ROWS, 4]],
                     domains={"position_ids": _positions(_ROWS - 3)})),
        Variant("4d_interleaved", {"interleaved": 1}, shapes=[[2, 2, 3, 8], [2, 3], [_ROWS, 4], [_ROWS, 4]]),
        Variant("partial", {"num_heads": 2, "rotary_embedding_dim": 4}, shapes=[[2, 3, 16], [2, 3], [_ROWS, 2], [_ROWS, 2]]),
        _rep(Variant("partial_4d_interleaved", {"num_heads": 2, "rotary_embedding_dim": 6, "interleaved": 1},
                     shapes=[[2, 2, 3, 8], [1], [_ROWS, 3], [_ROWS, 3]], domains={"position_ids": _positions(_ROWS - 3)})),
    ],
)


def _stream_of_columns(section, layout, half):
    owner = np.zeros(half, dtype=np.int64)
    if layout == 1:
        for stream in (1, 2):
            owner[stream: min(section[stream] * 3, half): 3] = stream
    else:
        owner[:] = np.repeat(np.arange(3), section)[:half]
    return owner


def _m_rotary(xs, a):
    x, pos, cos, sin = xs
    half = cos.shape[1]
    owner = _stream_of_columns(a["mrope_section"], a.get("mrope_layout", 0), half)
    scale = a.get("scale", 1.0)

    def rows(cache):
        streams = np.stack([cache[pos[k]] for k in range(3)])  # [3, B, S, half]
        return np.stack([streams[owner[c], :, :, c] for c in range(half)], axis=-1) * scale

    return _apply(x, rows(cos), rows(sin), a, a.get("num_heads", 0))


# com.microsoft MRotaryEmbedding: input, position_ids [3, B, S], cos_cache, sin_cache.
SPECS[("com.microsoft", "MRotaryEmbedding")] = OpSpec(
    ref=_m_rotary, tolerance_scale=2.0, domains=_cache_domain(),
    scheme={"basic": [[2, 3, 16], [3, 2, 3], [_ROWS, 4], [_ROWS, 4]],
            "dynamic": [[[2, 3, 16], [3, 2, 3], [_ROWS, 4], [_ROWS, 4]], [[1, 5, 16], [3, 1, 5], [_ROWS, 4], [_ROWS, 4]],
                        [[3, 1, 16], [3, 3, 1], [_ROWS, 4], [_ROWS, 4]]]},
    variants=[
        Variant("sectioned", {"num_heads": 2, "mrope_section": [2, 1, 1]}),
        Variant("interleaved_layout", {"num_heads": 2, "mrope_section": [2, 1, 1], "mrope_layout": 1, "interleaved": 1}),
        Variant("4d_partial_scale", {"num_heads": 2, "rotary_embedding_dim": 4, "mrope_section": [1, 1, 0], "scale": 0.5},
                shapes=[[2, 2, 3, 8], [3, 2, 3], [_ROWS, 2], [_ROWS, 2]]),
        _rep(Variant("packed_longer_than_cache", {"num_heads": 2, "mrope_section": [1, 2, 1], "is_packed_batching": 1},
                     shapes=[[1, 8, 16], [3, 1, 8], [_ROWS, 4], [_ROWS, 4]])),
        _rep(Variant("4d_layout1_unit_sections", {"mrope_section": [0, 2, 2], "mrope_layout": 1},
                     shapes=[[2, 2, 3, 8], [3, 2, 3], [_ROWS, 4], [_ROWS, 4]])),
    ],
)
