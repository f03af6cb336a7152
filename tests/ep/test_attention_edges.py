"""Attention edges the fuzzer (tests/fuzz) found, each a small model run MLX-first and on ORT's
CPU EP: ai.onnx Attention-23/24 over NaN/±inf scores and fully masked rows (ORT's rule: a row
whose every key is masked is all zeros whatever its scores; any other row is a max-subtracted
float32 softmax, so a NaN, a +inf or only -inf in it is NaN; masks are added, not selected),
scores that overflow only after the product (ORT scales after the GEMM), head counts ORT ignores
on 4-D inputs, and the shapes and values ORT's kernels refuse at run time."""

import numpy as np
import onnxruntime as ort
import pytest
from conftest import MLX, Run, cpu_outputs, make_model, tensor
from onnx import TensorProto, helper

F, F16, B, I64, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.INT64, TensorProto.INT32
NAN, INF = np.nan, np.inf
LOW = float(np.finfo(np.float32).min)


def _attention(elem, mask_elem=None, opset=23, nonpad=False, **attrs):
    names = ["Q", "K", "V", "M" if mask_elem is not None else ""]
    inputs = [tensor(n, elem, None) for n in "QKV"]
    if mask_elem is not None:
        inputs.append(tensor("M", mask_elem, None))
    if nonpad:
        names += ["", "", "N"]
        inputs.append(tensor("N", I64, None))
    node = helper.make_node("Attention", names, ["Y"], name="n", **attrs)
    return make_model([node], inputs, [tensor("Y", elem, None)], opset=opset)


def _row_feeds(scores, values, mask, dtype):
    """One query, head size 1, scale 1: the scores row is K itself."""
    t = len(scores)
    feeds = {"Q": np.ones((1, 1, 1, 1), dtype), "K": np.array(scores, dtype).reshape(1, 1, t, 1),
             "V": np.array(values, dtype).reshape(1, 1, t, 1)}
    if mask is not None:
        m = np.array(mask)
        feeds["M"] = (m if m.dtype == bool else m.astype(dtype)).reshape(1, 1, 1, t)
    return feeds


def _same(model, feeds):
    run = Run(model, feeds, optimize=False)
    run.assert_all_on_mlx()
    expected = cpu_outputs(model, feeds)
    for got, want in zip(run.outputs, expected):
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                   rtol=2e-3, atol=1e-3, equal_nan=True)
    return run.outputs


ROWS = [  # (scores, values, mask): the fuzz triggers, one row each
    ([1, NAN, 2], [3, 5, 7], None),  # NaN score: NaN row
    ([1, INF, 2], [3, 5, 7], None),  # +inf: NaN
    ([-INF, -INF], [3, 5], None),  # only -inf, unmasked: NaN
    ([-INF, 1], [3, 5], None),  # some -inf: a normal row
    ([LOW, LOW], [3, 5], None),  # the lowest value, unmasked: uniform, not zero
    ([1, 2], [INF, 5], None),  # an inf value under a positive weight
    ([1, 2], [3, 5], [False, False]),  # fully masked: zeros
    ([1, 2], [INF, 5], [False, False]),  # fully masked, inf value: 0·inf = NaN
    ([NAN, 2], [3, 5], [False, True]),  # NaN under the mask still poisons the row (added)
    ([INF, 2], [3, 5], [False, True]),
    ([1, 2], [INF, 5], [False, True]),  # a masked inf value: 0·inf = NaN
    ([NAN, 1], [3, 5], [-INF, -INF]),  # a float mask of -inf everywhere: zeros, NaN or not
    ([1, 2], [3, 5], [LOW, -INF]),
    ([-INF, -INF], [3, 5], [0.0, 0.0]),  # not masked: NaN
    ([-3e38, -3e38], [3, 5], [-1e38, -1e38]),  # the sum overflows to -inf, not masked: NaN
    ([1, 2], [3, 5], [-1e38, -3e38]),
]


@pytest.mark.parametrize("elem,dtype", [(F, np.float32), (F16, np.float16)])
@pytest.mark.parametrize("scores,values,mask", ROWS)
def test_attention_rows_with_nan_inf_and_masks(elem, dtype, scores, values, mask):
    if dtype == np.float16 and any(abs(x) > 65504 and np.isfinite(x) for x in scores + values + list(mask or [])
                                   if not isinstance(x, bool)):
        pytest.skip("float16 rounds these to inf")
    mask_elem = None if mask is None else (B if isinstance(mask[0], bool) else elem)
    _same(_attention(elem, mask_elem), _row_feeds(scores, values, mask, dtype))


