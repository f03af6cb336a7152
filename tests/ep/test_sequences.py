"""Sequences inside an MLX subgraph: graphs from tensors to tensors through every sequence op,
against ORT's CPU EP, with every node on MLX; positions from constants (compiled) and from data
(eager); bad positions fail the run as on the CPU EP; a sequence that would leave the subgraph
keeps its nodes on ORT's CPU EP, with the reason."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import COMPILE_MODES, MLX, Run, cpu_outputs, make_model, set_env, tensor

n = helper.make_node
rng = np.random.default_rng(9)
X, Y, Z = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))


def i64(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def three_inputs():
    return [tensor("x", shape=[2, 3]), tensor("y", shape=[2, 3]), tensor("z", shape=[2, 3])]


GRAPHS = {
    # construct, erase the middle, insert at the front, take the last, stack everything
    "construct_erase_insert_at": (
        [n("SequenceConstruct", ["x", "y", "z"], ["s"]), n("SequenceErase", ["s", "one"], ["s2"]),
         n("SequenceInsert", ["s2", "z", "zero"], ["s3"]), n("SequenceAt", ["s3", "minus_one"], ["last"]),
         n("ConcatFromSequence", ["s3"], ["stacked"], axis=0, new_axis=1), n("Add", ["last", "x"], ["out"])],
        ["out", "stacked"], [i64("one", 1), i64("zero", 0), i64("minus_one", -1)]),
    # empty, append three (no position), length, concatenate on axis 1
    "empty_append_length_concat": (
        [n("SequenceEmpty", [], ["e"], dtype=TensorProto.FLOAT), n("SequenceInsert", ["e", "x"], ["s1"]),
         n("SequenceInsert", ["s1", "y"], ["s2"]), n("SequenceInsert", ["s2", "z"], ["s3"]),
         n("SequenceLength", ["s3"], ["length"]), n("ConcatFromSequence", ["s3"], ["joined"], axis=-1)],
        ["length", "joined"], []),
    # split into pieces of one without the axis, erase the last, concatenate back
    "split_pieces_erase_concat": (
        [n("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0), n("SequenceErase", ["s"], ["s2"]),
         n("SequenceLength", ["s2"], ["length"]), n("ConcatFromSequence", ["s2"], ["out"], axis=0, new_axis=1)],
        ["length", "out"], []),
    # split by a chunk size (the last chunk shorter) and by listed sizes
    "split_chunks_and_sizes": (
        [n("Concat", ["x", "y", "z"], ["xyz"], axis=0), n("SplitToSequence", ["xyz", "chunk"], ["s"], axis=0),
         n("SequenceAt", ["s", "minus_one"], ["tail"]), n("SplitToSequence", ["xyz", "sizes"], ["t"], axis=1),
         n("SequenceAt", ["t", "one"], ["middle"]), n("SequenceLength", ["s"], ["chunks"])],
        ["tail", "middle", "chunks"], [i64("chunk", 4), i64("sizes", [1, 2]), i64("minus_one", -1), i64("one", 1)]),
}


def graph_model(name):
    nodes, outputs, constants = GRAPHS[name]
    declared = [tensor(o, TensorProto.INT64 if o in COUNTS else TensorProto.FLOAT) for o in outputs]
    return make_model(nodes, three_inputs(), declared, constants, opset=17)


COUNTS = ("length", "chunks")  # SequenceLength's outputs: int64


@pytest.mark.parametrize("mode", COMPILE_MODES)
@pytest.mark.parametrize("name", GRAPHS)
def test_sequences_inside_a_subgraph_run_on_mlx_and_match_the_cpu_ep(name, mode, monkeypatch):
    set_env(monkeypatch, COMPILE_MODES[mode])
    model = graph_model(name)
    feeds = {"x": X, "y": Y, "z": Z}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    want = cpu_outputs(model, feeds)
    for _ in range(3):
        for g, w in zip(run.session.run(None, feeds), want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def positions_model():
    """A position fed as data: SequenceAt(SequenceConstruct(x, y, z), pos)."""
    nodes = [n("SequenceConstruct", ["x", "y", "z"], ["s"]), n("SequenceAt", ["s", "pos"], ["out"], name="pick")]
    return make_model(nodes, three_inputs() + [tensor("pos", TensorProto.INT64, [])], [tensor("out")], opset=17)


def test_a_position_from_data_picks_each_tensor_and_a_bad_one_fails_as_on_the_cpu_ep():
    model = positions_model()
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    assert session.get_providers()[0] == MLX
    for pos in [0, 2, -1, -3, 1]:
        feeds = {"x": X, "y": Y, "z": Z, "pos": np.array(pos, np.int64)}
        np.testing.assert_array_equal(session.run(None, feeds)[0], cpu_outputs(model, feeds)[0])
    for pos in [3, -4]:
        feeds = {"x": X, "y": Y, "z": Z, "pos": np.array(pos, np.int64)}
        with pytest.raises(Exception):
            cpu_outputs(model, feeds)
        with pytest.raises(Exception, match="node 'pick'.*position"):
            session.run(None, feeds)


def explain_records(path):
    return {line.split('"node": "')[1].split('"')[0]: line for line in path.read_text().splitlines()}


def test_a_sequence_leaving_the_subgraph_keeps_its_nodes_on_the_cpu_ep_with_the_reason(tmp_path, monkeypatch):
    """The split's sequence is a graph output (ORT passes only tensors out of a fused node), so
    the split stays on the CPU EP, and so does SequenceLength, which reads it; the Add is MLX's."""
    nodes = [n("SplitToSequence", ["x"], ["s"], axis=0, name="split"), n("SequenceLength", ["s"], ["length"], name="count"),
             n("Add", ["x", "x"], ["twice"], name="add")]
    outputs = [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None), tensor("length", TensorProto.INT64),
               tensor("twice")]
    model = make_model(nodes, [tensor("x", shape=[2, 3])], outputs, opset=17)
    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    run = Run(model, {"x": X})
    want = cpu_outputs(model, {"x": X})
    for g, w in zip(run.outputs[1:], want[1:]):
        np.testing.assert_array_equal(g, w)
    assert len(run.outputs[0]) == 2
    records = explain_records(report)
    assert '"claimed": false' in records["split"] and "would cross the edge" in records["split"], records
    assert '"claimed": false' in records["count"] and '"claimed": true' in records["add"], records


