"""First-run cost per model: what a new process pays before a model runs at its warm speed, with
MLX's kernel caches empty (a fresh machine or container) and then filled by that first process.

MLX compiles kernels at first use and keeps them on disk: on its CUDA backend NVRTC's output
under `$TMPDIR/mlx/<version>/ptx` (or `MLX_PTX_CACHE_DIR`), with the driver's own cache of what
it builds from them (`CUDA_CACHE_PATH`); on the CPU backend the C++ of fused kernels, built into
shared libraries under `$TMPDIR/mlx/<version>/cpu`. Each measurement is a child process whose
TMPDIR and CUDA_CACHE_PATH point into one folder: the first child finds it empty ("cold"), the
second finds what the first left ("warm"). Times are the child's, ms: session creation, the
first run (eager: ORT's and the EP's setup, constants moved into MLX, every kernel compiled),
the second run (traced and compiled by the EP, `compile_after=1`), and the median warm run.

Usage: first_run.py [--large] [--quick] [--match TEXT] [--option KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def child(folder: Path, options: list[str]) -> None:
    """Runs the model in `folder` once MLX-first and prints the times as JSON."""
    sys.path.insert(0, str(HERE.parent / "python"))
    import onnxruntime as ort

    import onnxruntime_ep_mlx as mlx_ep

    feeds = dict(np.load(folder / "feeds.npz"))
    so = ort.SessionOptions()
    mlx_ep.append_to_session_options(so, dict(o.split("=", 1) for o in options))
    started = time.perf_counter()
    session = ort.InferenceSession(str(folder / "model.onnx"), so)
    times = {"session": time.perf_counter() - started}
    assert session.get_providers()[0] == mlx_ep.EP_NAME
    for run in ("first", "second"):
        started = time.perf_counter()
        session.run(None, feeds)
        times[run] = time.perf_counter() - started
    warm = []
    for _ in range(5):
        started = time.perf_counter()
        session.run(None, feeds)
        warm.append(time.perf_counter() - started)
    times["warm"] = statistics.median(warm)
    print(json.dumps({k: v * 1e3 for k, v in times.items()}))


def measure(folder: Path, caches: Path, options: list[str]) -> dict[str, float]:
    env = dict(os.environ, TMPDIR=str(caches), CUDA_CACHE_PATH=str(caches / "nv"))
    argv = [sys.executable, __file__, "--child", str(folder)] + [f"--option={o}" for o in options]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large", action="store_true", help="bench_models.py --large's models (GPU-sized)")
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="an EP provider option")
    parser.add_argument("--match", default="", help="only the models whose name contains this")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.option)
        return
    sys.path.insert(0, str(HERE))
    import bench_models as models

    if args.quick:
        benches = [models.encoder(seq=16, dim=64, ffn=128), models.cnn(batch=2, size=16, widths=(8, 16))]
    elif args.large:
        benches = [models.encoder(seq=256, batch=8, dim=768, heads=12, ffn=3072, layers=12),
                   models.cnn(batch=16, size=224, widths=(64, 128, 256))]
    else:
        benches = [models.mlp(), models.encoder(seq=256), models.cnn()]
    options = " ".join(args.option) or "none"
    print(f"first runs in a new process, ms (options: {options}); caches: cold = empty, warm = left by the cold process")
    print("| model | caches | session | first run | second run (trace + compile) | warm run |")
    print("|---|---|---|---|---|---|")
    for bench in [b for b in benches if args.match in b.name]:
        with tempfile.TemporaryDirectory(prefix="mlx-first-run-") as work:
            folder, caches = Path(work) / "model", Path(work) / "caches"
            folder.mkdir()
            caches.mkdir()
            (folder / "model.onnx").write_bytes(bench.model)
            np.savez(folder / "feeds.npz", **bench.feeds)
            for label in ("cold", "warm"):
                t = measure(folder, caches, args.option)
                print(f"| {bench.name} | {label} | {t['session']:.0f} | {t['first']:.0f} | {t['second']:.0f} | "
                      f"{t['warm']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
