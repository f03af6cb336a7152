"""Quantized weights prepared once per session, held once in memory, and shared when tied.

MatMulNBits repacks ORT's scales and zero points into MLX's affine form; with constant weights
the plan does it at the first run (eager or inside a compiled trace) and never again, and the
session summary (ONNXRUNTIME_EP_MLX_VERBOSE=1) counts it. An initializer's bytes move into MLX
(the plan keeps no host copy; ORT drops its own after Compile), so a session of int4 weights
holds about their packed size, not a float copy. Tied embeddings (the LM head's MatMulNBits
weight read by the embedding's GatherBlockQuantized through a Reshape, which ORT constant-folds
into a second initializer with the same bytes) are held once.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import COMPILE_MODES, MLX, make_model, set_env, tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import make_decoder  # noqa: E402

CPU = "CPUExecutionProvider"
MIB = 1 << 20


def int4_weights(n, k, block=32, seed=0):
    """A random int4 B [n, k/block, block/2] (low nibble first), float32 scales [n, k/block]
    and the float64 weights they stand for (ORT's default zero point 8)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, (n, k)).astype(np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, k // block, block // 2)
    scales = rng.uniform(0.01, 0.1, (n, k // block)).astype(np.float32)
    w = (q.astype(np.float64) - 8) * np.repeat(scales.astype(np.float64), block, axis=1)
    return packed, scales, w


def nbits_model(k, n, block=32, weights_as_inputs=False, seed=0):
    """Y = A · Wᵀ through MatMulNBits; W's B and scales are initializers or graph inputs."""
    packed, scales, w = int4_weights(n, k, block, seed)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block)
    inputs = [tensor("A", shape=["m", k])]
    initializers = [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales")]
    if weights_as_inputs:
        inputs += [tensor("B", TensorProto.UINT8, list(packed.shape)), tensor("scales", shape=list(scales.shape))]
        initializers = []
    model = make_model([node], inputs, [tensor("Y")], initializers, domains=[("com.microsoft", 1)])
    return model, {"B": packed, "scales": scales}, w


def session(model, monkeypatch, **env):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    set_env(monkeypatch, env)
    s = ort.InferenceSession(model, providers=[MLX, CPU])
    s.disable_fallback()
    return s


def summary_after_release(capfd):
    """The EP's session summary, printed when the session (already let go by the caller) is
    released."""
    gc.collect()
    return capfd.readouterr().err


def prepared(summary):
    """(arrays prepared, computations) of the summary's one plan."""
    found = re.findall(r"(\d+) prepared from them in (\d+) computation\(s\)", summary)
    assert len(found) == 1, summary
    return tuple(int(v) for v in found[0])


def mlx_memory(summary):
    """MiB held by MLX's live arrays after the last run (of the last session summarised)."""
    found = re.findall(r"MLX memory ([\d.]+) MiB active", summary)
    assert found, summary
    return float(found[-1])


def constants_mib(summary):
    found = re.search(r"constants ([\d.]+) MiB \((\d+) twin\(s\) shared\)", summary)
    assert found, summary
    return float(found.group(1)), int(found.group(2))


def relative_error(y, ref):
    return float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("env", COMPILE_MODES.values(), ids=COMPILE_MODES.keys())
def test_constant_weights_are_repacked_once(monkeypatch, capfd, env):
    """Decode rows, prefill blocks and decode rows again: one preparation in the summary, the
    product right on every run (eager, replayed, and traced with the preparation inside). On
    MLX's CUDA backend up to 8 rows read ORT's packing in a hand-written kernel, and only the
    16-row blocks need the repacked weights."""
    model, _, w = nbits_model(512, 96)
    s = session(model, monkeypatch, **env)
    rng = np.random.default_rng(1)
    for rows in [1, 1, 1, 7, 7, 16, 16, 1]:
        a = rng.uniform(-1, 1, (rows, 512)).astype(np.float32)
        assert relative_error(s.run(None, {"A": a})[0], a.astype(np.float64) @ w.T) <= 1e-5
    del s
    summary = summary_after_release(capfd)
    assert prepared(summary) == (1, 1), summary
    assert re.search(r"preparing constants [\d.]+ ms", summary), summary
    if "NO_COMPILE" not in str(env):
        assert "trace(s)" in summary and " 0 trace(s)" not in summary, summary


def test_weights_fed_as_inputs_are_repacked_every_run(monkeypatch, capfd):
    """Graph inputs can change between runs: nothing is kept, each run uses its own weights."""
    model, _, _ = nbits_model(256, 64, weights_as_inputs=True)
    s = session(model, monkeypatch)
    a = np.random.default_rng(2).uniform(-1, 1, (3, 256)).astype(np.float32)
    for seed in range(3):  # the third run is a compiled replay
        packed, scales, w = int4_weights(64, 256, seed=seed)
        y = s.run(None, {"A": a, "B": packed, "scales": scales})[0]
        assert relative_error(y, a.astype(np.float64) @ w.T) <= 1e-5
    del s
    summary = summary_after_release(capfd)
    assert "prepared from them" not in summary, summary


MEMORY_PROBE = """
import gc, sys, numpy as np, onnxruntime as ort
sys.path.insert(0, {python!r})
import onnxruntime_ep_mlx as mlx_ep
mlx_ep.register_execution_provider_library()

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

def run(path, k):
    s = ort.InferenceSession(path, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
    s.disable_fallback()
    for _ in range(3):  # eager, traced + compiled, replayed
        y = s.run(None, {{"A": np.ones((1, k), np.float32)}})[0]
    return s, y

warm = run({small!r}, 512)  # the one-time costs of MLX and ORT are not the weights'
del warm
gc.collect()
before = rss()
session, y = run({big!r}, {k})
print(rss() - before)
np.save({out!r}, y)
"""


def test_int4_weights_are_held_once(tmp_path):
    """4096 x 4096 int4, block 32: B is 8 MiB and its float32 scales 2 MiB; a float32 copy of
    W would be 64 MiB. In a fresh process (glibc's mmap threshold fixed, so freed blocks leave
    the resident set), a session grows by the initializers plus MLX's biases (one scale-sized
    array): ORT drops its copies after Compile and the plan hands its own to MLX. MLX's own
    count, in the summary, says the same."""
    k = n = 4096
    model, weights, w = nbits_model(k, n)
    packed_bytes = sum(v.nbytes for v in weights.values())
    (tmp_path / "big.onnx").write_bytes(model)
    (tmp_path / "small.onnx").write_bytes(nbits_model(512, 96, seed=1)[0])
    # On MLX's CUDA backend building a kernel grows the resident set too: with the big session's
    # kernel built in the probe, RSS grew 16.1 MiB on an H100 (28.6 with the warm-up's built as
    # well). So the probe runs twice over a kernel cache of its own, and the second process,
    # which reads every kernel from that cache, is the one measured.
    probe = MEMORY_PROBE.format(python=str(Path(__file__).resolve().parents[2] / "python"), k=k,
                                small=str(tmp_path / "small.onnx"), big=str(tmp_path / "big.onnx"),
                                out=str(tmp_path / "y.npy"))
    env = {**os.environ, "ONNXRUNTIME_EP_MLX_VERBOSE": "1", "MALLOC_MMAP_THRESHOLD_": str(128 << 10),
           "MLX_PTX_CACHE_DIR": str(tmp_path / "kernels")}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    grown, summary = int(done.stdout.split()[-1]), done.stderr
    assert relative_error(np.load(tmp_path / "y.npy"), np.ones(k) @ w.T) <= 1e-5
    big_plan = summary.strip().splitlines()[-1]
    constants, twins = constants_mib(big_plan)
    assert constants == pytest.approx(packed_bytes / MIB, abs=0.01) and twins == 0, summary
    biases = weights["scales"].nbytes
    held = mlx_memory(summary) * MIB
    assert packed_bytes <= held <= packed_bytes + biases + MIB // 2, summary
    # MLX's arrays and the run's small buffers; the initializers twice (10 MiB more) or a
    # float copy (64 MiB) would not fit. On a GPU MLX's arrays live in device memory, not in
    # the resident set.
    least = packed_bytes if "device cpu" in summary else 0
    assert least <= grown <= packed_bytes + biases + 4 * MIB, \
        f"RSS grew {grown / MIB:.1f} MiB for {packed_bytes / MIB:.1f} MiB of int4 weights\n{summary}"


def tied_model(layout, vocab=1024, hidden=512, block=32):
    """Embedding and LM head over one int4 table: GatherBlockQuantized reads the LM head's
    MatMulNBits weight as [vocab, hidden/2] (genai's builder: a Reshape of B) or as B itself
    [vocab, hidden/block, block/2] with its scales reshaped to [vocab, hidden/block, 1]."""
    packed, scales, _ = int4_weights(vocab, hidden, block)
    initializers = [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales")]
    gbq = dict(domain="com.microsoft", bits=4, block_size=block)
    if layout == "rows":
        initializers.append(numpy_helper.from_array(np.array([vocab, hidden // 2], np.int64), "rows"))
        nodes = [helper.make_node("Reshape", ["B", "rows"], ["table"]),
                 helper.make_node("GatherBlockQuantized", ["table", "ids", "scales"], ["h"], **gbq)]
    else:
        initializers += [numpy_helper.from_array(np.array([vocab, hidden // block, 1], np.int64), "blocks"),
                         numpy_helper.from_array(np.array([0, 0, hidden], np.int64), "flat")]
        nodes = [helper.make_node("Reshape", ["scales", "blocks"], ["block_scales"]),
                 helper.make_node("GatherBlockQuantized", ["B", "ids", "block_scales"], ["hb"], quantize_axis=2, **gbq),
                 helper.make_node("Reshape", ["hb", "flat"], ["h"])]
    nodes.append(helper.make_node("MatMulNBits", ["h", "B", "scales"], ["logits"], domain="com.microsoft",
                                  K=hidden, N=vocab, bits=4, block_size=block))
    model = make_model(nodes, [tensor("ids", TensorProto.INT64, [1, "s"])], [tensor("logits")], initializers,
                       domains=[("com.microsoft", 1)])
    return model, (packed, scales)


@pytest.mark.parametrize("layout", ["rows", "blocks"])
def test_tied_embedding_and_lm_head_hold_one_table(tmp_path, monkeypatch, capfd, layout):
    """ORT folds the Reshape into a second initializer with the same bytes; the plan holds it
    as a view of the first, so MLX holds the table once."""
    model, table = tied_model(layout)
    table_bytes = sum(v.nbytes for v in table)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # folds constants
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    feeds = {"ids": np.array([[3, 1000, 17, 3]], np.int64)}
    cpu = ort.InferenceSession(model, options, providers=[CPU]).run(None, feeds)[0]
    folded = onnx.load(options.optimized_model_filepath).graph.initializer
    copies = [i.name for i in folded if i.name not in ("B", "scales")
              and numpy_helper.to_array(i).tobytes() in [v.tobytes() for v in table]]
    assert len(copies) == 1, [i.name for i in folded]
    s = session(model, monkeypatch)
    for _ in range(3):
        y = s.run(None, feeds)[0]
    assert relative_error(y, cpu.astype(np.float64)) <= 1e-5  # float32 sums over K = 512, any order
    del s
    summary = summary_after_release(capfd)
    claimed = re.search(r"(\d+)/(\d+) nodes claimed", summary)
    assert claimed and claimed.group(1) == claimed.group(2), summary
    constants, twins = constants_mib(summary)
    assert twins == 1, summary
    assert constants == pytest.approx(table_bytes / MIB, abs=0.01), summary
    assert mlx_memory(summary) <= 1.5 * table_bytes / MIB + 0.1, summary


def test_tied_decoder_runs_on_mlx_with_one_table(tmp_path, monkeypatch, capfd):
    """scripts/make_decoder.py --tied: the embedding reads the LM head's int4 table; one
    forward pass, every node on MLX, logits as ORT's CPU EP gives them (accuracy_level 4 there:
    ORT quantises activations, so the bound is ORT's own error)."""
    shape = make_decoder.Shape(hidden=64, layers=1, heads=4, kv_heads=2, ffn=96, vocab=320, context=16)
    path = make_decoder.write(tmp_path, shape, "fp32", "int4", seed=1, tied=True)
    kv = {f"past_key_values.0.{kind}": np.zeros((1, 2, 0, 16), np.float32) for kind in ("key", "value")}
    feeds = {"input_ids": np.array([[5, 300, 7]], np.int64), "attention_mask": np.ones((1, 3), np.int64), **kv}
    cpu = ort.InferenceSession(str(path), providers=[CPU]).run(["logits"], feeds)[0]
    s = session(str(path), monkeypatch)
    logits = s.run(["logits"], feeds)[0]
    assert relative_error(logits, cpu.astype(np.float64)) <= 2e-2
    del s
    summary = summary_after_release(capfd)
    claimed = re.search(r"(\d+)/(\d+) nodes claimed", summary)
    assert claimed and claimed.group(1) == claimed.group(2), summary
    assert constants_mib(summary)[1] == 1, summary
