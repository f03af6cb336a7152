"""com.microsoft GroupQueryAttention across steps: a prompt then token-by-token decoding, the
present caches fed back as the next past (growing, or one shared max-length buffer), with
total_sequence_length fed as data (the node runs eagerly) or computed from the attention mask's
shape as genai's decoders do (the plan stays traceable); every step on MLX and equal to ORT's
CPU EP. Also: what the entry declines runs on the CPU EP, and bad seqlens_k fail like ORT."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, cpu_outputs, kernel_placements, make_model, profile_prefix, tensor

B, HQ, HKV, D, MAX = 2, 4, 2, 16, 12
MS = [("com.microsoft", 1)]


def _rotary_tables(rows, half, dtype):
    angle = np.arange(rows)[:, None] / (10000.0 ** (np.arange(half) / half))[None]
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def gqa_model(elem, *, shared=False, from_mask=False, rotary=True, window=-1, softcap=0.0, max_len=MAX):
    """A decoder step: query/key/value [B, S, *], past caches (BNSH), and either
    seqlens_k/total_sequence_length fed, or an int64 attention_mask [B, total] they are
    computed from (ReduceSum − 1 and the mask's second dim)."""
    np_dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    past_len = max_len if shared else "past"
    inputs = [tensor("query", elem, [B, "S", HQ * D]), tensor("key", elem, [B, "S", HKV * D]),
              tensor("value", elem, [B, "S", HKV * D]), tensor("past_key", elem, [B, HKV, past_len, D]),
              tensor("past_value", elem, [B, HKV, past_len, D])]
    nodes, inits = [], []
    if from_mask:
        inputs.append(tensor("attention_mask", TensorProto.INT64, [B, "total"]))
        inits += [numpy_helper.from_array(np.array([1], np.int64), "axes"),
                  numpy_helper.from_array(np.array(1, np.int64), "one"),
                  numpy_helper.from_array(np.array(1, np.int64), "dim1")]
        nodes += [
            helper.make_node("ReduceSum", ["attention_mask", "axes"], ["lengths"], keepdims=0),
            helper.make_node("Sub", ["lengths", "one"], ["lengths_m1"]),
            helper.make_node("Cast", ["lengths_m1"], ["seqlens_k"], to=TensorProto.INT32),
            helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
            helper.make_node("Gather", ["mask_shape", "dim1"], ["total64"], axis=0),
            helper.make_node("Cast", ["total64"], ["total_sequence_length"], to=TensorProto.INT32),
        ]
    else:
        inputs += [tensor("seqlens_k", TensorProto.INT32, [B]), tensor("total_sequence_length", TensorProto.INT32, [])]
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    attrs = {"num_heads": HQ, "kv_num_heads": HKV, "local_window_size": window}
    if softcap:
        attrs["softcap"] = softcap
    if rotary:
        cos, sin = _rotary_tables(max_len + 4, D // 2, np_dtype)
        inits += [numpy_helper.from_array(cos, "cos_cache"), numpy_helper.from_array(sin, "sin_cache")]
        names += ["cos_cache", "sin_cache"]
        attrs["do_rotary"] = 1
    nodes.append(helper.make_node("GroupQueryAttention", names, ["output", "present_key", "present_value"],
                                  domain="com.microsoft", name="gqa", **attrs))
    outputs = [tensor("output", elem), tensor("present_key", elem), tensor("present_value", elem)]
    return make_model(nodes, inputs, outputs, inits, domains=MS)


def profiled_session(model, providers):
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = profile_prefix("mlx_gqa_test")
    session = ort.InferenceSession(model, options, providers=providers)
    session.disable_fallback()
    return session


def steps(lengths, new_tokens, np_dtype, shared, rng):
    """Feeds of a ragged prompt (right-padded to max(lengths)) then ``new_tokens`` decode
    steps, without the past caches (the loop feeds the previous present)."""
    prompt = max(lengths)
    out = []
    for step in range(new_tokens + 1):
        s = prompt if step == 0 else 1
        lens = np.array(lengths) + step  # tokens so far, this step's included
        total = prompt + step
        feed = {"query": rng.uniform(-1, 1, (B, s, HQ * D)).astype(np_dtype),
                "key": rng.uniform(-1, 1, (B, s, HKV * D)).astype(np_dtype),
                "value": rng.uniform(-1, 1, (B, s, HKV * D)).astype(np_dtype)}
        mask = (np.arange(total)[None] < lens[:, None]).astype(np.int64)
        out.append((feed, lens - 1, total, mask))
    return out


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["float32", "float16"])
@pytest.mark.parametrize("shared", [False, True], ids=["growing_past", "shared_buffer"])
@pytest.mark.parametrize("from_mask", [False, True], ids=["lengths_fed", "lengths_from_mask"])
@pytest.mark.parametrize("extra", [{}, {"window": 3}, {"softcap": 4.0, "rotary": False}], ids=["plain", "window", "softcap"])
def test_prompt_then_decode_steps_match_cpu_on_mlx(elem, shared, from_mask, extra):
    np_dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    model = gqa_model(elem, shared=shared, from_mask=from_mask, **extra)
    mlx = profiled_session(model, [MLX, "CPUExecutionProvider"])
    assert mlx.get_providers()[0] == MLX
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    tol = dict(rtol=4e-3, atol=2e-3) if np_dtype == np.float16 else dict(rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(7)
    # The prompt: 5 tokens in row 0, 3 in row 1 (right padding), then 4 decode steps.
    plan = steps([5, 3], 4, np_dtype, shared, rng)
    length = MAX if shared else 0
    past = [np.zeros((B, HKV, length, D), np_dtype)] * 2
    past_cpu = list(past)
    for i, (feed, seqlens, total, mask) in enumerate(plan):
        if from_mask:
            extra_feed = {"attention_mask": mask}
        else:
            extra_feed = {"seqlens_k": seqlens.astype(np.int32), "total_sequence_length": np.array(total, np.int32)}
        got = mlx.run(None, dict(feed, **extra_feed, past_key=past[0], past_value=past[1]))
        want = cpu.run(None, dict(feed, **extra_feed, past_key=past_cpu[0], past_value=past_cpu[1]))
        for name, g, w in zip(("output", "present_key", "present_value"), got, want):
            assert g.shape == w.shape, (i, name)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), err_msg=f"step {i} {name}", **tol)
        past, past_cpu = got[1:], want[1:]
    placed = kernel_placements(mlx)
    assert placed and {p for _, p in placed} == {MLX}, placed


