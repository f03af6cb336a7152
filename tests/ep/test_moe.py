"""MoE and QMoE where ORT's CPU EP is no exact oracle, and what the op suite cannot show.

- Float16 MoE with normalize_routing_weights 0: ORT 1.31.1's CPU kernel answers as if the
  input were zeros (only fc1's bias reaches the activation), so the EP is held to a float64
  reference instead.
- QMoE layouts where ORT quantises the activations to int8 (blocks at accuracy_level 4, 8-bit
  blocks at every level): the EP's exact dequantised product is at least as close to a float64
  reference as ORT's answer.
- A NaN in an expert no row picked stays out of the output; k above the expert count fails
  the run, as on ORT's CPU EP; declined forms run on the CPU EP.

The op-suite cases (every activation, k, normalisation, bias, bits, block and zero-point form
vs ORT's CPU EP) are in tests/ops/specs/moe.py."""

from __future__ import annotations

import gc
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import COMPILE_MODES, MLX, Run, cpu_outputs, make_model, set_env, tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from specs.moe import dequantise, mixture  # noqa: E402
from specs.quantized import pack, pack_padded  # noqa: E402

CPU = "CPUExecutionProvider"
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
MOE_PORTS = ["input", "router_probs", "fc1_experts_weights", "fc1_experts_bias", "fc2_experts_weights",
             "fc2_experts_bias", "fc3_experts_weights", "fc3_experts_bias"]
QMOE_PORTS = ["input", "router_probs", "fc1_experts_weights", "fc1_scales", "fc1_experts_bias",
              "fc2_experts_weights", "fc2_scales", "fc2_experts_bias", "fc3_experts_weights", "fc3_scales",
              "fc3_experts_bias", "fc1_zero_points", "fc2_zero_points"]


def node_model(op, ports, weights, x_shape, experts, dtype, attrs, symbolic=False):
    """A one-node model: ``input`` and ``router_probs`` fed (with a symbolic token count when
    ``symbolic``), ``weights`` as initializers."""
    names = [p if p in weights or p in ("input", "router_probs") else "" for p in ports]
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, ["output"], domain="com.microsoft", **attrs)
    elem = ELEM[dtype]
    tokens = "t" if symbolic else int(np.prod(x_shape[:-1]))
    x_dims = ["t", x_shape[-1]] if symbolic else list(x_shape)
    return make_model([node], [tensor("input", elem, x_dims), tensor("router_probs", elem, [tokens, experts])],
                      [tensor("output", elem)], [numpy_helper.from_array(v, n) for n, v in weights.items()],
                      domains=[("com.microsoft", 1)])


def feeds_for(rng, x_shape, experts, dtype):
    tokens = int(np.prod(x_shape[:-1]))
    return {"input": rng.uniform(-2, 2, x_shape).astype(dtype),
            "router_probs": rng.uniform(-3, 3, (tokens, experts)).astype(dtype)}


def moe_model(x_shape=(6, 32), experts=4, inter=16, dtype=np.float32, seed=0, nan_expert=None, **attrs):
    rng = np.random.default_rng(seed)
    hidden = x_shape[-1]
    rows = 2 * inter if attrs.get("activation_type") == "swiglu" else inter
    w = {
        "fc1_experts_weights": rng.uniform(-0.5, 0.5, (experts, rows, hidden)).astype(dtype),
        "fc1_experts_bias": rng.uniform(-0.5, 0.5, (experts, rows)).astype(dtype),
        "fc2_experts_weights": rng.uniform(-0.5, 0.5, (experts, hidden, inter)).astype(dtype),
        "fc2_experts_bias": rng.uniform(-0.5, 0.5, (experts, hidden)).astype(dtype),
    }
    if nan_expert is not None:
        w["fc1_experts_weights"][nan_expert, 0, 0] = np.nan
    feeds = feeds_for(rng, x_shape, experts, dtype)
    model = node_model("MoE", MOE_PORTS, w, x_shape, experts, dtype, attrs)
    f64 = {k: v.astype(np.float64) for k, v in {**w, **feeds}.items()}
    ref = mixture(f64["input"], f64["router_probs"], f64["fc1_experts_weights"], f64["fc1_experts_bias"],
                  f64["fc2_experts_weights"], f64["fc2_experts_bias"], attrs)
    return model, feeds, ref


