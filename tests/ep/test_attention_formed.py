"""Attention spelled out as MatMul(Q, Kᵀ) → scale → Softmax → MatMul(P, V), as encoders are
exported before a graph optimizer fuses them, runs as one fused MLX attention (the session summary
counts it) and answers as ORT's CPU EP does, eager, traced and replayed, masked or not (rows a
mask makes NaN included); the chains it must not fuse (another softmax axis, broadcast heads, a
scale only known at run time or after the mask) answer the same, unfused."""

import gc
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (COMPILE_MODES, assert_kernels_on_mlx, attentions_in_one_kernel, cpu_outputs, cuda_kernels_run,
                      make_model, profiled_session, set_env, tensor)

RNG = np.random.default_rng(11)


def chain(dtype=np.float32, scale="Mul", opset=17, axis=-1, heads=3, key_heads=3, head=8, value_head=8,
          weights_out=False, mask=None, mask_first=False, scale_after_mask=False, poison=False, flat=False,
          value_heads=None):
    """q [2, heads, 5, head] · kᵀ (k [2, key_heads, 7, head], transposed in the graph), scaled by
    `scale` ("Mul", "Mul first" for the constant as the first operand, "Div", "input" for a
    graph input, None), plus a graph-input mask of shape `mask` (as Add's first operand when
    `mask_first`; scaled after it when `scale_after_mask`; with rows it makes NaN when
    `poison`), Softmax over `axis`, times v [2, value_heads (else heads), 7, value_head]; with
    `flat`, the batch and head axes are one, as PyTorch's nn.MultiheadAttention exports them."""
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    n = helper.make_node
    # With the mask before the scale, "scores" is the masked product.
    product = "product" if scale_after_mask else "scores"
    swap_last = [0, 2, 1] if flat else [0, 1, 3, 2]
    nodes = [n("Transpose", ["k"], ["k_t"], perm=swap_last), n("MatMul", ["q", "k_t"], [product])]
    if scale_after_mask:
        nodes.append(n("Add", [product, "mask"], ["scores"]))
    inits, inputs = [], [tensor("q", elem), tensor("k", elem), tensor("v", elem)]
    # Flat, one key head is a stack of one (MatMul broadcasts a 1, not 2 against 6).
    stack = (lambda h: [2 * h if h > 1 else 1]) if flat else (lambda h: [2, h])
    feeds = {
        "q": RNG.standard_normal([*stack(heads), 5, head]).astype(dtype),
        "k": RNG.standard_normal([*stack(key_heads), 7, head]).astype(dtype),
        "v": RNG.standard_normal([*stack(value_heads or heads), 7, value_head]).astype(dtype),
    }
    factor = np.array(1 / np.sqrt(head) * 1.5, dtype)
    scaled = "scaled"
    if scale == "Mul":
        nodes.append(n("Mul", ["scores", "factor"], [scaled]))
    elif scale == "Mul first":
        nodes.append(n("Mul", ["factor", "scores"], [scaled]))
    elif scale == "Div":
        factor = np.array(np.sqrt(head) / 1.5, dtype)
        nodes.append(n("Div", ["scores", "factor"], [scaled]))
    elif scale == "input":
        nodes.append(n("Mul", ["scores", "factor"], [scaled]))
        inputs.append(tensor("factor", elem))
        feeds["factor"] = factor
    else:
        scaled = "scores"
    if scale not in (None, "input"):
        inits.append(numpy_helper.from_array(factor, "factor"))
    if mask is not None:
        if not scale_after_mask:
            nodes.append(n("Add", ["mask", scaled] if mask_first else [scaled, "mask"], ["masked"]))
            scaled = "masked"
        inputs.append(tensor("mask", elem))
        values = np.where(RNG.random(mask) < 0.3, np.finfo(dtype).min, 0).astype(dtype)
        if poison:
            # Rows of [2, 1, 5, 7]: one all -inf, one with a NaN, one with +inf, one partly -inf.
            values[0, 0, 0, :] = -np.inf
            values[0, 0, 1, 3] = np.nan
            values[1, 0, 2, 6] = np.inf
            values[1, 0, 3, :4] = -np.inf
        feeds["mask"] = values
    nodes += [n("Softmax", [scaled], ["weights"], axis=axis), n("MatMul", ["weights", "v"], ["y"])]
    outputs = [tensor("y", elem)] + ([tensor("weights", elem)] if weights_out else [])
    return make_model(nodes, inputs, outputs, initializers=inits, opset=opset), feeds


