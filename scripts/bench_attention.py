"""Benchmark: fp16 attention as LLM decoders run it, MLX EP vs ORT's CPU EP vs the same call
written directly against mlx.core (the ceiling), median of warm runs in one process.

Cases: com.microsoft GroupQueryAttention (rotary inside, what onnxruntime-genai's builder emits)
at prefill (4 x 2048 tokens, no past) and one-token decode over a 4k shared KV buffer, and
ai.onnx Attention-23 (4-D, causal) at prefill. 32 query heads, 8 key/value heads, head size 128.
Each ORT run hands host tensors in and takes host tensors out; the direct-MLX run does the same
(numpy in, numpy out), so the ratios compare the same boundary.

Usage: bench_attention.py [--quick] [--runs R] [--cpu-runs R]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from bench_models import median_ms, ort_session  # noqa: E402

ROPE_BASE = 10000.0


@dataclass
class Case:
    name: str
    model: bytes
    feeds: dict[str, np.ndarray]
    direct: Callable[[], Callable[..., object]]  # builds f(*feeds as mx arrays) -> output 0


def _model(node, inputs, outputs, inits, domain_opsets) -> bytes:
    graph = helper.make_graph([node], "attention", inputs, outputs, inits)
    opsets = [helper.make_opsetid(d, v) for d, v in domain_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _rope_caches(context: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / ROPE_BASE ** (np.arange(0, head, 2, dtype=np.float64) / head)
    angles = np.outer(np.arange(context, dtype=np.float64), inv_freq)
    return np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)


def gqa(batch: int, new: int, context: int, heads: int = 32, kv_heads: int = 8, head: int = 128) -> Case:
    """GroupQueryAttention with do_rotary over a shared [B, kv, context, head] buffer holding
    `context - new` past rows per sequence (0: a prefill)."""
    rng = np.random.default_rng(0)
    f16 = TensorProto.FLOAT16
    past_len = context - new
    cos, sin = _rope_caches(context, head)
    scale = 1.0 / math.sqrt(head)
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total_len", "cos", "sin"],
        ["out", "present_key", "present_value"], domain="com.microsoft",
        num_heads=heads, kv_num_heads=kv_heads, scale=scale, do_rotary=1, rotary_interleaved=0, local_window_size=-1)
    buffer = [batch, kv_heads, context, head]
    inputs = [helper.make_tensor_value_info("q", f16, [batch, new, heads * head]),
              helper.make_tensor_value_info("k", f16, [batch, new, kv_heads * head]),
              helper.make_tensor_value_info("v", f16, [batch, new, kv_heads * head]),
              helper.make_tensor_value_info("past_key", f16, buffer),
              helper.make_tensor_value_info("past_value", f16, buffer),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [batch]),
              helper.make_tensor_value_info("total_len", TensorProto.INT32, [])]
    outputs = [helper.make_tensor_value_info("out", f16, [batch, new, heads * head]),
               helper.make_tensor_value_info("present_key", f16, buffer),
               helper.make_tensor_value_info("present_value", f16, buffer)]
    inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    model = _model(node, inputs, outputs, inits, [("", 21), ("com.microsoft", 1)])
    past = np.zeros(buffer, np.float16)
    past[:, :, :past_len] = rng.standard_normal((batch, kv_heads, past_len, head)).astype(np.float16)
    feeds = {"q": rng.standard_normal((batch, new, heads * head)).astype(np.float16),
             "k": rng.standard_normal((batch, new, kv_heads * head)).astype(np.float16),
             "v": rng.standard_normal((batch, new, kv_heads * head)).astype(np.float16),
             "past_key": past, "past_value": past.copy(),
             "seqlens_k": np.full([batch], context - 1, np.int32), "total_len": np.array(context, np.int32)}

    def direct():
        import mlx.core as mx

        def heads_first(x, n):
            return x.reshape(batch, new, n, head).transpose(0, 2, 1, 3)

        def step(q, k, v, past_key, past_value, seqlens_k, total_len):
            q = mx.fast.rope(heads_first(q, heads), head, traditional=False, base=ROPE_BASE, scale=1.0, offset=past_len)
            k = mx.fast.rope(heads_first(k, kv_heads), head, traditional=False, base=ROPE_BASE, scale=1.0, offset=past_len)
            v = heads_first(v, kv_heads)
            past_key[:, :, past_len:] = k
            past_value[:, :, past_len:] = v
            mask = "causal" if new > 1 else None
            out = mx.fast.scaled_dot_product_attention(q, past_key, past_value, scale=scale, mask=mask)
            return out.transpose(0, 2, 1, 3).reshape(batch, new, heads * head), past_key, past_value

        return step

    phase = f"prefill {batch}x{new}" if past_len == 0 else f"decode {batch}x{new} over {context}"
    return Case(f"GroupQueryAttention fp16, rotary, {phase}", model, feeds, direct)


def onnx_attention(batch: int, seq: int, heads: int = 32, kv_heads: int = 8, head: int = 128) -> Case:
    """ai.onnx Attention-23, 4-D [B, heads, S, head] operands, is_causal."""
    rng = np.random.default_rng(1)
    f16 = TensorProto.FLOAT16
    node = helper.make_node("Attention", ["q", "k", "v"], ["out"], is_causal=1)
    shapes = {"q": [batch, heads, seq, head], "k": [batch, kv_heads, seq, head], "v": [batch, kv_heads, seq, head]}
    inputs = [helper.make_tensor_value_info(n, f16, s) for n, s in shapes.items()]
    outputs = [helper.make_tensor_value_info("out", f16, [batch, heads, seq, head])]
    model = _model(node, inputs, outputs, [], [("", 23)])
    feeds = {n: rng.standard_normal(s).astype(np.float16) for n, s in shapes.items()}

    def direct():
        import mlx.core as mx

        return lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(head), mask="causal")

    return Case(f"Attention-23 fp16, causal, prefill {batch}x{seq}", model, feeds, direct)


def measure(case: Case, runs: int, cpu_runs: int) -> dict[str, float]:
    import mlx.core as mx

    r: dict[str, float] = {}
    cpu = ort_session(case.model, ["CPUExecutionProvider"])
    want = cpu.run(None, case.feeds)[0].astype(np.float32)
    r["cpu"] = median_ms(lambda: cpu.run(None, case.feeds), cpu_runs)
    session = ort_session(case.model, mlx_ep.providers())
    assert session.get_providers()[0] == mlx_ep.EP_NAME
    got = session.run(None, case.feeds)[0].astype(np.float32)
    r["diff"] = float(np.abs(got - want).max())
    r["ep"] = median_ms(lambda: session.run(None, case.feeds), runs)
    f = mx.compile(case.direct())

    def direct_run():
        # Same boundary as the EP: every input from the host, every output (presents too) back.
        outs = f(*(mx.array(v) for v in case.feeds.values()))
        outs = outs if isinstance(outs, tuple) else (outs,)
        return [np.array(o) for o in outs][0]

    # The ceiling must compute the same thing: its answer is checked against ORT's as well.
    r["direct diff"] = float(np.abs(direct_run().astype(np.float32) - want).max())
    r["direct"] = median_ms(direct_run, runs)
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run on the CPU backend)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cpu-runs", type=int, default=5, help="ORT's CPU EP is slow at prefill: fewer runs")
    args = parser.parse_args()
    mlx_ep.register_execution_provider_library()
    if args.quick:
        cases = [gqa(2, 64, 64, 8, 2, 64), gqa(1, 1, 256, 8, 2, 64), onnx_attention(2, 64, 8, 2, 64)]
    else:
        cases = [gqa(4, 2048, 2048), gqa(1, 1, 4096), onnx_attention(4, 2048)]
    import mlx.core as mx

    print(f"{platform.machine()}, {os.cpu_count()} cores; ORT {ort.__version__}, MLX {mx.__version__} "
          f"({mx.default_device()}); median of {args.runs} warm runs ({args.cpu_runs} on ORT's CPU EP), ms")
    print("| case | ORT CPU EP | MLX EP | direct MLX | CPU / MLX EP | MLX EP / direct | max diff vs CPU: EP, direct |")
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        try:
            r = measure(case, args.runs, args.cpu_runs)
        except Exception as error:  # noqa: BLE001 - one case failing (e.g. an ORT without the op) must not hide the rest
            print(f"| {case.name} | failed: {str(error).splitlines()[0][:200]} |||||", flush=True)
            continue
        print(f"| {case.name} | {r['cpu']:.2f} | {r['ep']:.2f} | {r['direct']:.2f} | {r['cpu'] / r['ep']:.1f}x | "
              f"{r['ep'] / r['direct']:.2f}x | {r['diff']:.1e}, {r['direct diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
