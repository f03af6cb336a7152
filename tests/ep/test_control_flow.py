"""If through the EP: the If node is claimed whole (ORT cannot host a plugin EP's fused node
inside a body), its branch lowered into the enclosing MLX graph, reading the enclosing scopes'
values; nested Ifs; the condition from shapes (compiled, keyed on it) or from data (eager); a
branch with a node the table declines keeps the whole If on ORT's CPU EP, with the reason."""

import gc

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import COMPILE_MODES, MLX, Run, cpu_outputs, make_model, set_env, tensor


def branch(name, nodes, output, initializers=()):
    return helper.make_graph(nodes, name, [], [tensor(output, shape=None)], list(initializers))


def if_model(then_nodes, else_nodes, initializers=(), then_inits=()):
    """x0 -> Relu -> x; y = Neg(If(cond) {then: ... -> t} {else: ... -> e}); the branches read x
    and x0 from the enclosing graph."""
    nodes = [
        helper.make_node("Relu", ["x0"], ["x"]),
        helper.make_node("If", ["cond"], ["picked"], name="choose",
                         then_branch=branch("then", then_nodes, "t", then_inits),
                         else_branch=branch("else", else_nodes, "e")),
        helper.make_node("Neg", ["picked"], ["y"]),
    ]
    inputs = [tensor("x0", shape=[2, 3]), tensor("cond", TensorProto.BOOL, [])]
    return make_model(nodes, inputs, [tensor("y")], initializers)


ADD_WEIGHT = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w")
SIMPLE = if_model([helper.make_node("Add", ["x", "w"], ["t"])], [helper.make_node("Mul", ["x0", "x"], ["e"])],
                  then_inits=[ADD_WEIGHT])
X = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_on_mlx_with_its_branch_reading_outer_values(cond):
    feeds = {"x0": X, "cond": np.array(cond)}
    run = Run(SIMPLE, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(SIMPLE, feeds)[0])


@pytest.mark.parametrize("mode", COMPILE_MODES)
def test_a_condition_from_data_takes_each_branch_on_every_path(mode, monkeypatch):
    set_env(monkeypatch, COMPILE_MODES[mode])
    session = ort.InferenceSession(SIMPLE, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    for cond in [True, False, False, True, True, False]:
        feeds = {"x0": X, "cond": np.array(cond)}
        np.testing.assert_array_equal(session.run(None, feeds)[0], cpu_outputs(SIMPLE, feeds)[0])


def nested_model():
    """cond = rows > 2 (from x0's shape); then: If(c2) {x0 - b} {x0 + b}; else: x0 * x0."""
    inner = dict(then_branch=branch("it", [helper.make_node("Sub", ["x0", "b"], ["it"])], "it"),
                 else_branch=branch("ie", [helper.make_node("Add", ["x0", "b"], ["ie"])], "ie"))
    nodes = [
        helper.make_node("Shape", ["x0"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
        helper.make_node("Greater", ["rows", "two"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], name="outer",
                         then_branch=branch("then", [helper.make_node("If", ["c2"], ["t"], name="inner", **inner)], "t"),
                         else_branch=branch("else", [helper.make_node("Mul", ["x0", "x0"], ["e"])], "e")),
    ]
    constants = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(2, np.int64), "two"),
                 numpy_helper.from_array(np.array([0.5, 1, 2], np.float32), "b")]
    return make_model(nodes, [tensor("x0", shape=["rows", 3]), tensor("c2", TensorProto.BOOL, [])], [tensor("y")], constants)


def test_nested_ifs_with_shape_and_data_conditions_match_the_cpu_ep():
    model = nested_model()
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    for rows in [3, 1, 3, 4, 1]:
        for c2 in [True, False]:
            feeds = {"x0": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), "c2": np.array(c2)}
            np.testing.assert_array_equal(session.run(None, feeds)[0], cpu_outputs(model, feeds)[0])
    run = Run(model, feeds)
    run.assert_all_on_mlx()


def test_a_condition_from_shapes_stays_compiled_keyed_on_it(monkeypatch, capfd):
    """cond = rows > 2 from Shape: a trace per shape, each taking its branch; no eager fallback."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_COMPILE_AFTER", "0")
    else_only = helper.make_node("If", ["cond"], ["y"], name="outer",
                                 then_branch=branch("then", [helper.make_node("Sub", ["x0", "b"], ["t"])], "t"),
                                 else_branch=branch("else", [helper.make_node("Mul", ["x0", "x0"], ["e"])], "e"))
    nodes = [helper.make_node("Shape", ["x0"], ["shape"]), helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
             helper.make_node("Greater", ["rows", "two"], ["cond"]), else_only]
    constants = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(2, np.int64), "two"),
                 numpy_helper.from_array(np.array([0.5, 1, 2], np.float32), "b")]
    model = make_model(nodes, [tensor("x0", shape=["rows", 3])], [tensor("y")], constants)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    for rows in [3, 1, 3, 1]:
        feeds = {"x0": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)}
        np.testing.assert_array_equal(session.run(None, feeds)[0], cpu_outputs(model, feeds)[0])
    del session
    gc.collect()
    summary = capfd.readouterr().err
    assert "shape-keyed path, 2 trace(s), 2 cache hit(s)" in summary and "fell back" not in summary, summary


def test_a_branch_with_a_declined_node_keeps_the_if_on_the_cpu_ep_with_the_reason(tmp_path, monkeypatch):
    # RandomUniformLike has no MLX lowering (MLX cannot repeat ORT's random stream).
    model = if_model([helper.make_node("Add", ["x", "x"], ["t"])], [helper.make_node("RandomUniformLike", ["x"], ["e"])])
    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    records = [line for line in report.read_text().splitlines() if '"choose"' in line]
    assert records and '"claimed": false' in records[-1] and "else_branch: node" in records[-1], records