def fused_on_mlx(model, feeds, tolerance, monkeypatch, capfd, mode="eager_then_compiled", runs=3):
    """`runs` runs all on MLX, each answering as ORT's CPU EP; returns how many lowerings the
    session summary says formed a fused attention, and the summary."""
    set_env(monkeypatch, {**COMPILE_MODES[mode], "ONNXRUNTIME_EP_MLX_VERBOSE": "1"})
    gc.collect()
    capfd.readouterr()  # an earlier test's session, released late, is not this one's
    expected = cpu_outputs(model, feeds)
    session = profiled_session(model)
    for _ in range(runs):
        for got, want in zip(session.run(None, feeds), expected):
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tolerance, atol=tolerance)
    assert_kernels_on_mlx(session)
    del session
    return fused_in_summary(capfd)


def fused_in_summary(capfd):
    """How many lowerings the session summary (printed when the session is released) says
    formed a fused attention, and the summary."""
    gc.collect()
    summary = capfd.readouterr().err
    found = re.findall(r"(\d+) attention\(s\) fused from MatMul, Softmax and MatMul", summary)
    return sum(int(count) for count in found), summary


@pytest.mark.parametrize("mode", sorted(COMPILE_MODES))
@pytest.mark.parametrize("scale", ["Mul", "Mul first", "Div", None])
def test_a_spelled_out_attention_runs_fused(scale, mode, monkeypatch, capfd):
    model, feeds = chain(scale=scale)
    fused, summary = fused_on_mlx(model, feeds, 1e-5, monkeypatch, capfd, mode)
    # Eager runs lower every time; a compiled plan lowers once to trace, then replays.
    want = {"eager_only": 3, "eager_then_compiled": 2, "traced_first": 1}[mode]
    assert fused == want, summary


@pytest.mark.parametrize(
    "case",
    [
        dict(dtype=np.float16),
        dict(opset=11, axis=3),  # the flattening Softmax, flattened at the last axis
        dict(weights_out=True),  # the weights are read too: computed as well, and right
        dict(value_head=4, head=16),
        dict(flat=True),  # [batch * heads, L, D], as nn.MultiheadAttention exports
        dict(flat=True, dtype=np.float16, weights_out=True),
        dict(key_heads=1, value_heads=1),  # one key/value head for every query head
        dict(key_heads=1, value_heads=1, dtype=np.float16, mask=[2, 1, 1, 7]),
        dict(flat=True, key_heads=1, value_heads=1),
    ],
    ids=["float16", "softmax-11-last-axis", "weights-also-an-output", "value-head-differs", "3d-heads",
         "3d-heads-float16-weights-out", "one-key-head", "one-key-head-masked-float16", "3d-one-key-head"],
)
def test_attention_variants_run_fused(case, monkeypatch, capfd):
    fused_twice(case, monkeypatch, capfd)


def fused_twice(case, monkeypatch, capfd):
    """Three runs of `chain(**case)` on MLX as ORT's CPU EP answers, its attention fused at the
    eager first run and in the trace of the second; the model and its feeds."""
    model, feeds = chain(**case)
    tolerance = 2e-3 if case.get("dtype") == np.float16 else 1e-5
    fused, summary = fused_on_mlx(model, feeds, tolerance, monkeypatch, capfd)
    assert fused == 2, summary
    return model, feeds


