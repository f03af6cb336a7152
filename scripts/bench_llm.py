"""Benchmark: a Llama-shaped decoder (scripts/make_decoder.py: fp16, int4 MatMulNBits +
GatherBlockQuantized, GroupQueryAttention with a shared KV buffer, as onnxruntime-genai's
builder emits) — prefill and one-token decode through plain ORT sessions (MLX EP vs ORT's CPU
EP), the same decoder written directly against mlx.core (the ceiling: same weights, MLX's
quantized_matmul / fast.rope / fast.scaled_dot_product_attention), and generation through
onnxruntime-genai's loop. Median of warm runs, one process.

Usage: bench_llm.py [--quick] [--model-dir DIR] [--runs R] [--cpu-runs R] [--skip-cpu] [--skip-genai]
                    [--loop-steps N]
The default shape is ~1B parameters (hidden 2048, 16 layers, 32/8 heads, ffn 8192, vocab 32k).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import make_decoder  # noqa: E402
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from bench_models import median_ms  # noqa: E402

FULL = make_decoder.Shape(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=32000, context=2304)
QUICK = make_decoder.Shape(hidden=128, layers=2, heads=4, kv_heads=2, ffn=256, vocab=512, context=160)


def feeds_for(shape: make_decoder.Shape, new: int, past: int, rng) -> dict[str, np.ndarray]:
    """A step of `new` tokens after `past` cached ones, genai's shared-buffer layout."""
    buffer = (1, shape.kv_heads, shape.context, shape.head_size)
    feeds = {"input_ids": rng.integers(3, shape.vocab, size=(1, new)).astype(np.int64),
             "attention_mask": np.ones((1, past + new), np.int64)}
    for i in range(shape.layers):
        for kind in ("key", "value"):
            cache = np.zeros(buffer, np.float16)
            cache[:, :, :past] = (rng.standard_normal((1, shape.kv_heads, past, shape.head_size)) * 0.5).astype(np.float16)
            feeds[f"past_key_values.{i}.{kind}"] = cache
    return feeds


class DirectDecoder:
    """The decoder in mlx.core over the model file's own int4 weights (ORT's packing viewed as
    MLX's: on little-endian hosts the bytes are the same nibbles in the same order)."""

    def __init__(self, model_path: Path, shape: make_decoder.Shape) -> None:
        import mlx.core as mx

        self.mx, self.s = mx, shape
        inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model_path)).graph.initializer}
        self.w = inits
        self.layers = []
        for i in range(shape.layers):
            p = f"/model/layers.{i}"
            self.layers.append({
                "ln1": mx.array(inits[f"model.layers.{i}.input_layernorm.weight"]),
                "ln2": mx.array(inits[f"model.layers.{i}.post_attention_layernorm.weight"]),
                **{name: self.qweight(f"{p}/{path}/MatMul") for name, path in
                   (("q", "attn/q_proj"), ("k", "attn/k_proj"), ("v", "attn/v_proj"), ("o", "attn/o_proj"),
                    ("gate", "mlp/gate_proj"), ("up", "mlp/up_proj"), ("down", "mlp/down_proj"))},
            })
        self.norm = mx.array(inits["model.norm.weight"])
        self.head = self.qweight("/lm_head/MatMul")
        table = inits["model.embed_tokens.qweight"]
        self.embed_w = mx.array(np.ascontiguousarray(table).view(np.uint32))
        self.embed_s = mx.array(inits["model.embed_tokens.scales"])
        self.embed_b = -8 * self.embed_s

    def qweight(self, name: str):
        mx = self.mx
        packed = self.w[f"{name}.qweight"]
        n = packed.shape[0]
        w = mx.array(np.ascontiguousarray(packed.reshape(n, -1)).view(np.uint32))
        scales = mx.array(self.w[f"{name}.scales"])
        return w, scales, -8 * scales

    def linear(self, x, weight):
        w, scales, biases = weight
        return self.mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size=32, bits=4)

    def step(self, ids, caches, offset: int):
        """Logits of `ids` [1, n] at positions offset.., writing their K/V into `caches`."""
        mx, s = self.mx, self.s
        n, d = ids.shape[1], s.head_size
        x = mx.dequantize(self.embed_w[ids[0]], self.embed_s[ids[0]], self.embed_b[ids[0]], group_size=32, bits=4)[None]
        eps = make_decoder.EPSILON
        for layer, (kc, vc) in zip(self.layers, caches):
            h = mx.fast.rms_norm(x, layer["ln1"], eps)

            def heads(t, count):
                return t.reshape(1, n, count, d).transpose(0, 2, 1, 3)

            q = mx.fast.rope(heads(self.linear(h, layer["q"]), s.heads), d, traditional=False,
                             base=make_decoder.ROPE_THETA, scale=1.0, offset=offset)
            k = mx.fast.rope(heads(self.linear(h, layer["k"]), s.kv_heads), d, traditional=False,
                             base=make_decoder.ROPE_THETA, scale=1.0, offset=offset)
            kc[:, :, offset:offset + n] = k
            vc[:, :, offset:offset + n] = heads(self.linear(h, layer["v"]), s.kv_heads)
            keys, values = kc[:, :, :offset + n], vc[:, :, :offset + n]
            attn = mx.fast.scaled_dot_product_attention(q, keys, values, scale=1.0 / math.sqrt(d),
                                                        mask="causal" if n > 1 else None)
            x = x + self.linear(attn.transpose(0, 2, 1, 3).reshape(1, n, -1), layer["o"])
            h = mx.fast.rms_norm(x, layer["ln2"], eps)
            gate = self.linear(h, layer["gate"])
            x = x + self.linear(gate * mx.sigmoid(gate) * self.linear(h, layer["up"]), layer["down"])
        return self.linear(mx.fast.rms_norm(x, self.norm, eps), self.head).astype(mx.float32)

    def caches(self):
        mx, s = self.mx, self.s
        shape = (1, s.kv_heads, s.context, s.head_size)
        return [tuple(mx.array(np.zeros(shape, np.float16)) for _ in range(2)) for _ in range(s.layers)]


