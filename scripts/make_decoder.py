"""Write a Llama-shaped decoder the way onnxruntime-genai's model builder lays one out, with random
weights: no torch, no download.

The graph has the builder's structure and input/output names, so genai runs the folder as it
runs a built model: token embedding (Gather, or GatherBlockQuantized when int4), per layer
SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, Q/K/V projections into
com.microsoft GroupQueryAttention (rotary inside, cos/sin caches, seqlens_k = ReduceSum(mask) - 1,
total_sequence_length = Shape(mask)[1]), SiLU as Sigmoid * Mul, and the LM head. Projections are
MatMul (float) or com.microsoft MatMulNBits (int4, block 32, no zero points, accuracy_level 4:
what the builder emits for `-p int4 -e cpu`).

With --tied (int4 only) the embedding and the LM head share one quantized table, as the
builder writes tied embeddings: the LM head's MatMulNBits weight [vocab, hidden/32, 16] and
scales also feed the embedding's GatherBlockQuantized, through a Reshape of the weight to
[vocab, hidden/2] (ORT's constant folding turns that Reshape into a second initializer with the
same bytes, which the EP holds once).

The folder: model.onnx (+ model.onnx.data when large), genai_config.json, and a byte-level
tokenizer (tokenizer.json, tokenizer_config.json): any text encodes, one token per byte.

Usage: make_decoder.py OUT_DIR [--hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128
                                --vocab 320 --context 128 --dtype fp32|fp16 --quant none|int4
                                --tied]
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # ORT 1.31.1 refuses newer IR
OPSET = 21
BLOCK = 32  # MatMulNBits / GatherBlockQuantized block size the builder uses for int4
# The builder's names for the LM head's int4 weight and scales, which tied embeddings share.
TIED_WEIGHT = f"lm_head.MatMul.weight_Q4G{BLOCK}"
TIED_SCALES = "lm_head.MatMul.weight_scale"
ROPE_THETA = 10000.0
EPSILON = 1e-5


@dataclass(frozen=True)
class Shape:
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    vocab: int = 320
    context: int = 128

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads

    def check(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads or self.head_size % 2:
            raise SystemExit("hidden must split into heads of even size, heads into kv_heads groups")


def quantize_int4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 4-bit blocks along the last axis of ``w`` [rows, K] (K a multiple of BLOCK):
    packed uint8 [rows, K/BLOCK, BLOCK/2] (low nibble first) and float32 scales [rows, K/BLOCK];
    the value is ``scale * (q - 8)``, ORT's default zero point."""
    rows, k = w.shape
    blocks = w.reshape(rows, k // BLOCK, BLOCK).astype(np.float64)
    scale = np.abs(blocks).max(axis=-1) / 7.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(blocks / scale[..., None]) + 8, 0, 15).astype(np.uint8)
    packed = q[..., 0::2] | (q[..., 1::2] << 4)
    return packed, scale.astype(np.float32)


