"""Session creation from a model's source vs from the model compiled for the MLX EP (EPContext
nodes: ORT's compile API), and the first run after it, for the real models of
tests/models/sources.py and a generated int4 Llama-shaped decoder (scripts/make_decoder.py).

Each model is compiled once; then source and compiled sessions are made in alternation (one of
each first, not timed: MLX's own start-up is not what a compiled model saves) and the medians
are reported. The compiled model's outputs are checked equal to the source model's.

    .venv/bin/python scripts/bench_compiled.py [--repeats 9] [--model NAME ...] [--decoder 512,8,8,4,1536,32000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "tests" / "models"), str(REPO / "scripts")]

import make_decoder  # noqa: E402
from sources import MODELS, fetch  # noqa: E402

from onnxruntime_ep_mlx import register_execution_provider_library  # noqa: E402
from onnxruntime_ep_mlx.compiled import compile_model, context_nodes  # noqa: E402
from onnxruntime_ep_mlx.sessions import mlx_session  # noqa: E402
from onnxruntime_ep_mlx.tables import format_table  # noqa: E402


def decoder_feeds(shape: make_decoder.Shape) -> dict[str, np.ndarray]:
    """A 16-token prompt with an empty past (a prefill)."""
    ids = np.random.default_rng(0).integers(3, shape.vocab, size=(1, 16))
    past = {f"past_key_values.{i}.{k}": np.zeros((1, shape.kv_heads, 0, shape.head_size), np.float16)
            for i in range(shape.layers) for k in ("key", "value")}
    return {"input_ids": ids, "attention_mask": np.ones((1, 16), np.int64), **past}


def timed_session(path: Path, feeds: dict) -> tuple[float, float, list]:
    """(session creation ms, first run ms, outputs)."""
    start = time.perf_counter()
    session = mlx_session(path)
    created = time.perf_counter()
    outputs = session.run(None, feeds)
    ran = time.perf_counter()
    del session
    gc.collect()
    return (created - start) * 1e3, (ran - created) * 1e3, outputs


def measure(name: str, source: Path, feeds: dict, scratch: Path, repeats: int) -> tuple:
    compiled = compile_model(source, scratch / f"{name}_ctx.onnx")
    nodes = len(onnx.load(str(source), load_external_data=False).graph.node)
    contexts = len(context_nodes(compiled))
    _, _, want = timed_session(source, feeds)
    _, _, got = timed_session(compiled, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{name}: compiled and source outputs differ")
    times = {source: ([], []), compiled: ([], [])}
    for _ in range(repeats):
        for path in (source, compiled):
            create, first, _ = timed_session(path, feeds)
            times[path][0].append(create)
            times[path][1].append(first)
    (src_create, src_first), (ctx_create, ctx_first) = (
        (statistics.median(times[p][0]), statistics.median(times[p][1])) for p in (source, compiled)
    )
    size_mb = sum(f.stat().st_size for f in source.parent.glob(source.name + "*")) / 1e6
    return (name, f"{size_mb:.1f}", f"{nodes}", f"{contexts}", f"{src_create:.1f}", f"{ctx_create:.1f}",
            f"{src_create / ctx_create:.2f}x", f"{src_first:.1f}", f"{ctx_first:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="sessions of each model to time (median)")
    parser.add_argument("--model", action="append", metavar="NAME",
                        help="only these real models (repeatable; default all)")
    parser.add_argument("--decoder", default="512,8,8,4,1536,32000",
                        help="hidden,layers,heads,kv_heads,ffn,vocab of the int4 decoder (default %(default)s)")
    args = parser.parse_args()
    register_execution_provider_library()
    hidden, layers, heads, kv_heads, ffn, vocab = (int(v) for v in args.decoder.split(","))
    shape = make_decoder.Shape(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, ffn=ffn,
                               vocab=vocab, context=256)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mlx-compiled-") as scratch:
        scratch = Path(scratch)
        for model in MODELS:
            if args.model and model.name not in args.model:
                continue
            rows.append(measure(model.name, fetch(model), model.feeds(), scratch, args.repeats))
        decoder = make_decoder.write(scratch / "decoder", shape, "fp16", "int4", seed=1)
        rows.append(measure(f"int4 decoder {args.decoder}", decoder, decoder_feeds(shape), scratch, args.repeats))
    print(format_table(["model", "MB", "nodes", "EPContext nodes", "create ms, source", "create ms, compiled",
                        "source / compiled", "first run ms, source", "first run ms, compiled"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
