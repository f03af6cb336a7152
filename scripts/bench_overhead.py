"""Where a small model's run time goes beyond direct MLX's: the EP with its inputs and outputs
bound in its own memory (the store of the output in MLX's evaluation, or the copy after it), the
EP with numpy inputs and outputs, ORT's CPU EP alone and with the MLX EP registered but
disabled, and the same computation written directly in MLX, alone and with one more elementwise
primitive on its result (what MLX's backend costs for one more kernel).

Every runner is timed in one process, in interleaved rounds (`bench_models.interleaved_ms`).
Models: a trivial one (Add -> Relu on 32 floats), bench_models' MLP, or its encoder layer at
seq 64 (the benchmark model whose bound run stayed above 1.05x direct MLX on an H100 in session
37). Meant for the GPU: the EP's excess over direct MLX there is host work, and these runners
take it apart.

Usage: bench_overhead.py [--model trivial|mlp|encoder] [--runs N]   (one line per runner, µs)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import bench_models  # noqa: E402
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402


def trivial():
    import mlx.core as mx

    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])], "trivial",
        [helper.make_tensor_value_info("x", f32, [32])], [helper.make_tensor_value_info("y", f32, [32])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    return model.SerializeToString(), {"x": np.ones(32, np.float32)}, mx.compile(lambda x: mx.maximum(x + x, 0))


def runners(model: bytes, feeds: dict[str, np.ndarray], direct) -> dict:
    import mlx.core as mx

    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = cpu.run(None, feeds)

    def session(options: dict[str, str]) -> ort.InferenceSession:
        so = ort.SessionOptions()
        mlx_ep.append_to_session_options(so, options)
        made = ort.InferenceSession(model, so)
        if options.get("disable") != "1":
            assert made.get_providers()[0] == mlx_ep.EP_NAME
        return made

    def bound(s: ort.InferenceSession, in_mlx_memory: bool):
        binding = s.io_binding()
        for name, value in feeds.items():
            placed = mlx_ep.ortvalue_in_mlx_memory(value) if in_mlx_memory else ort.OrtValue.ortvalue_from_numpy(value)
            binding.bind_ortvalue_input(name, placed)
        for info, like in zip(s.get_outputs(), expected):
            placed = (mlx_ep.ortvalue_in_mlx_memory(shape=like.shape, dtype=like.dtype) if in_mlx_memory
                      else ort.OrtValue.ortvalue_from_numpy(np.empty_like(like)))
            binding.bind_ortvalue_output(info.name, placed)
        s.run_with_iobinding(binding)
        return lambda: s.run_with_iobinding(binding)

    ep = session({})
    arrays = [mx.array(v) for v in feeds.values()]
    mx.eval(arrays)
    return {
        "EP, bound in its memory": bound(ep, True),
        "EP, bound, output copied after (no_cuda_kernels)": bound(session({"no_cuda_kernels": "1"}), True),
        "EP, numpy in and out": lambda: ep.run(None, feeds),
        "ORT's CPU EP alone, bound": bound(cpu, False),
        "ORT's CPU EP, MLX EP registered but disabled": bound(session({"disable": "1"}), False),
        "direct MLX, resident": lambda: mx.eval(direct(*arrays)),
        "direct MLX + one elementwise primitive": lambda: mx.eval(direct(*arrays) * 2),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["trivial", "mlp", "encoder"], default="trivial")
    parser.add_argument("--runs", type=int, default=1000, help="interleaved rounds")
    args = parser.parse_args(argv)
    mlx_ep.register_execution_provider_library()
    if args.model == "trivial":
        model, feeds, direct = trivial()
    else:
        bench = bench_models.mlp() if args.model == "mlp" else bench_models.encoder(64)
        model, feeds, direct = bench.model, bench.feeds, bench.direct()
    medians = bench_models.interleaved_ms(runners(model, feeds, direct), args.runs)
    for label, ms in medians.items():
        print(f"{args.model:8s} {label:50s} {ms * 1e3:9.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
