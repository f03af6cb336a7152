"""Benchmark: com.microsoft PagedAttention over a paged fp16 KV cache (continuous batching),
a decode step or a chunked prefill, three ways, each in a process of its own: the MLX EP (on
MLX's CUDA backend its paged attention kernels read the block pool through the block table),
the EP's composed path (`ONNXRUNTIME_EP_MLX_NO_CUDA_KERNELS=1`: every sequence's blocks gathered
into a contiguous copy, then MLX's attention), and the same gather + attention written directly
against mlx.core. ORT has no CPU kernel for the op, so a numpy reference checks every answer.
The KV pools are the model's initializers, resident in device memory as a server's pool
would be (and as mx.arrays made once for direct MLX): a run moves only the new tokens' Q/K/V in
and the attention output out, so the figures are the attention's, not 128 MiB of host copies.
Reported: median ms of warm runs, the first run (compilation included: MLX's kernels, ours, the
EP's graph) and MLX's peak memory in that process.

Usage: bench_paged.py [--case decode|prefill] [--quick] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "python"), str(HERE.parent / "tests" / "ep")]

VARIANTS = {
    "kernel": "MLX EP (its paged kernels on the GPU)",
    "composed": "MLX EP, composed path",
    "direct": "direct MLX (gather + attention)",
}


def shape(case: str, quick: bool) -> dict[str, int]:
    """Decode, the issue's case: batch 8, 4k-token caches in 16-token blocks, 32/8 heads of
    128, one new token each. Prefill: 2 sequences each adding a 512-token chunk to 512 cached."""
    if quick:
        return dict(batch=2, past=96, new=1 if case == "decode" else 24, block=16, heads=8, kv_heads=2, head=64)
    if case == "decode":
        return dict(batch=8, past=4095, new=1, block=16, heads=32, kv_heads=8, head=128)
    return dict(batch=2, past=512, new=512, block=16, heads=32, kv_heads=8, head=128)


def feeds_for(s: dict[str, int]) -> dict[str, np.ndarray]:
    """`new` tokens per sequence after `past` cached ones; blocks handed out shuffled."""
    from test_paged_attention import paged_feeds

    rng = np.random.default_rng(0)
    per_sequence = -(-(s["past"] + s["new"]) // s["block"])
    return paged_feeds(
        rng, [s["new"]] * s["batch"], [s["past"]] * s["batch"], num_heads=s["heads"], kv_num_heads=s["kv_heads"],
        head=s["head"], block_size=s["block"], num_blocks=s["batch"] * per_sequence, max_blocks=per_sequence,
    )


POOLS = ("key_cache", "value_cache")


def resident_pools_model(feeds: dict[str, np.ndarray], attrs: dict[str, int]) -> bytes:
    """The PagedAttention model with the KV pools as initializers and only `output` out."""
    import onnx
    from onnx import numpy_helper
    from test_paged_attention import paged_model

    model = onnx.load_from_string(paged_model(feeds, outputs=("output", "", ""), **attrs))
    graph = model.graph
    kept = [i for i in graph.input if i.name not in POOLS]
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(feeds[name], name) for name in POOLS)
    return model.SerializeToString()


def worker(variant: str, folder: Path, runs: int) -> None:
    """Runs one variant on the saved model and feeds; prints one JSON line."""
    import mlx.core as mx

    from bench_models import median_ms

    feeds = dict(np.load(folder / "feeds.npz"))
    s = json.loads((folder / "shape.json").read_text())
    if variant == "direct":
        run = direct_step(feeds, dict(np.load(folder / "pools.npz")), s)
    else:
        import onnxruntime as ort

        import onnxruntime_ep_mlx as mlx_ep

        mlx_ep.register_execution_provider_library()
        session = ort.InferenceSession(str(folder / "model.onnx"), providers=mlx_ep.providers())
        assert session.get_providers()[0] == mlx_ep.EP_NAME
        run = lambda: session.run(["output"], feeds)[0]  # noqa: E731
    start = time.perf_counter()
    out = run()  # the first run compiles (MLX's kernels, ours, the EP's graph)
    first_ms = (time.perf_counter() - start) * 1e3
    ms = median_ms(run, runs)
    want = np.load(folder / "want.npy")
    diff = float(np.abs(np.asarray(out, np.float32) - want).max())
    peak = mx.get_peak_memory() / 2**20 if variant == "direct" else None
    print(json.dumps({"ms": ms, "first_ms": first_ms, "diff": diff, "peak_mib": peak}), flush=True)


def direct_step(feeds: dict[str, np.ndarray], pools: dict[str, np.ndarray], s: dict[str, int]):
    """The cache write, the gather of each sequence's blocks and MLX's attention, in mlx.core,
    over pools made resident once."""
    import mlx.core as mx

    batch, block, hq, hkv, head, new = s["batch"], s["block"], s["heads"], s["kv_heads"], s["head"], s["new"]
    length = s["past"] + new
    blocks_per_seq = feeds["block_table"].shape[1]

    @mx.compile
    def step(q, k, v, key_cache, value_cache, table, slots):
        pool_rows = key_cache.shape[0] * block
        flat_k = key_cache.reshape(pool_rows, hkv, head)
        flat_v = value_cache.reshape(pool_rows, hkv, head)
        flat_k[slots] = k.reshape(batch * new, hkv, head)
        flat_v[slots] = v.reshape(batch * new, hkv, head)
        rows = (table[:, :, None] * block + mx.arange(block)[None, None, :]).reshape(batch, blocks_per_seq * block)
        rows = rows[:, :length]
        keys = flat_k[rows].transpose(0, 2, 1, 3)  # [B, Hkv, L, D]
        values = flat_v[rows].transpose(0, 2, 1, 3)
        q4 = q.reshape(batch, new, hq, head).transpose(0, 2, 1, 3)
        # MLX's causal mask aligns the new tokens with the last keys, as PagedAttention does.
        mask = "causal" if new > 1 else None
        out = mx.fast.scaled_dot_product_attention(q4, keys, values, scale=head**-0.5, mask=mask)
        return out.transpose(0, 2, 1, 3).reshape(batch * new, hq * head)

    table = feeds["block_table"]
    positions = [(b, s["past"] + j) for b in range(batch) for j in range(new)]
    slots = np.array([table[b, p // block] * block + p % block for b, p in positions], np.int32)

    key_cache, value_cache = mx.array(pools["key_cache"]), mx.array(pools["value_cache"])
    table, slots = mx.array(table), mx.array(slots)
    mx.eval(key_cache, value_cache, table, slots)

    def run():
        out = step(*(mx.array(feeds[n]) for n in ("query", "key", "value")), key_cache, value_cache, table, slots)
        return np.array(out)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=["decode", "prefill"], default="decode")
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run on the CPU backend)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--worker", nargs=2, metavar=("VARIANT", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], Path(args.worker[1]), args.runs)
        return
    from test_paged_attention import reference

    s = shape(args.case, args.quick)
    feeds = feeds_for(s)
    attrs = dict(num_heads=s["heads"], kv_num_heads=s["kv_heads"])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "model.onnx").write_bytes(resident_pools_model(feeds, attrs))
        pools = {name: feeds.pop(name) for name in POOLS}
        np.savez(folder / "pools.npz", **pools)
        np.savez(folder / "feeds.npz", **feeds)
        (folder / "shape.json").write_text(json.dumps(s))
        np.save(folder / "want.npy", np.asarray(reference({**feeds, **pools}, **attrs)[0], np.float32))
        cache_mib = 2 * pools["key_cache"].nbytes / 2**20
        print(f"PagedAttention fp16 {args.case}: batch {s['batch']}, {s['new']} new after {s['past']} cached tokens each in blocks of "
              f"{s['block']}, {s['heads']}/{s['kv_heads']} heads of {s['head']} (K and V caches {cache_mib:.1f} MiB); "
              f"median of {args.runs} warm runs, ms; max diff vs the numpy reference")
        print("| variant | ms | first run (ms) | MLX peak memory (MiB) | max diff |")
        print("|---|---|---|---|---|")
        for variant, label in VARIANTS.items():
            env = dict(os.environ, ONNXRUNTIME_EP_MLX_VERBOSE="1")
            if variant == "composed":
                env["ONNXRUNTIME_EP_MLX_NO_CUDA_KERNELS"] = "1"
            done = subprocess.run([sys.executable, __file__, "--worker", variant, str(folder), "--runs", str(args.runs)],
                                  capture_output=True, text=True, env=env)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                print(f"| {label} | failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]} ||||", flush=True)
                continue
            r = json.loads(lines[-1])
            # The EP reports its MLX peak in the session summary it prints when the session ends.
            peaks = re.findall(r"([0-9.]+) MiB peak", done.stderr)
            peak = r["peak_mib"] if r["peak_mib"] is not None else (float(peaks[-1]) if peaks else float("nan"))
            print(f"| {label} | {r['ms']:.3f} | {r['first_ms']:.0f} | {peak:.1f} | {r['diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
