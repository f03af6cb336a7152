"""Benchmark suite: whole models through ORT's CPU EP, the MLX EP (eager and compiled), and the
same computation written directly against MLX (`mlx.core`, `mx.compile`) as the ceiling for the
EP's overhead. Median of warm runs, all measured in this one process.

Models (generated here, deterministic): an MLP, a transformer encoder layer at several sequence
lengths, a small CNN (strided convolutions, batch norm, global pooling) and an audio log-mel
front end (STFT, mel filter bank); or any ONNX model given with --model (ORT CPU and MLX EP only: there is no
direct-MLX twin of an arbitrary model).

Usage: bench_models.py [--runs N] [--model PATH ...] [--quick | --large] [--precision fp16|bf16] [--bound]
                       [--match TEXT]
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402

RNG = np.random.default_rng(0)


def weight(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


@dataclass
class Bench:
    name: str
    model: bytes
    feeds: dict[str, np.ndarray]
    direct: Callable[[], Callable] | None  # builds a compiled mlx.core function of the feeds


def _model(nodes, inputs, outputs, weights: dict[str, np.ndarray], opset: int = 20) -> bytes:
    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def rounded_once(weights: dict, dtype) -> dict:
    """`weights` (MLX arrays) in `dtype`, evaluated now: a direct twin's weights must be data when
    `mx.compile` captures them, or the casts are traced into the compiled function and run on
    every call (122 extra kernels a run of the 12-layer encoder in float16, measured)."""
    import mlx.core as mx

    rounded = {k: v.astype(dtype) for k, v in weights.items()}
    mx.eval(list(rounded.values()))
    return rounded


def mlp(batch: int = 64, width: int = 1024, hidden: int = 4096, layers: int = 2) -> Bench:
    nodes, weights, x = [], {}, "x"
    for i in range(layers):
        weights |= {f"w1_{i}": weight(width, hidden), f"b1_{i}": weight(hidden), f"w2_{i}": weight(hidden, width), f"b2_{i}": weight(width)}
        nodes += [
            helper.make_node("MatMul", [x, f"w1_{i}"], [f"h{i}"]),
            helper.make_node("Add", [f"h{i}", f"b1_{i}"], [f"hb{i}"]),
            helper.make_node("Gelu", [f"hb{i}"], [f"g{i}"]),
            helper.make_node("MatMul", [f"g{i}", f"w2_{i}"], [f"o{i}"]),
            helper.make_node("Add", [f"o{i}", f"b2_{i}"], [f"ob{i}"]),
            helper.make_node("Add", [f"ob{i}", x], [f"r{i}"]),
        ]
        x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    feeds = {"x": RNG.standard_normal((batch, width)).astype(np.float32)}

    def direct():
        import mlx.core as mx

        w = {k: mx.array(v) for k, v in weights.items()}

        def f(x):
            for i in range(layers):
                h = x @ w[f"w1_{i}"] + w[f"b1_{i}"]
                h = 0.5 * h * (1 + mx.erf(h / np.sqrt(2.0)))
                x = h @ w[f"w2_{i}"] + w[f"b2_{i}"] + x
            return x

        return mx.compile(f)

    return Bench(f"MLP {layers}x({width}->{hidden}->{width}), batch {batch}", _model(nodes, [("x", ["batch", width])], ["y"], weights), feeds, direct)


def encoder(seq: int, batch: int = 4, dim: int = 256, heads: int = 4, ffn: int = 1024, layers: int = 1) -> Bench:
    head = dim // heads
    w = {
        "split_heads": np.array([0, 0, heads, head], np.int64), "merge_heads": np.array([0, 0, dim], np.int64),
        "scale": np.array(1.0 / np.sqrt(head), np.float32),
    }
    for i in range(layers):
        w.update({f"l{i}_{k}": v for k, v in {
            "ln1_s": np.ones(dim, np.float32), "ln1_b": np.zeros(dim, np.float32),
            "wq": weight(dim, dim), "wk": weight(dim, dim), "wv": weight(dim, dim), "wo": weight(dim, dim),
            "bq": weight(dim), "bk": weight(dim), "bv": weight(dim), "bo": weight(dim),
            "ln2_s": np.ones(dim, np.float32), "ln2_b": np.zeros(dim, np.float32),
            "w1": weight(dim, ffn), "b1": weight(ffn), "w2": weight(ffn, dim), "b2": weight(dim),
        }.items()})
    shared = {"split_heads", "merge_heads", "scale"}

    def n(op, ins, outs, layer, **attrs):
        """A node of layer `layer`: its tensors and weights named per layer, the shared ones not."""
        name = lambda t: t if t in shared else f"l{layer}_{t}"
        ins = ["x" if (t == "x" and layer == 0) else (f"l{layer - 1}_y" if t == "x" else name(t)) for t in ins]
        outs = ["y" if (t == "y" and layer == layers - 1) else name(t) for t in outs]
        return helper.make_node(op, ins, outs, **attrs)

    nodes = []
    for i in range(layers):
        nodes.append(n("LayerNormalization", ["x", "ln1_s", "ln1_b"], ["xn"], i))
        for p in "qkv":
            nodes += [
                n("MatMul", ["xn", f"w{p}"], [f"{p}0"], i),
                n("Add", [f"{p}0", f"b{p}"], [f"{p}1"], i),
                n("Reshape", [f"{p}1", "split_heads"], [f"{p}2"], i),
                n("Transpose", [f"{p}2"], [f"{p}3"], i, perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]),
            ]
        nodes += [
            n("MatMul", ["q3", "k3"], ["s0"], i),
            n("Mul", ["s0", "scale"], ["s1"], i),
            n("Softmax", ["s1"], ["p"], i, axis=-1),
            n("MatMul", ["p", "v3"], ["a0"], i),
            n("Transpose", ["a0"], ["a1"], i, perm=[0, 2, 1, 3]),
            n("Reshape", ["a1", "merge_heads"], ["a2"], i),
            n("MatMul", ["a2", "wo"], ["a3"], i),
            n("Add", ["a3", "bo"], ["a4"], i),
            n("Add", ["a4", "x"], ["r1"], i),
            n("LayerNormalization", ["r1", "ln2_s", "ln2_b"], ["rn"], i),
            n("MatMul", ["rn", "w1"], ["f0"], i),
            n("Add", ["f0", "b1"], ["f1"], i),
            n("Gelu", ["f1"], ["f2"], i),
            n("MatMul", ["f2", "w2"], ["f3"], i),
            n("Add", ["f3", "b2"], ["f4"], i),
            n("Add", ["f4", "r1"], ["y"], i),
        ]
    feeds = {"x": RNG.standard_normal((batch, seq, dim)).astype(np.float32)}

    def direct(half=None):
        import mlx.core as mx

        # In `half` (a half type) as the EP's `precision` computes: weights rounded once, layer
        # norm and softmax accumulating in float32, the output back in float32.
        dtype = half or mx.float32
        m = rounded_once({k: mx.array(v) for k, v in w.items() if v.dtype == np.float32}, dtype)

        def ln(x, s, b):
            return mx.fast.layer_norm(x, s, b, 1e-5)

        def layer(x, i):
            g = lambda k: m[f"l{i}_{k}"]
            xn = ln(x, g("ln1_s"), g("ln1_b"))
            q, k, v = ((xn @ g(f"w{p}") + g(f"b{p}")).reshape(batch, seq, heads, head).transpose(0, 2, 1, 3) for p in "qkv")
            p = mx.softmax((q @ k.transpose(0, 1, 3, 2)) * m["scale"], axis=-1, precise=True)
            a = (p @ v).transpose(0, 2, 1, 3).reshape(batch, seq, dim)
            r1 = a @ g("wo") + g("bo") + x
            h = ln(r1, g("ln2_s"), g("ln2_b")) @ g("w1") + g("b1")
            h = 0.5 * h * (1 + mx.erf(h / np.sqrt(2.0)))
            return h @ g("w2") + g("b2") + r1

        def f(x):
            x = x.astype(dtype)
            for i in range(layers):
                x = layer(x, i)
            return x.astype(mx.float32)

        return mx.compile(f)

    model = _model(nodes, [("x", ["batch", "seq", dim])], ["y"], w)
    stack = f"{layers} encoder layers" if layers > 1 else "encoder layer"
    return Bench(f"{stack} d{dim} h{heads}, batch {batch}, seq {seq}", model, feeds, direct)


def cnn(batch: int = 8, size: int = 64, widths: tuple[int, ...] = (32, 64, 128), classes: int = 10) -> Bench:
    n = helper.make_node
    nodes, w, x, channels = [], {}, "x", 3
    for i, width in enumerate(widths):
        w |= {
            f"k{i}": (weight(width, channels, 3, 3) * np.sqrt(channels / 9)).astype(np.float32), f"kb{i}": weight(width),
            f"s{i}": np.ones(width, np.float32), f"b{i}": weight(width),
            f"m{i}": weight(width), f"v{i}": np.abs(weight(width)) + 1,
        }
        nodes += [
            n("Conv", [x, f"k{i}", f"kb{i}"], [f"c{i}"], strides=[2, 2], pads=[1, 1, 1, 1]),
            n("BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [f"n{i}"]),
            n("Relu", [f"n{i}"], [f"r{i}"]),
        ]
        x, channels = f"r{i}", width
    w |= {"fc": weight(channels, classes), "fcb": weight(classes)}
    nodes += [n("GlobalAveragePool", [x], ["pool"]), n("Flatten", ["pool"], ["flat"]), n("Gemm", ["flat", "fc", "fcb"], ["y"])]
    feeds = {"x": RNG.standard_normal((batch, 3, size, size)).astype(np.float32)}

    def direct(half=None):
        import mlx.core as mx

        # In `half` as the EP's `precision` computes: weights rounded once, the pooling's mean
        # accumulated in float32, the output back in float32.
        dtype = half or mx.float32
        m = rounded_once({k: mx.array(v.transpose(0, 2, 3, 1) if v.ndim == 4 else v) for k, v in w.items()}, dtype)

        def f(x):
            h = x.transpose(0, 2, 3, 1).astype(dtype)
            for i in range(len(widths)):
                h = mx.conv2d(h, m[f"k{i}"], stride=2, padding=1) + m[f"kb{i}"]
                h = (h - m[f"m{i}"]) * mx.rsqrt(m[f"v{i}"] + 1e-5) * m[f"s{i}"] + m[f"b{i}"]
                h = mx.maximum(h, 0)
            pooled = h.astype(mx.float32).mean(axis=(1, 2)).astype(dtype)
            return (pooled @ m["fc"] + m["fcb"]).astype(mx.float32)

        return mx.compile(f)

    model = _model(nodes, [("x", ["batch", 3, size, size])], ["y"], w, opset=17)
    return Bench(f"CNN 3 strided convs {widths}, {size}x{size}, batch {batch}", model, feeds, direct)


def resnet18(batch: int = 16, size: int = 224, classes: int = 1000) -> Bench:
    """ResNet-18 as an inference export leaves it: batch norm folded into the convolutions'
    weights and biases; a 7x7/2 stem, 3x3/2 max pooling, four stages of two basic blocks (a
    1x1/2 projection where the shape changes), global average pooling and the classifier."""
    n = helper.make_node
    nodes, w = [], {}
    layers = []  # (name, input, output, stride, pad) for the direct twin, in order

    def conv(x, out, c_in, c_out, k, stride, relu):
        name = f"conv{len(layers)}"
        fan_in = c_in * k * k
        w[f"{name}_w"] = (RNG.standard_normal((c_out, c_in, k, k)) * np.sqrt(2 / fan_in)).astype(np.float32)
        w[f"{name}_b"] = (RNG.standard_normal(c_out) * 0.01).astype(np.float32)
        target = f"{name}_c" if relu else out
        nodes.append(n("Conv", [x, f"{name}_w", f"{name}_b"], [target], strides=[stride, stride], pads=[k // 2] * 4))
        if relu:
            nodes.append(n("Relu", [target], [out]))
        layers.append((name, stride, k // 2, relu))
        return out

    x = conv("x", "stem", 3, 64, 7, 2, True)
    nodes.append(n("MaxPool", ["stem"], ["pooled"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, c_in, blocks = "pooled", 64, []
    for stage, c_out in enumerate([64, 128, 256, 512]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            tag = f"s{stage}b{block}"
            h = conv(x, f"{tag}_h", c_in, c_out, 3, stride, True)
            h = conv(h, f"{tag}_h2", c_out, c_out, 3, 1, False)
            short = conv(x, f"{tag}_proj", c_in, c_out, 1, stride, False) if stride != 1 or c_in != c_out else x
            nodes += [n("Add", [h, short], [f"{tag}_sum"]), n("Relu", [f"{tag}_sum"], [f"{tag}_out"])]
            blocks.append((stride != 1 or c_in != c_out))
            x, c_in = f"{tag}_out", c_out
    w |= {"fc": weight(512, classes), "fcb": weight(classes)}
    nodes += [n("GlobalAveragePool", [x], ["pool"]), n("Flatten", ["pool"], ["flat"]), n("Gemm", ["flat", "fc", "fcb"], ["y"])]
    feeds = {"x": RNG.standard_normal((batch, 3, size, size)).astype(np.float32)}

    def direct(half=None):
        import mlx.core as mx
        import mlx.nn as nn

        # In `half` as the CNN above computes it.
        dtype = half or mx.float32
        m = rounded_once({k: mx.array(v.transpose(0, 2, 3, 1) if v.ndim == 4 else v) for k, v in w.items()}, dtype)
        pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        convs = iter(layers)

        def conv_of(h):
            name, stride, pad, relu = next(convs)
            h = mx.conv2d(h, m[f"{name}_w"], stride=stride, padding=pad) + m[f"{name}_b"]
            return mx.maximum(h, 0) if relu else h

        def f(x):
            nonlocal convs
            convs = iter(layers)
            h = pool(conv_of(x.transpose(0, 2, 3, 1).astype(dtype)))
            for projected in blocks:
                inner = conv_of(conv_of(h))
                h = mx.maximum(inner + (conv_of(h) if projected else h), 0)
            pooled = h.astype(mx.float32).mean(axis=(1, 2)).astype(dtype)
            return (pooled @ m["fc"] + m["fcb"]).astype(mx.float32)

        return mx.compile(f)

    model = _model(nodes, [("x", ["batch", 3, size, size])], ["y"], w, opset=17)
    return Bench(f"ResNet-18 (batch norm folded), {size}x{size}, batch {batch}", model, feeds, direct)


def audio_front_end(batch: int = 16, seconds: float = 10.0, rate: int = 16000, n_fft: int = 400, hop: int = 160,
                    mels: int = 80) -> Bench:
    """Whisper-style log-mel features: HannWindow, STFT, power, MelWeightMatrix, log."""
    n = helper.make_node
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    f32 = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    nodes = [
        n("HannWindow", ["n_fft"], ["window"]),
        n("Unsqueeze", ["audio", "last"], ["signal"]),
        n("STFT", ["signal", "hop", "window", "n_fft"], ["spectrum"]),
        n("Mul", ["spectrum", "spectrum"], ["squares"]),
        n("ReduceSum", ["squares", "last"], ["power"], keepdims=0),
        n("MelWeightMatrix", ["mels", "n_fft", "rate", "low", "high"], ["bank"]),
        n("MatMul", ["power", "bank"], ["mel"]),
        n("Max", ["mel", "floor"], ["clipped"]),
        n("Log", ["clipped"], ["y"]),
    ]
    constants = [i64("n_fft", n_fft), i64("hop", hop), i64("last", [-1]), i64("mels", mels), i64("rate", rate),
                 f32("low", 0.0), f32("high", rate / 2), f32("floor", 1e-10)]
    graph = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()
    samples = int(seconds * rate)
    feeds = {"audio": (0.1 * RNG.standard_normal((batch, samples))).astype(np.float32)}
    bank_graph = helper.make_graph([nodes[5]], "bank", [], [helper.make_tensor_value_info("bank", TensorProto.FLOAT, None)],
                                   [c for c in constants if c.name in ("mels", "n_fft", "rate", "low", "high")])
    bank_model = helper.make_model(bank_graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    bank = ort.InferenceSession(bank_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]

    def direct():
        import mlx.core as mx

        frames = (samples - n_fft) // hop + 1
        positions = mx.array((np.arange(frames)[:, None] * hop + np.arange(n_fft)).reshape(-1).astype(np.int32))
        window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
        angle = 2 * np.pi * ((np.arange(n_fft)[:, None] * np.arange(n_fft // 2 + 1)) % n_fft) / n_fft
        # The window folded into the real DFT matrix: [n_fft, bins] cosine and sine halves.
        dft = mx.array(np.concatenate([np.cos(angle), -np.sin(angle)], 1) * window[:, None], dtype=mx.float32)
        mel = mx.array(bank)
        bins = n_fft // 2 + 1

        def f(audio):
            framed = audio[:, positions].reshape(audio.shape[0] * frames, n_fft)
            spectrum = framed @ dft
            power = spectrum[:, :bins] ** 2 + spectrum[:, bins:] ** 2
            return mx.log(mx.maximum(power @ mel, 1e-10)).reshape(audio.shape[0], frames, -1)

        return mx.compile(f)

    return Bench(f"audio log-mel front end (STFT {n_fft}/{hop}, {mels} mels), {seconds:g} s at {rate} Hz, batch {batch}",
                 model, feeds, direct)


def forest(rows: int = 20000, features: int = 20, trees: int = 100, depth: int = 10) -> Bench:
    """A random-forest regressor as scikit-learn exports it (ai.onnx.ml TreeEnsembleRegressor,
    BRANCH_LEQ): `trees` full trees of `depth` levels over `features` features."""
    per_tree = 2 ** (depth + 1) - 1
    branches = 2**depth - 1
    ids = np.arange(per_tree)
    feature = RNG.integers(0, features, (trees, per_tree))
    threshold = (RNG.standard_normal((trees, per_tree)) * 0.7).astype(np.float32)
    leaf_weight = (RNG.standard_normal((trees, per_tree - branches)) * 0.1).astype(np.float32)
    is_branch = ids < branches
    attributes = dict(
        n_targets=1, aggregate_function="SUM", nodes_treeids=np.repeat(np.arange(trees), per_tree).tolist(),
        nodes_nodeids=np.tile(ids, trees).tolist(), nodes_featureids=np.where(is_branch, feature, 0).reshape(-1).tolist(),
        nodes_modes=np.tile(np.where(is_branch, "BRANCH_LEQ", "LEAF"), trees).tolist(),
        nodes_values=np.where(is_branch, threshold, 0).reshape(-1).tolist(),
        nodes_truenodeids=np.tile(np.where(is_branch, 2 * ids + 1, 0), trees).tolist(),
        nodes_falsenodeids=np.tile(np.where(is_branch, 2 * ids + 2, 0), trees).tolist(),
        target_treeids=np.repeat(np.arange(trees), per_tree - branches).tolist(),
        target_nodeids=np.tile(ids[branches:], trees).tolist(), target_ids=[0] * (trees * (per_tree - branches)),
        target_weights=leaf_weight.reshape(-1).tolist())
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", **attributes)
    graph = helper.make_graph([node], "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=imports, ir_version=10).SerializeToString()
    feeds = {"x": RNG.standard_normal((rows, features)).astype(np.float32)}

    def direct():
        import mlx.core as mx

        # The same level-by-level walk over the same paired tables: a node's feature and
        # threshold (its bits as int32) side by side, its successors at 2g (the test holds)
        # and 2g + 1; a leaf is its own successor.
        offsets = (np.arange(trees) * per_tree)[:, None]
        on_true = np.where(is_branch, 2 * ids + 1, ids) + offsets
        on_false = np.where(is_branch, 2 * ids + 2, ids) + offsets
        pair = lambda a, b: np.stack([a.reshape(-1), b.reshape(-1)], 1).astype(np.int32)
        tests = mx.array(pair(feature, threshold.view(np.int32)))
        succ = mx.array(pair(on_true, on_false).reshape(-1))
        w = mx.array(np.concatenate([np.zeros((trees, branches), np.float32), leaf_weight], 1).reshape(-1))
        roots = mx.array((np.arange(trees) * per_tree).astype(np.int32))

        def f(x):
            at = mx.broadcast_to(roots[None, :], (x.shape[0], trees))
            for _ in range(depth):
                test = mx.take(tests, at, axis=0)
                value = mx.take_along_axis(x, test[..., 0], axis=1)
                at = mx.take(succ, 2 * at + mx.logical_not(value <= test[..., 1].view(mx.float32)).astype(mx.int32))
            return mx.sum(mx.take(w, at), axis=1, keepdims=True)

        return mx.compile(f)

    return Bench(f"random forest regressor, {trees} trees of depth {depth}, {rows} rows x {features} features", model, feeds,
                 direct)


def cpu_model() -> str:
    """The host's CPU by name: ORT's CPU EP ran 3x faster on one H200 host than on another, so
    "x ORT" figures say which CPU they were measured against."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def interleaved_ms(runners: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median ms of each runner over `runs` rounds, every round running each runner once (in an
    order rotated from round to round). Why interleaved: a GPU's clocks and a host's load move
    within seconds, and runners timed one block after another compared different machines
    (the same direct MLX CNN took 0.49 ms in one block and 0.63 ms in the next on an H200)."""
    labels = list(runners)
    for label in labels:
        for _ in range(3):
            runners[label]()
    times: dict[str, list[float]] = {label: [] for label in labels}
    for round_ in range(runs):
        shift = round_ % len(labels)
        for label in labels[shift:] + labels[:shift]:
            start = time.perf_counter()
            runners[label]()
            times[label].append((time.perf_counter() - start) * 1e3)
    return {label: statistics.median(t) for label, t in times.items()}


def median_ms(run: Callable[[], object], runs: int) -> float:
    """Median ms of `run` over `runs` warm runs."""
    return interleaved_ms({"run": run}, runs)["run"]


def ort_session(model: bytes, providers: list[str], **env: str) -> ort.InferenceSession:
    for key, value in env.items():
        os.environ[key] = value
    try:
        session = ort.InferenceSession(model, providers=providers)
    finally:
        for key in env:
            os.environ.pop(key, None)
    return session


def measure(bench: Bench, runs: int, precision: str | None = None, bound: bool = False) -> dict[str, float | str]:
    feeds = bench.feeds
    results: dict[str, float | str] = {}
    runners: dict[str, Callable[[], object]] = {}
    cpu = ort_session(bench.model, ["CPUExecutionProvider"])
    reference = cpu.run(None, feeds)[0]
    variants = [("MLX EP eager", {"ONNXRUNTIME_EP_MLX_NO_COMPILE": "1"}), ("MLX EP compiled", {})]
    if precision:
        variants.append((f"MLX EP {precision}", {"ONNXRUNTIME_EP_MLX_PRECISION": precision}))
    for label, env in variants:
        session = ort_session(bench.model, mlx_ep.providers(), **env)
        assert session.get_providers()[0] == mlx_ep.EP_NAME
        # Settings are read at a plan's first run: run once with the environment in place.
        for key, value in env.items():
            os.environ[key] = value
        out = session.run(None, feeds)[0]
        for key in env:
            os.environ.pop(key, None)
        results[f"{label} max diff"] = float(np.abs(out - reference).max())
        runners[label] = lambda session=session: session.run(None, feeds)
    bound_variants = [("MLX EP bound", {})] if bound else []
    if bound and precision:
        bound_variants.append((f"MLX EP bound {precision}", {"precision": precision}))
    for label, options in bound_variants:
        # Inputs and outputs in the EP's memory (IO binding): no host copy on either side.
        so = ort.SessionOptions()
        mlx_ep.append_to_session_options(so, options)
        session = ort.InferenceSession(bench.model, so)
        binding = session.io_binding()
        for name, value in feeds.items():
            binding.bind_ortvalue_input(name, mlx_ep.ortvalue_in_mlx_memory(value))
        outputs = [mlx_ep.ortvalue_in_mlx_memory(shape=o.shape, dtype=o.dtype) for o in cpu.run(None, feeds)]
        for info, value in zip(session.get_outputs(), outputs):
            binding.bind_ortvalue_output(info.name, value)
        session.run_with_iobinding(binding)
        results[f"{label} max diff"] = float(np.abs(mlx_ep.to_numpy(outputs[0]) - reference).max())
        runners[label] = lambda session=session, binding=binding: session.run_with_iobinding(binding)
    if bench.direct is not None:
        import mlx.core as mx

        f = bench.direct()

        def direct_run():
            # Same boundary as the EP: host inputs in, host outputs out.
            y = f(*(mx.array(v) for v in feeds.values()))
            return np.array(y)

        runners["direct MLX"] = direct_run
        if bound:
            # The same boundary as the bound EP: inputs already in MLX, the output left there.
            resident = [mx.array(v) for v in feeds.values()]
            mx.eval(resident)
            runners["direct MLX resident"] = lambda: mx.eval(f(*resident))
            if precision and "half" in inspect.signature(bench.direct).parameters:
                half = bench.direct(half={"fp16": mx.float16, "bf16": mx.bfloat16}[precision])
                runners[f"direct MLX resident {precision}"] = lambda: mx.eval(half(*resident))
    # ORT's CPU EP in a block of its own, the MLX variants interleaved with one another: a GPU
    # left idle through an ORT run starts the next run slower (on an H200, ResNet-18 4.06 ms
    # back to back against 4.54 right after ORT's run; the MLP 0.20 against 0.32 ms), while
    # ORT's own times are the same either way. A service keeps its GPU busy.
    results["ORT CPU"] = median_ms(lambda: cpu.run(None, feeds), runs)
    results.update(interleaved_ms(runners, runs))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--model", action="append", default=[], help="an ONNX model to add (random inputs)")
    parser.add_argument("--quick", action="store_true", help="small shapes (CI smoke run)")
    parser.add_argument("--large", action="store_true",
                        help="GPU-sized models instead: 12 BERT-base encoder layers at 8x256, CNNs at 16x224x224 (and "
                             "ResNet-18) and (detection-sized) 8x640x640")
    parser.add_argument("--precision", choices=["fp16", "bf16"],
                        help="also the compiled EP with this `precision` option, and its difference from ORT's float32")
    parser.add_argument("--bound", action="store_true",
                        help="also the compiled EP with inputs and outputs in its own memory (IO binding), against "
                             "direct MLX with its inputs already in MLX and its output left there")
    parser.add_argument("--match", default="", help="only the models whose name contains this text")
    args = parser.parse_args()
    mlx_ep.register_execution_provider_library()
    if args.quick:
        benches = [mlp(batch=8, width=128, hidden=256), encoder(seq=16, dim=64, ffn=128), cnn(batch=2, size=16, widths=(8, 16)),
                   audio_front_end(batch=2, seconds=0.5), forest(rows=64, trees=4, depth=4)]
    elif args.large:
        benches = [encoder(seq=256, batch=8, dim=768, heads=12, ffn=3072, layers=12),
                   cnn(batch=16, size=224, widths=(64, 128, 256)), resnet18(batch=16, size=224),
                   cnn(batch=8, size=640, widths=(32, 64, 128, 256))]
    else:
        benches = [mlp(), encoder(seq=64), encoder(seq=256), cnn(), audio_front_end(), forest()]
    for path in args.model:
        from onnxruntime_ep_mlx.feeds import make_feeds

        model = Path(path).read_bytes()
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        benches.append(Bench(Path(path).name, model, make_feeds(session.get_inputs(), {}, RNG), None))
    import mlx.core as mx

    print(f"{cpu_model()}, {os.cpu_count()} cores; ORT {ort.__version__}, MLX {mx.__version__} ({mx.default_device()}); "
          f"median of {args.runs} warm runs, each model's MLX variants interleaved, ORT's CPU EP in a block, ms")
    half = f", EP {args.precision}, CPU / EP {args.precision}, {args.precision} max diff vs CPU" if args.precision else ""
    print("| model | ORT CPU EP | MLX EP eager | MLX EP compiled | direct MLX (compiled) | EP compiled / direct | CPU / EP compiled "
          f"| max diff vs CPU{half.replace(', ', ' | ')} |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * (3 if args.precision else 0))
    for bench in [b for b in benches if args.match in b.name]:
        r = measure(bench, args.runs, args.precision, args.bound)
        extra = ""
        if args.precision:
            ms = r[f"MLX EP {args.precision}"]
            extra = f" {ms:.2f} | {r['ORT CPU'] / ms:.2f}x | {r[f'MLX EP {args.precision} max diff']:.1e} |"
        direct = r.get("direct MLX")
        ratio = f"{r['MLX EP compiled'] / direct:.2f}x" if isinstance(direct, float) else "—"
        direct_s = f"{direct:.2f}" if isinstance(direct, float) else "—"
        print(
            f"| {bench.name} | {r['ORT CPU']:.2f} | {r['MLX EP eager']:.2f} | {r['MLX EP compiled']:.2f} | {direct_s} | {ratio} | "
            f"{r['ORT CPU'] / r['MLX EP compiled']:.2f}x | {r['MLX EP compiled max diff']:.1e} |{extra}",
            flush=True,
        )
        if args.bound:
            ms, resident = r["MLX EP bound"], r.get("direct MLX resident")
            versus = f", direct MLX resident {resident:.2f} ms, bound / resident {ms / resident:.2f}x" if resident else ""
            half = ""
            if args.precision:
                hms = r[f"MLX EP bound {args.precision}"]
                half = (f"; EP {args.precision} {hms:.2f} ms, CPU / EP {r['ORT CPU'] / hms:.2f}x, "
                        f"max diff {r[f'MLX EP bound {args.precision} max diff']:.1e}")
                direct_half = r.get(f"direct MLX resident {args.precision}")
                if direct_half:
                    half += f", direct MLX {args.precision} resident {direct_half:.2f} ms, EP / direct {hms / direct_half:.2f}x"
            print(f"|   {bench.name}, IO bound in MLX memory: EP {ms:.2f} ms, CPU / EP bound {r['ORT CPU'] / ms:.2f}x, "
                  f"max diff {r['MLX EP bound max diff']:.1e}{versus}{half} |", flush=True)


if __name__ == "__main__":
    main()