def shared_buffer_runner(session: ort.InferenceSession, feeds: dict[str, np.ndarray]):
    """A step as genai runs it: each past_key_values.N bound with present.N to one OrtValue (the
    EP then writes back only changed rows and keeps the cache on the device between steps)."""
    arrays = {name: value.copy() for name, value in feeds.items() if name.startswith("past_key_values.")}
    values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in arrays.items()}
    # genai hands the same KV OrtValues to every step: they are bound once (binding all 2 x
    # layers of them again each step cost this Python harness ~0.3 ms a step on the H200's host,
    # which neither EP nor genai's C++ loop pays).
    binding = session.io_binding()
    binding.bind_output("logits")  # first: get_outputs()[0]
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
        binding.bind_ortvalue_output(name.replace("past_key_values", "present"), value)

    def run():
        # The ids and the mask are new every step (the callers replace them in `feeds`).
        binding.bind_cpu_input("input_ids", feeds["input_ids"])
        binding.bind_cpu_input("attention_mask", feeds["attention_mask"])
        session.run_with_iobinding(binding)
        # The logits only: copy_outputs_to_cpu() would also copy every KV buffer (75 MB a step
        # for the 1B decoder), a cost of this harness, not of either EP.
        return binding.get_outputs()[0].numpy()

    run.keep = arrays  # the OrtValues borrow these arrays' memory
    return run


def bench_sessions(model: Path, shape, phases, runs: int, cpu_runs: int, skip_cpu: bool) -> list[dict]:
    rng = np.random.default_rng(0)
    mlx_session = ort.InferenceSession(str(model), providers=mlx_ep.providers())
    assert mlx_session.get_providers()[0] == mlx_ep.EP_NAME
    cpu_session = None if skip_cpu else ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    direct = DirectDecoder(model, shape)
    mx = direct.mx
    rows = []
    for name, new, past in phases:
        feeds = feeds_for(shape, new, past, rng)
        row = {"phase": name, "tokens": new}
        got = mlx_session.run(["logits"], feeds)[0]
        row["mlx"] = median_ms(lambda: mlx_session.run(None, feeds), runs)
        shared = shared_buffer_runner(mlx_session, feeds)
        row["shared_diff"] = float(np.abs(shared() - got).max())
        row["mlx shared"] = median_ms(shared, runs)
        if cpu_session is not None:
            want = cpu_session.run(["logits"], feeds)[0]
            row["diff"] = float(np.abs(got - want).max())
            row["cpu"] = median_ms(lambda: cpu_session.run(None, feeds), cpu_runs)
            row["cpu shared"] = median_ms(shared_buffer_runner(cpu_session, feeds), cpu_runs)
        caches = direct.caches()
        for (kc, vc), i in zip(caches, range(shape.layers)):
            kc[:, :, :past] = mx.array(feeds[f"past_key_values.{i}.key"][:, :, :past])
            vc[:, :, :past] = mx.array(feeds[f"past_key_values.{i}.value"][:, :, :past])
        ids = mx.array(feeds["input_ids"])

        def direct_run():
            logits = direct.step(ids, caches, past)
            mx.eval(logits, *[c for pair in caches for c in pair])
            return np.array(logits)

        row["direct_diff"] = float(np.abs(direct_run() - got).max())
        row["direct"] = median_ms(direct_run, runs)
        rows.append(row)
    return rows


