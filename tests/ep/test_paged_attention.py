"""com.microsoft PagedAttention on MLX, against a numpy reference written from ORT's schema and
its CUDA kernel (ORT 1.31.1 has no CPU kernel, so a CPU-only session cannot run these models).

Each case checks the attention output and both updated caches (every row that no token writes
must come out unchanged), that the session put MLX first, and that ORT's profile shows the node
ran on MLX. Bad lengths, block ids and slots fail the run naming the node; what the op declines
fails at session creation, as it does without the EP."""


import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from conftest import MLX, Run, make_model, mlx_devices, shared_buffer_counts, tensor

F16 = TensorProto.FLOAT16
BF16 = TensorProto.BFLOAT16
I32 = TensorProto.INT32
NP = {F16: np.float16, BF16: ml_dtypes.bfloat16}

INPUTS = [
    "query", "key", "value", "key_cache", "value_cache", "cumulative_sequence_length",
    "past_seqlens", "block_table", "cos_cache", "sin_cache", "slot_mapping", "head_sink",
    "q_norm_weight", "k_norm_weight", "k_scale", "v_scale", "attention_metadata",
]
INT_INPUTS = {"cumulative_sequence_length", "past_seqlens", "block_table", "slot_mapping", "attention_metadata"}


def paged_model(feeds, elem=F16, outputs=("output", "key_cache_out", "value_cache_out"), **attrs):
    """One PagedAttention node named 'paged' over the feeds it is given (absent inputs are '').
    bfloat16 crosses the Python boundary as float32, through Casts the EP claims too."""
    from onnx import helper

    wide = elem == BF16
    wire = TensorProto.FLOAT if wide else elem
    nodes = []

    def port(name):
        if name not in feeds:
            return ""
        if wide and name not in INT_INPUTS:
            nodes.append(helper.make_node("Cast", [name], [f"{name}_bf16"], to=BF16))
            return f"{name}_bf16"
        return name

    present = [port(name) for name in INPUTS]
    while present and present[-1] == "":
        present.pop()
    produced = [f"{name}_bf16" if wide and name else name for name in outputs]
    nodes.append(
        helper.make_node("PagedAttention", present, produced, name="paged", domain="com.microsoft", **attrs)
    )
    if wide:
        nodes += [helper.make_node("Cast", [p], [n], to=TensorProto.FLOAT) for p, n in zip(produced, outputs) if n]
    inputs = [
        tensor(name, I32 if name in INT_INPUTS else wire, list(feeds[name].shape)) for name in INPUTS if name in feeds
    ]
    outs = [tensor(name, wire) for name in outputs if name]
    return make_model(nodes, inputs, outs, domains=[("com.microsoft", 1)])


def wire_feeds(feeds):
    """bfloat16 feeds as float32 (the Python binding cannot carry bfloat16)."""
    return {k: v.astype(np.float32) if v.dtype == ml_dtypes.bfloat16 else v for k, v in feeds.items()}


def rotate(x, cos, sin, interleaved):
    """Rotary embedding over the first 2·cos.shape[-1] features of x [H, D] (float32)."""
    rd = 2 * cos.shape[-1]
    r, rest = x[:, :rd], x[:, rd:]
    if interleaved:
        a, b = r[:, 0::2], r[:, 1::2]
        out = np.empty_like(r)
        out[:, 0::2] = a * cos - b * sin
        out[:, 1::2] = b * cos + a * sin
    else:
        a, b = r[:, : rd // 2], r[:, rd // 2 :]
        out = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)
    return np.concatenate([out, rest], axis=1)