def test_optional_tensors_inside_a_subgraph_run_on_mlx():
    """x -> Optional -> OptionalGetElement + 1, and OptionalHasElement, at opsets 15 and 18."""
    nodes = [n("Optional", ["x"], ["o"]), n("OptionalHasElement", ["o"], ["has"]), n("OptionalGetElement", ["o"], ["got"]),
             n("Add", ["got", "x"], ["out"])]
    for opset in (15, 18):
        model = make_model(nodes, [tensor("x", shape=[2, 3])], [tensor("has", TensorProto.BOOL), tensor("out")], opset=opset)
        run = Run(model, {"x": X})
        run.assert_all_on_mlx()
        for g, w in zip(run.outputs, cpu_outputs(model, {"x": X})):
            np.testing.assert_array_equal(g, w)


def test_an_optional_graph_input_keeps_its_readers_on_the_cpu_ep(tmp_path, monkeypatch):
    """An optional fed from outside may be empty, and cannot enter a fused node: its reader
    stays on the CPU EP, with the reason."""
    optional_input = helper.make_value_info(
        "o", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])))
    nodes = [n("OptionalHasElement", ["o"], ["has"], name="has"), n("Add", ["x", "x"], ["twice"], name="add")]
    model = make_model(nodes, [optional_input, tensor("x", shape=[2, 3])], [tensor("has", TensorProto.BOOL), tensor("twice")],
                       opset=18)
    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    run = Run(model, {"o": X, "x": X})
    assert run.outputs[0] == np.array(True)
    records = explain_records(report)
    assert '"claimed": false' in records["has"] and "not a tensor" in records["has"], records
    assert '"claimed": true' in records["add"], records


def test_a_sequence_inside_a_branch_stays_inside_it_on_mlx():
    """An If branch builds a sequence and joins it: the sequence never leaves the body."""
    then_branch = helper.make_graph(
        [n("SequenceConstruct", ["x", "y"], ["s"]), n("ConcatFromSequence", ["s"], ["t"], axis=0)], "then", [],
        [tensor("t", shape=None)])
    else_branch = helper.make_graph([n("Concat", ["y", "x"], ["e"], axis=0)], "else", [], [tensor("e", shape=None)])
    model = make_model([n("If", ["c"], ["out"], then_branch=then_branch, else_branch=else_branch)],
                       [tensor("x", shape=[2, 3]), tensor("y", shape=[2, 3]), tensor("c", TensorProto.BOOL, [])],
                       [tensor("out")], opset=17)
    for cond in (True, False):
        feeds = {"x": X, "y": Y, "c": np.array(cond)}
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])
