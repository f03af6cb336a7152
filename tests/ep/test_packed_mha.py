"""com.microsoft PackedMultiHeadAttention on MLX, against a numpy reference written from ORT's
schema and its CUDA kernel (ORT 1.31.1 has no CPU kernel, so a CPU-only session cannot run these
models).

Each case checks the output, that the session put MLX first, and that ORT's profile shows the node
ran on MLX. Lengths and token offsets that disagree fail the run naming the node."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import MLX, Run, make_model, tensor

F16 = TensorProto.FLOAT16
F32 = TensorProto.FLOAT
I32 = TensorProto.INT32
ELEM = {np.float16: F16, np.float32: F32}

INPUTS = ["query", "key", "value", "bias", "token_offset", "cumulative_sequence_length", "attention_bias"]
INT_INPUTS = {"token_offset", "cumulative_sequence_length"}


def packed_model(feeds, **attrs):
    """One PackedMultiHeadAttention node named 'pmha' over the feeds it is given (absent inputs are '')."""
    elem = ELEM[feeds["query"].dtype.type]
    present = [name if name in feeds else "" for name in INPUTS]
    while present and present[-1] == "":
        present.pop()
    node = helper.make_node(
        "PackedMultiHeadAttention", present, ["output"], name="pmha", domain="com.microsoft", **attrs
    )
    inputs = [tensor(n, I32 if n in INT_INPUTS else elem, list(feeds[n].shape)) for n in INPUTS if n in feeds]
    return make_model([node], inputs, [tensor("output", elem)], domains=[("com.microsoft", 1)])


def token_offset(lengths, seq):
    """Each token's padded position b·seq + i in token order, then the padding positions."""
    real = [b * seq + i for b, n in enumerate(lengths) for i in range(n)]
    pads = [b * seq + i for b, n in enumerate(lengths) for i in range(n, seq)]
    return np.array(real + pads, np.int32).reshape(len(lengths), seq)


