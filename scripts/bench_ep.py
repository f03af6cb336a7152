"""Benchmark: the MLX EP against ORT's CPU EP on a 1-node graph and a 50-op elementwise chain.

For each model: median of warm runs of each session, in one process for the ratio; the EP's
own overhead (graph translation + input/output copies per run) comes from the EP's session
summary (ONNXRUNTIME_EP_MLX_VERBOSE=1), measured in a child process.

Usage: bench_ep.py [--runs N] [--elements N] [--child MODEL]   (prints a markdown table)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402

CHAIN_OPS = ["Add", "Mul", "Tanh", "Sigmoid", "Sub", "Abs", "Neg", "Relu", "Exp", "Sqrt"]


def one_node(elements: int) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "one_node",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [elements]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [elements])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def chain(elements: int, length: int = 50) -> bytes:
    """`length` elementwise ops; values stay bounded (Tanh/Sigmoid every few steps)."""
    nodes, current = [], "a"
    for i in range(length):
        op = CHAIN_OPS[i % len(CHAIN_OPS)]
        out = f"v{i}"
        if op in ("Add", "Mul", "Sub"):
            nodes.append(helper.make_node(op, [current, "b"], [out]))
        elif op in ("Exp", "Sqrt"):
            # Keep the domain safe: exp of a bounded value, sqrt of |x|.
            bounded = f"t{i}"
            nodes.append(helper.make_node("Tanh" if op == "Exp" else "Abs", [current], [bounded]))
            nodes.append(helper.make_node(op, [bounded], [out]))
        else:
            nodes.append(helper.make_node(op, [current], [out]))
        current = out
    nodes.append(helper.make_node("Identity", [current], ["c"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [elements]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [elements])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def median_ms(session: ort.InferenceSession, feeds: dict, runs: int) -> float:
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def feeds_for(elements: int) -> dict:
    rng = np.random.default_rng(0)
    return {n: rng.uniform(-1, 1, elements).astype(np.float32) for n in ("a", "b")}


def child(model_name: str, elements: int, runs: int) -> None:
    """Runs only the MLX session; its summary (stderr, at teardown) carries the overhead."""
    mlx_ep.register_execution_provider_library()
    model = MODELS[model_name](elements)
    session = ort.InferenceSession(model, providers=mlx_ep.providers())
    median_ms(session, feeds_for(elements), runs)


def overhead_per_run(model_name: str, elements: int, runs: int) -> tuple[float, float, float]:
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_VERBOSE="1")
    out = subprocess.run(
        [sys.executable, __file__, "--child", model_name, "--elements", str(elements), "--runs", str(runs)],
        env=env, capture_output=True, text=True, check=True,
    )
    match = re.search(r"(\d+) run\(s\): translation ([\d.]+) ms, MLX eval ([\d.]+) ms, copies ([\d.]+) ms", out.stderr)
    if not match:
        raise RuntimeError(f"no EP summary in: {out.stderr}")
    total_runs = int(match[1])
    return tuple(float(match[i]) / total_runs for i in (2, 3, 4))  # type: ignore[return-value]


MODELS = {"1-node Add": one_node, "50-op chain": chain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.elements, args.runs)
        return
    mlx_ep.register_execution_provider_library()
    print(f"float32, {args.elements} elements, median of {args.runs} warm runs; ORT {ort.__version__}")
    print("| model | ORT CPU EP | MLX EP | CPU / MLX | EP translation | EP copies | MLX eval |")
    print("|---|---|---|---|---|---|---|")
    for name, build in MODELS.items():
        model, feeds = build(args.elements), feeds_for(args.elements)
        cpu = median_ms(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), feeds, args.runs)
        mlx_session = ort.InferenceSession(model, providers=mlx_ep.providers())
        assert mlx_session.get_providers()[0] == mlx_ep.EP_NAME
        mlx = median_ms(mlx_session, feeds, args.runs)
        translate, evaluate, copies = overhead_per_run(name, args.elements, args.runs)
        print(
            f"| {name} | {cpu:.2f} ms | {mlx:.2f} ms | {cpu / mlx:.2f}x | {translate:.3f} ms | {copies:.3f} ms | {evaluate:.2f} ms |"
        )


if __name__ == "__main__":
    main()