class Builder:
    def __init__(self, shape: Shape, dtype: str, quant: str, seed: int, tied: bool = False) -> None:
        if tied and quant != "int4":
            raise SystemExit("--tied shares the int4 LM head with the embedding: it needs --quant int4")
        self.s, self.quant, self.tied = shape, quant, tied
        self.np_dtype = np.float16 if dtype == "fp16" else np.float32
        self.onnx_dtype = TensorProto.FLOAT16 if dtype == "fp16" else TensorProto.FLOAT
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    # -- graph plumbing ---------------------------------------------------------------------
    def node(self, op: str, inputs: list[str], outputs: list[str], name: str, domain: str = "", **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain, **attrs))
        return outputs[0]

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def random(self, *shape: int, scale: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def linear(self, name: str, x: str, k: int, n: int) -> str:
        """``x @ W`` for a random W [k, n]: MatMul, or MatMulNBits over W's int4 blocks."""
        w = self.random(k, n, scale=1.0 / math.sqrt(k))
        if self.quant == "int4":
            packed, scales = quantize_int4(w.T)
            return self.matmul_nbits(name, x, self.init(f"{name}.qweight", packed),
                                     self.init(f"{name}.scales", scales.astype(self.np_dtype)), k, n)
        return self.node("MatMul", [x, self.init(f"{name}.weight", w.astype(self.np_dtype))], [f"{name}/output_0"], name)

    def matmul_nbits(self, name: str, x: str, qweight: str, scales: str, k: int, n: int) -> str:
        return self.node("MatMulNBits", [x, qweight, scales], [f"{name}/output_0"], name, domain="com.microsoft",
                         K=k, N=n, bits=4, block_size=BLOCK, accuracy_level=4)

    def norm_weight(self, name: str) -> str:
        return self.init(name, (1.0 + 0.1 * self.random(self.s.hidden, scale=1.0)).astype(self.np_dtype))

    # -- the decoder ------------------------------------------------------------------------
    def build(self) -> onnx.ModelProto:
        s = self.s
        d = s.head_size
        self.embedding()
        self.attention_inputs()
        inv_freq = 1.0 / ROPE_THETA ** (np.arange(0, d, 2, dtype=np.float64) / d)
        angles = np.outer(np.arange(s.context, dtype=np.float64), inv_freq)
        self.init("cos_cache", np.cos(angles).astype(self.np_dtype))
        self.init("sin_cache", np.sin(angles).astype(self.np_dtype))

        x, residual = "embeddings", None
        for i in range(s.layers):
            p = f"/model/layers.{i}"
            if residual is None:
                normed = self.node("SimplifiedLayerNormalization", [x, self.norm_weight(f"model.layers.{i}.input_layernorm.weight")],
                                   [f"{p}/input_layernorm/output_0"], f"{p}/input_layernorm/LayerNorm",
                                   axis=-1, epsilon=EPSILON, stash_type=1)
                residual = x
            else:
                outs = [f"{p}/input_layernorm/output_0", "", "", f"{p}/input_layernorm/output_3"]
                self.node("SkipSimplifiedLayerNormalization", [x, residual, self.norm_weight(f"model.layers.{i}.input_layernorm.weight")],
                          outs, f"{p}/input_layernorm/SkipLayerNorm", domain="com.microsoft", epsilon=EPSILON)
                normed, residual = outs[0], outs[3]
            q = self.linear(f"{p}/attn/q_proj/MatMul", normed, s.hidden, s.heads * d)
            k = self.linear(f"{p}/attn/k_proj/MatMul", normed, s.hidden, s.kv_heads * d)
            v = self.linear(f"{p}/attn/v_proj/MatMul", normed, s.hidden, s.kv_heads * d)
            attn = self.node(
                "GroupQueryAttention",
                [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", "seqlens_k", "total_seq_len",
                 "cos_cache", "sin_cache"],
                [f"{p}/attn/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"],
                f"{p}/attn/GroupQueryAttention", domain="com.microsoft",
                num_heads=s.heads, kv_num_heads=s.kv_heads, scale=1.0 / math.sqrt(d),
                do_rotary=1, rotary_interleaved=0, local_window_size=-1,
            )
            o = self.linear(f"{p}/attn/o_proj/MatMul", attn, s.heads * d, s.hidden)
            outs = [f"{p}/post_attention_layernorm/output_0", "", "", f"{p}/post_attention_layernorm/output_3"]
            self.node("SkipSimplifiedLayerNormalization", [o, residual, self.norm_weight(f"model.layers.{i}.post_attention_layernorm.weight")],
                      outs, f"{p}/post_attention_layernorm/SkipLayerNorm", domain="com.microsoft", epsilon=EPSILON)
            normed, residual = outs[0], outs[3]
            gate = self.linear(f"{p}/mlp/gate_proj/MatMul", normed, s.hidden, s.ffn)
            up = self.linear(f"{p}/mlp/up_proj/MatMul", normed, s.hidden, s.ffn)
            sig = self.node("Sigmoid", [gate], [f"{p}/mlp/act_fn/Sigmoid/output_0"], f"{p}/mlp/act_fn/Sigmoid")
            silu = self.node("Mul", [gate, sig], [f"{p}/mlp/act_fn/Mul/output_0"], f"{p}/mlp/act_fn/Mul")
            h = self.node("Mul", [silu, up], [f"{p}/mlp/Mul/output_0"], f"{p}/mlp/Mul")
            x = self.linear(f"{p}/mlp/down_proj/MatMul", h, s.ffn, s.hidden)

        outs = ["/model/norm/output_0", "", "", ""]
        self.node("SkipSimplifiedLayerNormalization", [x, residual, self.norm_weight("model.norm.weight")],
                  outs, "/model/norm/SkipLayerNorm", domain="com.microsoft", epsilon=EPSILON)
        if self.tied:
            logits = self.matmul_nbits("/lm_head/MatMul", outs[0], TIED_WEIGHT, TIED_SCALES, s.hidden, s.vocab)
        else:
            logits = self.linear("/lm_head/MatMul", outs[0], s.hidden, s.vocab)
        if self.np_dtype != np.float32:
            logits = self.node("Cast", [logits], ["logits_float"], "/lm_head/Cast", to=TensorProto.FLOAT)
        self.node("Identity", [logits], ["logits"], "/logits/Identity")
        return self.model()

    def embedding(self) -> None:
        s = self.s
        table = self.random(s.vocab, s.hidden, scale=1.0)
        if self.tied:
            packed, scales = quantize_int4(table)
            self.init(TIED_WEIGHT, packed)
            self.init(TIED_SCALES, scales.astype(self.np_dtype))
            rows = self.init(f"/model/constants/INT64/[{s.vocab}, {s.hidden // 2}]",
                             np.array([s.vocab, s.hidden // 2], dtype=np.int64))
            table_2d = self.node("Reshape", [TIED_WEIGHT, rows], ["/model/embed_tokens/Reshape/output_0"],
                                 "/model/embed_tokens/Reshape")
            self.node("GatherBlockQuantized", [table_2d, "input_ids", TIED_SCALES],
                      ["embeddings"], "/model/embed_tokens/GatherBlockQuantized", domain="com.microsoft",
                      gather_axis=0, quantize_axis=1, block_size=BLOCK, bits=4)
        elif self.quant == "int4":
            packed, scales = quantize_int4(table)
            self.node("GatherBlockQuantized",
                      [self.init("model.embed_tokens.qweight", packed.reshape(s.vocab, s.hidden // 2)), "input_ids",
                       self.init("model.embed_tokens.scales", scales.astype(self.np_dtype))],
                      ["embeddings"], "/model/embed_tokens/GatherBlockQuantized", domain="com.microsoft",
                      gather_axis=0, quantize_axis=1, block_size=BLOCK, bits=4)
        else:
            self.node("Gather", [self.init("model.embed_tokens.weight", table.astype(self.np_dtype)), "input_ids"],
                      ["embeddings"], "/model/embed_tokens/Gather")

    def attention_inputs(self) -> None:
        """seqlens_k = int32(ReduceSum(mask, 1) - 1), total_seq_len = int32(Shape(mask)[1])."""
        self.init("one_i64", np.array(1, dtype=np.int64))
        self.init("axis_1", np.array([1], dtype=np.int64))
        total = self.node("ReduceSum", ["attention_mask", "axis_1"], ["/model/attn_mask_reformat/ReduceSum/output_0"],
                          "/model/attn_mask_reformat/ReduceSum", keepdims=0)
        minus = self.node("Sub", [total, "one_i64"], ["/model/attn_mask_reformat/Sub/output_0"], "/model/attn_mask_reformat/Sub")
        self.node("Cast", [minus], ["seqlens_k"], "/model/attn_mask_reformat/Cast", to=TensorProto.INT32)
        shape = self.node("Shape", ["attention_mask"], ["/model/attn_mask_reformat/Shape/output_0"], "/model/attn_mask_reformat/Shape")
        length = self.node("Gather", [shape, "one_i64"], ["/model/attn_mask_reformat/Gather/output_0"],
                           "/model/attn_mask_reformat/Gather", axis=0)
        self.node("Cast", [length], ["total_seq_len"], "/model/attn_mask_reformat/Cast_1", to=TensorProto.INT32)

    def model(self) -> onnx.ModelProto:
        s = self.s
        kv = [self.onnx_dtype, ["batch_size", s.kv_heads, "past_sequence_length", s.head_size]]
        present = [self.onnx_dtype, ["batch_size", s.kv_heads, "total_sequence_length", s.head_size]]
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
                  helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])]
        outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", s.vocab])]
        for i in range(s.layers):
            for kind in ("key", "value"):
                inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", *kv))
                outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", *present))
        graph = helper.make_graph(self.nodes, "decoder", inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = IR_VERSION
        return model


def genai_config(s: Shape) -> dict:
    return {
        "model": {
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "context_length": s.context,
            "type": "llama", "vocab_size": s.vocab,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx", "head_size": s.head_size, "hidden_size": s.hidden,
                "num_attention_heads": s.heads, "num_hidden_layers": s.layers, "num_key_value_heads": s.kv_heads,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"},
            },
        },
        "search": {"do_sample": False, "early_stopping": True, "max_length": s.context, "min_length": 0,
                   "num_beams": 1, "num_return_sequences": 1, "past_present_share_buffer": True,
                   "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1, "top_p": 1.0,
                   "diversity_penalty": 0.0, "length_penalty": 1.0, "no_repeat_ngram_size": 0},
    }


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte value: printable Latin-1 bytes stand for
    themselves, the rest map to code points from 256 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def tokenizer(s: Shape) -> tuple[dict, dict]:
    """A byte-level BPE tokenizer with no merges (every byte one token, ids 3..258 after <unk>,
    <s>, </s>), in the HF tokenizers format genai's tokenizer reads; ids past 258 decode to
    nothing printable but are valid model outputs."""
    if s.vocab < 259:
        raise SystemExit("vocab must be at least 259 (3 special tokens and 256 bytes)")
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({c: 3 + i for i, c in enumerate(byte_symbols())})
    specials = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": specials, "normalizer": None,
           "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": []}}
    config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "add_bos_token": False, "model_max_length": s.context}
    return tok, config


def write(out: Path, shape: Shape, dtype: str = "fp32", quant: str = "none", seed: int = 0,
          tied: bool = False) -> Path:
    shape.check()
    out.mkdir(parents=True, exist_ok=True)
    model = Builder(shape, dtype, quant, seed, tied).build()
    large = model.ByteSize() > 1 << 30
    onnx.save_model(model, out / "model.onnx", save_as_external_data=large, location="model.onnx.data")
    (out / "genai_config.json").write_text(json.dumps(genai_config(shape), indent=2) + "\n")
    tok, tok_config = tokenizer(shape)
    (out / "tokenizer.json").write_text(json.dumps(tok) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    return out / "model.onnx"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    for field, default in Shape().__dict__.items():
        p.add_argument(f"--{field.replace('_', '-')}", type=int, default=default)
    p.add_argument("--dtype", choices=["fp32", "fp16"], default="fp32")
    p.add_argument("--quant", choices=["none", "int4"], default="none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tied", action="store_true", help="int4 embedding and LM head share one table")
    a = p.parse_args()
    shape = Shape(a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, a.context)
    print(write(a.out, shape, a.dtype, a.quant, a.seed, a.tied))


if __name__ == "__main__":
    main()
