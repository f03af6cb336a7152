"""Compiled models (EPContext): ORT's compile API writes each MLX partition as an EPContext node
of this EP; a session over the compiled model runs those nodes on MLX, with the outputs of the
source model, and refuses a record that is stale, foreign or edited with a clear error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, make_model, tensor
from onnxruntime_ep_mlx.compiled import compile_model, context_nodes
from onnxruntime_ep_mlx.profiling import node_providers
from onnxruntime_ep_mlx.sessions import mlx_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import make_decoder  # noqa: E402

RNG = np.random.default_rng(5)
W = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)
X = RNG.standard_normal((2, 3)).astype(np.float32)
SQ = np.array([[2, 1], [1, 3]], np.float32)


def partly_claimed_model(path: Path) -> Path:
    """MatMul, Add, Relu and Neg on MLX around a com.microsoft Inverse the EP leaves to ORT."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Add", ["m", "B"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Inverse", ["sq"], ["inv"], domain="com.microsoft"),
        helper.make_node("Neg", ["r"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[2, 3]), tensor("sq", shape=[2, 2])], [tensor("y"), tensor("inv")],
                       [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")],
                       domains=[("com.microsoft", 1)])
    path.write_bytes(model)
    return path


def run_profiled(model: Path, feeds: dict, tmp_path: Path, ep_options=None):
    session = mlx_session(model, ep_options, profile_prefix=tmp_path / "profile")
    assert session.get_providers()[0] == MLX
    outputs = session.run(None, feeds)
    return outputs, node_providers(session.end_profiling())


def test_a_compiled_model_runs_its_partitions_as_epcontext_nodes_on_mlx(tmp_path):
    source = partly_claimed_model(tmp_path / "source.onnx")
    compiled = compile_model(source, tmp_path / "compiled.onnx")
    graph = onnx.load(str(compiled)).graph
    assert [(n.domain, n.op_type) for n in graph.node] == [("com.microsoft", "EPContext"),
                                                           ("com.microsoft", "Inverse")]
    context = context_nodes(compiled)[0]
    attributes = {a.name: helper.get_attribute_value(a) for a in context.attribute}
    assert attributes["embed_mode"] == 1 and attributes["main_context"] == 1
    assert attributes["source"] == b"MLXExecutionProvider"
    # The weights stay initializers of the model, read by the EPContext node.
    assert {i.name for i in graph.initializer} == {"W", "B"} <= set(context.input)

    feeds = {"x": X, "sq": SQ}
    want, _ = run_profiled(source, feeds, tmp_path)
    got, placements = run_profiled(compiled, feeds, tmp_path)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(got[0], -np.maximum(X @ W + B, 0), rtol=1e-6, atol=1e-6)
    # The EPContext node runs as a fused MLX kernel; only the Inverse runs on ORT's CPU EP.
    assert sorted(p.provider for p in placements) == ["CPUExecutionProvider", MLX], placements
    assert [p.op for p in placements if p.provider != MLX] == ["Inverse"], placements


def test_a_session_asked_for_a_context_model_runs_too_and_writes_it(tmp_path):
    """`ep.context_enable=1` on an ordinary session: ORT feeds the partition's initializers to
    the fused node (so it can write them), and the plan still uses its own copies."""
    source = partly_claimed_model(tmp_path / "source.onnx")
    written = tmp_path / "written_ctx.onnx"
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(written))
    from onnxruntime_ep_mlx import append_to_session_options

    append_to_session_options(so)
    session = ort.InferenceSession(str(source), so)
    feeds = {"x": X, "sq": SQ}
    got = session.run(None, feeds)
    want, _ = run_profiled(source, feeds, tmp_path)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert len(context_nodes(written)) == 1
    again, _ = run_profiled(written, feeds, tmp_path)
    np.testing.assert_array_equal(again[0], want[0])


def test_weights_can_go_to_an_external_data_file(tmp_path):
    w = RNG.standard_normal((64, 64)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "W"], ["y"])], [tensor("x", shape=[2, 64])], [tensor("y")],
                       [numpy_helper.from_array(w, "W")])
    (tmp_path / "source.onnx").write_bytes(model)
    compiled = compile_model(tmp_path / "source.onnx", tmp_path / "compiled.onnx", external_data="weights.bin")
    assert (tmp_path / "weights.bin").stat().st_size == w.nbytes
    stored = onnx.load(str(compiled), load_external_data=False).graph.initializer[0]
    assert stored.data_location == TensorProto.EXTERNAL
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    got, placements = run_profiled(compiled, {"x": x}, tmp_path)
    want, _ = run_profiled(tmp_path / "source.onnx", {"x": x}, tmp_path)
    np.testing.assert_array_equal(got[0], want[0])
    assert {p.provider for p in placements} == {MLX}