@pytest.mark.parametrize("elem,dtype", [(F, np.float32), (F16, np.float16)])
def test_attention_fuzz_rows(elem, dtype):
    """s20261201-Attention-23..23-0 / -24-10: special floats in Q, K and V across heads, grouped
    heads, causal and an all-true bool mask; and a Q of float32's max (24-9), whose scores only
    overflow once multiplied out (ORT applies the scale after the product)."""
    rng = np.random.default_rng(7)
    specials = np.array([NAN, INF, -INF, 1e30, -1e30, 3.4e38, -3.4e38, 0.0, -0.0, 1e-30], np.float32)

    def noisy(shape, frac):
        x = rng.uniform(-3, 3, shape).astype(np.float32)
        hit = rng.random(shape) < frac
        x[hit] = rng.choice(specials, hit.sum())
        return x.astype(dtype)

    feeds = {"Q": noisy((2, 4, 3, 8), 0.1), "K": noisy((2, 2, 5, 8), 0.5), "V": noisy((2, 2, 5, 6), 0.3)}
    _same(_attention(elem, is_causal=1), feeds)
    _same(_attention(elem, B, opset=24), dict(feeds, M=np.ones((3, 5), bool)))
    big = {"Q": np.full((3, 2, 1, 8), 3.4e38 if dtype == np.float32 else 65504, dtype),
           "K": rng.uniform(-3, 3, (3, 2, 2, 8)).astype(dtype), "V": noisy((3, 2, 2, 8), 0.1)}
    _same(_attention(elem), big)


def test_attention_nonpad_zero_is_a_zero_row():
    feeds = _row_feeds([NAN, 2], [3, 5], None, np.float32)
    out = _same(_attention(F, opset=24, nonpad=True), dict(feeds, N=np.array([0], np.int64)))
    assert out[0].ravel()[0] == 0.0


@pytest.mark.parametrize("heads", [0, -3, 1 << 40, -(1 << 63), (1 << 31) + 5])
def test_attention_4d_ignores_head_attributes(heads):
    """ORT reads 4-D head counts from the shapes and ignores q_num_heads/kv_num_heads that are not
    positive once truncated to 32 bits (fuzz: the EP used to fail the run)."""
    rng = np.random.default_rng(1)
    feeds = {"Q": rng.standard_normal((2, 4, 3, 8), np.float32), "K": rng.standard_normal((2, 2, 5, 8), np.float32),
             "V": rng.standard_normal((2, 2, 5, 6), np.float32)}
    _same(_attention(F, q_num_heads=heads, kv_num_heads=heads), feeds)


@pytest.mark.parametrize("q_shape,k_shape,v_shape", [
    ((2, 4, 3, 0), (2, 2, 5, 0), (2, 2, 5, 6)),  # head size 0 (s20261201-Attention-24-1)
    ((2, 4, 0, 8), (2, 2, 5, 8), (2, 2, 5, 6)),  # no queries (-24-4)
    ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 0)),  # value head size 0
])
def test_attention_empty_dims_fail_like_ort(q_shape, k_shape, v_shape):
    model = _attention(F, opset=24)
    feeds = {"Q": np.ones(q_shape, np.float32), "K": np.ones(k_shape, np.float32), "V": np.ones(v_shape, np.float32)}
    with pytest.raises(Exception, match="greater than 0"):
        cpu_outputs(model, feeds)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="greater than 0"):
        session.run(None, feeds)


def test_contrib_attention_negative_mask_index_fails_like_ort():
    """com.microsoft Attention: a negative end position in a 1-D mask_index fails the run, as ORT's
    CPU kernel does (s20261201-com.microsoft.Attention-1-1); a valid one runs on MLX."""
    node = helper.make_node("Attention", ["x", "w", "b", "m"], ["y"], name="n", domain="com.microsoft", num_heads=2)
    model = make_model([node], [tensor("x", F, [2, 3, 6]), tensor("w", F, [6, 24]), tensor("b", F, [24]),
                                tensor("m", I32, [2])], [tensor("y", F, None)], domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 3, 6), np.float32), "w": rng.standard_normal((6, 24), np.float32),
             "b": rng.standard_normal(24).astype(np.float32), "m": np.array([3, 2], np.int32)}
    _same(model, feeds)
    bad = dict(feeds, m=np.array([-2147483647, 2], np.int32))
    with pytest.raises(Exception, match="non-negative"):
        cpu_outputs(model, bad)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="non-negative"):
        session.run(None, bad)


