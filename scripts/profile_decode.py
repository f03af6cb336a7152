"""Where a decode step's time goes: scripts/make_decoder.py's int4 decoder (the ~1B shape's
widths, any number of layers) stepped as onnxruntime-genai feeds it (past and present bound to
one buffer, the attention mask one longer every step), through the MLX EP or written directly
against mlx.core (bench_llm.DirectDecoder, the ceiling).

Without --ncu: warm ms per step (median of the second half of the warm-up) and the last step's
greedy token; for the EP, its session summary (traces, replays, mirrors updated in place).
With --ncu (MLX's CUDA backend and NVIDIA Nsight Compute): runs itself under ncu, profiling
--steps steps after the warm-up, and prints each kernel's count and time per step, then one
step's kernels in order. Kernel time is the GPU's share; a step longer than its kernels is
host-bound.

Usage: profile_decode.py [--mode ep|direct] [--layers N] [--small] [--past P] [--warm W]
                         [--steps S] [--ncu] [--option KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import collections
import csv
import ctypes
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import make_decoder  # noqa: E402
from bench_llm import DirectDecoder, feeds_for, shared_buffer_runner  # noqa: E402

CHILD = "PROFILE_DECODE_UNDER_NCU"
NCU_FLAGS = ["--clock-control", "none", "--profile-from-start", "off", "--metrics", "gpu__time_duration.sum",
             "--csv", "--print-units", "base"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["ep", "direct"], default="ep")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (the ~1B shape has 16)")
    parser.add_argument("--small", action="store_true", help="a tiny decoder's widths (for the CPU backend)")
    parser.add_argument("--past", type=int, default=144, help="cached tokens before the first step")
    parser.add_argument("--warm", type=int, default=24, help="steps before profiling")
    parser.add_argument("--steps", type=int, default=3, help="steps profiled under ncu")
    parser.add_argument("--ncu", action="store_true", help="profile the kernels with Nsight Compute")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="an EP provider option")
    return parser.parse_args(argv)


def decoder_shape(args: argparse.Namespace) -> make_decoder.Shape:
    if args.small:
        return make_decoder.Shape(hidden=128, layers=args.layers, heads=4, kv_heads=2, ffn=256, vocab=512,
                                  context=args.past + args.warm + args.steps + 16)
    return make_decoder.Shape(hidden=2048, layers=args.layers, heads=32, kv_heads=8, ffn=8192, vocab=32000,
                              context=max(2304, args.past + args.warm + args.steps + 16))


def decoder_model(shape: make_decoder.Shape) -> Path:
    """The decoder's model file, written once per shape into the temp folder."""
    name = f"profile_decode_{shape.hidden}h_{shape.layers}l_{shape.context}c"
    folder = Path(tempfile.gettempdir()) / name
    model = folder / "model.onnx"
    if not model.exists():
        make_decoder.write(folder, shape, "fp16", "int4", seed=1)
    return model


def stepper(args: argparse.Namespace, shape: make_decoder.Shape, model: Path):
    """A function running decode step `t` (and returning its logits), and what to print after."""
    feeds = feeds_for(shape, 1, args.past, np.random.default_rng(1))
    if args.mode == "direct":
        direct = DirectDecoder(model, shape)
        mx, caches, ids = direct.mx, direct.caches(), direct.mx.array(feeds["input_ids"])

        def step(t: int):
            logits = direct.step(ids, caches, args.past + t)
            mx.eval(logits, *[c for pair in caches for c in pair])
            return np.array(logits)

        return step, lambda: None
    import onnxruntime as ort

    import onnxruntime_ep_mlx as mlx_ep

    mlx_ep.register_execution_provider_library()
    options = ort.SessionOptions()
    mlx_ep.append_to_session_options(options, dict(o.split("=", 1) for o in args.option))
    session = ort.InferenceSession(str(model), options)
    if session.get_providers()[0] != mlx_ep.EP_NAME:
        sys.exit(f"the session's first provider is {session.get_providers()[0]}, not {mlx_ep.EP_NAME}")
    run = shared_buffer_runner(session, feeds)

    def step(t: int):
        feeds["attention_mask"] = np.ones((1, args.past + t + 1), np.int64)
        return run()

    def finish():
        nonlocal session
        del session  # the EP prints its summary (ONNXRUNTIME_EP_MLX_VERBOSE) as the session ends

    return step, finish