def _single_step_feeds(np_dtype=np.float32):
    rng = np.random.default_rng(3)
    return {"query": rng.uniform(-1, 1, (B, 1, HQ * D)).astype(np_dtype),
            "key": rng.uniform(-1, 1, (B, 1, HKV * D)).astype(np_dtype),
            "value": rng.uniform(-1, 1, (B, 1, HKV * D)).astype(np_dtype),
            "past_key": rng.uniform(-1, 1, (B, HKV, 5, D)).astype(np_dtype),
            "past_value": rng.uniform(-1, 1, (B, HKV, 5, D)).astype(np_dtype),
            "seqlens_k": np.array([5, 2], np.int32), "total_sequence_length": np.array(6, np.int32)}


def _plain_model(outputs=("output", "present_key", "present_value"), **attrs):
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    node = helper.make_node("GroupQueryAttention", names, list(outputs), domain="com.microsoft", name="gqa",
                            num_heads=HQ, kv_num_heads=HKV, **attrs)
    inputs = [tensor("query", shape=[B, 1, HQ * D]), tensor("key", shape=[B, 1, HKV * D]),
              tensor("value", shape=[B, 1, HKV * D]), tensor("past_key", shape=[B, HKV, 5, D]),
              tensor("past_value", shape=[B, HKV, 5, D]), tensor("seqlens_k", TensorProto.INT32, [B]),
              tensor("total_sequence_length", TensorProto.INT32, [])]
    return make_model([node], inputs, [tensor(o) for o in outputs], domains=MS)


