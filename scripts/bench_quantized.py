"""Benchmark: com.microsoft MatMulNBits int4, the projection onnxruntime-genai's builder emits for
every linear layer: MLX EP vs the same product called directly through `mlx.core.quantized_matmul`
(the ceiling) vs ORT's CPU EP, median of warm runs, one invocation.

Cases: block 32 and 128; accuracy_level 4 (what the builder writes: ORT's CPU EP then quantizes
activations to int8) and 0; fp16 and fp32 activations (scales of the same type); a 1-row decode
and a 512-row prefill, K = N = 4096 (--small: K = N = 512 and a 32-row prefill, for the CPU backend).
Weights are random 4-bit codes and scales without zero points (ORT's default 8), as the builder
writes them for `-p int4`.

- Direct MLX: the same weights repacked once as MLX wants them (ORT's low-nibble-first bytes viewed
  as uint32, scales [N, K/block], biases -8 * scale) at MLX's group size = the block, in the
  activation type, eager (one op: nothing for `mx.compile` to fuse). Every run crosses the host
  boundary as an ORT run does: numpy in, numpy out. The EP differs on purpose: it computes 16-bit
  activations in float32 (as ORT's CPU kernel does) and hands MLX groups of at most 64 (a block of
  128 is two groups with one scale; MLX's CUDA kernel at group 128 spreads a non-finite row, see
  docs/DESIGN.md), so "MLX EP / direct" prices both.
- GB/s: the int4 weight bytes (packed codes + scales) over the time; "vs floor" is the time over
  those bytes read at the H200's 4.3 TB/s.
- Max diff: each result against the float64 product of the dequantized weights and the same
  activations.
- Memory: in a fresh process per path and weight layout (after a small warm-up model on the same
  path), the growth of process RSS and of MLX's active memory over loading the weights and one
  decode run, next to the int4 weight bytes. The EP and Python's `mlx` share one libmlx, so
  `mx.get_active_memory()` counts the EP's arrays; "n/a" where two libmlx copies are loaded.

Usage: bench_quantized.py [--small] [--runs R] [--cpu-runs R] [--ep-eager] [--skip-memory] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from bench_models import median_ms, ort_session  # noqa: E402
from onnxruntime_ep_mlx.explain import explain_to, read_explain_records  # noqa: E402

H200_BYTES_PER_S = 4.3e12
ONNX_TYPES = {"fp16": TensorProto.FLOAT16, "fp32": TensorProto.FLOAT}
NP_TYPES = {"fp16": np.float16, "fp32": np.float32}
PATHS = ("cpu", "ep", "direct")


@dataclass(frozen=True)
class Layout:
    """One MatMulNBits weight: B is [N, K] in int4 blocks of `block` along K; scales and
    activations of `dtype`."""

    k: int
    n: int
    block: int
    dtype: str


class Weights:
    """Random int4 codes (uint8 [N, K/block, block/2], low nibble first) and scales [N, K/block]."""

    def __init__(self, layout: Layout, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        k, n, block = layout.k, layout.n, layout.block
        self.layout = layout
        self.packed = rng.integers(0, 256, size=(n, k // block, block // 2), dtype=np.uint8)
        # Codes - 8 have a standard deviation of ~4.6: outputs of order 1 at any K.
        scales = rng.uniform(0.5, 1.5, size=(n, k // block)) / (4.6 * np.sqrt(k))
        self.scales = scales.astype(NP_TYPES[layout.dtype])

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales.nbytes

    def product(self, x: np.ndarray) -> np.ndarray:
        """x @ B^T in float64 over exactly the values the int4 blocks stand for."""
        n = self.layout.n
        flat = self.packed.reshape(n, -1)
        codes = np.stack([flat & 0x0F, flat >> 4], axis=-1).reshape(n, -1).astype(np.float64)
        dequantized = (codes - 8.0) * np.repeat(self.scales.astype(np.float64), self.layout.block, axis=1)
        return x.astype(np.float64) @ dequantized.T

    def model(self, level: int) -> bytes:
        layout = self.layout
        node = helper.make_node(
            "MatMulNBits", ["x", "qweight", "scales"], ["y"], domain="com.microsoft",
            K=layout.k, N=layout.n, bits=4, block_size=layout.block, accuracy_level=level)
        element = ONNX_TYPES[layout.dtype]
        graph = helper.make_graph(
            [node], "matmulnbits",
            [helper.make_tensor_value_info("x", element, ["m", layout.k])],
            [helper.make_tensor_value_info("y", element, ["m", layout.n])],
            [numpy_helper.from_array(self.packed, "qweight"), numpy_helper.from_array(self.scales, "scales")])
        opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()

    def direct(self) -> Callable[[np.ndarray], np.ndarray]:
        """x -> x @ B^T through mlx.core.quantized_matmul over MLX's packing of these weights."""
        import mlx.core as mx

        n = self.layout.n
        w = mx.array(np.ascontiguousarray(self.packed.reshape(n, -1)).view(np.uint32))
        scales = mx.array(self.scales)
        biases = -8 * scales
        mx.eval(w, scales, biases)

        def run(x: np.ndarray) -> np.ndarray:
            y = mx.quantized_matmul(mx.array(x), w, scales, biases, transpose=True, group_size=self.layout.block, bits=4)
            return np.array(y)

        return run


