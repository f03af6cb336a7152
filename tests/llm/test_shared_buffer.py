"""The shared KV buffer as onnxruntime-genai uses it: one OrtValue bound as both past_key_values.N
and present.N (IO binding), [1, kv_heads, context, head], zero-initialised. The EP writes back
only the rows that changed and feeds the next step from its device mirror of the buffer
(ep/src/resident.rs); every step's logits and the whole buffer must equal ORT's CPU EP's.

The session summary (ONNXRUNTIME_EP_MLX_VERBOSE=1, printed at teardown) counts rows written back
and inputs fed from the mirror, which is how these tests see what was (not) copied.
"""

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

SHAPE = make_decoder.Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=320, context=32)
PROMPT, DECODE = 5, 6
BUFFERS = 2 * SHAPE.layers  # a key and a value buffer per layer


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_execution_provider_library()


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    return make_decoder.write(tmp_path_factory.mktemp("shared"), SHAPE, "fp32", "none", seed=3)


def session_loop(model: Path, on_mlx: bool) -> SharedBufferLoop:
    return SharedBufferLoop(model, SHAPE, on_mlx)


def tokens(count: int) -> np.ndarray:
    return np.random.default_rng(11).integers(3, SHAPE.vocab, size=(1, count))


def summary_counts(text: str) -> tuple[int, int, int, int]:
    found = re.search(r"shared buffers: (\d+) of (\d+) row\(s\) written back, (\d+) input\(s\) fed from the "
                      r"device mirror, (\d+) mirror\(s\) updated in place", text)
    assert found, text
    return int(found[1]), int(found[2]), int(found[3]), int(found[4])


def generate_both(decoder, edit=None, in_mlx_memory=False):
    """Prompt + DECODE steps on MLX and on CPU; `edit(loop, step)` may change both loops'
    buffers between steps; `in_mlx_memory` puts the MLX loop's buffers in the EP's memory.
    Returns both loops and the MLX EP's session summary."""
    ids = tokens(PROMPT + DECODE)
    loops = [SharedBufferLoop(decoder, SHAPE, on_mlx=True, in_mlx_memory=in_mlx_memory),
             session_loop(decoder, on_mlx=False)]
    steps = [ids[:, :PROMPT]] + [ids[:, PROMPT + t: PROMPT + t + 1] for t in range(DECODE)]
    for n, chunk in enumerate(steps):
        if edit is not None:
            for loop in loops:
                edit(loop, n)
        got, want = (loop.step(chunk) for loop in loops)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"step {n} logits")
    for name in loops[0].arrays:
        np.testing.assert_allclose(loops[0].arrays[name], loops[1].arrays[name], rtol=1e-4, atol=1e-4, err_msg=name)
    return loops


def test_only_new_rows_are_written_back_and_steps_read_the_device_mirror(decoder, monkeypatch, capfd):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    loops = generate_both(decoder)
    summary = closing_summary(loops, capfd)
    written, held, mirrored, in_place = summary_counts(summary)
    rows_per_token = BUFFERS * SHAPE.kv_heads
    assert written == rows_per_token * (PROMPT + DECODE)
    assert held == rows_per_token * SHAPE.context * (1 + DECODE)
    assert mirrored == BUFFERS * DECODE  # every step after the prompt
    # Each compiled step's new rows went into the fed mirror's own buffer: nothing else of the
    # buffer was written. (The steps before the trace is compiled run eagerly, and an eager
    # graph holds its inputs until its outputs are copied.)
    compiled = int(re.search(r"\((\d+) with an eager prologue\)", summary)[1])
    assert compiled >= DECODE - 2, summary
    if "device gpu" in summary:
        # MLX donates a buffer only to an array that is its sole holder, and on its CUDA
        # backend that depends on timing: on the H200, some runs had one compiled step in four
        # copy its mirror instead (a full-buffer write; the rows written back are the same).
        assert BUFFERS * (compiled - 1) <= in_place <= BUFFERS * compiled, summary
    else:
        assert in_place == BUFFERS * compiled, summary