def run_steps(args: argparse.Namespace) -> None:
    shape = decoder_shape(args)
    model = decoder_model(shape)
    step, finish = stepper(args, shape, model)
    times, logits = [], None
    for t in range(args.warm):
        started = time.perf_counter()
        logits = step(t)
        times.append((time.perf_counter() - started) * 1e3)
    median = float(np.median(times[len(times) // 2:]))
    print(f"{args.mode}, {shape.layers} layer(s): {median:.3f} ms a step (median of the last "
          f"{len(times) - len(times) // 2} of {len(times)}; the first {times[0]:.0f} ms), greedy token "
          f"{int(np.argmax(logits[0, -1]))}", flush=True)
    if os.environ.get(CHILD):
        cuda = ctypes.CDLL("libcuda.so.1")
        cuda.cuProfilerStart()
        for t in range(args.warm, args.warm + args.steps):
            step(t)
        cuda.cuProfilerStop()
    finish()


def kernel_rows(ncu_csv: str) -> list[tuple[str, float, str, str]]:
    """(kernel name, ns, grid, block) per launch from ncu's CSV (its other lines dropped)."""
    lines = [line for line in ncu_csv.splitlines() if line.startswith('"')]
    rows = []
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            ns = float(row["Metric Value"].replace(",", ""))
            rows.append((row["Kernel Name"], ns, row.get("Grid Size", ""), row.get("Block Size", "")))
    return rows


def summarise(rows: list[tuple[str, float, str, str]], steps: int) -> str:
    per_name: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for name, ns, _, _ in rows:
        per_name[name[:110]][0] += 1
        per_name[name[:110]][1] += ns
    total = sum(ns for _, ns, _, _ in rows)
    out = [f"{len(rows) / steps:.1f} kernels and {total / steps / 1e3:.1f} us of kernel time a step",
           "  per step   us/step  kernel"]
    for name, (count, ns) in sorted(per_name.items(), key=lambda kv: -kv[1][1]):
        out.append(f"  {count / steps:8.1f} {ns / steps / 1e3:9.1f}  {name}")
    out.append("one step, in order (us, grid, block, kernel):")
    for name, ns, grid, block in rows[:len(rows) // steps]:
        out.append(f"  {ns / 1e3:8.1f} {grid:>14} {block:>12}  {name[:100]}")
    return "\n".join(out)


def profile_under_ncu(argv: list[str], steps: int) -> int:
    ncu = shutil.which("ncu") or next((p for p in ["/usr/local/cuda/bin/ncu"] if Path(p).exists()), None)
    if ncu is None:
        print("--ncu needs NVIDIA Nsight Compute (ncu on PATH or in /usr/local/cuda/bin) and MLX's CUDA backend",
              file=sys.stderr)
        return 2
    child_argv = [a for a in argv if a != "--ncu"]
    done = subprocess.run([ncu, *NCU_FLAGS, sys.executable, __file__, *child_argv], capture_output=True, text=True,
                          env=dict(os.environ, **{CHILD: "1"}))
    print("\n".join(line for line in done.stdout.splitlines() if not line.startswith('"')), flush=True)
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        return done.returncode
    rows = kernel_rows(done.stdout)
    if not rows:
        print("ncu profiled no kernels (is this MLX's CUDA backend?)", file=sys.stderr)
        return 1
    print(summarise(rows, steps))
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.warm < 2 or args.steps < 1:
        sys.exit("--warm must be at least 2 and --steps at least 1")
    if args.ncu:
        return profile_under_ncu(argv, args.steps)
    os.environ.setdefault("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    run_steps(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
