"""scripts/make_decoder.py's graph in float64 numpy, over the model file's own initializers
(int4 blocks dequantised exactly: ``scale * (q - 8)`` in float64): the reference a quantized
decoder's logits are held to, since ORT's CPU EP at accuracy_level 4 quantizes activations to
int8 and so is not a reference itself.

One pass over the whole sequence (causal attention, no cache) gives the logits every prefill and
decode step produces for the same tokens.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import make_decoder  # noqa: E402


def unpack_int4(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """[rows, K/2] (or [rows, K/block, block/2]) low-nibble-first bytes and [rows, K/block]
    scales, no zero points (ORT's default 8): the float64 values [rows, K]."""
    rows = packed.shape[0]
    flat = packed.reshape(rows, -1)
    q = np.stack([flat & 0x0F, flat >> 4], axis=-1).reshape(rows, -1).astype(np.float64)
    block = q.shape[1] // scales.shape[1]
    return (q - 8.0) * np.repeat(scales.astype(np.float64), block, axis=1)


class Float64Decoder:
    def __init__(self, model_path: Path, shape: make_decoder.Shape) -> None:
        self.s = shape
        self.w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model_path)).graph.initializer}

    def weight(self, name: str) -> np.ndarray:
        """The [K, N] matrix a projection multiplies by."""
        if f"{name}.qweight" in self.w:
            return unpack_int4(self.w[f"{name}.qweight"], self.w[f"{name}.scales"]).T
        return self.w[f"{name}.weight"].astype(np.float64)

    def param(self, name: str) -> np.ndarray:
        return self.w[name].astype(np.float64)

    def embed(self, ids: np.ndarray) -> np.ndarray:
        if "model.embed_tokens.qweight" in self.w:
            table = self.w["model.embed_tokens.qweight"][ids]
            return unpack_int4(table, self.w["model.embed_tokens.scales"][ids])
        return self.param("model.embed_tokens.weight")[ids]

    @staticmethod
    def rms_norm(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + make_decoder.EPSILON) * gamma

    def rotary(self, x: np.ndarray) -> np.ndarray:
        """GroupQueryAttention's rotate-half rotation (rotary_interleaved=0) of x [T, heads, d] at
        positions 0..T-1, from the model's cos/sin caches."""
        t = x.shape[0]
        cos = self.param("cos_cache")[:t, None, :]
        sin = self.param("sin_cache")[:t, None, :]
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def attention(self, h: np.ndarray, prefix: str) -> np.ndarray:
        s, t = self.s, h.shape[0]
        d = s.head_size
        q = self.rotary((h @ self.weight(f"{prefix}/q_proj/MatMul")).reshape(t, s.heads, d))
        k = self.rotary((h @ self.weight(f"{prefix}/k_proj/MatMul")).reshape(t, s.kv_heads, d))
        v = (h @ self.weight(f"{prefix}/v_proj/MatMul")).reshape(t, s.kv_heads, d)
        group = s.heads // s.kv_heads
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        mixed = np.einsum("hqk,khd->qhd", probs, v).reshape(t, s.heads * d)
        return mixed @ self.weight(f"{prefix}/o_proj/MatMul")

    def mlp(self, h: np.ndarray, prefix: str) -> np.ndarray:
        gate = h @ self.weight(f"{prefix}/gate_proj/MatMul")
        up = h @ self.weight(f"{prefix}/up_proj/MatMul")
        return (gate / (1.0 + np.exp(-gate)) * up) @ self.weight(f"{prefix}/down_proj/MatMul")

    def logits(self, ids: np.ndarray) -> np.ndarray:
        """[T, vocab] logits of the token sequence ``ids`` [T]: row i is what the model predicts
        after token i."""
        x = self.embed(np.asarray(ids))
        residual = np.zeros_like(x)  # layer 0's SimplifiedLayerNormalization has no skip input
        for i in range(self.s.layers):
            p = f"/model/layers.{i}"
            residual = x + residual
            h = self.rms_norm(residual, self.param(f"model.layers.{i}.input_layernorm.weight"))
            residual = residual + self.attention(h, f"{p}/attn")
            h = self.rms_norm(residual, self.param(f"model.layers.{i}.post_attention_layernorm.weight"))
            x = self.mlp(h, f"{p}/mlp")
        final = self.rms_norm(x + residual, self.param("model.norm.weight"))
        return final @ self.weight("/lm_head/MatMul")
