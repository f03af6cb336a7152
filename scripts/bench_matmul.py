"""Benchmark: f32 matmul [M,K]x[K,N] through our library (MLX, bound BLAS) vs ORT's CPU EP.

Median of warm runs, both measured in this one process. Usage: bench_matmul.py [M K N] [--runs R]
"""

import argparse
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from onnxruntime_ep_mlx import library_path  # noqa: E402


def ort_cpu_median_ms(m: int, k: int, n: int, runs: int) -> float:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"x": rng.standard_normal((m, k), dtype=np.float32)}
    session.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def mlx_median_ms(m: int, k: int, n: int, runs: int) -> tuple[float, str]:
    lib = ctypes.CDLL(library_path(), mode=os.RTLD_LOCAL)
    lib.OrtMlxEp_BlasDescription.restype = ctypes.c_char_p
    lib.OrtMlxEp_BenchMatmul.argtypes = [ctypes.c_int64] * 3 + [
        ctypes.c_int32, ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_size_t]
    median, error = ctypes.c_double(), ctypes.create_string_buffer(1024)
    if lib.OrtMlxEp_BenchMatmul(m, k, n, runs, ctypes.byref(median), error, len(error)):
        raise RuntimeError(error.value.decode())
    return median.value, lib.OrtMlxEp_BlasDescription().decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dims", nargs="*", type=int, default=[256, 768, 3072])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    m, k, n = args.dims
    mlx_ms, blas = mlx_median_ms(m, k, n, args.runs)
    cpu_ms = ort_cpu_median_ms(m, k, n, args.runs)
    print(f"f32 matmul {m}x{k}x{n}, median of {args.runs} warm runs")
    print(f"  MLX through our library : {mlx_ms:8.2f} ms   ({blas})")
    print(f"  ORT {ort.__version__} CPU EP      : {cpu_ms:8.2f} ms")
    print(f"  ratio MLX / ORT CPU      : {mlx_ms / cpu_ms:8.2f}x")


if __name__ == "__main__":
    main()