def decode_loop(model: Path, shape, past: int, steps: int, skip_cpu: bool) -> dict:
    """`steps` tokens one at a time as genai feeds them: shared KV buffers, the attention mask one
    longer each step (so every step is a new input shape for the EP). ms/token over the last
    three quarters, for the MLX EP, ORT's CPU EP and the direct decoder."""
    rng = np.random.default_rng(1)
    feeds = feeds_for(shape, 1, past, rng)

    def per_token(session) -> float:
        run = shared_buffer_runner(session, feeds)
        times = []
        for t in range(steps):
            feeds["attention_mask"] = np.ones((1, past + t + 1), np.int64)
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e3)
        return float(np.median(times[steps // 4:]))

    row = {"mlx": per_token(ort.InferenceSession(str(model), providers=mlx_ep.providers()))}
    if not skip_cpu:
        row["cpu"] = per_token(ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]))
    direct = DirectDecoder(model, shape)
    caches, ids, times = direct.caches(), direct.mx.array(feeds["input_ids"]), []
    for t in range(steps):
        start = time.perf_counter()
        direct.mx.eval(direct.step(ids, caches, past + t), *[c for pair in caches for c in pair])
        times.append((time.perf_counter() - start) * 1e3)
    row["direct"] = float(np.median(times[steps // 4:]))
    return row


def bench_genai(folder: Path, prompt_len: int, new_tokens: int, on_mlx: bool) -> tuple[float, float, list[int]]:
    from onnxruntime_ep_mlx import generation

    model = generation.load_model(folder, on_mlx)
    prompt = list(range(3, 3 + prompt_len))
    generation.generate(model, prompt, 4)  # warm-up
    result = generation.generate(model, prompt, new_tokens)
    return result.prefill_ms, result.tokens_per_second, result.tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny decoder (smoke run)")
    parser.add_argument("--model-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ort-mlx-bench-decoder")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cpu-runs", type=int, default=3)
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument("--skip-genai", action="store_true")
    parser.add_argument("--loop-steps", type=int, default=100, help="tokens of the growing-mask decode loop")
    args = parser.parse_args()
    shape = QUICK if args.quick else FULL
    folder = args.model_dir / ("quick" if args.quick else "1b")
    if not (folder / "model.onnx").exists():
        started = time.perf_counter()
        make_decoder.write(folder, shape, "fp16", "int4", seed=0)
        print(f"wrote {folder} in {time.perf_counter() - started:.0f} s")
    mlx_ep.register_execution_provider_library()
    import mlx.core as mx

    params = shape.vocab * shape.hidden * 2 + shape.layers * (
        shape.hidden * (shape.heads + 2 * shape.kv_heads) * shape.head_size + shape.hidden * shape.hidden + 3 * shape.hidden * shape.ffn)
    print(f"{platform.machine()}, {os.cpu_count()} cores; ORT {ort.__version__}, MLX {mx.__version__} ({mx.default_device()}); "
          f"decoder {shape} ~{params / 1e9:.2f}B params, fp16 activations, int4 weights; median ms")
    small = shape.context // 16
    phases = [(f"prefill {small}", small, 0), (f"prefill {shape.context // 2}", shape.context // 2, 0),
              (f"decode at past {small}", 1, small), (f"decode at past {shape.context * 8 // 9}", 1, shape.context * 8 // 9)]
    rows = bench_sessions(folder / "model.onnx", shape, phases, args.runs, args.cpu_runs, args.skip_cpu)
    print("Plain runs feed numpy arrays (every KV buffer copied in and out); shared-buffer runs bind past and "
          "present to one OrtValue, as genai does.")
    print("| phase | ORT CPU EP (plain / shared) | MLX EP (plain / shared) | direct MLX | CPU / MLX EP, shared | "
          "MLX EP shared / direct | tokens/s MLX EP shared | max |logit diff|: EP vs CPU, shared vs plain, direct vs EP |")
    print("|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    for r in rows:
        cpu, cpu_shared = r.get("cpu", nan), r.get("cpu shared", nan)
        print(f"| {r['phase']} | {cpu:.2f} / {cpu_shared:.2f} | {r['mlx']:.2f} / {r['mlx shared']:.2f} | {r['direct']:.2f} | "
              f"{cpu_shared / r['mlx shared']:.1f}x | {r['mlx shared'] / r['direct']:.2f}x | {1e3 * r['tokens'] / r['mlx shared']:.0f} | "
              f"{r.get('diff', nan):.2g}, {r['shared_diff']:.2g}, {r['direct_diff']:.2g} |", flush=True)
    loop = decode_loop(folder / "model.onnx", shape, small, args.loop_steps, args.skip_cpu)
    nan = float("nan")
    print(f"decode loop, {args.loop_steps} tokens from past {small}, growing mask (genai's feeds), ms/token: "
          f"ORT CPU EP {loop.get('cpu', nan):.2f}, MLX EP {loop['mlx']:.2f}, direct MLX {loop['direct']:.2f}; "
          f"CPU / MLX EP {loop.get('cpu', nan) / loop['mlx']:.1f}x, MLX EP / direct {loop['mlx'] / loop['direct']:.2f}x "
          f"(with ONNXRUNTIME_EP_MLX_VERBOSE=1 the session summary counts the traces)", flush=True)
    if not args.skip_genai:
        for on_mlx in (True, False) if not args.skip_cpu else (True,):
            prefill, rate, _ = bench_genai(folder, small, 64, on_mlx)
            print(f"genai loop, {'MLX EP' if on_mlx else 'ORT CPU EP'}: prompt {small} tokens prefill {prefill:.1f} ms, "
                  f"decode {rate:.1f} tokens/s", flush=True)


if __name__ == "__main__":
    main()