def test_buffers_in_the_eps_own_memory_generate_the_same(decoder, monkeypatch, capfd):
    """The KV buffers allocated in the EP's memory (MLX buffers, bound as past and present):
    the same logits and buffers as ORT's CPU EP with its own, the same rows written back, and
    no step's buffer copied in from host memory."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    loops = generate_both(decoder, in_mlx_memory=True)  # logits and whole buffers as ORT's CPU EP's
    summary = closing_summary(loops, capfd)
    written, _, mirrored, _ = summary_counts(summary)
    assert written == BUFFERS * SHAPE.kv_heads * (PROMPT + DECODE)
    assert mirrored == BUFFERS * DECODE
    # The prompt's step reads each buffer from MLX memory (the later ones from the mirror).
    bound_in = int(re.search(r"in MLX memory \(no host copy\): (\d+) input\(s\)", summary)[1])
    assert bound_in == BUFFERS, summary


def test_rows_the_step_does_not_write_keep_what_the_buffer_held(decoder, monkeypatch, capfd):
    """A buffer pre-filled with a sentinel: ORT's kernel writes only each step's new rows into a
    shared buffer, so every row past the sequence keeps the sentinel (a present of its own would
    have zeros there); the EP must write the same rows and no others."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    sentinel = 7.25

    def fill(loop, step):
        if step == 0:
            for array in loop.arrays.values():
                array[...] = sentinel

    loops = generate_both(decoder, fill)  # logits and whole buffers equal to ORT's CPU EP's
    used = PROMPT + DECODE
    for name, array in loops[0].arrays.items():
        assert (array[:, :, used:] == sentinel).all(), f"{name}: rows past the sequence were written"
        assert (array[:, :, :used] != sentinel).all(), f"{name}: a new row was not written"
    written, _, mirrored, _ = summary_counts(closing_summary(loops, capfd))
    assert written == BUFFERS * SHAPE.kv_heads * used
    assert mirrored == BUFFERS * DECODE


def test_a_compiled_step_writes_only_its_rows_too(decoder, monkeypatch, capfd):
    """The same step four times (the first follows the prompt, with other shapes: a run that
    changed some input shapes is one of a split's; the same shapes again are compiled at their
    second run): the replays of the compiled closure carry the written-rows masks as the eager
    run does."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.delenv("ONNXRUNTIME_EP_MLX_NO_COMPILE", raising=False)
    ids = tokens(PROMPT + 1)
    loops = [session_loop(decoder, on_mlx=True), session_loop(decoder, on_mlx=False)]
    for loop in loops:
        for array in loop.arrays.values():
            array[...] = -3.5
        loop.step(ids[:, :PROMPT])
    for _ in range(4):
        got, want = (loop.step(ids[:, PROMPT:]) for loop in loops)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        for loop in loops:
            loop.length -= 1  # the same step again
    for name in loops[0].arrays:
        np.testing.assert_allclose(loops[0].arrays[name], loops[1].arrays[name], rtol=1e-4, atol=1e-4, err_msg=name)
        assert (loops[0].arrays[name][:, :, PROMPT + 1:] == -3.5).all()
    summary = closing_summary(loops, capfd)
    assert re.search(r"[1-9]\d* cache hit\(s\)", summary), summary


def test_a_buffer_changed_between_steps_is_read_again_from_the_host(decoder, monkeypatch, capfd):
    """A row the last step wrote is changed on the host (both loops alike): the mirror no longer
    matches and the step must see the change."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")

    def edit(loop, step):
        if step == 3:
            loop.arrays["0.key"][0, :, loop.length - 1] += 0.5

    loops = generate_both(decoder, edit)
    _, _, mirrored, _ = summary_counts(closing_summary(loops, capfd))
    assert mirrored == BUFFERS * DECODE - 1  # that one buffer, that one step, came from the host

    # The edit matters: without it the logits differ (so the comparison above could fail).
    plain = session_loop(decoder, on_mlx=False)
    edited = session_loop(decoder, on_mlx=False)
    ids = tokens(PROMPT + DECODE)
    for n, chunk in enumerate([ids[:, :PROMPT]] + [ids[:, PROMPT + t: PROMPT + t + 1] for t in range(3)]):
        edit(edited, n)
        a, b = plain.step(chunk), edited.step(chunk)
    assert np.abs(a - b).max() > 1e-3


def test_the_mirror_can_be_turned_off(decoder, monkeypatch, capfd):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_KV_MIRROR", "0")
    loops = generate_both(decoder)
    written, _, mirrored, _ = summary_counts(closing_summary(loops, capfd))
    assert mirrored == 0
    assert written == BUFFERS * SHAPE.kv_heads * (PROMPT + DECODE)