def reference(feeds, num_heads, kv_num_heads, scale=0.0, softcap=0.0, local_window_size=-1, is_causal=1,
              do_rotary=0, rotary_interleaved=0, **_):
    """(output, key_cache_out, value_cache_out) as the schema and ORT's CUDA kernel define them."""
    query = feeds["query"]
    dtype = query.dtype
    f32 = lambda a: np.asarray(a, np.float32)
    kc, vc = feeds["key_cache"].copy(), feeds["value_cache"].copy()
    num_blocks, block_size, _, head = kc.shape
    hq, hkv = num_heads, kv_num_heads
    tokens = query.shape[0]
    if "key" in feeds:
        q, k, v = query, feeds["key"], feeds["value"]
    else:
        q = query[:, : hq * head]
        k = query[:, hq * head : (hq + hkv) * head]
        v = query[:, (hq + hkv) * head : (hq + 2 * hkv) * head]
    q = q.reshape(tokens, hq, head)
    k = k.reshape(tokens, hkv, head)
    v = v.reshape(tokens, hkv, head)
    cu, past, table = feeds["cumulative_sequence_length"], feeds["past_seqlens"], feeds["block_table"]
    batch = len(past)
    seq_of = np.zeros(tokens, int)
    pos_of = np.zeros(tokens, int)
    for b in range(batch):
        for j in range(cu[b + 1] - cu[b]):
            seq_of[cu[b] + j], pos_of[cu[b] + j] = b, past[b] + j
    if do_rotary:
        cos, sin = f32(feeds["cos_cache"]), f32(feeds["sin_cache"])
        turn = lambda x, t: rotate(f32(x), cos[pos_of[t]], sin[pos_of[t]], rotary_interleaved).astype(dtype)
        q = np.stack([turn(q[t], t) for t in range(tokens)]) if tokens else q
        k = np.stack([turn(k[t], t) for t in range(tokens)]) if tokens else k
    flat_k = kc.reshape(-1, hkv, head)
    flat_v = vc.reshape(-1, hkv, head)
    for t in range(tokens):
        if "slot_mapping" in feeds:
            slot = feeds["slot_mapping"][t]
        else:
            b, p = seq_of[t], pos_of[t]
            slot = table[b, p // block_size] * block_size + p % block_size
        if slot >= 0:
            flat_k[slot], flat_v[slot] = k[t], v[t]
    scale = scale or 1.0 / np.sqrt(head)
    out = np.zeros((tokens, hq, head), np.float32)
    group = hq // hkv
    for t in range(tokens):
        b, p = seq_of[t], pos_of[t]
        length = past[b] + cu[b + 1] - cu[b]
        keys = [c for c in range(length) if (not is_causal or c <= p) and (local_window_size <= 0 or c >= p + 1 - local_window_size)]
        slots = [table[b, c // block_size] * block_size + c % block_size for c in keys]
        for h in range(hq):
            kk, vv = f32(flat_k[slots, h // group]), f32(flat_v[slots, h // group])
            x = scale * (kk @ f32(q[t, h]))
            if softcap > 0:
                x = softcap * np.tanh(x / softcap)
            logits = list(x)
            if "head_sink" in feeds:
                logits.append(float(feeds["head_sink"][h]))
            logits = np.array(logits, np.float64)
            e = np.exp(logits - logits.max())
            probs = (e / e.sum())[: len(keys)]
            out[t, h] = probs @ vv
    return out.reshape(tokens, hq * head).astype(dtype), kc, vc


def paged_feeds(rng, q_lens, past, num_heads=4, kv_num_heads=2, head=16, block_size=16, num_blocks=12,
                max_blocks=3, packed=False, dtype=np.float16, rotary_cols=0, rotary_rows=64, head_sink=False,
                table=None):
    """Random inputs for sequences with q_lens new tokens after past cached ones; the block table
    hands out distinct shuffled blocks, and -1 in the entries no sequence reaches."""
    batch = len(q_lens)
    tokens = int(sum(q_lens))
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    if table is None:
        order = rng.permutation(num_blocks)
        table = np.full((batch, max_blocks), -1, np.int32)
        used = 0
        for b in range(batch):
            need = -(-(past[b] + q_lens[b]) // block_size)
            table[b, :need] = order[used : used + need]
            used += need
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32).astype(dtype)
    feeds = {
        "key_cache": r(num_blocks, block_size, kv_num_heads, head),
        "value_cache": r(num_blocks, block_size, kv_num_heads, head),
        "cumulative_sequence_length": cu,
        "past_seqlens": np.array(past, np.int32),
        "block_table": np.asarray(table, np.int32),
    }
    if packed:
        feeds["query"] = r(tokens, (num_heads + 2 * kv_num_heads) * head)
    else:
        feeds["query"] = r(tokens, num_heads * head)
        feeds["key"] = r(tokens, kv_num_heads * head)
        feeds["value"] = r(tokens, kv_num_heads * head)
    if rotary_cols:
        angles = rng.uniform(0, 2 * np.pi, (rotary_rows, rotary_cols))
        feeds["cos_cache"] = np.cos(angles).astype(dtype)
        feeds["sin_cache"] = np.sin(angles).astype(dtype)
    if head_sink:
        feeds["head_sink"] = r(num_heads)
    return feeds


def check(feeds, elem=F16, atol=1e-2, **attrs):
    attrs.setdefault("num_heads", 4)
    attrs.setdefault("kv_num_heads", 2)
    model = paged_model(feeds, elem, **attrs)
    run = Run(model, wire_feeds(feeds))
    run.assert_all_on_mlx()
    want = reference(feeds, **attrs)
    got_out, got_k, got_v = run.outputs
    np.testing.assert_allclose(np.asarray(got_out, np.float32), np.asarray(want[0], np.float32), atol=atol, rtol=atol)
    # The caches: new rows exactly as written (rotated K within one rounding), the rest unchanged.
    rotary = attrs.get("do_rotary", 0)
    np.testing.assert_allclose(np.asarray(got_k, np.float32), np.asarray(want[1], np.float32), atol=2e-2 if rotary else 0)
    np.testing.assert_array_equal(np.asarray(got_v, np.float32), np.asarray(want[2], np.float32))
    return run


CASES = {
    # (q_lens, past): decode (each token gathers its own sequence) and ragged prefill (all tokens
    # against all sequences, masked to their own), including a sequence with no new token.
    "decode": ([1, 1, 1], [5, 0, 17]),
    "prefill": ([4, 0, 7], [3, 2, 10]),
    "first_prompt": ([9], [0]),
    "chunked_prefill": ([6, 2], [16, 30]),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("is_causal", [1, 0])
def test_paged_attention_matches_the_reference(case, is_causal):
    q_lens, past = CASES[case]
    check(paged_feeds(np.random.default_rng(1), q_lens, past), is_causal=is_causal)


@pytest.mark.parametrize("case", ["decode", "prefill"])
@pytest.mark.parametrize("attrs", [
    {"softcap": 2.0},
    {"scale": 0.3},
    {"local_window_size": 3},
    {"local_window_size": 3, "is_causal": 0},
    {"local_window_size": 1, "softcap": 5.0},
    {"num_heads": 4, "kv_num_heads": 4},
    {"num_heads": 4, "kv_num_heads": 1},
], ids=str)
def test_paged_attention_attributes(case, attrs):
    q_lens, past = CASES[case]
    feeds = paged_feeds(np.random.default_rng(2), q_lens, past, kv_num_heads=attrs.get("kv_num_heads", 2))
    check(feeds, **attrs)


@pytest.mark.parametrize("case", ["decode", "prefill"])
@pytest.mark.parametrize("window", [-1, 4])
def test_head_sink(case, window):
    q_lens, past = CASES[case]
    feeds = paged_feeds(np.random.default_rng(3), q_lens, past, head_sink=True)
    check(feeds, local_window_size=window)


@pytest.mark.parametrize("case", ["decode", "prefill"])
@pytest.mark.parametrize("cols", [16, 8], ids=["full", "partial"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("packed", [False, True], ids=["separate", "packed"])
def test_rotary(case, cols, interleaved, packed):
    q_lens, past = CASES[case]
    feeds = paged_feeds(np.random.default_rng(4), q_lens, past, head=32, rotary_cols=cols, packed=packed)
    check(feeds, do_rotary=1, rotary_interleaved=interleaved)


def test_rotary_caches_without_do_rotary_change_nothing():
    feeds = paged_feeds(np.random.default_rng(5), [3, 2], [4, 0], head=32, rotary_cols=16)
    check(feeds, do_rotary=0)


@pytest.mark.parametrize("case", ["decode", "prefill"])
def test_packed_qkv(case):
    q_lens, past = CASES[case]
    check(paged_feeds(np.random.default_rng(6), q_lens, past, packed=True))


def test_slot_mapping_writes_where_it_says_and_minus_one_skips():
    rng = np.random.default_rng(7)
    feeds = paged_feeds(rng, [3, 2], [4, 0])
    # Token 1 is a prefix-cache hit (not written), the others go where the derived slots would,
    # except token 4, which goes to a block no sequence reads.
    table = feeds["block_table"]
    derived = [table[0, p // 16] * 16 + p % 16 for p in (4, 5, 6)] + [table[1, p // 16] * 16 + p % 16 for p in (0, 1)]
    spare = next(b for b in range(12) if b not in table)
    feeds["slot_mapping"] = np.array([derived[0], -1, derived[2], derived[3], spare * 16 + 7], np.int32)
    check(feeds)


def test_minus_one_block_entries_outside_every_window_are_never_read():
    rng = np.random.default_rng(8)
    feeds = paged_feeds(rng, [2, 1], [33, 40])
    feeds["block_table"][:, 0] = -1  # positions 0..15: outside a 4-token window of every token
    check(feeds, local_window_size=4)


def test_sequences_may_share_blocks_they_only_read():
    rng = np.random.default_rng(9)
    table = np.array([[3, 5, -1], [3, 7, -1]], np.int32)  # a shared 16-token prefix block
    check(paged_feeds(rng, [2, 3], [16, 20], table=table))


def test_bfloat16():
    rng = np.random.default_rng(10)
    feeds = paged_feeds(rng, [4, 1], [3, 9], dtype=ml_dtypes.bfloat16, head_sink=True)
    check(feeds, elem=BF16, atol=5e-2, softcap=3.0)
    check(paged_feeds(rng, [4, 1], [3, 9], dtype=ml_dtypes.bfloat16), elem=BF16, atol=5e-2)


@pytest.mark.parametrize("head", [64, 128, 256])
@pytest.mark.parametrize("elem", [F16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("group", [1, 4, 8], ids=["mha", "gqa4", "gqa8"])
def test_decode_over_long_paged_caches(head, elem, group):
    """Decode steps as the paged decode-attention kernel takes them on MLX's GPU (the composed
    path elsewhere): a packed batch whose sequences hold from none to 1,500 cached tokens in 100
    shuffled blocks, so one reads a single block and another is split over three blocks of the
    GPU; one, four or eight query heads a key head (a block serves them together; eight take
    the kernel's narrower blocks); the head sizes LLMs use."""
    past = [0, 15, 16, 1500]
    feeds = paged_feeds(np.random.default_rng(12), [1] * len(past), past, num_heads=2 * group, kv_num_heads=2,
                        head=head, num_blocks=125, max_blocks=100, dtype=NP[elem])
    check(feeds, elem=elem, atol=5e-2 if elem == BF16 else 1e-2, num_heads=2 * group, kv_num_heads=2)


@pytest.mark.parametrize("head", [64, 128, 256])
@pytest.mark.parametrize("elem", [F16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("group", [1, 4], ids=["mha", "gqa4"])
@pytest.mark.parametrize("attrs", [{}, {"is_causal": 0}, {"local_window_size": 40}], ids=str)
def test_prefill_over_paged_caches(head, elem, group, attrs):
    """Ragged prefills as the paged prefill-attention kernel takes them on MLX's CUDA backend:
    a first prompt of 37 tokens, a sequence with nothing new, and chunks after 100 and 3 cached
    tokens, so the kernel's 16-token tiles hold one, two or three sequences' tokens."""
    q_lens, past = [37, 0, 5, 20], [0, 30, 100, 3]
    feeds = paged_feeds(np.random.default_rng(13), q_lens, past, num_heads=2 * group, kv_num_heads=2, head=head,
                        num_blocks=16, max_blocks=8, dtype=NP[elem])
    check(feeds, elem=elem, atol=5e-2 if elem == BF16 else 1e-2, num_heads=2 * group, kv_num_heads=2, **attrs)


@pytest.mark.parametrize("elem", [F16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("q_lens, past", [([1, 1, 1], [1500, 3, 700]), ([37, 0, 5, 20], [0, 30, 100, 3])],
                         ids=["decode", "prefill"])
def test_the_kernels_agree_with_the_composed_path(elem, q_lens, past):
    """The same node with the hand-written kernels (where they run: MLX's GPU) and with the
    composed path they replace (`no_cuda_kernels`): outputs within a rounding of each other,
    caches identical, both sessions MLX-first."""
    feeds = paged_feeds(np.random.default_rng(14), q_lens, past, num_heads=8, kv_num_heads=2, head=128,
                        num_blocks=150, max_blocks=100, dtype=NP[elem])
    model = paged_model(feeds, elem, num_heads=8, kv_num_heads=2)
    outputs = []
    for options in ({}, {"no_cuda_kernels": "1"}):
        so = ort.SessionOptions()
        so.add_provider_for_devices(mlx_devices(), options)
        session = ort.InferenceSession(model, so)
        session.disable_fallback()
        assert session.get_providers()[0] == MLX
        outputs.append([np.asarray(o, np.float32) for o in session.run(None, wire_feeds(feeds))])
    (kernel_out, *kernel_caches), (composed_out, *composed_caches) = outputs
    atol = 5e-2 if elem == BF16 else 1e-2
    np.testing.assert_allclose(kernel_out, composed_out, atol=atol, rtol=atol)
    for got, want in zip(kernel_caches, composed_caches):
        np.testing.assert_array_equal(got, want)


def test_attention_metadata_bounds_change_nothing():
    feeds = paged_feeds(np.random.default_rng(11), [4, 0, 7], [3, 2, 10])
    feeds["attention_metadata"] = np.array([7, 17, 0], np.int32)
    check(feeds)


def test_cache_outputs_may_be_absent():
    feeds = paged_feeds(np.random.default_rng(12), [4, 2], [3, 9])
    model = paged_model(feeds, outputs=("output",), num_heads=4, kv_num_heads=2)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_allclose(
        np.asarray(run.outputs[0], np.float32),
        np.asarray(reference(feeds, 4, 2)[0], np.float32),
        atol=1e-2,
        rtol=1e-2,
    )


def test_a_decode_step_after_a_prefill_reads_what_the_prefill_wrote():
    rng = np.random.default_rng(13)
    first = paged_feeds(rng, [5, 3], [0, 0])
    model = paged_model(first, num_heads=4, kv_num_heads=2)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    assert session.get_providers()[0] == MLX
    _, k_cache, v_cache = session.run(None, first)
    second = paged_feeds(rng, [1, 1], [5, 3], table=first["block_table"])
    second["key_cache"], second["value_cache"] = k_cache, v_cache
    run = check(second)
    assert run.outputs[0].shape == (2, 64)


def mlx_session(model):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    assert session.get_providers()[0] == MLX
    return session


@pytest.mark.parametrize("breakage, words", [
    (lambda f: f["block_table"].__setitem__((0, 0), 12), "block id"),
    (lambda f: f["block_table"].__setitem__((1, 0), -1), "block id"),
    (lambda f: f["past_seqlens"].__setitem__(0, 47), "capacity"),
    (lambda f: f["past_seqlens"].__setitem__(1, -1), "past_seqlens"),
    (lambda f: f["cumulative_sequence_length"].__setitem__(2, 4), "token_count"),
    (lambda f: f["cumulative_sequence_length"].__setitem__(1, 6), "non-decreasing"),
    (lambda f: f.__setitem__("slot_mapping", np.array([0, 1, 2, 3, 192], np.int32)), "slot_mapping"),
    (lambda f: f.__setitem__("slot_mapping", np.array([0, 1, 2, 3, 1], np.int32)), "same cache slot"),
], ids=["block_past_num_blocks", "unmapped_block_read", "past_over_capacity", "negative_past",
        "cumulative_end", "cumulative_order", "slot_out_of_range", "duplicate_slot"])
def test_bad_lengths_blocks_and_slots_fail_the_run(breakage, words):
    feeds = paged_feeds(np.random.default_rng(14), [3, 2], [4, 0])
    model_feeds = dict(feeds)
    if "slot" in words or "same" in words:
        model_feeds["slot_mapping"] = np.zeros(5, np.int32)
    model = paged_model(model_feeds, num_heads=4, kv_num_heads=2)
    breakage(feeds)
    with pytest.raises(Exception, match=f"node 'paged'.*{words}"):
        mlx_session(model).run(None, feeds)


@pytest.mark.parametrize("attrs, extra", [
    ({"kv_cache_layout": "LATENT"}, {}),
    ({"rotary_offset": 8}, {}),
    ({"k_quant_type": "PER_TENSOR"}, {}),
    ({"k_cache_dtype": "float16"}, {}),
    ({}, {"q_norm_weight": np.ones(16, np.float16), "k_norm_weight": np.ones(16, np.float16)}),
], ids=["latent", "rotary_offset", "quantized", "cache_dtype", "qk_norm"])
def test_declined_nodes_fail_as_without_the_ep(attrs, extra):
    feeds = paged_feeds(np.random.default_rng(15), [2], [3])
    feeds.update(extra)
    model = paged_model(feeds, num_heads=4, kv_num_heads=2, **attrs)
    # ORT 1.31.1 has no CPU kernel: a node the EP declines cannot be placed anywhere.
    with pytest.raises(Exception, match="PagedAttention"):
        ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])


@pytest.mark.parametrize("case", ["decode", "prefill"])
def test_compiled_replays_agree_and_still_check(case):
    q_lens, past = CASES[case]
    feeds = paged_feeds(np.random.default_rng(16), q_lens, past, head_sink=case == "prefill")
    feeds["slot_mapping"] = np.full(int(sum(q_lens)), -1, np.int32)  # reads only
    model = paged_model(feeds, num_heads=4, kv_num_heads=2)
    session = mlx_session(model)
    want = reference(feeds, 4, 2)
    for _ in range(3):  # eager, then compiled, then replayed
        out, k_cache, v_cache = session.run(None, feeds)
        np.testing.assert_allclose(out.astype(np.float32), want[0].astype(np.float32), atol=1e-2, rtol=1e-2)
        np.testing.assert_array_equal(k_cache, feeds["key_cache"])
        np.testing.assert_array_equal(v_cache, feeds["value_cache"])
    feeds["block_table"] = feeds["block_table"].copy()
    feeds["block_table"][0, 0] = 99
    with pytest.raises(Exception, match="node 'paged'.*block id"):
        session.run(None, feeds)


def test_no_new_tokens_passes_the_caches_through():
    feeds = paged_feeds(np.random.default_rng(17), [0, 0], [3, 5])
    run = check(feeds)
    assert run.outputs[0].shape == (0, 64)


@pytest.mark.parametrize("skipping", [False, True], ids=["every_token_writes", "a_token_skips"])
def test_pools_bound_as_their_own_outputs_are_updated_in_place(skipping, monkeypatch, capfd):
    """A server binds each pool as both the input and its output (ORT's in-place PagedAttention):
    the EP feeds the next step from its device mirror and writes the step's rows into the
    mirror's own buffer, not into a copy of the pool; a token with slot_mapping -1 writes
    nothing. Every step is checked against the reference, pools included."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    rng = np.random.default_rng(12)
    feeds = paged_feeds(rng, [1, 1], [5, 20])
    if skipping:
        feeds["slot_mapping"] = np.zeros(2, np.int32)
    session = ort.InferenceSession(paged_model(feeds, num_heads=4, kv_num_heads=2), providers=[MLX, "CPUExecutionProvider"])
    assert session.get_providers()[0] == MLX
    pools = {name: ort.OrtValue.ortvalue_from_numpy(feeds[name]) for name in ("key_cache", "value_cache")}
    steps = 5
    for step in range(steps):
        table = feeds["block_table"]
        if skipping:  # the second sequence's token is a prefix-cache hit: not written
            p = feeds["past_seqlens"][0]
            feeds["slot_mapping"] = np.array([table[0, p // 16] * 16 + p % 16, -1], np.int32)
        binding = session.io_binding()
        for name, value in feeds.items():
            if name in pools:
                binding.bind_ortvalue_input(name, pools[name])
            else:
                binding.bind_cpu_input(name, value)
        binding.bind_output("output")
        binding.bind_ortvalue_output("key_cache_out", pools["key_cache"])
        binding.bind_ortvalue_output("value_cache_out", pools["value_cache"])
        session.run_with_iobinding(binding)
        want = reference(feeds, num_heads=4, kv_num_heads=2)
        np.testing.assert_allclose(np.asarray(binding.copy_outputs_to_cpu()[0], np.float32),
                                   np.asarray(want[0], np.float32), atol=1e-2, rtol=1e-2, err_msg=f"step {step}")
        np.testing.assert_array_equal(pools["key_cache"].numpy(), want[1], err_msg=f"step {step}")
        np.testing.assert_array_equal(pools["value_cache"].numpy(), want[2], err_msg=f"step {step}")
        fresh = paged_feeds(rng, [1, 1], [5, 20])
        feeds.update({name: fresh[name] for name in ("query", "key", "value")})
        feeds.update({name: pools[name].numpy() for name in pools})
        feeds["past_seqlens"] = feeds["past_seqlens"] + np.array([1, 0 if skipping else 1], np.int32)
    capfd.readouterr()
    del session, binding
    (written, _, mirrored, in_place), summary = shared_buffer_counts(capfd)
    # Only the tokens' rows go back to ORT's buffers: 2 pools x writing tokens x 2 key heads.
    assert written == steps * 2 * (1 if skipping else 2) * 2, summary
    assert mirrored == 2 * (steps - 1), summary
    if skipping:
        # The skipped token's repeated write reads the pool (row 0, for a step where no token
        # writes): MLX may still hold that read when the scatter runs, and then copies the pool,
        # so how many steps scatter in place is timing (0 of 8 on a loaded 2-core machine,
        # 2026-12-04); the pools' contents and the rows written back are checked above.
        assert in_place <= 2 * (steps - 1), summary
    elif "device gpu" in summary:
        # MLX's CUDA backend may still reference a mirror when a step starts (the timing of its
        # references), then copies it once; the rows written back stay the same.
        assert 2 * (steps - 2) <= in_place <= 2 * (steps - 1), summary
    else:
        assert in_place == 2 * (steps - 1), summary