def qmoe_model(x_shape=(6, 64), experts=4, inter=64, bits=4, block=None, zp=False, dtype=np.float32, seed=0,
               symbolic=False, **attrs):
    rng = np.random.default_rng(seed)
    hidden = x_shape[-1]
    rows = 2 * inter if attrs.get("activation_type") == "swiglu" else inter
    attrs = dict(attrs, expert_weight_bits=bits, **({"block_size": block} if block else {}))
    w, scales, zeros = {}, {}, {}
    for name, n, k in (("fc1", rows, hidden), ("fc2", hidden, inter)):
        q = rng.integers(0, 2**bits, (experts, n, k))
        groups = (k // block,) if block else ()
        scales[name] = (rng.uniform(0.01, 0.05, (experts, n) + groups) * 2.0 ** (4 - bits)).astype(dtype)
        w[f"{name}_experts_weights"] = pack(q, bits)
        w[f"{name}_scales"] = scales[name]
        w[f"{name}_experts_bias"] = rng.uniform(-0.5, 0.5, (experts, n)).astype(dtype)
        if zp:
            z = rng.integers(0, 2**bits, (experts, n) + groups)
            zeros[name] = pack_padded(z, bits)
            w[f"{name}_zero_points"] = zeros[name]
    feeds = feeds_for(rng, x_shape, experts, dtype)
    model = node_model("QMoE", QMOE_PORTS, w, x_shape, experts, dtype, attrs, symbolic)
    deq = {name: dequantise(w[f"{name}_experts_weights"], scales[name], zeros.get(name), bits, block)
           for name in ("fc1", "fc2")}
    f = lambda v: v.astype(np.float64)  # noqa: E731
    ref = mixture(f(feeds["input"]), f(feeds["router_probs"]), deq["fc1"], f(w["fc1_experts_bias"]), deq["fc2"],
                  f(w["fc2_experts_bias"]), attrs, quantized=True)
    if symbolic:
        return model, w, deq
    return model, feeds, ref


def relative_error(y, ref):
    return float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("x_shape", [(1, 32), (6, 32), (2, 20, 32)], ids=["one_row", "rows", "input_3d"])
@pytest.mark.parametrize("attrs", [dict(k=1), dict(k=2, activation_type="silu"), dict(k=2, activation_type="gelu"),
                                   dict(k=2, activation_type="swiglu", swiglu_fusion=1, activation_alpha=1.702,
                                        activation_beta=1.0, swiglu_limit=7.0)],
                         ids=["k1_relu", "k2_silu", "k2_gelu", "k2_swiglu"])
def test_float16_moe_is_the_float32_mixture_rounded_once(attrs, x_shape):
    """Without normalize_routing_weights ORT 1.31.1's float16 CPU kernel answers as if the input
    were zeros; the EP computes in float32 and rounds once, as ORT's float32 kernel does (and its
    float16 kernel when it renormalises: the op suite compares those)."""
    model, feeds, ref = moe_model(x_shape=x_shape, dtype=np.float16, **attrs)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert relative_error(run.outputs[0], ref) <= 2e-3
    assert relative_error(cpu_outputs(model, feeds)[0], ref) > 5e-2  # why it is not the oracle


# Where ORT quantises the activations to int8 per block.
INT8_ACTIVATIONS = [
    dict(bits=8, block=32),
    dict(bits=8, block=64, zp=True),
    dict(bits=8, block=16, accuracy_level=4),
    dict(bits=4, block=32, accuracy_level=4),
    dict(bits=4, block=16, zp=True, accuracy_level=4),
    dict(bits=4, block=64, accuracy_level=4, activation_type="swiglu", swiglu_fusion=1),
    # K >= 128: MLX's gather_qmm
    dict(bits=8, block=128, x_shape=(5, 256), inter=128),
    dict(bits=4, block=32, accuracy_level=4, x_shape=(1, 256), inter=256, activation_type="swiglu",
         swiglu_fusion=1),
    dict(bits=4, block=64, zp=True, accuracy_level=4, x_shape=(2, 9, 128), inter=256),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "float16"])
