"""Activations kept channels-last between convolutions (the table's `layout` field): chains of
Conv, BatchNormalization, elementwise ops with every kind of broadcast operand, and global
pooling answer as ORT's CPU EP does, whichever of their values also leave channels-first (a
reshape, a graph output), for 1-, 2- and 3-D convolutions and float16."""

import gc
import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import Run, assert_kernels_on_mlx, cpu_outputs, make_model, mlx_devices, profiled_session, tensor

RNG = np.random.default_rng(5)


def init(name, array):
    return numpy_helper.from_array(array, name)


def chain(spatial, dtype=np.float32):
    """conv -> BN -> Relu -> Add [C,1..] -> Mul scalar -> conv -> PRelu [C,1..] -> Add [W] ->
    Clip -> conv -> GlobalAveragePool -> Flatten, with the first Relu's output also a graph
    output and reshaped (channels-first readers), and Sub(x, x's mean) feeding nothing that
    prefers channels-last."""
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    size = [9, 7, 5][:spatial]
    ones = [1] * spatial
    c = 6
    k = [3] * spatial
    w = lambda o, i: (RNG.standard_normal([o, i, *k]) / np.sqrt(i * 9)).astype(dtype)  # noqa: E731
    inits = [
        init("w0", w(c, 3)), init("b0", RNG.standard_normal(c).astype(dtype)),
        init("scale", RNG.uniform(0.5, 1.5, c).astype(dtype)), init("bias", RNG.standard_normal(c).astype(dtype)),
        init("mean", RNG.standard_normal(c).astype(dtype)), init("var", RNG.uniform(0.5, 2, c).astype(dtype)),
        init("per_channel", RNG.standard_normal([c, *ones]).astype(dtype)),
        init("two", np.array(2, dtype)),
        init("w1", w(c, c)), init("slope", RNG.uniform(0, 0.3, [c, *ones]).astype(dtype)),
        init("per_last", RNG.standard_normal(size[-1]).astype(dtype)),
        init("lo", np.array(-1.5, dtype)), init("hi", np.array(1.5, dtype)),
        init("w2", w(4, c)),
        init("flat", np.array([0, -1], np.int64)),
    ]
    pads = [1] * (2 * spatial)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w0", "b0"], ["c0"], pads=pads),
        n("BatchNormalization", ["c0", "scale", "bias", "mean", "var"], ["n0"]),
        n("Relu", ["n0"], ["r0"]),
        n("Reshape", ["r0", "flat"], ["r0_flat"]),
        n("Add", ["r0", "per_channel"], ["a0"]),
        n("Mul", ["a0", "two"], ["m0"]),
        n("Conv", ["m0", "w1"], ["c1"], pads=pads, strides=[2] * spatial),
        n("PRelu", ["c1", "slope"], ["p1"]),
        n("Add", ["p1", "per_last_strided"], ["a1"]),
        n("Clip", ["a1", "lo", "hi"], ["k1"]),
        n("Conv", ["k1", "w2"], ["c2"], pads=pads),
        n("GlobalAveragePool", ["c2"], ["g"]),
        n("Flatten", ["g"], ["y"]),
        n("ReduceMean", ["x"], ["x_mean"], keepdims=1),
        n("Sub", ["x", "x_mean"], ["centred"]),
    ]
    # The [W] operand of the second Add must match the strided conv's last axis.
    strided_last = (size[-1] + 2 - 3) // 2 + 1
    inits[10] = init("per_last_strided", RNG.standard_normal(strided_last).astype(dtype))
    inputs = [tensor("x", elem, [2, 3, *size])]
    outputs = [tensor("y", elem), tensor("r0", elem), tensor("r0_flat", elem), tensor("centred", elem)]
    model = make_model(nodes, inputs, outputs, initializers=inits, opset=17)
    feeds = {"x": RNG.standard_normal([2, 3, *size]).astype(dtype)}
    return model, feeds


def kept_channels_last(capfd):
    gc.collect()
    summary = capfd.readouterr().err
    found = re.findall(r"(\d+) elementwise node lowering\(s\) between convolutions kept channels-last", summary)
    return sum(int(n) for n in found), summary


def answers_as_the_cpu_ep(model, feeds, tolerance, capfd):
    """One run all on MLX, as ORT's CPU EP answers; returns the elementwise lowerings it kept
    channels-last, and the session summary."""
    expected = cpu_outputs(model, feeds)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, expected):
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    del run
    return kept_channels_last(capfd)


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_a_convolution_chain_answers_as_the_cpu_ep(spatial, monkeypatch, capfd):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    model, feeds = chain(spatial)
    kept, summary = answers_as_the_cpu_ep(model, feeds, 1e-4, capfd)
    # Relu, Add, Mul between the first convolutions; PRelu, Add, Clip between the next (one
    # eager run: each lowered once).
    assert kept == 6, summary


def test_float16_chains_keep_their_rounding(monkeypatch):
    model, feeds = chain(2, np.float16)
    expected = cpu_outputs(model, feeds)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, expected):
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)


