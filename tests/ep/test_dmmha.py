"""com.microsoft DecoderMaskedMultiHeadAttention on MLX against ORT's CPU EP: token-by-token
decoding over one shared max-length KV buffer (the presents fed back as the next pasts), with
and without beams (cache_indirection), the cross-attention form (keys and values given whole,
BNSH or 3-D), mask_index, attention_bias, bias, scale, mask_filter_value and the qk output,
float32 and float16; every node on MLX. Also: what the entry declines runs on the CPU EP, and
out-of-range lengths and beam indices fail the run as they do in ORT."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import MLX, kernel_placements, make_model, profile_prefix, shared_buffer_counts, tensor

N, H, MAX = 2, 8, 7
D = N * H
MS = [("com.microsoft", 1)]
INPUTS = ["query", "key", "value", "mask_index", "attention_bias", "past_key", "past_value",
          "past_sequence_length", "beam_width", "cache_indirection", "bias"]
INT_INPUTS = {"mask_index", "past_sequence_length", "beam_width", "cache_indirection"}


def dmmha_model(elem, used, outputs, **attrs):
    """One node over the inputs named in ``used`` (the others left empty), all graph inputs
    with unknown shapes."""
    names = [n if n in used else "" for n in INPUTS]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("DecoderMaskedMultiHeadAttention", names, list(outputs),
                            domain="com.microsoft", name="dmmha", num_heads=N, **attrs)
    inputs = [tensor(n, TensorProto.INT32 if n in INT_INPUTS else elem) for n in INPUTS if n in used]
    outs = [tensor(o, elem) for o in outputs if o]
    return make_model([node], inputs, outs, domains=MS)


def profiled_session(model):
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = profile_prefix("mlx_dmmha_test")
    session = ort.InferenceSession(model, options, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    assert session.get_providers()[0] == MLX
    return session


def tolerance(np_dtype):
    return dict(rtol=4e-3, atol=2e-3) if np_dtype == np.float16 else dict(rtol=1e-5, atol=1e-5)


def compare(got, want, np_dtype, what):
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (what, i, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), err_msg=f"{what} output {i}",
                                   **tolerance(np_dtype))


def uniform(rng, shape, np_dtype):
    return rng.uniform(-1, 1, shape).astype(np_dtype)


# ORT 1.30's CPU kernel (the GPU machine's ORT) answers self-attention over a shared buffer
# without beams from rows it should not read: at past length 0, where the one key is the new one,
# its output is not the new value. ORT 1.31.1, which the EP follows, is right there.
ORT_WITH_SHARED_BUFFER_FIX = pytest.mark.skipif(
    tuple(int(part) for part in ort.__version__.split(".")[:2]) < (1, 31),
    reason="ORT before 1.31 answers a shared buffer's self-attention from rows past its past length")

ELEMS = [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)]
ELEM_IDS = ["float32", "float16"]

SELF_VARIANTS = {
    "plain": {},
    "mask": {"mask": True},
    "bias_full": {"attention_bias": "full"},
    "bias_broadcast": {"attention_bias": "broadcast", "mask": True},
    "packed_bias": {"bias": True},
    "scale_filter_qk": {"mask": True, "attention_bias": "full", "qk": True,
                        "attrs": {"scale": 0.3, "mask_filter_value": -50.0}},
    "everything": {"mask": True, "attention_bias": "head", "bias": True, "qk": True},
}


def _bias_shape(kind, rows, total):
    return {"full": (rows, N, 1, total), "broadcast": (1, 1, 1, total), "head": (1, N, 1, total),
            "batch": (rows, 1, 1, total)}[kind]


def _decode(np_dtype, elem, rows, variant, beams=None, steps=5, seed=0, width_fed=True):
    """Runs ``steps`` decode steps (past lengths 0, 1, ...) on an MLX-first and a CPU-only
    session, feeding each session's presents back as its next pasts; returns the MLX session."""
    rng = np.random.default_rng(seed)
    used = {"query", "key", "value", "past_key", "past_value", "past_sequence_length"}
    if variant.get("mask"):
        used.add("mask_index")
    if variant.get("attention_bias"):
        used.add("attention_bias")
    if variant.get("bias"):
        used.add("bias")
    if beams is not None:
        used |= {"beam_width", "cache_indirection"} if width_fed else {"cache_indirection"}
    outputs = ["output", "present_key", "present_value"] + (["qk"] if variant.get("qk") else [])
    attrs = dict(variant.get("attrs", {}), past_present_share_buffer=1)
    if variant.get("qk"):
        attrs["output_qk"] = 1
    model = dmmha_model(elem, used, outputs, **attrs)
    mlx = profiled_session(model)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    past = [uniform(rng, (rows, N, MAX, H), np_dtype) for _ in range(2)]
    past_cpu = list(past)
    bias = uniform(rng, (3 * D,), np_dtype)
    for p in range(steps):
        feed = {"query": uniform(rng, (rows, 1, D), np_dtype), "key": uniform(rng, (rows, 1, D), np_dtype),
                "value": uniform(rng, (rows, 1, D), np_dtype), "past_sequence_length": np.array([p], np.int32)}
        if "mask_index" in used:
            mask = (rng.random((rows, p + 1)) < 0.7).astype(np.int32)
            mask[rng.random((rows, p + 1)) < 0.2] = -1  # read as kept with beams, masked without
            if p >= 2:
                mask[0] = 0  # a fully masked row
            feed["mask_index"] = mask
        if "attention_bias" in used:
            feed["attention_bias"] = uniform(rng, _bias_shape(variant["attention_bias"], rows, p + 1), np_dtype)
        if "bias" in used:
            feed["bias"] = bias
        if beams is not None:
            if width_fed:
                feed["beam_width"] = np.array([beams], np.int32)
            feed["cache_indirection"] = rng.integers(0, beams, (rows // beams, beams, MAX)).astype(np.int32)
        got = mlx.run(None, dict(feed, past_key=past[0], past_value=past[1]))
        want = cpu.run(None, dict(feed, past_key=past_cpu[0], past_value=past_cpu[1]))
        compare(got, want, np_dtype, f"step {p}")
        past, past_cpu = got[1:3], want[1:3]
    return mlx


@ORT_WITH_SHARED_BUFFER_FIX
@pytest.mark.parametrize("elem, np_dtype", ELEMS, ids=ELEM_IDS)
@pytest.mark.parametrize("variant", SELF_VARIANTS.values(), ids=SELF_VARIANTS.keys())
def test_decode_steps_over_a_shared_buffer_match_cpu_on_mlx(elem, np_dtype, variant):
    mlx = _decode(np_dtype, elem, 2, variant)
    placed = kernel_placements(mlx)
    assert placed and {p for _, p in placed} == {MLX}, placed


BEAM_VARIANTS = {
    "plain": {},
    "mask_bias_qk": {"mask": True, "attention_bias": "full", "qk": True,
                     "attrs": {"scale": 0.4, "mask_filter_value": -30.0}},
    "head_bias_packed_bias": {"attention_bias": "head", "bias": True},
}


@pytest.mark.parametrize("elem, np_dtype", ELEMS, ids=ELEM_IDS)
@pytest.mark.parametrize("variant", BEAM_VARIANTS.values(), ids=BEAM_VARIANTS.keys())
@pytest.mark.parametrize("beams, width_fed", [(1, True), (2, True), (3, True), (2, False)],
                         ids=["1", "2", "3", "2_from_indirection"])
def test_beam_search_steps_match_cpu_on_mlx(elem, np_dtype, variant, beams, width_fed):
    """Without beam_width ORT takes the beam count from cache_indirection's second dimension."""
    mlx = _decode(np_dtype, elem, 2 * beams, variant, beams=beams, seed=beams, width_fed=width_fed)
    placed = kernel_placements(mlx)
    assert placed and {p for _, p in placed} == {MLX}, placed


CROSS_VARIANTS = {
    "bnsh": {},
    "bnsh_mask_bias_qk": {"mask": True, "bias": True, "qk": True, "attrs": {"scale": 0.5, "mask_filter_value": -7.0}},
    "three_d": {"rank": 3, "bias": True},
    "three_d_mask_qk": {"rank": 3, "mask": True, "qk": True},
}


@pytest.mark.parametrize("elem, np_dtype", ELEMS, ids=ELEM_IDS)
@pytest.mark.parametrize("variant", CROSS_VARIANTS.values(), ids=CROSS_VARIANTS.keys())
def test_cross_attention_matches_cpu_on_mlx(elem, np_dtype, variant):
    rng = np.random.default_rng(5)
    rows, length = 3, 6
    used = {"query", "key", "value"}
    shape = (rows, length, D) if variant.get("rank") == 3 else (rows, N, length, H)
    feed = {"query": uniform(rng, (rows, 1, D), np_dtype), "key": uniform(rng, shape, np_dtype),
            "value": uniform(rng, shape, np_dtype)}
    if variant.get("mask"):
        used.add("mask_index")
        mask = (rng.random((rows, length)) < 0.6).astype(np.int32)
        mask[1] = 0
        mask[2, 0] = -3
        feed["mask_index"] = mask
    if variant.get("bias"):
        used.add("bias")
        feed["bias"] = uniform(rng, (3 * D,), np_dtype)
    outputs = ["output"] + (["", "", "qk"] if variant.get("qk") else [])
    attrs = dict(variant.get("attrs", {}))
    if variant.get("qk"):
        attrs["output_qk"] = 1
    model = dmmha_model(elem, used, outputs, **attrs)
    mlx = profiled_session(model)
    got = mlx.run(None, feed)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    compare(got, want, np_dtype, "cross")
    placed = kernel_placements(mlx)
    assert placed and {p for _, p in placed} == {MLX}, placed


def _one_step_feed(rows=4, beams=2, p=3, seed=9):
    rng = np.random.default_rng(seed)
    return {"query": uniform(rng, (rows, 1, D), np.float32), "key": uniform(rng, (rows, 1, D), np.float32),
            "value": uniform(rng, (rows, 1, D), np.float32),
            "past_key": uniform(rng, (rows, N, MAX, H), np.float32),
            "past_value": uniform(rng, (rows, N, MAX, H), np.float32),
            "past_sequence_length": np.array([p], np.int32), "beam_width": np.array([beams], np.int32),
            "cache_indirection": rng.integers(0, beams, (rows // beams, beams, MAX)).astype(np.int32)}


def test_qk_output_without_output_qk_is_declined_and_runs_on_cpu():
    used = {"query", "key", "value"}
    model = dmmha_model(TensorProto.FLOAT, used, ["output", "", "", "qk"])
    feed = {k: v for k, v in _one_step_feed().items() if k in used}
    feed["key"] = feed["value"] = np.ones((4, N, 5, H), np.float32)
    session = profiled_session(model)
    got = session.run(None, feed)
    assert ("dmmha_kernel_time", "CPUExecutionProvider") in kernel_placements(session)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_array_equal(got[0], want[0])


BAD_FEEDS = {
    "beam_index_out_of_range": ({"cache_indirection": np.full((2, 2, MAX), 2, np.int32)}, "beam index out of range"),
    "negative_beam_index": ({"cache_indirection": np.full((2, 2, MAX), -1, np.int32)}, "beam index out of range"),
    "beam_width_mismatch": ({"beam_width": np.array([4], np.int32)}, "beam_width"),
    "past_at_max": ({"past_sequence_length": np.array([MAX], np.int32)}, "past_sequence_length"),
    "negative_past": ({"past_sequence_length": np.array([-1], np.int32)}, "past_sequence_length"),
}


@pytest.mark.parametrize("change, message", BAD_FEEDS.values(), ids=BAD_FEEDS.keys())
def test_out_of_range_lengths_and_beams_fail_like_cpu(change, message):
    used = set(INPUTS) - {"mask_index", "attention_bias", "bias"}
    model = dmmha_model(TensorProto.FLOAT, used, ["output", "present_key", "present_value"],
                        past_present_share_buffer=1)
    feed = dict(_one_step_feed(), **change)
    with pytest.raises(Exception):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    with pytest.raises(Exception, match=f"node 'dmmha'.*{message}"):
        profiled_session(model).run(None, feed)


def test_indirection_rows_past_the_past_length_are_not_checked():
    """ORT checks (and reads) only the first past_sequence_length entries of each row."""
    used = set(INPUTS) - {"mask_index", "attention_bias", "bias"}
    model = dmmha_model(TensorProto.FLOAT, used, ["output", "present_key", "present_value"],
                        past_present_share_buffer=1)
    feed = _one_step_feed()
    feed["cache_indirection"][:, :, 3:] = 99
    got = profiled_session(model).run(None, feed)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    compare(got, want, np.float32, "indirection tail")


def test_a_batched_head_broadcast_bias_with_beams_fails_on_mlx():
    """ORT's beam kernel reads an attention_bias [B, 1, 1, T] at row (b / W) * num_heads, past
    its end for the later rows: no defined answer, so the EP fails the run (the claim declines
    it when the graph gives the shape)."""
    used = set(INPUTS) - {"mask_index", "bias"}
    model = dmmha_model(TensorProto.FLOAT, used, ["output", "present_key", "present_value"],
                        past_present_share_buffer=1)
    feed = dict(_one_step_feed(), attention_bias=np.zeros((4, 1, 1, 4), np.float32))
    with pytest.raises(Exception, match="node 'dmmha'.*past its end"):
        profiled_session(model).run(None, feed)


@ORT_WITH_SHARED_BUFFER_FIX
def test_a_buffer_bound_as_past_and_present_is_updated_in_place(monkeypatch, capfd):
    """The past and present bound to one OrtValue each (IO binding, as the shared buffer is
    meant): the EP feeds each step from its device mirror and copies only the new row of each
    (batch, head) back to ORT's buffer. (Whether the row also goes into the mirror's own buffer
    depends on the step replaying a compiled trace; past_sequence_length is read on the host,
    so each step here is lowered anew.)"""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    rng = np.random.default_rng(21)
    rows, steps = 2, 5
    used = {"query", "key", "value", "past_key", "past_value", "past_sequence_length"}
    model = dmmha_model(TensorProto.FLOAT, used, ["output", "present_key", "present_value"],
                        past_present_share_buffer=1)
    mlx = profiled_session(model)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    past = [uniform(rng, (rows, N, MAX, H), np.float32) for _ in range(2)]
    buffers = [ort.OrtValue.ortvalue_from_numpy(p.copy()) for p in past]
    for p in range(steps):
        feed = {"query": uniform(rng, (rows, 1, D), np.float32), "key": uniform(rng, (rows, 1, D), np.float32),
                "value": uniform(rng, (rows, 1, D), np.float32), "past_sequence_length": np.array([p], np.int32)}
        binding = mlx.io_binding()
        for name, value in feed.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("output")
        for i, name in enumerate(["key", "value"]):
            binding.bind_ortvalue_input(f"past_{name}", buffers[i])
            binding.bind_ortvalue_output(f"present_{name}", buffers[i])
        mlx.run_with_iobinding(binding)
        want = cpu.run(None, dict(feed, past_key=past[0], past_value=past[1]))
        got = [binding.copy_outputs_to_cpu()[0], buffers[0].numpy(), buffers[1].numpy()]
        compare(got, want, np.float32, f"step {p}")
        past = want[1:3]
    capfd.readouterr()
    del mlx, binding
    (written, _, mirrored, _), summary = shared_buffer_counts(capfd)
    assert written == steps * 2 * rows * N, summary  # one row per (batch, head) a buffer a step
    assert mirrored == 2 * (steps - 1), summary