def activations(layout: Layout, m: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((m, layout.k)).astype(NP_TYPES[layout.dtype])


def mlx_session(model: bytes) -> ort.InferenceSession:
    """The MLX EP's session, checked to have claimed the node (else the column would time ORT's
    CPU kernel under the MLX EP's name)."""
    with tempfile.TemporaryDirectory() as folder, explain_to(Path(folder) / "explain.jsonl") as report:
        session = ort_session(model, mlx_ep.providers())
        declined = [r.reason for r in read_explain_records(report) if not r.claimed]
    if declined or session.get_providers()[0] != mlx_ep.EP_NAME:
        raise RuntimeError(f"the MLX EP did not claim MatMulNBits: {declined}")
    return session


def runner(path: str, weights: Weights, level: int, model: bytes | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """x -> y on one path, its weights loaded (`level` is ORT's attribute: direct MLX has none;
    `model`: the ORT paths' model, when already serialized)."""
    if path == "direct":
        return weights.direct()
    model = model or weights.model(level)
    session = mlx_session(model) if path == "ep" else ort_session(model, ["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def timed(path: str, weights: Weights, level: int, x: np.ndarray, want: np.ndarray, runs: int) -> dict:
    """One path on one case: median ms, weight GB/s and max |y - float64|."""
    run = runner(path, weights, level)
    diff = float(np.abs(run(x).astype(np.float64) - want).max())
    ms = median_ms(lambda: run(x), runs)
    return {f"{path}_ms": ms, f"{path}_gbs": weights.nbytes / ms / 1e6, f"{path}_diff": diff}


# -- memory, one fresh process per path and layout ---------------------------------------------
def rss_bytes() -> int:
    """Resident set size now (Linux), or the peak so far where /proc is absent (macOS)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS


def libmlx_copies() -> int | None:
    """How many distinct libmlx files this process maps (None: cannot tell on this OS)."""
    try:
        with open("/proc/self/maps") as maps:
            return len({line.split()[-1] for line in maps if "/libmlx." in line})
    except OSError:
        return None


def probe(spec: dict) -> dict:
    """In this (fresh) process: load one path's weights and run one decode row; what that grew."""
    mlx_ep.register_execution_provider_library()  # first: it picks the libmlx Python's mlx binds too
    import mlx.core as mx

    layout, path, level = Layout(**spec["layout"]), spec["path"], spec["level"]
    # Warm the runtime on a small weight of the same kind: device, thread pools and the EP's
    # first session are not the weights' cost.
    small = Weights(Layout(256, 256, layout.block, layout.dtype), seed=1)
    runner(path, small, level)(activations(small.layout, 1))
    weights = Weights(layout)
    model = None if path == "direct" else weights.model(level)
    x = activations(layout, 1)
    gc.collect()
    rss, active = rss_bytes(), mx.get_active_memory()
    run = runner(path, weights, level, model)
    run(x)
    grown = {"rss_growth": rss_bytes() - rss, "mlx_active_growth": mx.get_active_memory() - active}
    if path == "cpu" or libmlx_copies() not in (None, 1):
        grown["mlx_active_growth"] = None
    return grown


def memory(layout: Layout, path: str, level: int = 0) -> dict:
    """`probe` in a child process: {path}_rss_growth, {path}_mlx_active_growth (bytes)."""
    spec = json.dumps({"layout": asdict(layout), "path": path, "level": level})
    # A fixed mmap threshold: glibc otherwise raises it as big blocks are freed (building the
    # model frees a few), and the weights then reuse freed heap pages without growing RSS.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    done = subprocess.run([sys.executable, __file__, "--probe", spec], capture_output=True, text=True, timeout=600, env=env)
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1][:200]
        found = {"rss_growth": None, "mlx_active_growth": None, "memory_error": reason}
    else:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    return {f"{path}_{name}": value for name, value in found.items()}


# -- the report ----------------------------------------------------------------------------------
def megabytes(value) -> str:
    return "n/a" if value is None else f"{value / 1e6:.2f}"


def table_row(r: dict) -> str:
    def cells(key: str, fmt: str, paths=PATHS) -> str:
        return " / ".join("failed" if f"{p}_error" in r else format(r[f"{p}_{key}"], fmt) for p in paths)

    def ratio(a: str, b: str) -> str:
        return "—" if f"{a}_error" in r or f"{b}_error" in r else f"{r[f'{a}_ms'] / r[f'{b}_ms']:.3g}x"

    failures = "; ".join(f"{p}: {r[f'{p}_error']}" for p in PATHS if f"{p}_error" in r)
    rss = " / ".join(megabytes(r.get(f"{p}_rss_growth")) for p in PATHS)
    active = " / ".join(megabytes(r.get(f"{p}_mlx_active_growth")) for p in ("ep", "direct"))
    floor = "—" if "ep_error" in r else f"{r['ep_ms'] / r['floor_ms']:.0f}x"
    return (f"| {r['case']} | {cells('ms', '.3f')} | {ratio('cpu', 'ep')} | {ratio('ep', 'direct')} | {cells('gbs', '.1f')} | "
            f"{floor} | {cells('diff', '.1e')} | {megabytes(r['weight_bytes'])} | {rss} | {active} |"
            + (f" failed: {failures}" if failures else ""))


HEADER = ("| case (M x K x N) | ms: ORT CPU / MLX EP / direct MLX | CPU / MLX EP | MLX EP / direct | "
          "GB/s: CPU / EP / direct | MLX EP vs 4.3 TB/s floor | max diff vs float64: CPU / EP / direct | "
          "int4 weights MB | RSS growth MB: CPU / EP / direct | MLX active MB: EP / direct |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
LEVELS = (4, 0)  # the builder's accuracy_level, and none


def sizes(small: bool) -> tuple[int, list[int]]:
    """K = N, and the rows of the decode and prefill cases."""
    return (512, [1, 32]) if small else (4096, [1, 512])


def attempt(path: str, measure) -> dict:
    """One path's figures, or why it failed: a path failing must not hide the others."""
    try:
        return measure()
    except Exception as error:  # noqa: BLE001
        return {f"{path}_error": str(error).splitlines()[0][:200]}


def layout_rows(layout: Layout, rows_of_m: list[int], args) -> list[dict]:
    """Every case over one weight layout: each row count at each accuracy_level. Direct MLX and
    the float64 reference do not depend on the level: computed once per row count."""
    weights = Weights(layout)
    memory_of = {level: {} for level in LEVELS}
    if not args.skip_memory:
        direct_memory = memory(layout, "direct")
        for level in LEVELS:
            memory_of[level] = {**memory(layout, "cpu", level), **memory(layout, "ep", level), **direct_memory}
    rows = []
    for m in rows_of_m:
        x = activations(layout, m)
        want = weights.product(x)
        direct: dict = {}
        for level in LEVELS:
            row = {"case": f"{m}x{layout.k}x{layout.n}, block {layout.block}, level {level}, {layout.dtype}",
                   "m": m, "level": level, **asdict(layout), "weight_bytes": weights.nbytes,
                   "floor_ms": weights.nbytes / H200_BYTES_PER_S * 1e3}
            for path in ("cpu", "ep"):
                row.update(attempt(path, lambda: timed(path, weights, level, x, want,
                                                       args.cpu_runs if path == "cpu" else args.runs)))
            direct = direct or attempt("direct", lambda: timed("direct", weights, level, x, want, args.runs))
            row.update(direct, **memory_of[level])
            rows.append(row)
            print(table_row(row), flush=True)
            gc.collect()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="K = N = 512, 32 prefill rows (a quick run on the CPU backend)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cpu-runs", type=int, default=10)
    parser.add_argument("--ep-eager", action="store_true",
                        help="ONNXRUNTIME_EP_MLX_NO_COMPILE=1 (default: the EP compiles a shape at its second run)")
    parser.add_argument("--skip-memory", action="store_true", help="no memory probes (each is a fresh process)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ep_eager:
        os.environ["ONNXRUNTIME_EP_MLX_NO_COMPILE"] = "1"
    if args.probe:
        print(json.dumps(probe(json.loads(args.probe))))
        return
    mlx_ep.register_execution_provider_library()
    import mlx.core as mx

    mode = "eager" if args.ep_eager else "compiled from a shape's second run"
    setup = (f"{platform.machine()}, {os.cpu_count()} cores; ORT {ort.__version__}, MLX {mx.__version__} "
             f"({mx.default_device()}); MatMulNBits int4, no zero points; median of {args.runs} warm runs "
             f"({args.cpu_runs} on ORT's CPU EP), ms; MLX EP {mode}; direct MLX eager")
    print(setup)
    print(HEADER, flush=True)
    size, rows_of_m = sizes(args.small)
    rows = []
    for dtype in ("fp16", "fp32"):
        for block in (32, 128):
            rows += layout_rows(Layout(size, size, block, dtype), rows_of_m, args)
    if args.json:
        args.json.write_text(json.dumps({"setup": setup, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