def test_compiled_runs_answer_as_the_cpu_ep_and_replays_alike(monkeypatch, capfd):
    """The forms are recorded per lowering: the eager first run, the trace at the second and
    its replays all keep the chain channels-last, and answer alike (the compiled runs bit for
    bit; the eager run within rounding of them, as MLX's fused kernels may round differently)."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    model, feeds = chain(2)
    expected = cpu_outputs(model, feeds)
    so = ort.SessionOptions()
    so.add_provider_for_devices(mlx_devices(), {})
    session = ort.InferenceSession(model, so)
    runs = [session.run(None, feeds) for _ in range(5)]
    for outputs in runs:
        for got, want in zip(outputs, expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for later in runs[2:]:
        for got, want in zip(later, runs[1]):
            np.testing.assert_array_equal(got, want)
    del session
    # Six nodes in the eager run, six in the trace; replays lower nothing.
    kept, summary = kept_channels_last(capfd)
    assert kept == 12, summary


@pytest.mark.parametrize("pool", [("MaxPool", {}), ("AveragePool", {}), ("AveragePool", {"count_include_pad": 1})],
                         ids=["max", "average", "average_counting_pads"])
@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize("spatial", [1, 2])
def test_pooling_between_convolutions_reads_and_leaves_channels_last(spatial, ceil_mode, pool, monkeypatch, capfd):
    """conv -> Relu -> pooling 3/2 (padded; ceil_mode overhangs) -> conv, as in a ResNet stem."""
    op, attrs = pool
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    size = [12, 10][:spatial]
    k = [3] * spatial
    w = lambda o, i: (RNG.standard_normal([o, i, *k]) / 3).astype(np.float32)  # noqa: E731
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w0"], ["c0"], pads=[1] * (2 * spatial)),
        n("Relu", ["c0"], ["r0"]),
        n(op, ["r0"], ["p0"], kernel_shape=k, strides=[2] * spatial, pads=[1] * (2 * spatial),
          ceil_mode=ceil_mode, **attrs),
        n("Conv", ["p0", "w1"], ["y"], pads=[1] * (2 * spatial)),
    ]
    model = make_model(nodes, [tensor("x", shape=[2, 3, *size])], [tensor("y"), tensor("p0")],
                       initializers=[init("w0", w(4, 3)), init("w1", w(5, 4))], opset=17)
    feeds = {"x": RNG.standard_normal([2, 3, *size]).astype(np.float32)}
    kept, summary = answers_as_the_cpu_ep(model, feeds, 1e-5, capfd)
    assert kept == 1, summary  # the Relu between the convolution and the pooling


@pytest.mark.parametrize("p", [1, 2])
def test_lp_pooling_and_transposed_convolutions_read_and_leave_channels_last(p, monkeypatch, capfd):
    """conv -> Relu -> LpPool 3/2 -> ConvTranspose 2x (output_padding) -> Relu -> ConvTranspose
    grouped, as a decoder upsamples; compiled replays too. Each of the three convolutions'
    weights is laid out once (prepared), not at every run."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    n = helper.make_node
    w = lambda *shape: (RNG.standard_normal(shape) / 3).astype(np.float32)  # noqa: E731
    nodes = [
        n("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        n("Relu", ["c0"], ["r0"]),
        n("LpPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], p=p),
        n("ConvTranspose", ["p0", "wt0", "bt0"], ["u0"], strides=[2, 2], pads=[1, 1, 1, 1],
          output_padding=[1, 1], kernel_shape=[3, 3]),
        n("Relu", ["u0"], ["r1"]),
        n("ConvTranspose", ["r1", "wt1"], ["y"], group=2, kernel_shape=[2, 2], strides=[2, 2]),
    ]
    inits = [init("w0", w(4, 3, 3, 3)), init("wt0", w(4, 6, 3, 3)), init("bt0", w(6)), init("wt1", w(6, 1, 2, 2))]
    model = make_model(nodes, [tensor("x", shape=[2, 3, 11, 9])], [tensor("y"), tensor("p0")],
                       initializers=inits, opset=17)
    feeds = {"x": RNG.standard_normal([2, 3, 11, 9]).astype(np.float32)}
    expected = cpu_outputs(model, feeds)
    session = profiled_session(model, {})
    for _ in range(4):  # eager, traced, replayed twice
        for got, want in zip(session.run(None, feeds), expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert_kernels_on_mlx(session)
    del session
    kept, summary = kept_channels_last(capfd)
    assert kept == 4, summary  # both Relus, in the eager run and in the trace
    prepared = re.search(r"(\d+) prepared from them in (\d+) computation\(s\)", summary)
    assert prepared and prepared.groups() == ("3", "3"), summary


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_chains_stay_channels_last(precision, monkeypatch, capfd):
    """Under `precision` the whole chain computes in the half type (none of its rows is marked
    float32) and stays channels-last: eager, traced and replayed, within the half type's
    rounding of ORT's float32 answer."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    model, feeds = chain(2)
    expected = cpu_outputs(model, feeds)
    so = ort.SessionOptions()
    so.add_provider_for_devices(mlx_devices(), {"precision": precision})
    session = ort.InferenceSession(model, so)
    tolerance = 3e-2 if precision == "fp16" else 2e-1
    for _ in range(3):
        for got, want in zip(session.run(None, feeds), expected):
            np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    del session
    kept, summary = kept_channels_last(capfd)
    assert kept == 12, summary