def packed_feeds(rng, lengths, seq=None, num_heads=2, head=16, v_head=None, packed=False, bias=False,
                 attention_bias=None, dtype=np.float16):
    """Random inputs for sequences of the given lengths, padded to seq (default: the longest).
    attention_bias is None or the shape's leading dims (batch or 1, heads or 1)."""
    seq = max(lengths) if seq is None else seq
    v_head = head if v_head is None else v_head
    batch, tokens = len(lengths), int(sum(lengths))
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32).astype(dtype)
    feeds = {}
    if packed:
        feeds["query"] = r(tokens, num_heads, 3, head)
    else:
        feeds["query"] = r(tokens, num_heads * head)
        feeds["key"] = r(tokens, num_heads * head)
        feeds["value"] = r(tokens, num_heads * v_head)
    if bias:
        feeds["bias"] = r(num_heads * (2 * head + v_head))
    feeds["token_offset"] = token_offset(lengths, seq)
    feeds["cumulative_sequence_length"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    if attention_bias is not None:
        lead = [batch if attention_bias[0] else 1, num_heads if attention_bias[1] else 1]
        feeds["attention_bias"] = r(*lead, seq, seq)
    return feeds


def reference(feeds, num_heads, scale=0.0, **_):
    """The output as the schema and ORT's CUDA kernel define it: each token attends to the tokens
    of its own sequence; the bias is added in the element type, scores and softmax in float."""
    query = feeds["query"]
    dtype = query.dtype
    f32 = lambda a: np.asarray(a, np.float32)
    tokens = query.shape[0]
    if query.ndim == 4:
        q, k, v = query[:, :, 0], query[:, :, 1], query[:, :, 2]
    else:
        split = lambda a: a.reshape(tokens, num_heads, a.shape[1] // num_heads)
        q, k, v = split(query), split(feeds["key"]), split(feeds["value"])
    head, v_head = q.shape[2], v.shape[2]
    if "bias" in feeds:
        bias = feeds["bias"]
        qk = num_heads * head
        q = q + bias[:qk].reshape(num_heads, head)
        k = k + bias[qk : 2 * qk].reshape(num_heads, head)
        v = v + bias[2 * qk :].reshape(num_heads, v_head)
    scale = scale or 1.0 / np.sqrt(head)
    cu = feeds["cumulative_sequence_length"]
    out = np.zeros((tokens, num_heads, v_head), np.float32)
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        for i in range(hi - lo):
            for h in range(num_heads):
                x = scale * (f32(k[lo:hi, h]) @ f32(q[lo + i, h]))
                if "attention_bias" in feeds:
                    ab = feeds["attention_bias"]
                    x = x + f32(ab[b if ab.shape[0] > 1 else 0, h if ab.shape[1] > 1 else 0, i, : hi - lo])
                e = np.exp(np.float64(x) - x.max())
                out[lo + i, h] = (e / e.sum()) @ f32(v[lo:hi, h])
    return out.reshape(tokens, num_heads * v_head).astype(dtype)


def check(feeds, atol=1e-2, **attrs):
    attrs.setdefault("num_heads", 2)
    run = Run(packed_model(feeds, **attrs), feeds)
    run.assert_all_on_mlx()
    want = reference(feeds, **attrs)
    got = run.outputs[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=atol, rtol=atol)
    return run


LENGTHS = {
    "one": [5],
    "ragged": [3, 7, 1],
    "with_empty": [4, 0, 6],
    "padded_wider": [2, 5],  # sequence_length 8 > the longest
    "many": [1, 9, 4, 4, 12, 2],
}


@pytest.mark.parametrize("case", LENGTHS)
@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
def test_packed_mha_matches_the_reference(case, packed):
    lengths = LENGTHS[case]
    seq = 8 if case == "padded_wider" else None
    check(packed_feeds(np.random.default_rng(1), lengths, seq=seq, packed=packed))


@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
@pytest.mark.parametrize("case", ["ragged", "with_empty"])
def test_bias(case, packed):
    check(packed_feeds(np.random.default_rng(2), LENGTHS[case], packed=packed, bias=True))


@pytest.mark.parametrize("lead", [(True, True), (True, False), (False, True), (False, False)],
                         ids=["bn", "b1", "1n", "11"])
@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
def test_attention_bias(lead, packed):
    feeds = packed_feeds(np.random.default_rng(3), [3, 0, 6, 2], seq=7, packed=packed, bias=True,
                         attention_bias=lead, num_heads=4)
    check(feeds, num_heads=4)


@pytest.mark.parametrize("attrs", [{"scale": 0.3}, {"mask_filter_value": -1.0}, {"num_heads": 1}, {"num_heads": 4}],
                         ids=str)
def test_attributes(attrs):
    feeds = packed_feeds(np.random.default_rng(4), [3, 7, 1], num_heads=attrs.get("num_heads", 2))
    check(feeds, **attrs)


def test_value_head_size_may_differ():
    feeds = packed_feeds(np.random.default_rng(5), [3, 0, 5], v_head=8, bias=True, attention_bias=(True, True))
    run = check(feeds)
    assert run.outputs[0].shape == (8, 16)


@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
def test_float32(packed):
    feeds = packed_feeds(np.random.default_rng(6), [4, 0, 9], packed=packed, bias=True,
                         attention_bias=(False, True), dtype=np.float32)
    check(feeds, atol=1e-4)


def test_no_tokens():
    feeds = packed_feeds(np.random.default_rng(7), [0, 0], seq=3)
    run = check(feeds)
    assert run.outputs[0].shape == (0, 32)


def test_padding_order_in_token_offset_does_not_matter():
    feeds = packed_feeds(np.random.default_rng(8), [2, 5, 3], seq=6)
    flat = feeds["token_offset"].reshape(-1)
    flat[10:] = flat[10:][::-1]
    check(feeds)


def mlx_session(model):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    assert session.get_providers()[0] == MLX
    return session


@pytest.mark.parametrize("breakage, words", [
    (lambda f: f["cumulative_sequence_length"].__setitem__(0, 1), "start with 0"),
    (lambda f: f["cumulative_sequence_length"].__setitem__(3, 9), "token_count"),
    (lambda f: f["cumulative_sequence_length"].__setitem__(1, 6), "non-decreasing"),
    (lambda f: f["cumulative_sequence_length"].__setitem__(slice(1, 3), [1, 8]), "at most sequence_length"),
    (lambda f: f["token_offset"].__setitem__((0, 1), 5), "token_offset"),
], ids=["cumulative_start", "cumulative_end", "cumulative_order", "sequence_too_long", "token_offset"])
def test_bad_lengths_and_offsets_fail_the_run(breakage, words):
    feeds = packed_feeds(np.random.default_rng(9), [3, 2, 5], seq=6)
    model = packed_model(feeds, num_heads=2)
    breakage(feeds)
    with pytest.raises(Exception, match=f"node 'pmha'.*{words}"):
        mlx_session(model).run(None, feeds)


def test_compiled_replays_agree_and_still_check():
    feeds = packed_feeds(np.random.default_rng(10), [3, 0, 6], bias=True, attention_bias=(True, False))
    session = mlx_session(packed_model(feeds, num_heads=2))
    want = reference(feeds, 2).astype(np.float32)
    for _ in range(3):  # eager, then compiled, then replayed
        (out,) = session.run(None, feeds)
        np.testing.assert_allclose(out.astype(np.float32), want, atol=1e-2, rtol=1e-2)
    feeds["token_offset"] = feeds["token_offset"].copy()
    feeds["token_offset"][0, 0] = 7
    with pytest.raises(Exception, match="node 'pmha'.*token_offset"):
        session.run(None, feeds)


def test_declined_node_fails_as_without_the_ep():
    feeds = packed_feeds(np.random.default_rng(11), [2, 3])
    model = packed_model(feeds, num_heads=0)
    # ORT 1.31.1 has no CPU kernel: a node the EP declines cannot be placed anywhere.
    with pytest.raises(Exception, match="PackedMultiHeadAttention"):
        ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