@pytest.mark.parametrize("layout", INT8_ACTIVATIONS,
                         ids=lambda d: "_".join(f"{k}{v}" for k, v in d.items()).replace(" ", ""))
def test_int8_activation_layouts_are_the_exact_product(layout, dtype):
    model, feeds, ref = qmoe_model(dtype=dtype, k=2, **layout)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    ours = relative_error(run.outputs[0], ref)
    theirs = relative_error(cpu_outputs(model, feeds)[0], ref)
    bound = 1e-5 if dtype == np.float32 else 2e-3  # float16: one rounding of the output
    assert ours <= max(bound, theirs), f"MLX {ours:.3g}, ORT's CPU EP {theirs:.3g} (relative to max |ref|)"
    assert ours <= bound, f"MLX {ours:.3g} > {bound:g}"


def test_nan_in_an_expert_no_row_picks_stays_out():
    """Expert 0 holds a NaN; the logits never pick it, so no output is NaN (a dense mixture that
    multiplied unpicked experts by a zero weight would spread it)."""
    model, feeds, ref = moe_model(nan_expert=0, k=2)
    feeds["router_probs"][:, 0] = -10.0
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert np.isfinite(run.outputs[0]).all()
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Routing with special floats: each expert writes `scale` into its own output column (fc1 gives 1
# through relu, fc2 is one-hot), so a row's output is the weight ORT's kernel gives each expert,
# 0 where it drops it.


def routing_model(op, logits, k, dtype=np.float32, scale=1.0, x=None, router_weights=None, **attrs):
    logits = np.asarray(logits, dtype)
    tokens, experts = logits.shape
    attrs = dict(attrs, k=k)
    w = {}
    if op == "MoE":
        w["fc1_experts_weights"] = np.zeros((experts, 1, experts), dtype)
        w["fc1_experts_bias"] = np.ones((experts, 1), dtype)
        w["fc2_experts_weights"] = (np.eye(experts) * scale).astype(dtype).reshape(experts, experts, 1)
        ports = MOE_PORTS
    else:  # 8-bit columns, zero point 128: fc1's codes are all zeros, fc2's one-hot
        attrs["expert_weight_bits"] = 8
        fc2 = np.full((experts, experts, 1), 128, np.uint8)
        fc2[np.arange(experts), np.arange(experts), 0] = 129
        w.update({"fc1_experts_weights": np.full((experts, 1, experts), 128, np.uint8),
                  "fc1_scales": np.ones((experts, 1), dtype), "fc1_experts_bias": np.ones((experts, 1), dtype),
                  "fc2_experts_weights": fc2, "fc2_scales": np.full((experts, experts), scale, dtype)})
        ports = QMOE_PORTS + ["fc3_zero_points", "router_weights"]
    feeds = {"input": np.zeros((tokens, experts), dtype) if x is None else np.asarray(x, dtype),
             "router_probs": logits}
    inputs = [tensor("input", ELEM[dtype], [tokens, experts]), tensor("router_probs", ELEM[dtype], [tokens, experts])]
    names = [p if p in w or p in feeds else "" for p in ports]
    if router_weights is not None:
        feeds["router_weights"] = np.asarray(router_weights, dtype)
        inputs.append(tensor("router_weights", ELEM[dtype], [tokens, experts]))
        names[-1] = "router_weights"
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, ["output"], domain="com.microsoft", **attrs)
    model = make_model([node], inputs, [tensor("output", ELEM[dtype])],
                       [numpy_helper.from_array(v, n) for n, v in w.items()], domains=[("com.microsoft", 1)])
    return model, feeds


def assert_routes_as_on_cpu(model, feeds):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    ours, theirs = run.outputs[0].astype(np.float64), cpu_outputs(model, feeds)[0].astype(np.float64)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=0)
    return ours


