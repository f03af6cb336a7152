"""If through the EP: the If node is claimed whole (ORT cannot host a plugin EP's fused node
inside a body), its branch lowered into the enclosing MLX graph, reading the enclosing scopes'
values; nested Ifs; the condition from shapes (compiled, keyed on it) or from data (eager); a
branch with a node the table declines keeps the whole If on ORT's CPU EP, with the reason."""

import gc
import re

import numpy as np
import onnx
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
    # IDF with two pool n-grams in one output slot: declined (ORT keeps its last match).
    tf_idf = [helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
              helper.make_node("TfIdfVectorizer", ["xi"], ["e"], mode="IDF", min_gram_length=1, max_gram_length=1,
                               max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 0], pool_int64s=[2, 3])]
    model = if_model([helper.make_node("Add", ["x", "x"], ["t"])], tf_idf)
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


def bodies_summary(capfd):
    """The session summary's line on the bodies compiled for their steps (the caller releases
    the session first: the summary is written then)."""
    gc.collect()
    summary = capfd.readouterr().err
    found = re.search(r"(\d+) body\(ies\) compiled for their steps: (\d+) trace\(s\), (\d+) step\(s\) replayed, "
                      r"(\d+) lowered node by node", summary)
    assert found, summary
    return tuple(int(g) for g in found.groups())


def eager_session(model, monkeypatch):
    set_env(monkeypatch, dict(COMPILE_MODES["eager_only"], ONNXRUNTIME_EP_MLX_VERBOSE="1"))
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    return session


def test_a_loop_whose_condition_comes_from_data_replays_its_body_compiled_once(monkeypatch, capfd):
    """The condition is read after every step, so the loop runs eagerly; each step replays the
    body traced at the first one instead of lowering its nodes again."""
    model = loop_model(cond=True, cond_out="small")
    session = eager_session(model, monkeypatch)
    feeds = {"x0": X0}
    want = cpu_outputs(model, feeds)
    for _ in range(3):
        for g, w in zip(session.run(None, feeds), want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    steps = want[1].shape[0]
    assert steps > 3
    del session
    assert bodies_summary(capfd) == (1, 1, 3 * steps, 0)


def test_a_body_reading_the_iteration_number_on_the_host_is_lowered_node_by_node(monkeypatch, capfd):
    """Slice at the iteration number reads it on the host, which a trace cannot: the first step
    finds that and every step lowers the body's nodes instead, with the same results."""
    n = helper.make_node
    extra = [n("Unsqueeze", ["i", "axes"], ["start"]), n("Add", ["start", "one"], ["end"]),
             n("Slice", ["table", "start", "end"], ["picked"]), n("Add", ["x_out", "picked"], ["x_picked"])]
    proto = onnx.load_from_string(loop_model(trip=4, body_extra=extra))
    body = next(a.g for a in proto.graph.node[0].attribute if a.name == "body")
    body.output[2].name = "x_picked"  # the scan output: each step's x plus table[i]
    proto.graph.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "axes"),
                                    numpy_helper.from_array(np.array([1], np.int64), "one"),
                                    numpy_helper.from_array(np.array([10.0, 20.0, 30.0, 40.0], np.float32), "table")])
    model = proto.SerializeToString()
    session = eager_session(model, monkeypatch)
    feeds = {"x0": X0}
    for _ in range(2):
        for g, w in zip(session.run(None, feeds), cpu_outputs(model, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    del session
    assert bodies_summary(capfd) == (1, 1, 0, 8)


def test_a_body_whose_carried_value_grows_stops_tracing_after_eight_shapes(monkeypatch, capfd):
    """x grows by one element a step: every step is a new shape, so after eight traces the
    remaining steps lower the body node by node."""
    n = helper.make_node
    body = helper.make_graph(
        [n("Concat", ["x_in", "tail"], ["x_out"], axis=0), n("Identity", ["c_in"], ["c_out"])], "body",
        [tensor("i", TensorProto.INT64, []), tensor("c_in", TensorProto.BOOL, []), tensor("x_in", shape=None)],
        [tensor("c_out", TensorProto.BOOL, []), tensor("x_out", shape=None)])
    model = make_model([n("Loop", ["trip", "", "x0"], ["x_final"], body=body)], [tensor("x0", shape=[3])],
                       [tensor("x_final")], [numpy_helper.from_array(np.array(12, np.int64), "trip"),
                                             numpy_helper.from_array(np.array([7.0], np.float32), "tail")])
    session = eager_session(model, monkeypatch)
    feeds = {"x0": X0}
    got = session.run(None, feeds)[0]
    np.testing.assert_array_equal(got, cpu_outputs(model, feeds)[0])
    assert got.shape == (15,)
    del session
    assert bodies_summary(capfd) == (1, 8, 8, 4)


def test_a_check_of_a_compiled_body_fails_the_run_at_the_step_that_breaks_it(monkeypatch):
    """Gather at a carried index that walks the table while it is below `stop`: with `stop` past
    the table's end the sixth step reads out of range; ORT's CPU EP fails the run, and so does
    the EP, naming the body's node, though the body is replayed."""
    n = helper.make_node
    body = helper.make_graph(
        [n("Gather", ["table", "k_in"], ["picked"], name="lookup"), n("Add", ["k_in", "one"], ["k_out"]),
         n("Add", ["x_in", "picked"], ["x_out"]), n("Less", ["k_out", "stop"], ["c_out"])], "body",
        [tensor("i", TensorProto.INT64, []), tensor("c_in", TensorProto.BOOL, []), tensor("k_in", TensorProto.INT64, []),
         tensor("x_in", shape=[])],
        [tensor("c_out", TensorProto.BOOL, []), tensor("k_out", TensorProto.INT64, []), tensor("x_out", shape=[])])
    model = make_model([n("Loop", ["", "cond", "k0", "x0"], ["k_final", "x_final"], body=body, name="walk")],
                       [tensor("k0", TensorProto.INT64, []), tensor("x0", shape=[]), tensor("stop", TensorProto.INT64, [])],
                       [tensor("k_final", TensorProto.INT64), tensor("x_final")],
                       [numpy_helper.from_array(np.array(True), "cond"), numpy_helper.from_array(np.array(1, np.int64), "one"),
                        numpy_helper.from_array(np.arange(5, dtype=np.float32), "table")])
    session = eager_session(model, monkeypatch)
    fine = {"k0": np.array(0, np.int64), "x0": np.array(0.0, np.float32), "stop": np.array(5, np.int64)}
    for g, w in zip(session.run(None, fine), cpu_outputs(model, fine)):
        np.testing.assert_array_equal(g, w)
    broken = dict(fine, stop=np.array(8, np.int64))
    with pytest.raises(Exception):
        cpu_outputs(model, broken)
    with pytest.raises(Exception, match="lookup.*out of range"):
        session.run(None, broken)


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
