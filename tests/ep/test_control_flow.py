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


def loop_model(trip=None, cond=None, cond_out="keep", scan=True, body_extra=(), fed_trip=False):
    """Loop over x (carried): x <- x * 0.5 + i (the iteration number as float) + outer b; the
    scan output collects each iteration's x. ``cond_out``: "keep" passes the condition through,
    "small" continues while sum(x) < 40 (from data)."""
    n = helper.make_node
    body_nodes = [
        n("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
        n("Mul", ["x_in", "half"], ["halved"]),
        n("Add", ["halved", "i_f"], ["stepped"]),
        n("Add", ["stepped", "b"], ["x_out"]),
        n("Identity", ["x_out"], ["x_scan"]),
    ]
    if cond_out == "keep":
        body_nodes.append(n("Identity", ["c_in"], ["c_out"]))
    else:
        body_nodes += [n("ReduceSum", ["x_out"], ["total"], keepdims=0), n("Less", ["total", "limit"], ["c_out"])]
    body_nodes += list(body_extra)
    outputs = [tensor("c_out", TensorProto.BOOL, []), tensor("x_out", shape=[3])] + ([tensor("x_scan", shape=[3])] if scan else [])
    body = helper.make_graph(body_nodes, "body", [tensor("i", TensorProto.INT64, []), tensor("c_in", TensorProto.BOOL, []),
                                                 tensor("x_in", shape=[3])], outputs)
    loop_outputs = ["x_final"] + (["xs"] if scan else [])
    node = n("Loop", ["trip" if trip is not None or fed_trip else "", "cond" if cond is not None else "", "x0"], loop_outputs,
             body=body, name="repeat")
    constants = [numpy_helper.from_array(np.array(0.5, np.float32), "half"),
                 numpy_helper.from_array(np.array([1.0, -1.0, 0.5], np.float32), "b"),
                 numpy_helper.from_array(np.array(40.0, np.float32), "limit")]
    if trip is not None and not fed_trip:
        constants.append(numpy_helper.from_array(np.array(trip, np.int64), "trip"))
    if cond is not None:
        constants.append(numpy_helper.from_array(np.array(cond), "cond"))
    inputs = [tensor("x0", shape=[3])] + ([tensor("trip", TensorProto.INT64, [])] if fed_trip else [])
    return make_model([node], inputs, [tensor(o) for o in loop_outputs], constants)


X0 = np.array([1.0, 2.0, -3.0], np.float32)


@pytest.mark.parametrize("mode", COMPILE_MODES)
@pytest.mark.parametrize("form", ["for", "while_from_data", "zero_trips", "long"])
def test_loops_unroll_on_mlx_and_match_the_cpu_ep(form, mode, monkeypatch):
    set_env(monkeypatch, COMPILE_MODES[mode])
    model = {
        "for": lambda: loop_model(trip=5),
        "while_from_data": lambda: loop_model(cond=True, cond_out="small"),
        "zero_trips": lambda: loop_model(trip=0),
        "long": lambda: loop_model(trip=150),  # past an eager loop's periodic evaluation
    }[form]()
    feeds = {"x0": X0}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    want = cpu_outputs(model, feeds)
    for _ in range(3):  # eager, then compiled (or eager again), then replayed
        got = run.session.run(None, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_fed_trip_count_changes_the_unrolling_from_run_to_run():
    model = loop_model(fed_trip=True)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    for trips in [3, 1, 3, 0, 6]:
        feeds = {"x0": X0, "trip": np.array(trips, np.int64)}
        for g, w in zip(session.run(None, feeds), cpu_outputs(model, feeds)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def scan_model(input_directions, output_directions, output_axes):
    """Scan over the rows of s ([4, 3]) with a running sum (state) and, per step, the row
    times the state (a scan output laid out by ``output_axes`` / ``output_directions``)."""
    n = helper.make_node
    body = helper.make_graph(
        [n("Add", ["sum_in", "row"], ["sum_out"]), n("Mul", ["row", "sum_out"], ["product"])], "body",
        [tensor("sum_in", shape=[3]), tensor("row", shape=[3])], [tensor("sum_out", shape=[3]), tensor("product", shape=[3])])
    node = n("Scan", ["init", "s"], ["final", "products"], body=body, num_scan_inputs=1, name="scan",
             scan_input_directions=input_directions, scan_output_directions=output_directions, scan_output_axes=output_axes)
    return make_model([node], [tensor("init", shape=[3]), tensor("s", shape=["steps", 3])], [tensor("final"), tensor("products")],
                      opset=16)


@pytest.mark.parametrize("input_directions, output_directions, output_axes", [
    ([0], [0], [0]), ([1], [0], [0]), ([0], [1], [1]), ([1], [1], [-1]),
])
def test_scan_steps_in_its_directions_and_lays_outputs_on_their_axes(input_directions, output_directions, output_axes):
    model = scan_model(input_directions, output_directions, output_axes)
    rng = np.random.default_rng(2)
    for steps in [4, 1, 4]:
        feeds = {"init": rng.standard_normal(3).astype(np.float32), "s": rng.standard_normal((steps, 3)).astype(np.float32)}
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        for g, w in zip(run.outputs, cpu_outputs(model, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def scan8_model(directions):
    """Scan-8 over [batch, steps, 3] with a per-entry running sum and the products, like
    ``scan_model`` with a batch axis first and optional sequence lengths."""
    n = helper.make_node
    body = helper.make_graph(
        [n("Add", ["sum_in", "row"], ["sum_out"]), n("Mul", ["row", "sum_out"], ["product"])], "body",
        [tensor("sum_in", shape=[3]), tensor("row", shape=[3])], [tensor("sum_out", shape=[3]), tensor("product", shape=[3])])
    node = n("Scan", ["lens", "init", "s"], ["final", "products"], body=body, num_scan_inputs=1, directions=directions)
    inputs = [tensor("lens", TensorProto.INT64, ["batch"]), tensor("init", shape=["batch", 3]), tensor("s", shape=["batch", "steps", 3])]
    return make_model([node], inputs, [tensor("final"), tensor("products")], opset=8)


@pytest.mark.parametrize("directions", [[0], [1]])
@pytest.mark.parametrize("lengths", [[4, 4], [4, 2], [1, 3]])
def test_scan8_scans_each_batch_entry_for_its_length(directions, lengths):
    model = scan8_model(directions)
    rng = np.random.default_rng(4)
    feeds = {"lens": np.array(lengths, np.int64), "init": rng.standard_normal((2, 3)).astype(np.float32),
             "s": rng.standard_normal((2, 4, 3)).astype(np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for g, w in zip(run.outputs, cpu_outputs(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_scan8_refuses_a_zero_length_as_the_cpu_ep_does():
    model = scan8_model([0])
    feeds = {"lens": np.array([0, 3], np.int64), "init": np.zeros((2, 3), np.float32), "s": np.ones((2, 4, 3), np.float32)}
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match="Scan.*sequence_lens"):
        session.run(None, feeds)


def sr_model():
    """Silero's shape: cond = Equal(rate, 16000) from a small int64 input; the branches differ."""
    nodes = [helper.make_node("Equal", ["rate", "sixteen_k"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], name="by_rate",
                              then_branch=branch("then", [helper.make_node("Mul", ["x0", "x0"], ["t"])], "t"),
                              else_branch=branch("else", [helper.make_node("Add", ["x0", "x0"], ["e"])], "e"))]
    return make_model(nodes, [tensor("x0", shape=[2, 3]), tensor("rate", TensorProto.INT64, [])], [tensor("y")],
                      [numpy_helper.from_array(np.array(16000, np.int64), "sixteen_k")])


@pytest.mark.parametrize("model", [SIMPLE, sr_model()], ids=["cond_fed", "cond_from_a_small_input"])
def test_a_condition_from_a_small_input_keys_compiled_traces_on_its_value(model, monkeypatch, capfd):
    """The first trace cannot read the condition (data); the plan then splits the small inputs
    off into an eager prologue and keys each compiled trace on the condition's value: one trace
    per branch, replayed, never eager for good."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_VERBOSE", "1")
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_COMPILE_AFTER", "0")
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    small = "cond" if "cond" in {i.name for i in session.get_inputs()} else "rate"
    values = [np.array(v) for v in (True, False, True, True, False)] if small == "cond" else \
        [np.array(v, np.int64) for v in (16000, 8000, 16000, 16000, 8000)]
    for value in values:
        feeds = {"x0": X, small: value}
        np.testing.assert_array_equal(session.run(None, feeds)[0], cpu_outputs(model, feeds)[0])
    del session
    gc.collect()
    summary = capfd.readouterr().err
    # Run 1 traces and finds the host read (eager); runs 2-5 split: a trace for each branch
    # (runs 2 and 3), replayed by runs 4 and 5.
    assert "fell back" not in summary and "3 trace(s), 2 cache hit(s) (4 with an eager prologue)" in summary, summary