@pytest.mark.parametrize("attrs, outputs", [
    ({"sliding_window_cache": 1, "local_window_size": 3}, ("output", "present_key", "present_value")),
    ({}, ("output",)),  # no present outputs: ORT's kernel attends over the new keys alone
], ids=["sliding_window_cache", "no_present_outputs"])
def test_declined_nodes_run_on_cpu(attrs, outputs):
    model = _plain_model(outputs, **attrs)
    feeds = _single_step_feeds()
    session = profiled_session(model, [MLX, "CPUExecutionProvider"])
    got = session.run(None, feeds)
    placed = kernel_placements(session)
    assert ("gqa_kernel_time", "CPUExecutionProvider") in placed, placed
    if "sliding_window_cache" in attrs:
        # A windowed cache leaves its rows past the resident ones unspecified: output only.
        # (Without present outputs ORT reads past the new keys: no stable answer to compare.)
        np.testing.assert_array_equal(got[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("seqlens", [[5, 6], [-1, 2]], ids=["past_the_present", "negative"])
def test_seqlens_out_of_range_fail_like_cpu(seqlens):
    model = _plain_model()
    feeds = dict(_single_step_feeds(), seqlens_k=np.array(seqlens, np.int32))
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="node 'gqa'.*seqlens_k"):
        session.run(None, feeds)


@pytest.mark.parametrize("from_mask", [False, True], ids=["lengths_fed", "lengths_from_mask"])
def test_a_repeated_decode_shape_replays_compiled_and_stays_right(from_mask):
    """The same shapes three times (eager, then compiled, then replayed: the compiled trace
    reads total_sequence_length when it comes from the mask's shape, and falls back to the
    eager path when it is fed), with other lengths in every run."""
    model = gqa_model(TensorProto.FLOAT, shared=True, from_mask=from_mask)
    mlx = profiled_session(model, [MLX, "CPUExecutionProvider"])
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    total = 7
    for lengths in ([7, 4], [3, 7], [6, 6]):
        lens = np.array(lengths)
        feed = {"query": rng.uniform(-1, 1, (B, 1, HQ * D)).astype(np.float32),
                "key": rng.uniform(-1, 1, (B, 1, HKV * D)).astype(np.float32),
                "value": rng.uniform(-1, 1, (B, 1, HKV * D)).astype(np.float32),
                "past_key": rng.uniform(-1, 1, (B, HKV, MAX, D)).astype(np.float32),
                "past_value": rng.uniform(-1, 1, (B, HKV, MAX, D)).astype(np.float32)}
        if from_mask:
            feed["attention_mask"] = (np.arange(total)[None] < lens[:, None]).astype(np.int64)
        else:
            feed.update(seqlens_k=(lens - 1).astype(np.int32), total_sequence_length=np.array(total, np.int32))
        for g, w in zip(mlx.run(None, feed), cpu.run(None, feed)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    placed = kernel_placements(mlx)
    assert len(placed) == 3 and {p for _, p in placed} == {MLX}, placed


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["float32", "float16"])
def test_long_prompts_then_decode_over_a_long_shared_buffer(elem):
    """Rows of 700 and 1,030 tokens in a 1,100-row shared buffer, then decode steps: on MLX's
    CUDA backend the decode kernel takes the visible keys in passes of 512 (three here), and the
    cache-update kernel writes the whole buffer; both equal to ORT's CPU EP."""
    np_dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    max_len = 1100
    model = gqa_model(elem, shared=True, max_len=max_len)
    mlx = profiled_session(model, [MLX, "CPUExecutionProvider"])
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    tol = dict(rtol=4e-3, atol=2e-3) if np_dtype == np.float16 else dict(rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(5)
    past = [rng.uniform(-1, 1, (B, HKV, max_len, D)).astype(np_dtype) for _ in range(2)]
    past_cpu = list(past)
    for i, (feed, seqlens, total, _) in enumerate(steps([700, 1030], 3, np_dtype, True, rng)):
        lengths = {"seqlens_k": seqlens.astype(np.int32), "total_sequence_length": np.array(total, np.int32)}
        got = mlx.run(None, dict(feed, **lengths, past_key=past[0], past_value=past[1]))
        want = cpu.run(None, dict(feed, **lengths, past_key=past_cpu[0], past_value=past_cpu[1]))
        for name, g, w in zip(("output", "present_key", "present_value"), got, want):
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), err_msg=f"step {i} {name}", **tol)
        past, past_cpu = got[1:], want[1:]
    placed = kernel_placements(mlx)
    assert placed and {p for _, p in placed} == {MLX}, placed