def test_a_compiled_int4_decoder_steps_as_its_source(tmp_path):
    """The genai-shaped decoder (int4 MatMulNBits and GatherBlockQuantized, GroupQueryAttention,
    norms): prefill then decode steps, outputs equal to the source model's."""
    shape = make_decoder.Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=320, context=32)
    source = make_decoder.write(tmp_path / "decoder", shape, "fp32", "int4", seed=4)
    compiled = compile_model(source, tmp_path / "decoder_ctx.onnx")
    assert len(onnx.load(str(compiled), load_external_data=False).graph.node) == len(context_nodes(compiled))

    def steps(model):
        session = mlx_session(model)
        names = [o.name for o in session.get_outputs()]
        rng = np.random.default_rng(0)
        ids = rng.integers(3, shape.vocab, size=(1, 8))
        past = {f"past_key_values.{i}.{k}": np.zeros((1, shape.kv_heads, 0, shape.head_size), np.float32)
                for i in range(shape.layers) for k in ("key", "value")}
        results = []
        for end in (5, 6, 7, 8):
            start = 0 if end == 5 else end - 1
            feeds = {"input_ids": ids[:, start:end], "attention_mask": np.ones((1, end), np.int64), **past}
            out = dict(zip(names, session.run(None, feeds)))
            past = {n.replace("present", "past_key_values"): v for n, v in out.items() if n.startswith("present")}
            results.append(out)
        return results

    for got, want in zip(steps(compiled), steps(source)):
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=name)


# ------------------------------------------------------------------------------- refusals


def edited(compiled: Path, out: Path, change) -> Path:
    model = onnx.load(str(compiled))
    change(context_nodes_of(model)[0])
    onnx.save(model, str(out))
    return out


def context_nodes_of(model: onnx.ModelProto):
    return [n for n in model.graph.node if n.op_type == "EPContext"]


def set_attribute(node, name, value):
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(name, value)])


def record_of(node) -> dict:
    return json.loads(next(a.s for a in node.attribute if a.name == "ep_cache_context"))


def creation_error(model: Path) -> str:
    with pytest.raises(Exception) as raised:
        mlx_session(model)
    return str(raised.value)


@pytest.fixture()
def compiled(tmp_path):
    return compile_model(partly_claimed_model(tmp_path / "source.onnx"), tmp_path / "compiled.onnx")


def test_a_record_of_another_library_version_is_refused_naming_both(compiled, tmp_path):
    def older(node):
        record = record_of(node)
        record["library"] = "0.28.9"
        set_attribute(node, "ep_cache_context", json.dumps(record))

    message = creation_error(edited(compiled, tmp_path / "stale.onnx", older))
    assert "compiled by onnxruntime-ep-mlx 0.28.9" in message and "recompile" in message, message


def test_a_record_that_is_not_ours_is_refused(compiled, tmp_path):
    message = creation_error(edited(compiled, tmp_path / "garbage.onnx",
                                    lambda n: set_attribute(n, "ep_cache_context", "binary_data")))
    assert "not a record of this EP" in message, message
    message = creation_error(edited(compiled, tmp_path / "file.onnx", lambda n: set_attribute(n, "embed_mode", 0)))
    assert "embed_mode 0" in message, message


def test_an_edited_compiled_model_is_refused(compiled, tmp_path):
    def drop_input(node):
        node.input.pop()

    message = creation_error(edited(compiled, tmp_path / "edited.onnx", drop_input))
    assert "edited after it was compiled" in message, message


def test_another_eps_context_is_left_to_that_ep(compiled, tmp_path):
    foreign = edited(compiled, tmp_path / "foreign.onnx", lambda n: set_attribute(n, "source", "OtherExecutionProvider"))
    message = creation_error(foreign)
    assert "EPContext" in message, message


def test_a_compiled_model_cannot_be_compiled_again(compiled, tmp_path):
    with pytest.raises(Exception) as raised:
        compile_model(compiled, tmp_path / "twice.onnx")
    assert "cannot be compiled again" in str(raised.value), raised.value


def test_the_compile_command_writes_the_model_and_times_both(tmp_path, capsys):
    from onnxruntime_ep_mlx import cli

    source = partly_claimed_model(tmp_path / "source.onnx")
    assert cli.main(["compile", str(source), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    written = tmp_path / "source_mlx_ctx.onnx"
    assert f"wrote {written}: 1 EPContext node(s) of {MLX}, 1 node(s) left to ORT" in out, out
    assert "session creation (median of 1):" in out and "ms compiled" in out, out
    assert cli.main(["compile", str(written), "-o", str(tmp_path / "twice.onnx"), "--repeats", "0"]) == cli.EXIT_SETUP
    assert "cannot be compiled again" in capsys.readouterr().err
