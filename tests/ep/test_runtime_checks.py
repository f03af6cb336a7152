"""Inputs ORT's CPU EP rejects at run time (out-of-range indices, integer division by zero) fail
the MLX run too, naming the node, on the eager and the compiled path; and reductions over
size-1 axes, which crash MLX 0.32.4 inside shapeless compiled closures, run."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, cpu_outputs_or_mlx_fails_too, make_model, tensor


def mlx_session(model):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()  # else ORT's binding retries a failed run on the CPU EP
    assert session.get_providers()[0] == MLX
    return session


def assert_fails_like_cpu(model, feeds, node_name, words):
    with pytest.raises(Exception) as cpu_error:
        cpu_outputs(model, feeds)
    with pytest.raises(Exception) as mlx_error:
        mlx_session(model).run(None, feeds)
    message = str(mlx_error.value)
    assert f"node '{node_name}'" in message, message
    assert words in message, message
    assert cpu_error.value is not None
    return message


def gather_model(op, data_shape, indices_shape, index_type=TensorProto.INT64, **attrs):
    node = helper.make_node(op, ["data", "indices"], ["out"], name="pick", **attrs)
    return make_model([node], [tensor("data", shape=data_shape), tensor("indices", index_type, indices_shape)], [tensor("out")])


@pytest.mark.parametrize("op, data_shape, indices", [
    ("Gather", [3, 2], np.array([0, 3])),
    ("Gather", [3, 2], np.array([-4])),
    ("GatherElements", [2, 2], np.array([[0, 2], [1, 0]])),
    ("GatherND", [2, 3], np.array([[1, 3]])),
    ("GatherND", [2, 3], np.array([[-3, 0]])),
])
def test_an_out_of_range_index_fails_the_run_naming_the_node(op, data_shape, indices):
    model = gather_model(op, data_shape, list(indices.shape))
    feeds = {"data": np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape), "indices": indices}
    message = assert_fails_like_cpu(model, feeds, "pick", "out of range")
    assert "ORT's CPU EP rejects this input too" in message, message


@pytest.mark.parametrize("op", ["Gather", "GatherElements"])
def test_in_range_indices_still_run_on_mlx_and_a_bad_one_fails_after_compiling(op):
    model = gather_model(op, [3, 3], [3, 3], TensorProto.INT32)
    data = np.arange(9, dtype=np.float32).reshape(3, 3)
    good = np.array([[0, -1, 2], [2, 1, 0], [-3, 0, 1]], np.int32)
    run = Run(model, {"data": data, "indices": good})
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, {"data": data, "indices": good})[0])
    session = mlx_session(model)
    for _ in range(3):  # eager, then compiled, then replayed
        session.run(None, {"data": data, "indices": good})
    with pytest.raises(Exception, match="node 'pick'.*out of range"):
        session.run(None, {"data": data, "indices": np.full((3, 3), 3, np.int32)})
    # A failed check is the input's fault: the session goes on, compiled.
    np.testing.assert_array_equal(session.run(None, {"data": data, "indices": good})[0],
                                  cpu_outputs(model, {"data": data, "indices": good})[0])


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_an_out_of_range_scatter_index_fails_the_run(op):
    if op == "ScatterND":
        indices, updates = np.array([[0], [5]]), np.ones((2, 3), np.float32)
    else:
        indices, updates = np.array([[0, 1, 7]]), np.ones((1, 3), np.float32)
    node = helper.make_node(op, ["data", "indices", "updates"], ["out"], name="put")
    model = make_model([node], [tensor("data", shape=[3, 3]), tensor("indices", TensorProto.INT64, list(indices.shape)),
                                tensor("updates", shape=list(updates.shape))], [tensor("out")])
    feeds = {"data": np.zeros((3, 3), np.float32), "indices": indices, "updates": updates}
    assert_fails_like_cpu(model, feeds, "put", "out of range")


def test_gather_elements_with_indices_smaller_than_data_on_another_axis():
    # Fuzz trigger: data [2,2], indices [[1]], axis 0 gave [[2, 3]] (take_along_axis broadcast).
    for data_shape, indices, axis in [([2, 2], [[1]], 0), ([3, 4], [[0, 2], [1, 1]], 1), ([2, 3, 4], [[[1]], [[0]]], 2)]:
        indices = np.array(indices, np.int64)
        model = gather_model("GatherElements", data_shape, list(indices.shape), axis=axis)
        feeds = {"data": np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape), "indices": indices}
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("op", ["Div", "Mod"])
@pytest.mark.parametrize("elem, dtype", [(TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64), (TensorProto.UINT8, np.uint8)])
def test_integer_division_by_zero_fails_the_run_like_cpu(op, elem, dtype):
    node = helper.make_node(op, ["a", "b"], ["c"], name="ratio")
    model = make_model([node], [tensor("a", elem, [3]), tensor("b", elem, [3])], [tensor("c", elem)])
    good = {"a": np.array([7, 9, 4], dtype), "b": np.array([2, 4, 3], dtype)}
    session = mlx_session(model)
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, good)[0], cpu_outputs(model, good)[0])
    bad = {"a": np.array([7, 9, 4], dtype), "b": np.array([2, 0, 3], dtype)}
    assert_fails_like_cpu(model, bad, "ratio", f"integer {'division' if op == 'Div' else 'modulo'} by zero")
    with pytest.raises(Exception, match="node 'ratio'"):
        session.run(None, bad)


# Reductions over size-1 axes: MLX 0.32.4 corrupts its heap when a shapeless compiled closure
# holds one (x f32[1, 4], axis 0). Each model runs eagerly, compiled, replayed, at a second
# shape with the same size-1 axis, and back.
SIZE_ONE_CASES = [
    ("Softmax", {"axis": 0}, 13),
    ("LogSoftmax", {"axis": 0}, 13),
    ("Softmax", {"axis": 1}, 13),
    ("LogSoftmax", {"axis": 1}, 13),
    ("ReduceSum", {"keepdims": 1}, 13),
    ("ReduceMax", {"keepdims": 0}, 18),
    ("ReduceMean", {"keepdims": 1}, 18),
    ("ReduceLogSumExp", {"keepdims": 1}, 18),
    ("ReduceProd", {"keepdims": 1}, 18),
]


@pytest.mark.parametrize("op, attrs, opset", SIZE_ONE_CASES, ids=[f"{c[0]}-{sorted(c[1].items())}" for c in SIZE_ONE_CASES])
@pytest.mark.parametrize("layout", ["row", "column"])
def test_reductions_over_a_size_one_axis_in_compiled_closures(op, attrs, opset, layout):
    axis = 0 if layout == "row" else 1
    shapes = [(1, 4), (1, 5)] if layout == "row" else [(4, 1), (6, 1)]
    inputs = ["x"]
    initializers = []
    if op.startswith("Reduce"):
        axes = numpy_helper.from_array(np.array([axis], np.int64), "axes")
        inputs.append("axes")
        initializers.append(axes)
    else:
        attrs = {"axis": axis}
    node = helper.make_node(op, inputs, ["y"], **attrs)
    dims = ["one", "n"] if layout == "row" else ["n", "one"]
    model = make_model([node], [tensor("x", shape=dims)], [tensor("y")], initializers, opset=opset)
    session = mlx_session(model)
    rng = np.random.default_rng(0)
    for shape in [shapes[0], shapes[0], shapes[0], shapes[1], shapes[1], shapes[0]]:
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        np.testing.assert_allclose(session.run(None, feeds)[0], cpu_outputs(model, feeds)[0], rtol=1e-6, atol=1e-6)
    run = Run(model, {"x": rng.standard_normal(shapes[0]).astype(np.float32)})
    run.assert_all_on_mlx()


def test_conv_with_group_zero_is_declined_not_run():
    # Fuzz trigger on MLX's CUDA backend: group=0 reached MLX, whose division by it raised SIGFPE.
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=0)
    model = make_model([node], [tensor("x", shape=[1, 2, 4, 4]), tensor("w", shape=[2, 2, 3, 3])], [tensor("y")])
    feeds = {"x": np.ones((1, 2, 4, 4), np.float32), "w": np.ones((2, 2, 3, 3), np.float32)}
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)  # ORT's CPU EP rejects it: so must the session, on the CPU EP
    with pytest.raises(Exception) as error:
        Run(model, feeds)
    assert "MLXExecutionProvider" not in str(error.value), "the node must not have run on MLX"


@pytest.mark.parametrize("row", [[1.0, np.inf, 2.0], [-np.inf, -np.inf, 0.0], [np.nan, 1.0, 2.0], [3.0, 1.0, -2.0]])
@pytest.mark.parametrize("elem, dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)])
def test_log_softmax_with_infinities_matches_cpu(row, elem, dtype):
    # Fuzz trigger: +inf in a row gave [NaN, -inf, -inf]; ORT's CPU EP gives NaN throughout.
    model = make_model([helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)], [tensor("x", elem, [2, 3])],
                       [tensor("y", elem)], opset=13)
    feeds = {"x": np.array([row, [0.5, 0.25, 0.125]], dtype)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_float16_sum_and_mean_add_up_in_float32(op):
    # [6e4, 6e4]: ORT's CPU EP adds in float32 (Mean 6e4), float16 addition overflowed to inf.
    model = make_model([helper.make_node(op, ["a", "b", "c"], ["y"])],
                       [tensor(n, TensorProto.FLOAT16, [3]) for n in "abc"], [tensor("y", TensorProto.FLOAT16)])
    feeds = {"a": np.array([6e4, 6e4, 1], np.float16), "b": np.array([6e4, -6e4, 2], np.float16),
             "c": np.array([-6e4, 1e-3, 3], np.float16)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("op", ["Scatter", "ScatterElements"])
def test_scatter_indices_larger_than_data_on_another_axis_fail_like_cpu(op):
    # Fuzz trigger: ORT raises "Indices dim=4 at pos=1 is greater than input dim=2"; we scattered.
    node = helper.make_node(op, ["data", "indices", "updates"], ["out"], name="put", axis=0)
    opset = 10 if op == "Scatter" else 17
    model = make_model([node], [tensor("data", shape=[3, 2]), tensor("indices", TensorProto.INT64, [1, 4]),
                                tensor("updates", shape=[1, 4])], [tensor("out")], opset=opset)
    feeds = {"data": np.zeros((3, 2), np.float32), "indices": np.zeros((1, 4), np.int64),
             "updates": np.ones((1, 4), np.float32)}
    assert_fails_like_cpu(model, feeds, "put", "exceed data")


def pad_model(pads):
    pads_init = numpy_helper.from_array(np.array(pads, np.int64), "pads")
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")
    return make_model([node], [tensor("x", shape=[2, 4])], [tensor("y")], [pads_init], opset=13)


@pytest.mark.parametrize("pads", [[-(2**63), 0, 0, 0], [0, -3, 0, -2]])
def test_pads_that_leave_no_valid_length_fail_like_cpu(pads):
    # Fuzz trigger: pads [INT64_MIN, ...] wrapped around and we returned values; ORT raises.
    model = pad_model(pads)
    feeds = {"x": np.ones((2, 4), np.float32)}
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)
    with pytest.raises(Exception, match="node 'pad'|Pad"):
        mlx_session(model).run(None, feeds)


def test_pads_past_32_bits_are_declined(monkeypatch, capfd):
    # [2, 2^40 + 4]: MLX's dimensions are 32-bit, so the node goes to ORT's CPU EP. The model is
    # not run: ORT's CPU EP asks for 8 TiB, which fails on a host that refuses to overcommit
    # (the dev machine) and on one that allows it fills memory until the OOM killer ends the
    # process (the 128 GiB GPU machine, 2026-12-06).
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_CLAIM_DEBUG", "1")
    session = ort.InferenceSession(pad_model([0, 2**40, 0, 0]), providers=[MLX, "CPUExecutionProvider"])
    err = capfd.readouterr().err
    assert "declined 'pad' (Pad)" in err and "MLX dims are 32-bit" in err, err
    assert session.get_providers()[0] == MLX


def test_gather_nd_reading_nothing_checks_no_index():
    # Fuzz trigger: data [2, 3, 0] reads empty slices; ORT's CPU EP returns [5, 0] whatever the
    # indices hold, and so must we.
    model = gather_model("GatherND", [2, 3, 0], [5, 2])
    feeds = {"data": np.zeros((2, 3, 0), np.float32), "indices": np.full((5, 2), 7, np.int64)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert run.outputs[0].shape == cpu_outputs(model, feeds)[0].shape == (5, 0)


@pytest.mark.parametrize("op, domain", [("Conv", ()), ("FusedConv", (("com.microsoft", 1),))])
def test_conv_over_zero_input_channels_gives_the_bias(op, domain):
    # Fuzz trigger on MLX's CUDA backend: X [2, 0, 6, 6], W [4, 0, 3, 3] raised SIGFPE in MLX.
    # (ORT's CPU EP never returns on this model, so the expectation is the definition: no
    # channel contributes, every output is the bias, then FusedConv's activation.)
    extra = {"domain": "com.microsoft", "activation": "Relu"} if op == "FusedConv" else {}
    node = helper.make_node(op, ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], **extra)
    model = make_model([node], [tensor("x", shape=[2, 0, 6, 6]), tensor("w", shape=[4, 0, 3, 3]), tensor("b", shape=[4])],
                       [tensor("y")], domains=domain)
    bias = np.array([1, -2, 3, -4], np.float32)
    feeds = {"x": np.zeros((2, 0, 6, 6), np.float32), "w": np.zeros((4, 0, 3, 3), np.float32), "b": bias}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    expected = np.broadcast_to(bias.reshape(1, 4, 1, 1), (2, 4, 6, 6))
    np.testing.assert_array_equal(run.outputs[0], np.maximum(expected, 0) if op == "FusedConv" else expected)


def test_mod_with_an_fmod_other_than_0_or_1_is_left_to_ort():
    # Fuzz trigger: fmod=-1; ORT's kernel refuses it at session creation, we computed.
    node = helper.make_node("Mod", ["a", "b"], ["c"], fmod=-1)
    model = make_model([node], [tensor("a", TensorProto.INT32, [3]), tensor("b", TensorProto.INT32, [3])],
                       [tensor("c", TensorProto.INT32)])
    with pytest.raises(Exception, match="fmod"):
        ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])


def test_pad_whose_crop_reaches_into_the_other_sides_padding():
    # Fuzz trigger: x[2, 3, 1] padded 1 before and cropped 2 after on the last axis; ORT gives length 0.
    for pads in ([0, 2, 1, 1, 0, -2], [0, 0, 3, 0, 0, -2]):
        pads_init = numpy_helper.from_array(np.array(pads, np.int64), "pads")
        model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"])], [tensor("x", shape=[2, 3, 1])],
                           [tensor("y")], [pads_init], opset=13)
        feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3, 1)}
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


def test_dropout_mask_follows_the_input_shape_across_shapeless_replays():
    # Fuzz trigger: the mask kept the first feed's shape (a broadcast baked into the trace).
    node = helper.make_node("Dropout", ["x"], ["y", "mask"])
    model = make_model([node], [tensor("x", shape=[1, 3, "n"])], [tensor("y"), tensor("mask", TensorProto.BOOL)], opset=13)
    session = mlx_session(model)
    for n in (4, 4, 4, 9, 9, 4):
        feeds = {"x": np.ones((1, 3, n), np.float32)}
        for got, want in zip(session.run(None, feeds), cpu_outputs(model, feeds)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 0), (0, 3, 4, 5), (0, 3, 0, 5)])
def test_global_pools_of_empty_inputs_match_cpu(op, shape):
    # Fuzz triggers: ORT refuses an empty input unless its batch is empty (then [0, C, 1, 1]).
    model = make_model([helper.make_node(op, ["x"], ["y"])], [tensor("x", shape=list(shape))], [tensor("y")])
    feeds = {"x": np.zeros(shape, np.float32)}
    want = cpu_outputs_or_mlx_fails_too(model, feeds)
    if want is not None:
        np.testing.assert_array_equal(mlx_session(model).run(None, feeds)[0], want[0])


@pytest.mark.parametrize("op, attrs", [("ReduceSum", {"keepdims": 2}), ("ReduceMean", {"keepdims": -1}),
                                       ("ArgMax", {"keepdims": 2}), ("ArgMin", {"select_last_index": 3})])
def test_flags_outside_0_1_are_left_to_ort(op, attrs):
    # Fuzz triggers: keepdims=-1/2 read as "== 1" by ORT's kernels but as nonzero by references.
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [tensor("x", shape=[2, 3])],
                       [tensor("y", TensorProto.INT64 if op.startswith("Arg") else TensorProto.FLOAT)], opset=12)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    run = Run(model, feeds)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}, run.kernels
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("elem,dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)])
def test_a_window_fed_its_size_answers_as_ort_does(elem, dtype):
    # Fuzzed (s1-BlackmanWindow-17-2): a fed size of 0 is an empty window; below 0 ORT's float32
    # kernel fails while the function body ORT runs for float16 gives an empty window.
    node = helper.make_node("BlackmanWindow", ["size"], ["window"], name="window", output_datatype=elem, periodic=0)
    model = make_model([node], [tensor("size", TensorProto.INT64, [])], [tensor("window", elem)], opset=17)
    for size in (7, 0):
        feeds = {"size": np.array(size, np.int64)}
        want = cpu_outputs(model, feeds)
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        np.testing.assert_allclose(run.outputs[0].astype(np.float64), want[0].astype(np.float64), atol=1e-3)
    feeds = {"size": np.array(-1, np.int64)}
    if dtype == np.float32:
        assert_fails_like_cpu(model, feeds, "window", "window size -1")
    else:
        assert cpu_outputs(model, feeds)[0].shape == (0,)
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        assert run.outputs[0].shape == (0,)


def test_a_lowering_error_names_the_node_and_does_not_assume_whose_fault_it_is():
    """Errors found while lowering (here ScatterElements' indices wider than data on another
    axis, which ORT's CPU EP rejects too) name the node and tell the user how to tell a bad
    model from an EP bug, without claiming either."""
    node = helper.make_node("ScatterElements", ["data", "indices", "updates"], ["out"], name="put", axis=0)
    model = make_model([node], [tensor("data", shape=[3, 2]), tensor("indices", TensorProto.INT64, [1, 3]),
                                tensor("updates", shape=[1, 3])], [tensor("out")])
    feeds = {"data": np.zeros((3, 2), np.float32), "indices": np.zeros((1, 3), np.int64),
             "updates": np.ones((1, 3), np.float32)}
    message = assert_fails_like_cpu(model, feeds, "put", "exceed data")
    assert "ONNXRUNTIME_EP_MLX_DISABLE=1" in message and "if that runs it, please report" in message, message
