"""A genai-shaped decoder (scripts/make_decoder.py: GroupQueryAttention with rotary inside,
SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, SiLU as Sigmoid * Mul) through
plain ORT sessions: prefill then one-token decode steps, the way onnxruntime-genai feeds it,
with every node on MLX and logits and KV cache within 1e-4 of ORT's CPU EP.

Two cache layouts, as genai uses them: a growing past (present = past + new rows) and the shared
buffer (past and present both [B, kv_heads, context, head], written in place by the attention).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxruntime_ep_mlx import EP_NAME, register_execution_provider_library
from onnxruntime_ep_mlx.explain import explain_to, read_explain_records
from onnxruntime_ep_mlx.profiling import node_providers
from onnxruntime_ep_mlx.sessions import cpu_session, mlx_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import make_decoder  # noqa: E402

SHAPE = make_decoder.Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=320, context=32)
TOLERANCE = 1e-4


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_execution_provider_library()


@pytest.fixture(scope="module")
def fp32_decoder(tmp_path_factory) -> Path:
    return make_decoder.write(tmp_path_factory.mktemp("decoder"), SHAPE, "fp32", "none", seed=3)


def steps(batch: int, prompt: int, decode: int, shared: bool, seed: int = 0):
    """Feeds for a prefill of `prompt` tokens then `decode` single tokens (past filled in by the
    caller from the previous step's presents)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, SHAPE.vocab, size=(batch, prompt + decode))
    yield ids[:, :prompt], prompt
    for t in range(decode):
        yield ids[:, prompt + t : prompt + t + 1], prompt + t + 1


def generate(session, shared: bool, batch=2, prompt=5, decode=4):
    """Runs prefill + decode steps; returns every step's outputs."""
    kv, d = SHAPE.kv_heads, SHAPE.head_size
    past_len = SHAPE.context if shared else 0
    past = {f"past_key_values.{i}.{k}": np.zeros((batch, kv, past_len, d), np.float32)
            for i in range(SHAPE.layers) for k in ("key", "value")}
    names = [o.name for o in session.get_outputs()]
    results = []
    for ids, total in steps(batch, prompt, decode, shared):
        feeds = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((batch, total), np.int64), **past}
        out = dict(zip(names, session.run(None, feeds)))
        results.append(out)
        past = {n.replace("present", "past_key_values"): v for n, v in out.items() if n.startswith("present")}
    return results


def close(got: dict, want: dict, step: int) -> None:
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, (step, name, g.shape, w.shape)
        difference = float(np.abs(g.astype(np.float64) - w).max()) if g.size else 0.0
        assert difference <= TOLERANCE, f"step {step} {name}: max |MLX - CPU| {difference:.3g}"


@pytest.mark.parametrize("shared", [False, True], ids=["growing_past", "shared_buffer"])
def test_decoder_prefill_and_decode_run_entirely_on_mlx(fp32_decoder, tmp_path, shared):
    with explain_to(tmp_path / "explain.jsonl") as report:
        session = mlx_session(fp32_decoder, profile_prefix=tmp_path / "profile")
    assert session.get_providers()[0] == EP_NAME
    declined = [f"{r.node} ({r.qualified_op}): {r.reason}" for r in read_explain_records(report) if not r.claimed]
    assert not declined, "declined:\n" + "\n".join(declined)

    got = generate(session, shared)
    off_mlx = [p for p in node_providers(session.end_profiling()) if p.provider != EP_NAME]
    assert not off_mlx, f"kernels outside MLX: {off_mlx}"

    want = generate(cpu_session(fp32_decoder), shared)
    for step, (g, w) in enumerate(zip(got, want)):
        close(g, w, step)


def test_trailing_unnamed_outputs_are_not_slots_to_fill(tmp_path):
    """genai's builder writes the final norm's outputs as [y, "", "", ""]: the node runs on MLX
    like one with a single output (it used to fail: one array for four slots)."""
    from onnx import TensorProto, helper

    hidden = 8
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "", "", ""],
                            domain="com.microsoft", epsilon=1e-5)
    gamma = onnx.numpy_helper.from_array(np.linspace(0.5, 1.5, hidden).astype(np.float32), "gamma")
    x_info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, hidden]) for n in ("x", "skip", "y")]
    graph = helper.make_graph([node], "final_norm", x_info[:2], x_info[2:], [gamma])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    path = tmp_path / "final_norm.onnx"
    onnx.save(model, path)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((2, 3, hidden)).astype(np.float32) for n in ("x", "skip")}
    session = mlx_session(path, profile_prefix=tmp_path / "profile")
    got = session.run(None, feeds)[0]
    assert [p.provider for p in node_providers(session.end_profiling())] == [EP_NAME]
    np.testing.assert_allclose(got, cpu_session(path).run(None, feeds)[0], rtol=1e-5, atol=1e-5)
