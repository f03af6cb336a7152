"""A decode step is traced once, not once per token: genai's attention mask grows by one each
step, and the EP lowers the nodes that read it (the plan's prologue) eagerly while the rest of
the step replays one compiled closure (ep/src/split.rs). Every step's logits and the shared KV
buffers equal ORT's CPU EP's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from genai_loop import SharedBufferLoop, closing_summary
from onnxruntime_ep_mlx import register_execution_provider_library

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import make_decoder  # noqa: E402

SHAPE = make_decoder.Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=320, context=128)
PROMPT = 8


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_execution_provider_library()


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    return make_decoder.write(tmp_path_factory.mktemp("capture"), SHAPE, "fp32", "none", seed=5)


@pytest.fixture
def compiled(monkeypatch):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.delenv("ONNXRUNTIME_EP_MLX_NO_COMPILE", raising=False)
    monkeypatch.delenv("ONNXRUNTIME_EP_MLX_NO_SPLIT", raising=False)


def session_loop(model: Path, on_mlx: bool) -> SharedBufferLoop:
    return SharedBufferLoop(model, SHAPE, on_mlx)


def capture_counts(summary: str) -> tuple[int, int, int]:
    found = re.search(r"shape-keyed path, (\d+) trace\(s\), (\d+) cache hit\(s\) \((\d+) with an eager prologue\)", summary)
    assert found, summary
    return int(found[1]), int(found[2]), int(found[3])


def test_a_hundred_decode_steps_replay_one_trace(decoder, compiled, capfd):
    steps = 100
    ids = np.random.default_rng(2).integers(3, SHAPE.vocab, size=(1, PROMPT + steps))
    loops = [session_loop(decoder, on_mlx=True), session_loop(decoder, on_mlx=False)]
    chunks = [ids[:, :PROMPT]] + [ids[:, PROMPT + t: PROMPT + t + 1] for t in range(steps)]
    for n, chunk in enumerate(chunks):
        got, want = (loop.step(chunk) for loop in loops)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"step {n}")
    for name in loops[0].arrays:
        np.testing.assert_allclose(loops[0].arrays[name], loops[1].arrays[name], rtol=1e-4, atol=1e-4, err_msg=name)
    traces, hits, split = capture_counts(closing_summary(loops, capfd))
    # The prompt and the first two steps run eagerly (the first decode step changes the ids'
    # shape too; a key compiles at its second sighting), the third traces, the rest replay it.
    assert (traces, hits, split) == (1, steps - 3, steps - 2)


def test_a_bad_step_fails_as_on_the_cpu_and_the_next_one_replays(decoder, compiled, capfd):
    """A mask longer than the KV buffer: ORT's GroupQueryAttention refuses the step. The EP
    fails it too, with the node named, and the following good step still replays the trace."""
    ids = np.random.default_rng(4).integers(3, SHAPE.vocab, size=(1, PROMPT + 8))
    loops = [session_loop(decoder, on_mlx=True), session_loop(decoder, on_mlx=False)]
    chunks = [ids[:, :PROMPT]] + [ids[:, PROMPT + t: PROMPT + t + 1] for t in range(8)]
    for chunk in chunks[:6]:
        got, want = (loop.step(chunk) for loop in loops)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(Exception):
        loops[1].step(chunks[6], mask_length=SHAPE.context + 1)
    with pytest.raises(Exception, match=r"node '/model/layers\.0/attn/GroupQueryAttention'.*rows"):
        loops[0].step(chunks[6], mask_length=SHAPE.context + 1)
    for loop in loops:
        loop.length -= 1
    for chunk in chunks[6:]:
        got, want = (loop.step(chunk) for loop in loops)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    summary = closing_summary(loops, capfd)
    assert "prologue split stopped" not in summary, summary
    traces, hits, _ = capture_counts(summary)
    # The bad step replayed the first trace before its host values were read (capture.rs,
    # speculate); they did not fit it (total past the buffer), so it ran again with them read
    # first, traced anew and failed there, the mirrors it had consumed reloaded from ORT's
    # bytes (and the plan stopped guessing). Nothing of that trace is kept, and steps 6 to 8
    # replay the first one.
    assert (traces, hits) == (2, 2 + 3), summary


def test_a_layers_attention_builds_what_only_that_layer_needs(tmp_path, monkeypatch, capfd):
    """GroupQueryAttention derives a step's rows, masks, rotary rows and scatter rows once a
    step (`Lower::shared`): a layer adds only its own arrays, each a primitive (on the GPU a
    launch, ~5 us of host work). With the per-op profile's arrays a node for 2 and 4 layers,
    `a(L) = per_layer + shared / L` gives the per-layer part: 47 here. The scatter rows of the
    new K/V, built per layer before, put it at 87 for `make profile-decode --small` (49 now)."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROFILE_OPS", "1")
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    per_node = {}
    for layers in (2, 4):
        shape = make_decoder.Shape(hidden=64, layers=layers, heads=4, kv_heads=2, ffn=96, vocab=320, context=64)
        model = make_decoder.write(tmp_path / str(layers), shape, "fp32", "none", seed=5)
        loops = [SharedBufferLoop(model, shape, on_mlx=True)]
        ids = np.random.default_rng(3).integers(3, shape.vocab, size=(1, PROMPT + 6))
        loops[0].step(ids[:, :PROMPT])
        for t in range(6):
            loops[0].step(ids[:, PROMPT + t: PROMPT + t + 1])
        summary = closing_summary(loops, capfd)
        found = re.search(r"GroupQueryAttention: \d+ node run\(s\).*?([\d.]+) arrays a node", summary)
        assert found, summary
        per_node[layers] = float(found[1])
    per_layer = 2 * per_node[4] - per_node[2]
    assert per_layer <= 55, per_node