def test_mha_float16_scores_beyond_float16_stay_finite():
    """MultiHeadAttention in float16 whose scores pass 65504: ORT computes them in float32 and
    rounds once at the end; MLX's fused kernel in float16 gave NaN (s20261201-com.microsoft.Attention-1-7)."""
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], name="n", domain="com.microsoft", num_heads=2)
    model = make_model([node], [tensor(n, F16, [1, 3, 8]) for n in "qkv"], [tensor("y", F16, None)],
                       domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(5)
    feeds = {n: (rng.choice([-1, 1], (1, 3, 8)) * rng.uniform(250, 400, (1, 3, 8))).astype(np.float16) for n in "qkv"}
    out = _same(model, feeds)
    assert np.isfinite(out[0]).all()


def test_gqa_total_sequence_length_must_match_the_cache():
    """A 0-token step with total_sequence_length 4 and no past: ORT refuses it at run time
    (s20261201-com.microsoft.GroupQueryAttention-1-24), and so does the EP."""
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sk", "total"], ["y", "pk", "pv"], name="n",
                            domain="com.microsoft", num_heads=4, kv_num_heads=2)
    total = helper.make_tensor("total", I32, [], [4])
    inputs = [tensor("q", F, [2, 0, 64]), tensor("k", F, [2, 0, 32]), tensor("v", F, [2, 0, 32]), tensor("sk", I32, [2])]
    model = make_model([node], inputs, [tensor(n, F, None) for n in ("y", "pk", "pv")], initializers=[total],
                       domains=[("com.microsoft", 1)])
    feeds = {"q": np.zeros((2, 0, 64), np.float32), "k": np.zeros((2, 0, 32), np.float32),
             "v": np.zeros((2, 0, 32), np.float32), "sk": np.array([3, 3], np.int32)}
    # ORT 1.30 (the GPU machine's wheel) refuses the same step in other words.
    with pytest.raises(Exception, match="total_sequence_length|sequence_length shall be 1"):
        cpu_outputs(model, feeds)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="total_sequence_length"):
        session.run(None, feeds)


@pytest.mark.parametrize("attr", ["num_heads", "rotary_embedding_dim"])
@pytest.mark.parametrize("value", [-1, -(1 << 63), 1 << 31])
def test_rotary_attributes_outside_int_are_declined(tmp_path, monkeypatch, attr, value):
    """ORT's rotary kernels refuse num_heads/rotary_embedding_dim outside [0, INT_MAX] when the
    session is built (s20261201-com.microsoft.RotaryEmbedding-1-29): the EP declines them."""
    import json

    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="n", domain="com.microsoft",
                            **{attr: value})
    model = make_model([node], [tensor("x", F, [1, 2, 2, 8]), tensor("pos", I64, [1, 2]), tensor("cos", F, [4, 4]),
                                tensor("sin", F, [4, 4])], [tensor("y", F, None)], domains=[("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with pytest.raises(Exception, match=attr):
        ort.InferenceSession(model, options, providers=[MLX, "CPUExecutionProvider"])
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    decision = {line["node"]: line for line in lines}["n"]
    assert not decision["claimed"] and attr in decision["reason"], decision


def test_gqa_probabilities_past_the_window_stay_zero_in_a_nan_row():
    """GroupQueryAttention's qk output (mode 2, the probabilities) for a row a NaN bias turned to
    NaN: ORT's softmax covers the visible keys only and leaves zeros past them
    (s20261201-com.microsoft.GroupQueryAttention-1-5)."""
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sk", "total", "", "", "", "bias"],
                            ["y", "pk", "pv", "qk"], name="n", domain="com.microsoft", num_heads=2, kv_num_heads=1,
                            qk_output=2)
    total = helper.make_tensor("total", I32, [], [3])
    inputs = [tensor("q", F, [1, 3, 16]), tensor("k", F, [1, 3, 8]), tensor("v", F, [1, 3, 8]),
              tensor("sk", I32, [1]), tensor("bias", F, [1, 1, 3, 3])]
    model = make_model([node], inputs, [tensor(n, F, None) for n in ("y", "pk", "pv", "qk")], initializers=[total],
                       domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(2)
    bias = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    bias[0, 0, 1, 0] = np.nan
    feeds = {"q": rng.standard_normal((1, 3, 16), np.float32), "k": rng.standard_normal((1, 3, 8), np.float32),
             "v": rng.standard_normal((1, 3, 8), np.float32), "sk": np.array([2], np.int32), "bias": bias}
    qk = _same(model, feeds)[3]
    assert np.isnan(qk[0, :, 1, :2]).all() and (qk[0, :, 1, 2] == 0).all()


@pytest.mark.parametrize("attr", ["num_heads", "rotary_embedding_dim"])
def test_contrib_attention_attributes_beyond_int_are_declined(tmp_path, monkeypatch, attr):
    """ORT narrows these to int and fails with narrowing_error (s20261201-com.microsoft.Attention-1-68)."""
    import json

    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    attrs = {"num_heads": 2, attr: 1 << 31}
    node = helper.make_node("Attention", ["x", "w", "b"], ["y"], name="n", domain="com.microsoft", **attrs)
    model = make_model([node], [tensor("x", F, [2, 3, 6]), tensor("w", F, [6, 24]), tensor("b", F, [24])],
                       [tensor("y", F, None)], domains=[("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(model, options, providers=[MLX, "CPUExecutionProvider"])
    except Exception:
        pass  # ORT's own kernel refuses the node: what matters is that the EP declined it
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    decision = {line["node"]: line for line in lines}["n"]
    assert not decision["claimed"] and attr in decision["reason"], decision
