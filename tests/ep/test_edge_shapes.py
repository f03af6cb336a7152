"""Edge cases found by fuzzing the EP against ORT's CPU EP (issue 13): huge or extreme index
values, zero-size results, dims beyond MLX's 32 bits, and places where ORT's CPU EP departs from
the ONNX spec. Each node either runs on MLX with ORT's answer or is declined with a reason."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import Run, cpu_outputs, make_model, tensor

I32_MAX = np.iinfo(np.int32).max
I64 = np.iinfo(np.int64)


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype), name)


def assert_same_as_cpu(model, feeds, run=None):
    run = run or Run(model, feeds)
    run.assert_all_on_mlx()
    want = cpu_outputs(model, feeds)
    for got, expected in zip(run.outputs, want):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    return run


def assert_declined(model, feeds, capfd, monkeypatch, name, op, reason):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_CLAIM_DEBUG", "1")
    run = Run(model, feeds)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}, run.kernels
    err = capfd.readouterr().err
    assert f"declined '{name}' ({op}): " in err and reason in err, err
    return run


# --- Slice: every clamp path, as ORT's CPU EP resolves it ------------------------------------

SLICE_VALUES = [0, 1, 3, 4, 5, -1, -4, -5, I32_MAX, I32_MAX + 1, 1 << 32, -(1 << 31), I64.max, I64.min]
SLICE_STEPS = [1, 2, -1, -2, 1 << 31, -(1 << 31), 1 << 32, I64.max, I64.min, -I64.max]


@pytest.mark.parametrize("step", SLICE_STEPS)
def test_slice_huge_and_extreme_bounds_match_ort(step):
    # The fuzz trigger: x[4], starts 0, ends 4, step 2^31 gave [] where ORT gives [x[0]]; an end
    # of INT32_MAX/INT64_MAX with a negative step runs through index 0 in ORT.
    model = make_model(
        [helper.make_node("Slice", ["x", "s", "e", "a", "p"], ["y"], name="slice")],
        [tensor("x", shape=[4]), tensor("s", TensorProto.INT64, [1]), tensor("e", TensorProto.INT64, [1])],
        [tensor("y")],
        [const("a", [0]), const("p", [step])],
        opset=13,
    )
    x = np.arange(4, dtype=np.float32)
    for start in SLICE_VALUES:
        for end in SLICE_VALUES:
            feeds = {"x": x, "s": np.array([start], np.int64), "e": np.array([end], np.int64)}
            run = Run(model, feeds)
            run.assert_all_on_mlx()
            np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0], err_msg=f"{start}:{end}:{step}")


# --- TopK -------------------------------------------------------------------------------------

INT_TYPES = [(np.int8, TensorProto.INT8), (np.int16, TensorProto.INT16), (np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64)]


def topk_model(elem, n, largest=1, name="topk", **attrs):
    return make_model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest, name=name, **attrs)],
        [tensor("x", elem, [n]), tensor("k", TensorProto.INT64, [1])],
        [tensor("v", elem), tensor("i", TensorProto.INT64)],
        opset=13,
    )


@pytest.mark.parametrize("dtype,elem", INT_TYPES)
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_integer_extremes(dtype, elem, largest):
    # [-3, INT64_MIN] with largest=1, k=1 gave INT64_MIN: the largest-first key negated the
    # values, and the minimum negates to itself.
    info = np.iinfo(dtype)
    x = np.array([-3, info.min, info.max, 0, info.min, info.max, -1], dtype)
    model = topk_model(elem, len(x), largest)
    for k in range(len(x) + 1):
        assert_same_as_cpu(model, {"x": x, "k": np.array([k], np.int64)})


@pytest.mark.parametrize("k,picked", [(1 << 40, 0), ((1 << 32) + 2, 2)])
def test_topk_k_keeps_its_low_32_bits_as_in_ort(k, picked):
    model = topk_model(TensorProto.FLOAT, 4)
    feeds = {"x": np.array([5, 1, 4, 2], np.float32), "k": np.array([k], np.int64)}
    run = assert_same_as_cpu(model, feeds)
    assert run.outputs[0].shape == (picked,)


def test_topk_k_too_large_fails_like_ort():
    model = topk_model(TensorProto.FLOAT, 4)
    session_feeds = {"x": np.ones(4, np.float32), "k": np.array([I64.max], np.int64)}
    with pytest.raises(Exception, match="larger than the axis"):
        import onnxruntime as ort

        session = ort.InferenceSession(model, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
        session.disable_fallback()
        session.run(None, session_feeds)


def test_unsorted_topk_is_declined(capfd, monkeypatch):
    model = topk_model(TensorProto.FLOAT, 6, sorted=0)
    feeds = {"x": np.array([-3, 7, 2, 0, 9, 1], np.float32), "k": np.array([3], np.int64)}
    run = assert_declined(model, feeds, capfd, monkeypatch, "topk", "TopK", "sorted = 0")
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        np.testing.assert_array_equal(got, want)


# --- dims beyond MLX's 32 bits ------------------------------------------------------------------

BIG = 1 << 31


def test_a_static_dim_beyond_i32_is_declined_for_any_op(capfd, monkeypatch):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", shape=[0, BIG])], [tensor("y")])
    run = assert_declined(
        model, {"x": np.zeros((0, BIG), np.float32)}, capfd, monkeypatch, "relu", "Relu", "input 'X' has a dim of 2147483648"
    )
    assert run.outputs[0].shape == (0, BIG)


@pytest.mark.parametrize(
    "node,inputs,feeds,op",
    [
        (helper.make_node("Expand", ["x", "s"], ["y"], name="n"), [tensor("x", shape=[1])], {"x": np.ones(1, np.float32)}, "Expand"),
        (helper.make_node("Reshape", ["x", "s"], ["y"], name="n"), [tensor("x", shape=[0])], {"x": np.zeros(0, np.float32)}, "Reshape"),
    ],
)
def test_a_host_known_target_beyond_i32_is_declined(node, inputs, feeds, op, capfd, monkeypatch):
    # ORT infers the output's shape from the constant target: the claim sees the big dim there.
    model = make_model([node], inputs, [tensor("y")], [const("s", [0, BIG])], opset=14)
    run = assert_declined(model, feeds, capfd, monkeypatch, "n", op, "output 'output' has a dim" if op == "Expand" else "has a dim of 2147483648")
    assert run.outputs[0].shape == (0, BIG)


# --- pools --------------------------------------------------------------------------------------


def pool_model(op, shape, outputs=("y",), name="pool", **attrs):
    outs = [tensor("y")] + ([tensor("i", TensorProto.INT64)] if len(outputs) > 1 else [])
    return make_model([helper.make_node(op, ["x"], list(outputs), name=name, **attrs)], [tensor("x", shape=shape)], outs, opset=19)


def pool_feeds(shape):
    return {"x": (np.random.default_rng(0).standard_normal(shape) * 10).astype(np.float32)}


def assert_pool_close(model, feeds):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return run


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize(
    "shape,attrs,out",
    [
        # The window outgrows the padded input; with ceil_mode ORT returns a zero-size dim.
        ([1, 2, 3], dict(kernel_shape=[6], pads=[1, 1], ceil_mode=1), (1, 2, 0)),
        ([1, 2, 3], dict(kernel_shape=[5], strides=[2], ceil_mode=1), (1, 2, 0)),
        ([1, 2, 1, 3], dict(kernel_shape=[2, 2], ceil_mode=1, auto_pad="VALID"), (1, 2, 0, 2)),
        # ORT's floor division truncates toward zero: (1 - 2) / 2 + 1 = 1 window that overhangs.
        ([1, 2, 1], dict(kernel_shape=[2], strides=[2]), (1, 2, 1)),
        ([1, 2, 3, 2], dict(kernel_shape=[4, 3], strides=[2, 3], pads=[0, 1, 0, 0]), (1, 2, 1, 1)),
    ],
)
def test_pool_windows_larger_than_the_input_follow_ort(op, shape, attrs, out):
    for outputs in [("y",), ("y", "i")] if op == "MaxPool" else [("y",)]:
        run = assert_pool_close(pool_model(op, shape, outputs, **attrs), pool_feeds(shape))
        assert run.outputs[0].shape == out


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_dilated_pools_over_several_channels(op):
    # MLX 0.32.4 reduced this strided window view wrongly in every channel after the first.
    for count_include_pad in [0, 1]:
        attrs = dict(kernel_shape=[2], pads=[1, 1], dilations=[2])
        if op == "AveragePool":
            attrs["count_include_pad"] = count_include_pad
        assert_pool_close(pool_model(op, [2, 3, 5], **attrs), pool_feeds([2, 3, 5]))


@pytest.mark.parametrize("outputs", [("y",), ("y", "i")])
def test_max_windows_of_padding_only_give_orts_lowest_value_and_index(outputs):
    # Dilation 2 with pads 1 puts the first and last windows' taps all in the padding.
    assert_pool_close(pool_model("MaxPool", [1, 2, 1, 2], outputs, kernel_shape=[2, 1], strides=[2, 3], pads=[1, 0, 1, 0], dilations=[2, 1], ceil_mode=1), pool_feeds([1, 2, 1, 2]))
    assert_pool_close(pool_model("AveragePool", [1, 2, 1], kernel_shape=[2], pads=[1, 1], dilations=[2]), pool_feeds([1, 2, 1]))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_same_padded_pools_with_dilations_are_declined(op, auto_pad, capfd, monkeypatch):
    model = pool_model(op, [1, 1, 7], kernel_shape=[3], dilations=[2], auto_pad=auto_pad)
    feeds = pool_feeds([1, 1, 7])
    run = assert_declined(model, feeds, capfd, monkeypatch, "pool", op, "SAME auto_pad with dilations > 1")
    # ORT pads as if undilated: 7 -> 5 outputs where ONNX's SAME would keep 7.
    assert run.outputs[0].shape == (1, 1, 5)


@pytest.mark.parametrize("op,outputs", [("AveragePool", ("y",)), ("LpPool", ("y",)), ("MaxPool", ("y", "i"))])
def test_same_padding_that_comes_out_negative_pools_as_in_ort(op, outputs):
    # (ceil(4 / 7) - 1) * 7 + 1 - 4 = -3: ORT starts the window one element in.
    for shape, stride in [([1, 2, 4], 7), ([1, 2, 5], 3), ([1, 2, 2, 3], 2)]:
        strides = [stride] + [1] * (len(shape) - 3)
        kernel = [1] * (len(shape) - 2)
        for auto_pad in ["SAME_UPPER", "SAME_LOWER"]:
            assert_pool_close(pool_model(op, shape, outputs, kernel_shape=kernel, strides=strides, auto_pad=auto_pad), pool_feeds(shape))


# --- Squeeze and Concat -------------------------------------------------------------------------


@pytest.mark.parametrize("axes", [[0, 0], [0, -2], [1, -1], [0, 1, 0], []])
def test_squeeze_names_an_axis_twice_or_none(axes):
    model = make_model(
        [helper.make_node("Squeeze", ["x", "a"], ["y"])],
        [tensor("x", shape=["p", "q"]), tensor("a", TensorProto.INT64, [len(axes)])],
        [tensor("y")],
        opset=13,
    )
    assert_same_as_cpu(model, {"x": np.ones((1, 1), np.float32), "a": np.array(axes, np.int64)})


@pytest.mark.parametrize("axes", [[0, 0], [0, -2]])
def test_squeeze_attribute_names_an_axis_twice(axes):
    model = make_model([helper.make_node("Squeeze", ["x"], ["y"], axes=axes)], [tensor("x", shape=[1, 3])], [tensor("y")], opset=11)
    assert_same_as_cpu(model, {"x": np.arange(3, dtype=np.float32).reshape(1, 3)})


def concat_model(axis):
    # Symbolic shapes: ORT's shape inference cannot reject these, its CPU EP accepts them.
    return make_model(
        [helper.make_node("Concat", ["a", "b"], ["y"], axis=axis)],
        [tensor("a", shape=["p", "q"]), tensor("b", shape=["r", "s"])],
        [tensor("y")],
    )


@pytest.mark.parametrize(
    "a,b,axis",
    [((2, 3), (0, 5), 0), ((0, 5), (2, 3), 0), ((0, 3), (0, 5), 0), ((2, 3), (0, 0), 0), ((2, 3), (2, 0), 1)],
)
def test_concat_empty_inputs_whose_other_dims_differ(a, b, axis):
    model = concat_model(axis)
    assert_same_as_cpu(model, {"a": np.full(a, 7, np.float32), "b": np.ones(b, np.float32)})


@pytest.mark.parametrize("a,b,axis", [((2, 3), (0, 5), 1), ((2, 3), (1, 0), 0), ((2, 3), (0, 3), 1), ((0, 3), (2, 0), 0),
                                      ((0, 5), (2, 3), 1), ((1, 0), (2, 3), 0)])  # the empty one first (s185-Concat-4-0)
def test_concat_empty_input_with_an_axis_dim_reserves_zeros_at_the_end(a, b, axis):
    # ORT sizes the output with the empty input's axis dim too, writes the non-empty input from
    # the start of the axis whatever the order, and never writes the rest (it holds whatever
    # the allocation held); here it is zeros. The written part must agree exactly.
    model = concat_model(axis)
    feeds = {"a": np.full(a, 7, np.float32), "b": np.ones(b, np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    got, want = run.outputs[0], cpu_outputs(model, feeds)[0]
    assert got.shape == want.shape
    filled = max(a, b, key=np.prod)[axis]
    written = [slice(None)] * 2
    written[axis] = slice(0, filled)
    np.testing.assert_array_equal(got[tuple(written)], want[tuple(written)])
    unwritten = [slice(None)] * 2
    unwritten[axis] = slice(filled, None)
    assert not got[tuple(unwritten)].any()


# --- more of the shape family at its edges ------------------------------------------------------


def mlx_session(model):
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
    session.disable_fallback()
    return session


def assert_both_fail(model, feeds, ours):
    import onnxruntime as ort

    with pytest.raises(Exception):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(Exception, match=ours):
        mlx_session(model).run(None, feeds)


@pytest.mark.parametrize(
    "shape,target",
    [((0, 6), [0, 2, -1]), ((2, 0, 3), [0, -1]), ((2, 0, 3), [0, 0, -1]), ((0,), [0, -1]), ((0, 3), [-1, 0])],
)
def test_reshape_infers_minus_one_next_to_a_real_zero_as_ort(shape, target):
    model = make_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)],
        [tensor("x", shape=["a"] * len(shape)), tensor("s", TensorProto.INT64, [len(target)])],
        [tensor("y")],
        opset=14,
    )
    assert_same_as_cpu(model, {"x": np.ones(shape, np.float32), "s": np.array(target, np.int64)})


@pytest.mark.parametrize(
    "dtype,elem,bounds",
    [
        (np.int64, TensorProto.INT64, (I64.min, I64.max, 1 << 62)),  # the span overflows int64
        (np.int64, TensorProto.INT64, (1 << 62, (1 << 62) + 3, 1)),  # float64 rounds the span to 0
        (np.float32, TensorProto.FLOAT, (-16777216, 1, 1)),  # float32 would round the span
    ],
)
def test_range_counts_in_float64_as_ort(dtype, elem, bounds):
    model = make_model(
        [helper.make_node("Range", ["a", "b", "d"], ["y"])],
        [tensor("a", elem, []), tensor("b", elem, []), tensor("d", elem, [])],
        [tensor("y", elem)],
        opset=13,
    )
    a, b, d = (np.array(v, dtype) for v in bounds)
    assert_same_as_cpu(model, {"a": a, "b": b, "d": d})


@pytest.mark.parametrize("k", [-(1 << 31) - 1, I64.min, I64.max, 1 << 31, -5, 5])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_extreme_k(k, upper):
    model = make_model(
        [helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)],
        [tensor("x", shape=[3, 4]), tensor("k", TensorProto.INT64, [])],
        [tensor("y")],
        opset=14,
    )
    assert_same_as_cpu(model, {"x": np.arange(12, dtype=np.float32).reshape(3, 4) + 1, "k": np.array(k, np.int64)})


@pytest.mark.parametrize("n,parts", [(0, 1), (2, 3), (4, 3), (9, 4)])
def test_split_num_outputs_with_an_empty_chunk_fails_as_in_ort(n, parts):
    outs = [f"o{i}" for i in range(parts)]
    model = make_model(
        [helper.make_node("Split", ["x"], outs, axis=0, num_outputs=parts)],
        [tensor("x", shape=["n"])],
        [tensor(o) for o in outs],
        opset=18,
    )
    assert_both_fail(model, {"x": np.arange(n, dtype=np.float32)}, "nonempty chunks")


def test_reverse_sequence_length_out_of_range_fails_as_in_ort():
    model = make_model(
        [helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1)],
        [tensor("x", shape=[2, 4]), tensor("l", TensorProto.INT64, [2])],
        [tensor("y")],
        opset=10,
    )
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert_both_fail(model, {"x": x, "l": np.array([5, 1], np.int64)}, "sequence length is outside")
    assert_same_as_cpu(model, {"x": x, "l": np.array([4, 0], np.int64)})


@pytest.mark.parametrize("axes", [[0, 0], [1, -1], None])
def test_slice_naming_an_axis_twice_or_too_many_fails_as_in_ort(axes):
    count = 3 if axes is None else len(axes)
    names = ["x", "s", "e"] + (["a"] if axes is not None else [])
    inputs = [tensor("x", shape=["p", "q"]), tensor("s", TensorProto.INT64, [count]), tensor("e", TensorProto.INT64, [count])]
    if axes is not None:
        inputs.append(tensor("a", TensorProto.INT64, [count]))
    model = make_model([helper.make_node("Slice", names, ["y"])], inputs, [tensor("y")], opset=13)
    feeds = {"x": np.ones((3, 4), np.float32), "s": np.zeros(count, np.int64), "e": np.ones(count, np.int64)}
    if axes is not None:
        feeds["a"] = np.array(axes, np.int64)
    assert_both_fail(model, feeds, "name an axis twice" if axes else "3 starts for rank 2")


def test_center_crop_pad_naming_an_axis_twice_fails_as_in_ort():
    model = make_model(
        [helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[0, 0])],
        [tensor("x", shape=["p", "q"]), tensor("s", TensorProto.INT64, [2])],
        [tensor("y")],
        opset=18,
    )
    feeds = {"x": np.ones((3, 4), np.float32), "s": np.array([2, 2], np.int64)}
    import onnxruntime as ort

    with pytest.raises(Exception):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(Exception, match="name an axis twice"):
        mlx_session(model).run(None, feeds)


# --- found by `python -m tests.fuzz run --seed 7` over this family --------------------------------


@pytest.mark.parametrize("attrs,reason", [(dict(largest=-1), "largest = -1"), (dict(sorted=2), "sorted = 2")])
def test_topk_flags_ort_reads_as_equals_one_are_declined(attrs, reason, capfd, monkeypatch):
    model = topk_model(TensorProto.FLOAT, 6, **attrs) if "largest" not in attrs else topk_model(TensorProto.FLOAT, 6, attrs["largest"])
    feeds = {"x": np.array([-3, 7, 2, 0, 9, 1], np.float32), "k": np.array([3], np.int64)}
    assert_declined(model, feeds, capfd, monkeypatch, "topk", "TopK", reason)


@pytest.mark.parametrize("target", [[3, 5, -1], [-1, 5, 3], [I64.min, 3, 2], [4, 3, I64.min], [2, 1, 7]])
def test_center_crop_pad_negative_targets_follow_orts_function_body(target):
    model = make_model(
        [helper.make_node("CenterCropPad", ["x", "s"], ["y"])],
        [tensor("x", shape=["a", "b", "c"])],
        [tensor("y")],
        [const("s", target)],
        opset=18,
    )
    assert_same_as_cpu(model, {"x": np.arange(24, dtype=np.float32).reshape(4, 3, 2)})


@pytest.mark.parametrize("op", ["CumSum"])
def test_cumulative_ops_return_an_empty_input_whatever_the_axis(op):
    model = make_model(
        [helper.make_node(op, ["x", "a"], ["y"])],
        [tensor("x", shape=["p", "q", "r"]), tensor("a", TensorProto.INT64, [])],
        [tensor("y")],
        opset=14,
    )
    assert_same_as_cpu(model, {"x": np.zeros((2, 3, 0), np.float32), "a": np.array(3, np.int64)})


def test_cumsum_flags_other_than_0_or_1_are_declined(capfd, monkeypatch):
    model = make_model(
        [helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=2, name="cs")],
        [tensor("x", shape=[3]), tensor("a", TensorProto.INT64, [])],
        [tensor("y")],
        opset=14,
    )
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_CLAIM_DEBUG", "1")
    import onnxruntime as ort

    with pytest.raises(Exception):  # ORT's CPU EP refuses the node when it loads it
        ort.InferenceSession(model, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
    assert "declined 'cs' (CumSum): exclusive = 2" in capfd.readouterr().err


def range_model(elem=TensorProto.FLOAT, start_shape=()):
    return make_model(
        [helper.make_node("Range", ["a", "b", "d"], ["y"])],
        [tensor("a", elem, list(start_shape)), tensor("b", elem, []), tensor("d", elem, [])],
        [tensor("y", elem)],
        opset=13,
    )


def test_range_with_a_non_finite_count_or_non_scalar_bounds_fails_as_in_ort():
    f = np.float32
    assert_both_fail(range_model(), {"a": np.array(0, f), "b": np.array(np.inf, f), "d": np.array(1, f)}, "not finite")
    assert_both_fail(range_model(), {"a": np.array(np.nan, f), "b": np.array(1, f), "d": np.array(1, f)}, "not finite")
    assert_both_fail(
        range_model(start_shape=[3]), {"a": np.zeros(3, f), "b": np.array(1, f), "d": np.array(1, f)}, "must be scalars"
    )


def test_reverse_sequence_axes_outside_0_and_1_are_declined(capfd, monkeypatch):
    model = make_model(
        [helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=-4, time_axis=0, name="rs")],
        [tensor("x", shape=[4, 3, 2]), tensor("l", TensorProto.INT64, [3])],
        [tensor("y")],
        opset=10,
    )
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(4, 3, 2), "l": np.array([1, 2, 3], np.int64)}
    run = assert_declined(model, feeds, capfd, monkeypatch, "rs", "ReverseSequence", "batch_axis -4 and time_axis 0")
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


def test_reverse_sequence_lengths_of_the_wrong_shape_fail_as_in_ort():
    model = make_model(
        [helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0)],
        [tensor("x", shape=[4, 3, 2]), tensor("l", TensorProto.INT64, ["n"])],
        [tensor("y")],
        opset=10,
    )
    feeds = {"x": np.zeros((4, 3, 2), np.float32), "l": np.array([1, 2, 3, 4], np.int64)}
    assert_both_fail(model, feeds, "for a batch of 3")


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pools_fail_on_an_empty_channel_or_spatial_dim_as_in_ort(op):
    for shape in [(2, 0, 5), (2, 3, 0)]:
        model = pool_model(op, ["n", "c", "w"], kernel_shape=[2])
        assert_both_fail(model, {"x": np.zeros(shape, np.float32)}, "only N may be 0")


def test_max_pool_indices_of_an_empty_batch():
    model = pool_model("MaxPool", ["n", 3, 4, 4], ("y", "i"), kernel_shape=[2, 2], dilations=[2, 1], ceil_mode=1, strides=[2, 2])
    run = assert_pool_close(model, {"x": np.zeros((0, 3, 4, 4), np.float32)})
    assert run.outputs[0].shape == (0, 3, 2, 2)


@pytest.mark.parametrize("attrs,reason", [(dict(storage_order=2), "storage_order 2")])
def test_pool_attributes_ort_refuses_are_declined(attrs, reason, capfd, monkeypatch):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_CLAIM_DEBUG", "1")
    import onnxruntime as ort

    model = pool_model("MaxPool", [1, 1, 5], kernel_shape=[2], **attrs)
    with pytest.raises(Exception):  # ORT's CPU EP refuses the node when it loads it
        ort.InferenceSession(model, providers=["MLXExecutionProvider", "CPUExecutionProvider"]).run(None, pool_feeds([1, 1, 5]))
    err = capfd.readouterr().err
    assert "declined 'pool' (MaxPool): " in err and reason in err, err


@pytest.mark.parametrize("dtype,elem", [(np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16)])
def test_one_hot_float_indices_match_only_whole_numbers_as_in_ort(dtype, elem):
    # ORT compares float indices exactly: 2.7, -0.5 and NaN are hot nowhere (we truncated them).
    indices = np.array(
        [[np.nan, np.inf, -np.inf, 1e30, 2.7, -0.5], [0.0, 1.0, -1.0, -4.0, 3.0, 4.0], [-0.0, -5, 2, -2, 1.0000001, 0.99999994]],
        np.float32,
    ).astype(dtype)
    model = make_model(
        [helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
        [tensor("i", elem, [3, 6]), tensor("d", TensorProto.FLOAT, []), tensor("v", TensorProto.FLOAT, [2])],
        [tensor("y")],
        opset=11,
    )
    assert_same_as_cpu(model, {"i": indices, "d": np.array(4, np.float32), "v": np.array([0.25, 7], np.float32)})


@pytest.mark.parametrize("op,x", [("CumProd", [300, 300, 0.5]), ("CumSum", [60000, 60000, -60000]), ("CumSum", [1, 0.0004, 0.0004, 0.0004])])
def test_half_precision_running_ops_accumulate_in_float32_as_ort(op, x):
    model = make_model(
        [helper.make_node(op, ["x", "a"], ["y"])],
        [tensor("x", TensorProto.FLOAT16, [len(x)])],
        [tensor("y", TensorProto.FLOAT16)],
        [const("a", 0)],
        opset=26,
    )
    assert_same_as_cpu(model, {"x": np.array(x, np.float16)})


def test_flags_ort_reads_as_equals_one():
    # ceil_mode = 2 is floor mode in ORT; allowzero = -1 still copies zeros.
    pool = pool_model("MaxPool", [1, 2, 7, 8], ("y", "i"), kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], ceil_mode=2)
    assert_pool_close(pool, pool_feeds([1, 2, 7, 8]))
    reshape = make_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=-1)],
        [tensor("x", TensorProto.INT32, ["p", "q"])],
        [tensor("y", TensorProto.INT32)],
        [const("s", [0, 1, 3])],
        opset=14,
    )
    assert_same_as_cpu(reshape, {"x": np.arange(3, dtype=np.int32).reshape(1, 3)})