nan, inf = np.nan, np.inf
SPECIAL_LOGITS = [
    [1, 0, 1, 0], [nan, 0, 1, 2], [0, nan, 1, 2], [0, 1, 2, nan], [nan, nan, nan, nan], [1, nan, 3, nan],
    [2, nan, nan, 1], [1, -inf, nan, 0.5], [1, -inf, nan, -inf], [inf, 0, 1, 2], [inf, inf, 0, 1], [-inf, 0, 1, 2],
    [-inf, -inf, -inf, -inf], [inf, nan, inf, 0], [nan, nan, -0.0, 65504], [0, -0.0, 0, -0.0],
    # Probabilities that round equal tie (MoE ranks them, not the logits); weights near QMoE's 1e-8
    # threshold and ones that underflow to 0.
    [1e-8, 0, -5, -5], [0, -19, -30, -30], [0, -17, -30, -30], [0, -200, -300, -300],
]


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("normalize", [0, 1], ids=["norm0", "norm1"])
@pytest.mark.parametrize("dtype,scale", [(np.float32, 1.0), (np.float32, 1e30), (np.float16, 1.0)],
                         ids=["float", "float_scale1e30", "float16"])
@pytest.mark.parametrize("op", ["MoE", "QMoE"])
def test_special_router_logits_route_as_on_cpu(op, dtype, scale, normalize, k):
    """NaN and inf logits (fuzz s20261201 MoE-1-11, QMoE-1-1): MoE ranks softmax(logits), and a NaN,
    a +inf or a row of -inf makes every weight NaN; QMoE ranks the logits, where ORT's partial_sort
    keeps a NaN of the first k columns (the row gives 0) and never takes a later one. A weight not
    above 0 (MoE) or 1e-8 (QMoE) drops its expert; scale 1e30 shows the tiny weights kept."""
    model, feeds = routing_model(op, SPECIAL_LOGITS, k, dtype, scale, normalize_routing_weights=normalize)
    assert_routes_as_on_cpu(model, feeds)


SPECIAL_ROUTER_WEIGHTS = [
    [0.5, 0.25, 0.125, 1.0], [nan, 0.25, 0.125, 1.0], [0.5, nan, 0.125, 1.0], [inf, 0.25, 0.125, 1.0],
    [0.5, -0.25, 0.125, 1.0], [0.5, 0.0, 0.125, 1.0], [0, 0, 0, 0], [5e-9, 0.25, 0.125, 1.0], [-1, 1, 0, 0],
    [1.5e-8, 0.25, 0.125, 1.0], [1e-8, 0.25, 0, 0],
]
# No NaN among the first k logits: there ORT's pick is undefined (see moe.rs, given_route).
LOGITS_FOR_ROUTER_WEIGHTS = [[3, 2, 1, 0], [inf, 0, 1, 2], [inf, inf, 0, 1], [-inf, -inf, -inf, -inf],
                             [0, 1, 2, nan], [1, -inf, 0, nan]]


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("normalize", [0, 1], ids=["norm0", "norm1"])
@pytest.mark.parametrize("logits", LOGITS_FOR_ROUTER_WEIGHTS, ids=str)
def test_special_router_weights_mix_as_on_cpu(logits, normalize, k):
    """QMoE's router_weights: negative, zero, NaN and tiny weights (not above 1e-8) drop their
    expert, inf mixes in; renormalising by a zero sum gives zero weights."""
    rows = len(SPECIAL_ROUTER_WEIGHTS)
    model, feeds = routing_model("QMoE", [logits] * rows, k, router_weights=SPECIAL_ROUTER_WEIGHTS, scale=1e20,
                                 normalize_routing_weights=normalize)
    assert_routes_as_on_cpu(model, feeds)