@pytest.mark.parametrize(
    "case",
    [
        dict(mask=[2, 1, 1, 7]),
        dict(mask=[2, 1, 1, 7], mask_first=True),
        dict(mask=[7], scale=None),
        dict(mask=[5, 7], scale="Div"),
        dict(mask=[2, 3, 5, 7], dtype=np.float16),
        dict(mask=[2, 1, 5, 7], poison=True),
        dict(mask=[2, 1, 5, 7], poison=True, dtype=np.float16),  # MLX's GPU kernels take float16
        dict(flat=True, mask=[6, 5, 7]),
        dict(flat=True, mask=[5, 7], dtype=np.float16),
    ],
    ids=["padding-mask", "mask-as-first-operand", "1d-mask-unscaled", "2d-mask-divided", "full-mask-float16",
         "rows-the-mask-makes-nan", "rows-the-mask-makes-nan-float16", "3d-heads-3d-mask", "3d-heads-2d-mask-float16"],
)
def test_masked_attention_runs_fused(case, monkeypatch, capfd):
    model, feeds = fused_twice(case, monkeypatch, capfd)
    if case.get("poison"):
        (y,) = cpu_outputs(model, feeds)
        assert np.isnan(y[0, :, :2]).all() and np.isnan(y[1, :, 2]).all() and not np.isnan(y[1, :, 3]).any()


@pytest.mark.parametrize(
    "case",
    [
        dict(axis=2),
        dict(opset=11, axis=2),  # flattened at axis 2: rows span two axes
        dict(key_heads=1),  # k broadcast over the heads, v not: MLX's kernel takes one count
        dict(scale="input"),  # the scale is only known at run time
        dict(mask=[2, 1, 1, 7], scale_after_mask=True),  # the scale would apply to the mask too
        dict(mask=[3, 1, 3, 5, 7]),  # a 5-D mask makes 5-D scores
        dict(flat=True, key_heads=1),  # 3-D, k broadcast over the stack, v not
    ],
    ids=["softmax-over-keys-axis", "softmax-11-flattened-early", "broadcast-key-heads", "runtime-scale",
         "scaled-after-the-mask", "mask-raising-the-rank", "3d-broadcast-key-stack"],
)
def test_chains_that_are_not_attention_stay_unfused(case, monkeypatch, capfd):
    model, feeds = chain(**case)
    fused, summary = fused_on_mlx(model, feeds, 1e-5, monkeypatch, capfd)
    assert fused == 0, summary


def encoder_on_mlx(options, tolerance, monkeypatch, capfd, **shape):
    """Three runs of the benchmark's encoder (`bench_models.encoder(**shape)`: Q, K, V split
    into heads by Reshape and Transpose, as exported; the plan compiled after its first run)
    on MLX with the EP's `options`, each answering as ORT's CPU EP; returns how many lowerings
    formed a fused attention, and the session summary."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import bench_models

    bench = bench_models.encoder(**shape)
    set_env(monkeypatch, {"ONNXRUNTIME_EP_MLX_COMPILE_AFTER": "1"})
    gc.collect()
    capfd.readouterr()  # an earlier test's session, released late, is not this one's
    (expected,) = cpu_outputs(bench.model, bench.feeds)
    session = profiled_session(bench.model, {"verbose": "1", **options})
    for _ in range(3):
        (got,) = session.run(None, bench.feeds)
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)
    assert_kernels_on_mlx(session)
    del session
    return fused_in_summary(capfd)


def test_a_half_precision_encoder_fuses_every_layer(monkeypatch, capfd):
    """The benchmark's encoder under `precision=fp16`: every layer's attention fused, the
    output close to float32's."""
    fused, summary = encoder_on_mlx({"precision": "fp16"}, 2e-2, monkeypatch, capfd, seq=16, dim=64, heads=4,
                                    ffn=128, layers=3)
    assert "precision fp16" in summary, summary
    assert fused == 2 * 3, summary


@pytest.mark.parametrize("no_cuda_kernels", [False, True], ids=["kernels", "no-cuda-kernels"])
def test_a_float32_encoders_short_attention_runs_in_one_kernel_on_cuda(no_cuda_kernels, monkeypatch, capfd):
    """The benchmark's encoder in float32 (its Reshapes key the plan by shape), 3 layers of 24
    keys: on MLX's CUDA backend every fused attention runs as one hand-written kernel
    (`custom::dense_attention`), unless the session turns the kernels off; elsewhere none
    does. Answers as ORT's CPU EP either way."""
    options = {"no_cuda_kernels": "1"} if no_cuda_kernels else {}
    fused, summary = encoder_on_mlx(options, 1e-5, monkeypatch, capfd, seq=24, batch=2, dim=64, heads=4, ffn=128,
                                    layers=3)
    assert fused == 2 * 3, summary
    expected = fused if cuda_kernels_run(summary, no_cuda_kernels) else 0
    assert attentions_in_one_kernel(summary) == expected, summary