@pytest.mark.parametrize("op", ["MoE", "QMoE"])
def test_a_dropped_expert_adds_nothing_even_nan(op):
    """Every row's input holds a NaN. Rows whose weights ORT drops are exactly 0, not NaN (no
    `0·NaN`); the other is NaN on both sides."""
    logits = [[inf, 0, 1, 2], [nan, 0, 1, 2], [0, 1, 2, 3], [-inf, -inf, -inf, -inf]]
    x = np.ones((4, 4), np.float32)
    x[:, 0] = nan
    model, feeds = routing_model(op, logits, 2, x=x, activation_type="identity")
    ours = assert_routes_as_on_cpu(*_with_fc1_ones(model, feeds))
    assert (ours[[0, 1, 3]] == 0).all() and np.isnan(ours[2]).all()


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu", "identity"])
@pytest.mark.parametrize("op", ["MoE", "QMoE"])
def test_activations_of_special_values_as_on_cpu(op, activation):
    """fc1's output is `x[0] + 1`: NaN, ±inf, huge and signed zeros through each activation (ORT's
    relu is `std::max(0.0f, x)`: NaN gives 0)."""
    first = [nan, inf, -inf, 1e30, -1e30, -1.0, -2.0, 3.0]
    x = np.zeros((len(first), 4), np.float32)
    x[:, 0] = first
    model, feeds = routing_model(op, [[0, 1, 2, 3]] * len(first), 2, x=x, activation_type=activation)
    assert_routes_as_on_cpu(*_with_fc1_ones(model, feeds, first_column_only=True))


def _with_fc1_ones(model, feeds, first_column_only=False):
    """The routing model with fc1's weights 1 (all, or only on the input's first column)."""
    proto = onnx.load_from_string(model)
    for init in proto.graph.initializer:
        if init.name == "fc1_experts_weights":
            w = numpy_helper.to_array(init).copy()
            one = 129 if w.dtype == np.uint8 else 1
            if first_column_only:
                w[..., 0] = one
            else:
                w[...] = one
            init.CopyFrom(numpy_helper.from_array(w, init.name))
    return proto.SerializeToString(), feeds


def test_k_above_the_expert_count_fails_as_on_cpu():
    model, feeds, _ = moe_model(k=5)
    with pytest.raises(Exception, match="k"):
        cpu_outputs(model, feeds)
    session = ort.InferenceSession(model, providers=[MLX, CPU])
    session.disable_fallback()
    with pytest.raises(Exception, match="experts"):
        session.run(None, feeds)


def _ran_on_cpu(run: Run):
    node_kernels = [(name, p) for name, p in run.kernels if not name.startswith("MLX")]
    assert node_kernels and all(p == CPU for _, p in node_kernels), run.kernels


@pytest.mark.parametrize("op,attrs", [
    ("MoE", dict(k=2, use_sparse_mixer=1)),
    ("QMoE", dict(k=2, use_sparse_mixer=1)),
    ("QMoE", dict(k=2, weights_prepacked=1)),
], ids=["moe_sparse_mixer", "qmoe_sparse_mixer", "qmoe_weights_prepacked"])
def test_declined_forms_run_on_cpu(op, attrs):
    model, feeds, _ = moe_model(**attrs) if op == "MoE" else qmoe_model(**attrs)
    run = Run(model, feeds)
    _ran_on_cpu(run)
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("env", COMPILE_MODES.values(), ids=COMPILE_MODES.keys())
def test_constant_experts_are_repacked_once(monkeypatch, capfd, env):
    """QMoE's MLX scales and biases (fc1 and fc2) are made at the first run and reused by decode
    rows, a prefill block and decode rows again, eager, replayed and traced."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    set_env(monkeypatch, env)
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1)
    model, w, deq = qmoe_model(x_shape=(1, 128), inter=128, block=32, symbolic=True, **attrs)
    session = ort.InferenceSession(model, providers=[MLX, CPU])
    session.disable_fallback()
    rng = np.random.default_rng(3)
    f64 = lambda v: v.astype(np.float64)  # noqa: E731
    attrs = dict(attrs, expert_weight_bits=4, block_size=32)
    for rows in [1, 1, 1, 7, 7, 1]:
        feeds = feeds_for(rng, (rows, 128), 4, np.float32)
        ref = mixture(f64(feeds["input"]), f64(feeds["router_probs"]), deq["fc1"], f64(w["fc1_experts_bias"]),
                      deq["fc2"], f64(w["fc2_experts_bias"]), attrs, quantized=True)
        assert relative_error(session.run(None, feeds)[0], ref) <= 1e-5
    del session
    gc.collect()
    summary = capfd.readouterr().err
    found = re.findall(r"(\d+) prepared from them in (\d+) computation\(s\)", summary)
    assert found == [("2", "2")], summary