def random_chain(rng):
    """A random attention chain: 3-D or 4-D heads, one key/value head or as many as the queries,
    float32 or float16, any scale form (a negative or tiny factor included), and a mask of
    random broadcast shape whose values mix 0, large negatives, -inf and, now and then, NaN
    and +inf."""
    flat = bool(rng.integers(2))
    dtype = [np.float32, np.float16][rng.integers(2)]
    batch, heads, rows, keys = (int(rng.choice(c)) for c in ([1, 2], [1, 3], [1, 4], [1, 5]))
    key_heads = int(rng.choice([heads, 1]))
    head = int(rng.choice([1, 8, 16]))
    value_head = int(rng.choice([head, 4]))
    # Flat, the one key/value head all queries share is a stack of one (MatMul broadcasts it).
    stack = (lambda h: [batch * h if h == heads else 1]) if flat else (lambda h: [batch, h])
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    n = helper.make_node
    nodes = [n("Transpose", ["k"], ["k_t"], perm=[0, 2, 1] if flat else [0, 1, 3, 2]),
             n("MatMul", ["q", "k_t"], ["scores"])]
    inputs = [tensor("q", elem), tensor("k", elem), tensor("v", elem)]
    feeds = {
        "q": rng.standard_normal([*stack(heads), rows, head]).astype(dtype),
        "k": rng.standard_normal([*stack(key_heads), keys, head]).astype(dtype),
        "v": rng.standard_normal([*stack(key_heads), keys, value_head]).astype(dtype),
    }
    inits = []
    scaled = "scores"
    form = rng.choice(["Mul", "Mul first", "Div", "none"])
    if form != "none":
        factor = np.array(rng.choice([0.125, -0.7, 1e-3, 2.5]), dtype)
        inits.append(numpy_helper.from_array(factor, "factor"))
        operands = {"Mul": ["scores", "factor"], "Mul first": ["factor", "scores"], "Div": ["scores", "factor"]}[form]
        nodes.append(n("Div" if form == "Div" else "Mul", operands, ["scaled"]))
        scaled = "scaled"
    if rng.integers(3):
        full = [*stack(heads), rows, keys]
        rank = int(rng.integers(1, len(full) + 1))
        shape = [d if rng.integers(2) else 1 for d in full[len(full) - rank:]]
        # No -1e4 in float16: its ulp of 8 rounds the scores away in the model's float16 sum,
        # which ORT's CPU EP computes in float32 (its InsertCastTransformer), the EP as typed.
        fills = [0.0, -3.0, -1e4 if dtype == np.float32 else -3.0, -np.inf]
        values = rng.choice(fills, size=shape, p=[0.5, 0.2, 0.2, 0.1]).astype(dtype)
        if rng.integers(4) == 0:
            values.flat[rng.integers(values.size)] = rng.choice([np.nan, np.inf])
        nodes.append(n("Add", [scaled, "mask"], ["masked"]))
        inputs.append(tensor("mask", elem))
        feeds["mask"] = values
        scaled = "masked"
    nodes += [n("Softmax", [scaled], ["weights"], axis=-1), n("MatMul", ["weights", "v"], ["y"])]
    model = make_model(nodes, inputs, [tensor("y", elem)], initializers=inits, opset=17)
    return model, feeds, dtype


@pytest.mark.parametrize("seed", range(40))
def test_random_attention_chains_run_fused_and_answer_as_the_cpu_ep(seed, monkeypatch, capfd):
    model, feeds, dtype = random_chain(np.random.default_rng(1000 + seed))
    tolerance = 3e-3 if dtype == np.float16 else 2e-5
    fused, summary = fused_on_mlx(model, feeds, tolerance, monkeypatch, capfd)
    assert fused == 2, summary
