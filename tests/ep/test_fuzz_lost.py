"""Lost fallbacks and CPU-only errors found by fuzzing (issue 13): nodes the EP claimed and then
failed where ORT's CPU EP answers, and inputs ORT's CPU EP refuses that the EP used to answer.
Each test is built from the fuzz case that found it (ids `s1-<entry>-<k>`, `make fuzz` seed 1)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (MLX, Run, cpu_outputs, cpu_outputs_or_mlx_fails_too, kernel_placements, make_model,
                      profiled_session, tensor)


def assert_same_as_cpu(model, feeds):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    return run


def mlx_session(model):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()  # else ORT's binding retries a failed run on the CPU EP
    return session


def assert_both_fail(model, feeds, cpu_says, mlx_says):
    with pytest.raises(Exception, match=cpu_says):
        cpu_outputs(model, feeds)
    with pytest.raises(Exception, match=mlx_says):
        mlx_session(model).run(None, feeds)


# --- Pools: an empty batch lets any other axis be 0 (s1-MaxPool-1..7-43) -----------------------


@pytest.mark.parametrize("op,opset", [("MaxPool", 7), ("MaxPool", 12), ("AveragePool", 19), ("LpPool", 18)])
@pytest.mark.parametrize("shape", [(0, 3, 7, 0), (0, 0, 7, 8), (0, 3, 0, 8)])
def test_pool_with_empty_batch_and_another_zero_axis(op, opset, shape):
    # ORT's rule is `Size() > 0 || N == 0`; the EP refused any zero axis but N.
    attrs = {"kernel_shape": [2, 3], "strides": [1, 2], "auto_pad": "SAME_LOWER"}
    model = make_model(
        [helper.make_node(op, ["x"], ["y"], name="pool", **attrs)],
        [tensor("x", shape=["n", "c", "h", "w"])],
        [tensor("y")],
        opset=opset,
    )
    assert_same_as_cpu(model, {"x": np.zeros(shape, np.float32)})


def test_global_lp_pool_with_empty_batch_and_empty_spatial_axis():
    model = make_model(
        [helper.make_node("GlobalLpPool", ["x"], ["y"], name="pool")],
        [tensor("x", shape=["n", "c", "h", "w"])],
        [tensor("y")],
    )
    assert_same_as_cpu(model, {"x": np.zeros((0, 3, 7, 0), np.float32)})


def test_pool_with_a_batch_and_a_zero_axis_fails_as_ort():
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 3])],
        [tensor("x", shape=["n", "c", "h", "w"])],
        [tensor("y")],
        opset=12,
    )
    assert_both_fail(model, {"x": np.zeros((1, 3, 7, 0), np.float32)}, "Only N can be zero", "only N may be 0")


# --- Softmax family: ORT's axis rules ----------------------------------------------------------


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [1, 10])
def test_legacy_softmax_of_an_empty_input_ignores_the_axis(op, opset):
    # s1-LogSoftmax-1..12-6: axis -3 on [0, 3]; ORT returns the empty input before checking.
    model = make_model(
        [helper.make_node(op, ["x"], ["y"], name="sm", axis=-3)],
        [tensor("x", shape=[0, 3])],
        [tensor("y")],
        opset=opset,
    )
    assert_same_as_cpu(model, {"x": np.zeros((0, 3), np.float32)})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [2**32 + 1, 2**63 - 1])
def test_softmax13_with_a_64_bit_axis(op, axis):
    # s1-Softmax-13-39, s1-LogSoftmax-13-33: float16 runs ONNX's function body on ORT's CPU EP,
    # whose ReduceMax refuses the axis at load; float32 reads it in 32 bits and runs.
    def model(elem):
        return make_model(
            [helper.make_node(op, ["x"], ["y"], name="sm", axis=axis)],
            [tensor("x", elem, [2, 3, 4])],
            [tensor("y", elem)],
            opset=13,
        )

    with pytest.raises(Exception, match="ReduceMax"):
        mlx_session(model(TensorProto.FLOAT16))
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    run = Run(model(TensorProto.FLOAT), {"x": x})
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model(TensorProto.FLOAT), {"x": x})[0], rtol=1e-5, atol=1e-6)


# --- GroupNormalization: scale and bias as ORT's function body broadcasts them -----------------


def group_norm_model(opset, groups):
    return make_model(
        [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], name="gn", num_groups=groups)],
        [tensor("x", shape=["n", "c", "h", "w"]), tensor("scale", shape=["s"]), tensor("bias", shape=["b"])],
        [tensor("y")],
        opset=opset,
    )


@pytest.mark.parametrize(
    "opset,x_shape,groups,scale,bias",
    [
        (18, (2, 6, 3, 2), 3, 3, 1),  # s1-GroupNormalization-18..20-37
        (18, (2, 6, 3, 2), 3, 1, 3),
        (18, (2, 6, 3, 2), 3, 1, 1),
        (21, (2, 6, 3, 2), 3, 1, 6),
        (21, (2, 6, 3, 2), 3, 6, 1),
    ],
)
def test_group_norm_broadcasts_a_length_one_scale_or_bias(opset, x_shape, groups, scale, bias):
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal(x_shape).astype(np.float32),
        "scale": rng.standard_normal(scale).astype(np.float32),
        "bias": rng.standard_normal(bias).astype(np.float32),
    }
    model = group_norm_model(opset, groups)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "opset,x_shape,groups,scale,bias",
    [
        (21, (2, 1, 3, 2), 1, 6, 6),  # s1-GroupNormalization-21-1
        (21, (2, 6, 3, 2), 3, 3, 3),
        (18, (2, 6, 3, 2), 3, 6, 6),
        (18, (2, 1, 3, 2), 1, 3, 1),
    ],
)
def test_group_norm_with_other_lengths_fails_as_ort(opset, x_shape, groups, scale, bias):
    feeds = {
        "x": np.ones(x_shape, np.float32),
        "scale": np.ones(scale, np.float32),
        "bias": np.ones(bias, np.float32),
    }
    assert_both_fail(group_norm_model(opset, groups), feeds, "broadcast|reshape", "node 'gn'.*must be")


# --- SkipLayerNormalization / SkipSimplifiedLayerNormalization: ORT's shape contract ------------


def skip_norm_model(op):
    names = ["input", "skip", "gamma", "beta", "bias"] if op == "SkipLayerNormalization" else ["input", "skip", "gamma", "bias"]
    return make_model(
        [helper.make_node(op, names, ["y"], name="sln", domain="com.microsoft")],
        [tensor(n) for n in names],
        [tensor("y")],
        domains=[("com.microsoft", 1)],
    ), names


SKIP_NORM_REFUSED = [
    # (input, skip, parameter shapes, ORT's words); s1-...SkipLayerNormalization-1-20/24/30/37
    # and s1-...SkipSimplifiedLayerNormalization-1-19.
    ((2, 3, 4), (2, 1, 4), (4,), "last two dimensions of skip needs to be same as input"),
    ((2, 3, 4), (2, 3, 1), (4,), "last two dimensions of skip needs to be same as input"),
    ((2, 3, 4), (4,), (4,), "skip is expected to have 3 or 2 dimensions"),
    ((3, 4), (1, 3, 4), (4,), "skip is expected to have same shape as input"),
    ((3, 4), (1, 4), (4,), "last two dimensions of skip needs to be same as input"),
    ((2, 3, 4), (2, 3, 4), (1,), "Last dimension of .* and input does not match"),
    ((2, 3, 4), (2, 3, 4), (1, 4), "is expected to have 1 dimension"),
    ((3, 4), (3, 4), (), "is expected to have 1 dimension"),
]


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
@pytest.mark.parametrize("x_shape,skip_shape,param_shape,words", SKIP_NORM_REFUSED)
def test_skip_norm_shapes_ort_refuses_fail_here_too(op, x_shape, skip_shape, param_shape, words):
    model, names = skip_norm_model(op)
    feeds = {n: np.ones((4,), np.float32) for n in names}
    feeds.update(input=np.ones(x_shape, np.float32), skip=np.ones(skip_shape, np.float32), bias=np.ones(param_shape, np.float32))
    assert_both_fail(model, feeds, words, f"node 'sln'.*{words}")


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
@pytest.mark.parametrize("x_shape,skip_shape", [((2, 3, 4), (3, 3, 4)), ((4, 3, 4), (3, 3, 4)), ((2, 3, 4), (1, 3, 4)), ((2, 3, 4), (3, 4))])
def test_skip_norm_skip_batches_as_ort_reads_them(op, x_shape, skip_shape):
    # ORT's kernel adds skip element i % skip.size(): sample b takes skip sample b % skip batch.
    model, names = skip_norm_model(op)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((4,)).astype(np.float32) for n in names}
    feeds.update(input=rng.standard_normal(x_shape).astype(np.float32), skip=rng.standard_normal(skip_shape).astype(np.float32))
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)


# --- ConvTranspose with a stride or padding of billions (s1-ConvTranspose-1-9) ----------------


def conv_transpose_run(attrs, x_len):
    """A 1-D ConvTranspose (2 -> 3 channels, kernel 3) with `attrs` over x [1, 2, x_len]: the
    MLX-first run and ORT's CPU answer."""
    rng = np.random.default_rng(3)
    model = make_model(
        [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="ct", **attrs)],
        [tensor("x", shape=[1, 2, x_len]), tensor("w", shape=[2, 3, 3]), tensor("b", shape=[3])],
        [tensor("y")],
        opset=11,
    )
    feeds = {
        "x": rng.standard_normal((1, 2, x_len)).astype(np.float32),
        "w": rng.standard_normal((2, 3, 3)).astype(np.float32),
        "b": rng.standard_normal(3).astype(np.float32),
    }
    want = cpu_outputs(model, feeds)[0]
    if want.size > 1 << 20:
        pytest.skip("an output too large to compare here")
    return Run(model, feeds), want


HUGE_STRIDES = [
    ({"auto_pad": "SAME_UPPER", "output_shape": [10], "strides": [2**31 - 1]}, 5),  # the trigger
    ({"auto_pad": "SAME_LOWER", "output_shape": [10], "strides": [2**31 - 1]}, 5),
    ({"output_shape": [7], "strides": [2**31 - 1]}, 3),
    ({"output_shape": [20], "strides": [2**31]}, 3),
    ({"output_shape": [12], "strides": [2**30 + 3]}, 4),
]


@pytest.mark.parametrize("attrs,x_len", HUGE_STRIDES)
def test_conv_transpose_with_huge_strides_is_left_to_ort(attrs, x_len):
    # MLX's CPU convolution takes them (the lowering keeps only the inputs whose taps land in
    # the output), but its CUDA one cannot build the graph (H200 fuzz): a claim holds on every
    # backend, so strides past 65535 stay on ORT's CPU EP, which gives its own answer.
    run, want = conv_transpose_run(attrs, x_len)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}, run.kernels
    np.testing.assert_array_equal(run.outputs[0], want)


@pytest.mark.parametrize(
    "attrs,x_len",
    [
        ({"output_shape": [10], "strides": [65535], "pads": [0, 2**31 - 1]}, 5),
        ({"output_shape": [7], "strides": [65535], "pads": [2**30, 0]}, 3),
    ],
)
def test_conv_transpose_with_huge_pads_keeps_only_the_inputs_that_reach_the_output(attrs, x_len):
    run, want = conv_transpose_run(attrs, x_len)
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-5, atol=1e-5)


# --- EyeLike: a dtype ORT's kernel refuses (s1-EyeLike-9-2, -45) -------------------------------


@pytest.mark.parametrize("dtype", [0, -(2**63)])
def test_eye_like_with_a_dtype_naming_no_type_is_left_to_ort(dtype):
    model = make_model(
        [helper.make_node("EyeLike", ["x"], ["y"], name="eye", dtype=dtype)],
        [tensor("x", TensorProto.INT32, [3, 5])],
        [tensor("y", TensorProto.INT32)],
        opset=9,
    )
    feeds = {"x": np.zeros((3, 5), np.int32)}
    with pytest.raises(Exception, match="Unsupported data type"):
        cpu_outputs(model, feeds)
    with pytest.raises(Exception, match="Unsupported data type"):
        mlx_session(model).run(None, feeds)


# --- Empty tensors with a dimension beyond MLX's 32 bits, known only at run time --------------
# (s1-Concat-4-3, s1-LessOrEqual-12-6, s1-GreaterOrEqual-12-21, s1-ReduceL1-18-15, s1-ReduceL2-1..17-0,
# s1-ReduceMean-18-39: a CPU node upstream hands the MLX nodes [0, 2^31 + 7]-like tensors.)

HUGE = 2**31 + 7


def sym(name, elem=TensorProto.FLOAT, rank=2):
    return tensor(name, elem, [f"{name}_{i}" for i in range(rank)])


def assert_same_shapes_as_cpu(model, feeds):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.shape == want.shape and got.dtype == want.dtype and got.size == 0


F, B = TensorProto.FLOAT, TensorProto.BOOL
AXES = tensor("axes", TensorProto.INT64, [1])


@pytest.mark.parametrize(
    "nodes,inputs,feeds,out",
    [
        ([helper.make_node("Relu", ["a"], ["y"])], [sym("a")], {"a": (0, HUGE)}, F),
        ([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], [sym("a"), sym("b")], {"a": (0, HUGE), "b": (0, 3)}, F),
        ([helper.make_node("Concat", ["a", "a"], ["y"], axis=1)], [sym("a")], {"a": (0, HUGE)}, F),
        (
            [helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]), helper.make_node("LessOrEqual", ["t", "b"], ["y"])],
            [sym("a"), sym("b")],
            {"a": (HUGE, 0), "b": (0, HUGE)},
            B,
        ),
        ([helper.make_node("Add", ["a", "b"], ["y"])], [sym("a"), sym("b")], {"a": (0, HUGE), "b": (1, 1)}, F),
        (
            [helper.make_node("ReduceSum", ["a", "axes"], ["y"], keepdims=1)],
            [sym("a", rank=3), AXES],
            {"a": (2, 0, HUGE), "axes": np.array([-1], np.int64)},
            F,
        ),
        ([helper.make_node("Unsqueeze", ["a", "axes"], ["y"])], [sym("a"), AXES], {"a": (HUGE, 0), "axes": np.array([1], np.int64)}, F),
        (
            [
                helper.make_node("Transpose", ["b"], ["t"], perm=[1, 0]),
                helper.make_node("Concat", ["a", "t"], ["c"], axis=1),
                helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT16),
            ],
            [sym("a"), sym("b")],
            {"a": (0, HUGE), "b": (HUGE + 5, 0)},
            TensorProto.FLOAT16,
        ),
    ],
    ids=["relu", "concat", "concat_twice", "transpose_compare", "broadcast", "reduce_keepdims", "unsqueeze", "two_huge"],
)
def test_empty_results_of_huge_dimensions_are_shaped_without_mlx(nodes, inputs, feeds, out):
    model = make_model(nodes, inputs, [tensor("y", out)], opset=13)
    arrays = {
        name: spec if isinstance(spec, np.ndarray) else np.zeros(spec, np.float32)
        for name, spec in feeds.items()
    }
    assert_same_shapes_as_cpu(model, arrays)


def test_an_empty_result_whose_shape_divides_a_huge_dimension_fails_naming_why():
    # Slice with step 2: ceil(D / 2), not an affine function the stand-ins can measure; ORT
    # answers, the EP says why it cannot (a lost fallback left on purpose: no exact shape).
    model = make_model(
        [helper.make_node("Slice", ["a", "s", "e", "ax", "st"], ["y"])],
        [sym("a"), tensor("s", TensorProto.INT64, [1]), tensor("e", TensorProto.INT64, [1]), tensor("ax", TensorProto.INT64, [1]), tensor("st", TensorProto.INT64, [1])],
        [tensor("y")],
        opset=13,
    )
    feeds = {
        "a": np.zeros((0, HUGE), np.float32),
        "s": np.array([0], np.int64),
        "e": np.array([2**63 - 1], np.int64),
        "ax": np.array([1], np.int64),
        "st": np.array([2], np.int64),
    }
    assert cpu_outputs(model, feeds)[0].shape == (0, (HUGE + 1) // 2)
    with pytest.raises(Exception, match="beyond MLX's 32 bits.*a division or a stride"):
        mlx_session(model).run(None, feeds)


# --- Quantised convolutions of empty inputs (s3-QLinearConv-10-8) ------------------------------


def quantised_conv(op, w_shape, bias, **attrs):
    """ConvInteger (uint8 x and w) or QLinearConv (uint8 x, int8 w, uint8 y) with fixed
    parameters, x of any shape."""
    init = helper.make_tensor
    if op == "ConvInteger":
        inputs, out_type = ["x", "w", "x_zp", "w_zp"], TensorProto.INT32
        params = [init("w", TensorProto.UINT8, w_shape, np.full(w_shape, 3).ravel().tolist()),
                  init("x_zp", TensorProto.UINT8, [], [7]), init("w_zp", TensorProto.UINT8, [], [1])]
    else:
        inputs, out_type = ["x", "xs", "x_zp", "w", "ws", "w_zp", "ys", "y_zp"], TensorProto.UINT8
        params = [init("xs", TensorProto.FLOAT, [], [0.5]), init("x_zp", TensorProto.UINT8, [], [7]),
                  init("w", TensorProto.INT8, w_shape, np.full(w_shape, 3).ravel().tolist()),
                  init("ws", TensorProto.FLOAT, [], [0.25]), init("w_zp", TensorProto.INT8, [], [1]),
                  init("ys", TensorProto.FLOAT, [], [0.3]), init("y_zp", TensorProto.UINT8, [], [138])]
        if bias:
            inputs.append("B")
            params.append(init("B", TensorProto.INT32, [w_shape[0]], [10 * i - 7 for i in range(w_shape[0])]))
    names = ["n", "c", "h", "w"][: len(w_shape)]
    return make_model([helper.make_node(op, inputs, ["y"], name="qconv", **attrs)],
                      [tensor("x", TensorProto.UINT8, names)], [tensor("y", out_type)], initializers=params,
                      opset=13)


@pytest.mark.parametrize("op,bias", [("ConvInteger", False), ("QLinearConv", False), ("QLinearConv", True)])
@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 3, 0, 6), (4, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),  # the trigger's
    ((2, 3, 0, 1), (4, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 4, 0, 6), (4, 2, 3, 2), {"pads": [1, 0, 2, 1], "group": 2}),
    ((1, 3, 0), (4, 3, 3), {"pads": [2, 1]}),
    ((0, 3, 0, 6), (4, 3, 3, 2), {"pads": [1, 0, 2, 1]}),
])
def test_quantised_conv_of_empty_input_is_the_padding_alone(op, bias, x_shape, w_shape, attrs):
    # ORT's CPU EP answers from the padding (x's zero point, so 0 once centred): 0 for
    # ConvInteger, the requantised bias for QLinearConv. The EP failed at run time. (With no
    # input channels ORT's answer is uninitialised memory: the EP fails there, tested below.)
    model = quantised_conv(op, w_shape, bias, **attrs)
    assert_same_as_cpu(model, {"x": np.full(x_shape, 9, np.uint8)})


@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
@pytest.mark.parametrize("x_shape,attrs", [
    ((1, 3, 0, 6), {}),
    ((0, 3, 0, 6), {}),  # the output extent is checked before the batch
    ((1, 3, 0, 6), {"auto_pad": "SAME_UPPER"}),
])
def test_quantised_conv_with_no_output_extent_fails_as_ort(op, x_shape, attrs):
    model = quantised_conv(op, (4, 3, 3, 2), False, **attrs)
    assert_both_fail(model, {"x": np.zeros(x_shape, np.uint8)}, "Invalid input shape", "leaves no output")


@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
def test_quantised_conv_with_no_input_channels_fails_naming_why(op):
    # ORT's GEMM of depth 0 leaves its output unwritten (values change run to run).
    model = quantised_conv(op, (4, 0, 3, 2), False, pads=[1, 0, 2, 1])
    with pytest.raises(Exception, match="uninitialised memory"):
        mlx_session(model).run(None, {"x": np.zeros((1, 0, 6, 6), np.uint8)})


# --- EmbedLayerNormalization: ORT's CheckInputs (s3-com.microsoft.EmbedLayerNormalization-1-5) --


EMBED_INPUTS = ["input_ids", "segment_ids", "word_embedding", "position_embedding", "segment_embedding",
                "gamma", "beta", "mask", "position_ids"]
EMBED_TABLES = {"word_embedding": (5, 8), "position_embedding": (6, 8), "segment_embedding": (3, 8),
                "gamma": (8,), "beta": (8,)}


def embed_layer_norm(shapes, declared=True):
    """EmbedLayerNormalization over the inputs `shapes` names (the ids declared symbolic unless
    `declared`: ORT's shape inference needs the tables' shapes), and feeds for them."""
    names = [n if n in shapes else "" for n in EMBED_INPUTS]
    while names[-1] == "":
        names.pop()
    ints = {"input_ids", "segment_ids", "mask", "position_ids"}
    inputs = [tensor(n, TensorProto.INT32 if n in ints else TensorProto.FLOAT,
                     shapes[n] if declared or n not in ints else [f"{n}_{i}" for i in range(len(shapes[n]))])
              for n in EMBED_INPUTS if n in shapes]
    node = helper.make_node("EmbedLayerNormalization", names, ["y", "mask_index", "sum"], name="eln",
                            domain="com.microsoft", epsilon=1e-5)
    model = make_model([node], inputs, [tensor("y"), tensor("mask_index", TensorProto.INT32), tensor("sum")],
                       domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(5)
    feeds = {}
    for n, shape in shapes.items():
        if n == "mask":
            feeds[n] = (np.arange(np.prod(shape)) % 3 != 0).astype(np.int32).reshape(shape)
        elif n in ints:
            feeds[n] = (np.arange(np.prod(shape)) % 3).astype(np.int32).reshape(shape)
        else:
            feeds[n] = rng.standard_normal(shape).astype(np.float32)
    return model, feeds


EMBED_REFUSED = [
    # (input shapes besides the tables, ORT's words)
    ({"input_ids": (2, 4), "segment_ids": (1, 4), "mask": (2, 4)}, "Input 0 and 1 shall have same shape"),  # the trigger
    ({"input_ids": (2, 4), "segment_ids": (2, 4), "mask": (1, 4)}, r"Input 0 and 7 \(mask\) shall have same shape"),
    ({"input_ids": (2, 4), "position_ids": (3, 4)}, "position_ids's first dimension shall be 1 or batch_size"),
    ({"input_ids": (2, 4), "position_ids": (2, 3)}, "input_ids and position_ids shall have same sequence_length"),
]


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("ids,words", EMBED_REFUSED)
def test_embed_layer_norm_shapes_ort_refuses_fail_here_too(ids, words, declared):
    # Declared shapes are declined (ORT's CPU EP reports them); undeclared ones fail at run time
    # naming the node. The EP broadcast segment_ids and mask.
    model, feeds = embed_layer_norm({**EMBED_TABLES, **ids}, declared)
    assert_both_fail(model, feeds, words, words if declared else f"node 'eln'.*{words}")


def test_embed_layer_norm_declared_ranks_settle_a_symbolic_shape():
    # A mask of another rank than input_ids differs whatever its symbolic dims: declined.
    model, feeds = embed_layer_norm({**EMBED_TABLES, "input_ids": (2, 4), "mask": (2,)}, declared=False)
    assert_both_fail(model, feeds, "Input 0 and 7", "Name:'eln' Status Message: Input 0 and 7")


@pytest.mark.parametrize("ids", [
    {"input_ids": (2, 4), "segment_ids": (2, 4), "mask": (2, 4)},
    {"input_ids": (2, 4)},  # no segment_ids: ORT adds the segment table's row 0
    {"input_ids": (2, 4), "position_ids": (1, 4)},
    {"input_ids": (2, 4), "segment_ids": (2, 4), "position_ids": (2, 4, 1)},  # read flat
])
def test_embed_layer_norm_inputs_ort_takes_match(ids):
    model, feeds = embed_layer_norm({**EMBED_TABLES, **ids}, declared=False)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- MaxRoiPool: billions of bins (s34-MaxRoiPool-1-4, which aborted the process) ---------------


def max_roi_pool_model(pooled_shape, channels):
    node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], name="roi", pooled_shape=pooled_shape)
    return make_model([node], [tensor("X", shape=[1, channels, 4, 4]), tensor("rois", shape=["r", 5])], [tensor("Y")],
                      opset=13)


def test_max_roi_pool_with_more_bins_than_the_ep_gathers_is_left_to_ort(capfd, monkeypatch):
    # Placing 2^31 bins a box on the host aborted the process (a failed allocation). The node is
    # declined from its attribute alone; ORT's kernel would allocate 17 GB, so it is not run.
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_CLAIM_DEBUG", "1")
    ort.InferenceSession(max_roi_pool_model([2, 2**31 - 1], 1), providers=[MLX, "CPUExecutionProvider"])
    err = capfd.readouterr().err
    assert "declined 'roi' (MaxRoiPool): " in err and "more than 134217728 bins a box" in err, err


@pytest.mark.parametrize("pooled_shape, channels, boxes", [([1, 2**26], 4, 1), ([64, 65], 1, 2**20)])
def test_max_roi_pool_past_the_gather_limit_fails_naming_the_node(pooled_shape, channels, boxes):
    # Claimed (the bins fit), but the channels or the number of boxes take it past what the EP
    # places and gathers at once: a clear error before any allocation, never an abort.
    rois = np.tile(np.array([[0, 0, 0, 3, 3]], np.float32), (boxes, 1))
    feeds = {"X": np.ones((1, channels, 4, 4), np.float32), "rois": rois}
    with pytest.raises(Exception, match=r"node 'roi' \(MaxRoiPool\).*beyond the EP's 134217728 at once"):
        mlx_session(max_roi_pool_model(pooled_shape, channels)).run(None, feeds)


# --- DFT: an empty signal padded to dft_length (s35-DFT-17..19-5) ------------------------------


@pytest.mark.parametrize("shape, fails", [((2, 0, 1), True), ((2, 0, 2), True), ((0, 0, 1), False)])
def test_dft_of_an_empty_signal_into_a_non_empty_output_fails_as_ort(shape, fails):
    # Zero padding would give an all-zero spectrum; ORT's kernel refuses the input instead, and
    # answers only when the output is empty too.
    node = helper.make_node("DFT", ["x", "n"], ["y"], name="dft", axis=1)
    model = make_model([node], [tensor("x", shape=list(shape))], [tensor("y")], [numpy_helper.from_array(np.array(11, np.int64), "n")], opset=17)
    feeds = {"x": np.zeros(shape, np.float32)}
    if fails:
        assert_both_fail(model, feeds, "signal dimension must be greater than zero",
                         r"node 'dft' \(DFT\): the signal axis 1 is empty .*refuses this input too")
    else:
        assert_same_as_cpu(model, feeds)


# --- Col2Im: no rows (s37-Col2Im-18-0) ---------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 0])
def test_col2im_without_rows_fails_as_ort(batch):
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="c2i")
    model = make_model([node], [tensor("x", shape=[batch, 0, 6])], [tensor("y")],
                       [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in [("image", [4, 5]), ("block", [2, 3])]],
                       opset=18)
    assert_both_fail(model, {"x": np.zeros((batch, 0, 6), np.float32)}, "must be a positive multiple",
                     r"node 'c2i' \(Col2Im\): input has 0 rows: not a positive multiple")


# --- ConvTranspose: an output_shape inconsistent with the input (s39-ConvTranspose-1-3) --------


def test_conv_transpose_output_shape_consistency_follows_ort():
    # ORT 1.31 refuses an output_shape that its padding rule does not tie to this input size
    # (output_padding at or past the stride, or an input too short for the shape); the EP used
    # to answer those. Every combination below either fails in both or matches ORT exactly.
    import itertools

    failures = 0
    for n, out, k, s, d, pad in itertools.product([1, 2, 4], [1, 4, 9, 13], [1, 3], [1, 2, 3], [1, 2], [0, 1, 2]):
        if pad >= max(s, d):
            continue  # refused by the spec's bound, declined or failed elsewhere
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[s], dilations=[d],
                                output_shape=[out], output_padding=[pad])
        model = make_model([node], [tensor("x", shape=[1, 1, n]), tensor("w", shape=[1, 1, k])], [tensor("y")], opset=11)
        feeds = {"x": np.arange(1, n + 1, dtype=np.float32).reshape(1, 1, n),
                 "w": np.arange(1, k + 1, dtype=np.float32).reshape(1, 1, k)}
        try:
            want = cpu_outputs(model, feeds)[0]
        except Exception:
            want = None
            failures += 1
        if want is None:
            with pytest.raises(Exception, match=r"node 'up' \(ConvTranspose\): output_shape .* refuses it too"):
                mlx_session(model).run(None, feeds)
        else:
            np.testing.assert_array_equal(assert_same_as_cpu(model, feeds).outputs[0], want)
    assert failures > 20  # the grid reaches ORT's refusals


# --- pads of another length than two an axis (s44-QLinearConv-10-1, s45-Conv-1-2) -------------


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("pads", [[1, 2, 3], [1, 0, 2, 1], [1, 0, 2, 1, 5], [1, 0, 2, 1, 5, 6], [0, 0, 0, 0, -1]])
def test_pads_of_another_length_follow_ort(op, pads):
    # With X's rank unknown to ORT's shape inference, its Conv kernel reads the first two values
    # an axis and ignores the rest (the EP refused them); ConvTranspose and the pools refuse any
    # other length (the EP took some). Either both fail or both give ORT's answer.
    conv = op.startswith("Conv")
    attributes = {"pads": pads} if conv else {"pads": pads, "kernel_shape": [3, 3]}
    node = helper.make_node(op, ["x", "w"] if conv else ["x"], ["y"], name="n", **attributes)
    model = make_model([node], [tensor("x")] + ([tensor("w", shape=[1, 1, 3, 3])] if conv else []), [tensor("y")],
                       opset=18)
    feeds = {"x": np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)}
    if conv:
        feeds["w"] = np.ones((1, 1, 3, 3), np.float32)
    if cpu_outputs_or_mlx_fails_too(model, feeds) is not None:
        assert_same_as_cpu(model, feeds)


# --- MaxUnpool: what ORT refuses (s48-MaxUnpool-9-1, s33-MaxUnpool-9-0) -------------------------


@pytest.mark.parametrize("x_shape, attributes, output_shape", [
    ((1, 1, 2, 2), {"kernel_shape": [2, -2]}, None),  # refused when ORT loads the node
    ((1, 1, 2, 2), {"kernel_shape": [2, 2], "strides": [0, 1]}, None),
    ((1, 1, 2, 2), {"kernel_shape": [2, 2], "pads": [2, 0, 2, 0]}, None),
    ((1, 1, 2, 2), {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}, None),  # taken: a larger output
    ((1, 1, 0, 2), {"kernel_shape": [2, 2]}, [1, 1, 3, 4]),
    ((2, 3, 0, 3), {"kernel_shape": [2, 2], "strides": [2, 2]}, [2, 3, 3, 4]),  # implied axis of 0: refused
    ((1, 1, 2, 2), {"kernel_shape": [2, 2]}, [1, 1, 1, 1]),  # smaller than implied: refused
    ((1, 1, 2, 2), {"kernel_shape": [2, 2]}, [1, 1, 3, 4]),
])
def test_max_unpool_takes_what_ort_takes(x_shape, attributes, output_shape):
    inputs = ["x", "i"] + (["o"] if output_shape else [])
    node = helper.make_node("MaxUnpool", inputs, ["y"], name="u", **attributes)
    constants = [numpy_helper.from_array(np.array(output_shape, np.int64), "o")] if output_shape else []
    model = make_model([node], [tensor("x"), tensor("i", TensorProto.INT64)], [tensor("y")], constants, opset=11)
    feeds = {"x": np.ones(x_shape, np.float32), "i": np.zeros(x_shape, np.int64)}
    if cpu_outputs_or_mlx_fails_too(model, feeds) is not None:
        assert_same_as_cpu(model, feeds)


# --- MeanVarianceNormalization: an axis out of range (s48-MeanVarianceNormalization-9-1) --------


@pytest.mark.parametrize("elem, dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)])
def test_mvn_with_an_axis_out_of_range_follows_ort_for_its_type(elem, dtype):
    # ORT's float32 kernel ignores the axis; float16 runs its function body, whose ReduceMean
    # refuses it (when the session is created, so the MLX run fails in its place).
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn", axes=[0, 1, 2, -5])
    model = make_model([node], [tensor("x", elem, [2, 3, 4, 5])], [tensor("y", elem)], opset=13)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(dtype)}
    if dtype == np.float32:
        np.testing.assert_allclose(Run(model, feeds).outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-5, atol=1e-5)
        Run(model, feeds).assert_all_on_mlx()
    else:
        assert_both_fail(model, feeds, "axis must be in", r"node 'mvn' .*axis -5 is out of range")


# --- Resize: tf_crop_and_resize with an empty roi (s47-Resize-11..12-4) -------------------------


@pytest.mark.parametrize("opset, roi", [(11, "empty"), (11, "full"), (13, "empty"), (13, "absent"), (19, "empty"),
                                        (19, "absent"), (19, "full")])
def test_crop_and_resize_roi_follows_ort(opset, roi):
    # An empty roi tensor is refused by ORT (two values an axis); an absent one (from opset 13)
    # is the whole image. The EP took an empty one as absent.
    constants = [numpy_helper.from_array(np.array([1, 1, 2, 0.6], np.float32), "scales")]
    if roi != "absent":
        values = [] if roi == "empty" else [0, 0, 0.1, 0.2, 1, 1, 0.9, 0.7]
        constants.append(numpy_helper.from_array(np.array(values, np.float32), "roi"))
    node = helper.make_node("Resize", ["x", "" if roi == "absent" else "roi", "scales"], ["y"], name="resize",
                            coordinate_transformation_mode="tf_crop_and_resize")
    model = make_model([node], [tensor("x", shape=[1, 2, 4, 5])], [tensor("y")], constants, opset=opset)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 2, 4, 5)).astype(np.float32)}
    if roi == "empty":
        assert_both_fail(model, feeds, "size of roi array", r"node 'resize' \(Resize\): roi has 0 values")
    else:
        np.testing.assert_allclose(Run(model, feeds).outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-5, atol=1e-6)
        Run(model, feeds).assert_all_on_mlx()


# --- MelWeightMatrix: a dft_length of 0 (s50-MelWeightMatrix-17-4) -----------------------------


@pytest.mark.parametrize("dft_length", [-3, -1, 0, 1, 2, 7])
@pytest.mark.parametrize("mel_bins, low, high, rate", [(4, 0, 8000, 16000), (2, 100, 300, 1000)])
def test_mel_weight_matrix_of_any_dft_length_follows_ort(dft_length, mel_bins, low, high, rate):
    # The EP refused a dft_length below 1; ORT leaves it to its edges' range check (0 gives one
    # spectrum bin, and a negative length either one bin or a refusal).
    constants = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in [("m", mel_bins), ("d", dft_length), ("sr", rate)]]
    constants += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in [("lo", low), ("hi", high)]]
    node = helper.make_node("MelWeightMatrix", ["m", "d", "sr", "lo", "hi"], ["y"], name="mel")
    model = make_model([node], [], [tensor("y")], constants, opset=17)
    try:
        want = cpu_outputs(model, {})[0]
    except Exception:
        options = ort.SessionOptions()  # unoptimised, or ORT folds the constant node itself
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(model, options, providers=[MLX, "CPUExecutionProvider"])
        session.disable_fallback()
        with pytest.raises(Exception, match=r"node 'mel' \(MelWeightMatrix\).*out of range"):
            session.run(None, {})
        return
    run = Run(model, {}, optimize=False)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], want)


# --- contrib Attention: the 3B+2 mask_index layout (s47-com.microsoft.Attention-1-0) ------------


@pytest.mark.parametrize("batch, mask", [(0, [5, 7]), (0, []), (2, [3, 2, 1, 0, 9, 9, 9, 9]), (2, [2, 3, 0, 1, 0, 0, 0, 0]),
                                         (1, [1, 0, 4, 4, 4])])
def test_attention_takes_the_3b_plus_2_mask_layout_as_ort_does(batch, mask):
    # ORT's CPU kernel accepts a 1-D mask_index of 3B+2 values (its GPU kernels' layout) and
    # reads the first B as end positions; with an empty batch, two values of anything. The EP
    # refused the layout.
    node = helper.make_node("Attention", ["input", "weights", "bias", "mask"], ["out"], name="att",
                            domain="com.microsoft", num_heads=2)
    model = make_model([node], [tensor("input", shape=[batch, 3, 6]), tensor("weights", shape=[6, 24]),
                                tensor("bias", shape=[24]), tensor("mask", TensorProto.INT32, [len(mask)])],
                       [tensor("out")], opset=17, domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(2)
    feeds = {"input": rng.standard_normal((batch, 3, 6)).astype(np.float32),
             "weights": rng.standard_normal((6, 24)).astype(np.float32), "bias": np.zeros(24, np.float32),
             "mask": np.array(mask, np.int32)}
    want = cpu_outputs_or_mlx_fails_too(model, feeds, match=r"node 'att'")
    if want is None:
        return
    want = want[0]
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert run.outputs[0].shape == want.shape
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-4, atol=1e-5)


# --- PRelu: a slope wider than X (s53-PRelu-7-3) ------------------------------------------------


@pytest.mark.parametrize("x_shape, slope_shape", [((), (3, 1)), ((3,), (2, 1)), ((1, 3), (2, 1, 1)), ((2, 3), (4,)),
                                                  ((2, 3), (3,))])
def test_prelu_broadcasts_both_ways_as_ort_does(x_shape, slope_shape):
    # ONNX says slope broadcasts to X; ORT's kernel broadcasts both ways (X [] with slope [3, 1]
    # gives [3, 1]), which the EP refused.
    model = make_model([helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")],
                       [tensor("x", shape=list(x_shape)), tensor("slope", shape=list(slope_shape))], [tensor("y")],
                       opset=9)
    feeds = {"x": np.linspace(-2, 2, int(np.prod(x_shape))).astype(np.float32).reshape(x_shape),
             "slope": np.linspace(0.1, 0.9, int(np.prod(slope_shape))).astype(np.float32).reshape(slope_shape)}
    if cpu_outputs_or_mlx_fails_too(model, feeds) is not None:
        assert_same_as_cpu(model, feeds)


# --- Gemm: a C that does not broadcast to Y (s55-Gemm-7..10-5) ----------------------------------


@pytest.mark.parametrize("c_shape", [(5,), (3,), (2, 1), (1, 3), (3, 1), (1,), (1, 1), ()])
@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_gemm_bias_broadcasts_one_way_as_ort_requires(c_shape, beta):
    # Y is [3, 1]: MLX's add widened it to [3, 5] for a C of [5], which ORT refuses (even when
    # beta is 0 and C is never read).
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", beta=beta)
    model = make_model([node], [tensor("a", shape=[3, 4]), tensor("b", shape=[4, 1]), tensor("c")], [tensor("y")],
                       opset=13)
    feeds = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones((4, 1), np.float32),
             "c": np.full(c_shape, 0.5, np.float32)}
    if cpu_outputs_or_mlx_fails_too(model, feeds, match=r"node 'gemm' \(Gemm\): C of shape") is not None:
        assert_same_as_cpu(model, feeds)


# --- RotaryEmbedding: num_heads beside a 4-D input (s55-com.microsoft.RotaryEmbedding-1-5) -------


@pytest.mark.parametrize("num_heads", [1, 2, 5])
def test_rotary_embedding_of_a_4d_input_ignores_num_heads_as_ort_does(num_heads):
    # [B, N, S, H] names its heads: ORT's kernel gives the same answer whatever num_heads says
    # (the EP refused a num_heads other than N).
    rng = np.random.default_rng(3)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope", domain="com.microsoft",
                            interleaved=1, rotary_embedding_dim=6, num_heads=num_heads)
    model = make_model([node], [tensor("x", shape=[2, 1, 3, 8]), tensor("pos", TensorProto.INT64, [1]),
                                tensor("cos", shape=[6, 3]), tensor("sin", shape=[6, 3])], [tensor("y")],
                       opset=17, domains=[("com.microsoft", 1)])
    feeds = {"x": rng.standard_normal((2, 1, 3, 8)).astype(np.float32), "pos": np.array([1], np.int64),
             "cos": rng.standard_normal((6, 3)).astype(np.float32), "sin": rng.standard_normal((6, 3)).astype(np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-6, atol=1e-6)


# --- RotaryEmbedding: caches head_size / 2 wide with a smaller rotary_embedding_dim (s81) ------


def test_rotary_embedding_with_caches_wider_than_the_rotation_is_left_to_ort():
    # ORT takes a cache head_size / 2 wide when rotary_embedding_dim is smaller, but reads it
    # with a row stride of rotary_embedding_dim / 2 (position p reads flat elements from
    # p * rot / 2). The EP declines such a node when the cache's width is declared, and fails
    # naming the node when it is not.
    rng = np.random.default_rng(81)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope", domain="com.microsoft",
                            rotary_embedding_dim=2, num_heads=2)
    feeds = {"x": rng.standard_normal((1, 3, 16)).astype(np.float32), "pos": np.array([[0, 2, 4]], np.int64),
             "cos": rng.standard_normal((6, 4)).astype(np.float32), "sin": rng.standard_normal((6, 4)).astype(np.float32)}

    def model(cache_shape):
        inputs = [tensor("x", shape=[1, 3, 16]), tensor("pos", TensorProto.INT64, [1, 3]),
                  tensor("cos", shape=cache_shape), tensor("sin", shape=cache_shape)]
        return make_model([node], inputs, [tensor("y")], opset=17, domains=[("com.microsoft", 1)])

    run = Run(model([6, 4]), feeds)
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}, run.kernels
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model([6, 4]), feeds)[0])
    with pytest.raises(Exception, match=r"node 'rope'.*caches are 4 wide.*row stride of 1"):
        mlx_session(model(["rows", "width"])).run(None, feeds)


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
@pytest.mark.parametrize("rot,x_shape", [(5, (1, 3, 12)), (3, (1, 3, 12)), (0, (1, 3, 10)), (4, (1, 3, 12))])
def test_rotary_embedding_of_odd_width_fails_naming_why(domain, rot, x_shape):
    # ORT's kernels run an odd rotation width (rotary_embedding_dim, else the head size) but
    # leave the last rotated feature unwritten: its answer changes run to run. The EP fails the
    # node saying so (it said only that the width must be even); an even width runs on MLX.
    rng = np.random.default_rng(5)
    width = (rot or x_shape[-1] // 2) // 2
    ms = domain == "com.microsoft"
    names = ["x", "pos", "cos", "sin"] if ms else ["x", "cos", "sin", "pos"]
    node = helper.make_node("RotaryEmbedding", names, ["y"], name="rope", domain=domain, rotary_embedding_dim=rot,
                            num_heads=2)
    shapes = {"x": x_shape, "pos": (1, 3), "cos": (8, width), "sin": (8, width)}
    inputs = [tensor(n, TensorProto.INT64 if n == "pos" else TensorProto.FLOAT, list(shapes[n])) for n in names]
    model = make_model([node], inputs, [tensor("y")], opset=17 if ms else 23, domains=[(domain, 1)] if ms else ())
    feeds = {n: rng.standard_normal(shapes[n]).astype(np.float32) for n in ("x", "cos", "sin")}
    feeds["pos"] = np.array([[0, 3, 7]], np.int64)
    if (rot or x_shape[-1] // 2) % 2 == 0:
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, feeds)[0], rtol=1e-6, atol=1e-6)
    else:
        with pytest.raises(Exception, match=r"node 'rope'.*odd rotation width.*uninitialised memory"):
            mlx_session(model).run(None, feeds)


# --- DequantizeLinear: a float8 zero point of -0.0 (s57-DequantizeLinear-19..20-3) -------------


@pytest.mark.parametrize("zero_point", [[0.0, -0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
@pytest.mark.parametrize("x_shape", [(2, 4, 5), (0, 4, 5)])
def test_float8_dequantize_takes_only_a_positive_zero_zero_point(zero_point, x_shape):
    # ORT compares the zero point's bits with 0, so -0.0 fails the run (even over an empty x);
    # the EP compared values.
    from onnx import TensorProto as TP
    node = helper.make_node("DequantizeLinear", ["x", "scale", "zp"], ["y"], name="dq", axis=1)
    constants = [numpy_helper.from_array(np.array([0.5, 1.0, 2.0, 4.0], np.float32), "scale"),
                 helper.make_tensor("zp", TP.FLOAT8E4M3FN, [4], zero_point)]
    x = helper.make_node("Cast", ["x32"], ["x"], to=TP.FLOAT8E4M3FN)
    model = make_model([x, node], [tensor("x32", shape=list(x_shape))], [tensor("y")], constants, opset=19)
    feeds = {"x32": np.linspace(-3, 3, int(np.prod(x_shape))).astype(np.float32).reshape(x_shape)}
    if cpu_outputs_or_mlx_fails_too(model, feeds, match=r"node 'dq'.*must be \+0") is not None:
        assert_same_as_cpu(model, feeds)


# --- BitCast: a `to` that names no type (s60-BitCast-26-5) --------------------------------------


@pytest.mark.parametrize("to", [0, TensorProto.UINT32])
def test_bit_cast_with_a_to_naming_no_type_is_left_to_ort(to):
    # The EP read the output's declared type and ignored `to`; ORT fails on `to` 0.
    node = helper.make_node("BitCast", ["x"], ["y"], name="bits", to=to)
    model = make_model([node], [tensor("x", TensorProto.UINT32, [1, 3, 4])], [tensor("y", TensorProto.UINT32)], opset=26)
    feeds = {"x": np.arange(12, dtype=np.uint32).reshape(1, 3, 4)}
    if cpu_outputs_or_mlx_fails_too(model, feeds, match="tensor type 0 is not supported") is not None:
        assert_same_as_cpu(model, feeds)


# --- Cast: a `to` that names no type (s98-Cast-6..18-2) -----------------------------------------


@pytest.mark.parametrize("to", [0, TensorProto.FLOAT])
def test_cast_with_a_to_naming_no_type_is_left_to_ort(to):
    # Type inference lets `to` 0 through when the graph declares the output's type; the EP
    # converted to that type, ORT's Cast fails on `to`.
    node = helper.make_node("Cast", ["x"], ["y"], name="cast", to=to)
    model = make_model([node], [tensor("x", TensorProto.UINT8, [2, 3, 4])], [tensor("y")], opset=13)
    feeds = {"x": np.arange(24, dtype=np.uint8).reshape(2, 3, 4)}
    if cpu_outputs_or_mlx_fails_too(model, feeds, match="Unsupported data type: 0") is not None:
        assert_same_as_cpu(model, feeds)


# --- MultiHeadAttention: no keys, and a value width the heads do not divide (s98-MHA-1-0) -----


@pytest.mark.parametrize("elem,dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)])
@pytest.mark.parametrize("outputs", [["y"], ["y", "present_key", "present_value", "qk"]])
@pytest.mark.parametrize("value_width", [1, 3])
def test_mha_with_no_keys_answers_zeros_whatever_the_value_width(elem, dtype, outputs, value_width):
    # ORT checks no value width against num_heads: over no keys it answers zeros [B, S, D_v]
    # (present_value [B, N, 0, D_v / N], truncated); with keys it fails. The EP failed both.
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], outputs, name="mha", domain="com.microsoft", num_heads=2)
    model = make_model([node], [tensor(x, elem) for x in "qkv"], [tensor(o, elem) for o in outputs],
                       domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(98)
    feeds = {"q": rng.standard_normal((2, 3, 8)).astype(dtype), "k": np.zeros((2, 0, 8), dtype),
             "v": np.zeros((2, 0, value_width), dtype)}
    assert_same_as_cpu(model, feeds)
    feeds |= {"k": np.ones((2, 5, 8), dtype), "v": np.ones((2, 5, value_width), dtype)}
    assert_both_fail(model, feeds, "Tensor size", "heads do not divide")


@pytest.mark.parametrize("query_width,value_width", [(1, 1), (3, 2), (1, 4)])
def test_mha_with_nothing_to_attend_answers_empty_whatever_the_query_width(query_width, value_width):
    # s153-com.microsoft.MultiHeadAttention-1-3: no query rows and no keys, with a query width
    # the heads do not divide. ORT answers empty outputs, the present keys [B, N, 0, D / N]
    # truncated; the EP failed splitting the query into heads.
    outputs = ["y", "present_key", "present_value", "qk"]
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], outputs, name="mha", domain="com.microsoft", num_heads=2)
    model = make_model([node], [tensor(x) for x in "qkv"], [tensor(o) for o in outputs], domains=[("com.microsoft", 1)])
    feeds = {"q": np.zeros((2, 0, query_width), np.float32), "k": np.zeros((2, 0, query_width), np.float32),
             "v": np.zeros((2, 0, value_width), np.float32)}
    assert_same_as_cpu(model, feeds)
    # With query rows of that width ORT fails reshaping the query (s177-...-1-3), and so does the EP.
    feeds["q"] = np.ones((2, 3, query_width), np.float32)
    if query_width == 3:
        assert_both_fail(model, feeds, "Tensor size", "heads do not divide")


# --- Pools whose dilated window passes int64 (s120-MaxPool-12-5) ------------------------------


@pytest.mark.parametrize("op,opset", [("MaxPool", 12), ("AveragePool", 19), ("LpPool", 18)])
def test_pool_with_a_dilated_window_past_int64_is_left_to_ort(op, opset):
    # ORT fails on the overflow of dilation * (kernel - 1); the EP's window arithmetic wrapped
    # and it answered.
    node = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
                            dilations=[2**63 - 1, 1])
    model = make_model([node], [tensor("x", shape=[2, 3, 7, 8])], [tensor("y")], opset=opset)
    feeds = {"x": np.arange(336, dtype=np.float32).reshape(2, 3, 7, 8)}
    assert cpu_outputs_or_mlx_fails_too(model, feeds, match="Integer overflow") is None


# --- ConvTranspose: output_shape of neither the spatial rank nor the full rank (s124) -----------


@pytest.mark.parametrize("output_shape,fails", [([1, 1, 1, 1], True), ([1, 2, 5, 5, 5], False), ([5, 5, 5], False),
                                                 ([5, 5], True)])
def test_conv_transpose_output_shape_names_the_spatial_dims_or_all_of_them(output_shape, fails):
    # ORT takes output_shape with the spatial rank's length or the full rank's; the EP took the
    # last spatial-rank entries of any longer list.
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="convt", output_shape=output_shape)
    dims = lambda name: [f"{name}{i}" for i in range(5)]  # symbolic: ONNX's inference checks static ones first
    model = make_model([node], [tensor("x", shape=dims("x")), tensor("w", shape=dims("w"))], [tensor("y")], opset=17)
    feeds = {"x": np.ones((1, 3, 3, 3, 3), np.float32), "w": np.ones((3, 2, 3, 3, 3), np.float32)}
    if fails:
        assert_both_fail(model, feeds, "output_shape attribute has", "output_shape .* elements")
    else:
        assert_same_as_cpu(model, feeds)  # small integers: exact on both


# --- GatherND whose batch axes differ (s76-GatherND-11-4) -----------------------------------


@pytest.mark.parametrize("data_shape,indices", [
    ((1, 2, 3, 4), [[1, 2], [0, 1], [1, 0], [0, 0], [1, 1]]),  # the fuzz case: data batch 1, five lookups
    ((2, 3, 4), [[0], [1], [2], [0]]),  # two lookups a data batch entry
    ((2, 3, 4), [[[0], [1]], [[2], [0]], [[1], [1]], [[0], [2]]]),
    ((2, 3, 4), [[[0]], [[1]], [[2]], [[0]]]),
    ((2, 3, 4), [[0], [1], [2]]),  # three lookups over two entries: ORT refuses
    ((2, 3, 4), [[1]]),
])
def test_gather_nd_deals_lookups_out_to_the_data_batch_as_ort_does(data_shape, indices):
    # ONNX wants the batch axes equal; ORT's kernel only wants the indices' batch a multiple of
    # the data's, and gives lookup i the data batch entry i / (lookups / batch). The EP refused
    # every such model.
    indices = np.array(indices, np.int64)
    node = helper.make_node("GatherND", ["data", "indices"], ["y"], name="gnd", batch_dims=1)
    model = make_model([node], [tensor("data", shape=list(data_shape)), tensor("indices", TensorProto.INT64, list(indices.shape))],
                       [tensor("y")], opset=13)
    feeds = {"data": np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape), "indices": indices}
    if cpu_outputs_or_mlx_fails_too(model, feeds, match="not a multiple") is not None:
        assert_same_as_cpu(model, feeds)


# --- ConvTranspose's bias: one value per output channel (s95-ConvTranspose-1) ---------------


@pytest.mark.parametrize("bias_shape", [(1,), (1, 3), (6,)])
def test_conv_transpose_refuses_a_bias_other_than_one_value_per_output_channel(bias_shape):
    # ORT's ConvTranspose refuses B unless it is 1-D of M values (M = W's second axis × group),
    # as its Conv does; the EP broadcast a bias of 1 or [1, M] into the answer.
    def model(bias_shape):
        node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="convt")
        inputs = [tensor("x", shape=[1, 2, 4, 4]), tensor("w", shape=[2, 3, 3, 3]), tensor("b", shape=list(bias_shape))]
        return make_model([node], inputs, [tensor("y")], opset=17)

    feeds = {"x": np.ones((1, 2, 4, 4), np.float32), "w": np.ones((2, 3, 3, 3), np.float32),
             "b": np.ones(bias_shape, np.float32)}
    assert_both_fail(model(bias_shape), feeds, "Bias shape is not compatible", "one value per output channel")
    feeds["b"] = np.arange(3, dtype=np.float32)
    assert_same_as_cpu(model((3,)), feeds)  # small integers: exact on both


# --- Quantised convolutions with Conv's stride bound (s140-QLinearConv-10-1) ------------------


@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
@pytest.mark.parametrize("attrs", [{"strides": [1, 2**31]}, {"dilations": [2**31, 1]},
                                   {"auto_pad": "SAME_UPPER", "pads": [0, 0, 0, 0]}])
def test_quantised_conv_declines_what_conv_declines(op, attrs):
    # A stride of 2^31 reached MLX's convolution as a negative int32 ("Stride sizes must be
    # positive") where ORT's CPU EP answers; Conv declined it, the integer convolutions claimed
    # it. They now claim through Conv's rules, so ORT's CPU EP runs the node (or both refuse it).
    model = quantised_conv(op, (4, 3, 3, 2), False, **attrs)
    feeds = {"x": np.arange(2 * 3 * 6 * 6, dtype=np.uint8).reshape(2, 3, 6, 6)}
    want = cpu_outputs_or_mlx_fails_too(model, feeds)
    if want is not None:
        session = profiled_session(model)
        session.disable_fallback()
        for got, expected in zip(session.run(None, feeds), want):
            np.testing.assert_array_equal(got, expected)
        assert {provider for _, provider in kernel_placements(session)} == {"CPUExecutionProvider"}


# --- Layer norms' scale and bias must not change X's shape (s143-LayerNormalization-17-3) ------


NORMS = [("LayerNormalization", "", 17, ["x", "scale", "bias"]), ("RMSNormalization", "", 23, ["x", "scale"]),
         ("SimplifiedLayerNormalization", "", 17, ["x", "scale"])]


@pytest.mark.parametrize("op,domain,opset,inputs", NORMS, ids=[n[0] for n in NORMS])
@pytest.mark.parametrize("x_shape,axis,scale_shape", [
    ((8, 3, 2, 1), 3, (8,)),  # the fuzz case: the EP widened Y to [8, 3, 2, 8]
    ((8, 3, 2, 1), 3, (1, 1, 1, 4)),
    ((2, 3, 4), 1, (1, 1, 1, 4)),  # a higher rank than X's
    ((2, 3, 4), 1, (3, 1)), ((2, 3, 4), 1, (2, 1, 4)), ((2, 3, 4), -1, (1,)), ((2, 3, 4), 0, (1, 3, 4)),  # taken
    ((2, 3, 4), 1, (4, 1)),  # refused by both before
])
def test_layer_norm_scale_must_broadcast_to_x_unchanged(op, domain, opset, inputs, x_shape, axis, scale_shape):
    # ORT takes a scale (and bias) that broadcasts to X without changing X's shape; the EP took
    # any two shapes that broadcast together, and answered in a wider shape.
    node = helper.make_node(op, inputs, ["y"], name="norm", axis=axis)
    model = make_model([node], [tensor(name) for name in inputs], [tensor("y")], opset=opset)
    rng = np.random.default_rng(143)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    feeds |= {name: rng.standard_normal(scale_shape).astype(np.float32) for name in inputs[1:]}
    want = cpu_outputs_or_mlx_fails_too(model, feeds, match="broadcast to X without changing")
    if want is not None:
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        assert run.outputs[0].shape == want[0].shape
        np.testing.assert_allclose(run.outputs[0], want[0], rtol=1e-5, atol=1e-5)


# --- Einsum over an empty operand whose index is 1 elsewhere (s145-Einsum-12-0) ---------------


@pytest.mark.parametrize("equation,shapes", [
    ("bhid, bhjd -> bhij", [(0, 2, 3, 4), (1, 2, 5, 4)]),  # the fuzz case
    ("bij,bjk", [(0, 3, 4), (1, 4, 2)]),  # implicit output
    ("...ij,...jk->...ik", [(0, 3, 4), (1, 4, 2)]),  # ellipses broadcast
    ("ij,jk->ik", [(3, 0), (0, 2)]),  # a sum over nothing
])
def test_einsum_of_an_empty_operand_broadcasts_a_one_to_zero(equation, shapes):
    # MLX's einsum sized the index of sizes 0 and 1 as 1, then failed to broadcast the empty
    # operand into it; ORT broadcasts the 1 to 0. (ORT's kernel raises SIGFPE with the operands
    # swapped, so the test keeps the empty one first.)
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], name="einsum", equation=equation)
    model = make_model([node], [tensor(n, shape=[f"{n}_{a}" for a in range(len(s))]) for n, s in zip(names, shapes)],
                       [tensor("y")], opset=12)
    feeds = {n: np.ones(s, np.float32) for n, s in zip(names, shapes)}
    assert_same_as_cpu(model, feeds)


# --- Pad with an empty output (s166-Pad-2..10-5) ---------------------------------------------


@pytest.mark.parametrize("mode,shape,pads,opset", [
    ("reflect", (2, 3, 0), [0, 1, 1, 0, 1, -1], 10),  # the fuzz case: answered, empty
    ("reflect", (2, 0, 4), [0, 0, 5, 0, 0, 5], 10),  # a reflection wider than its axis: answered
    ("edge", (2, 3, 0), [0, 0, 1, 0, 0, -1], 18),
    ("reflect", (2, 3, 0), [0, 0, 1, 0, 0, 0], 18),  # an empty axis padded to 1: both fail
    ("edge", (0, 3, 0), [0, 0, 1, 0, 0, 0], 18),  # the same, with the output empty anyway
    ("wrap", (2, 3, 4), [0, 0, 1, 0, 0, 1], 10),  # ORT wraps in every opset (ONNX: from 19)
])
def test_pad_follows_ort_where_an_axis_is_empty(mode, shape, pads, opset):
    # ORT answers an empty output whatever the mode's limits, and refuses to pad an empty axis
    # to a nonzero length in edge or reflect mode; the EP refused the first and, with a crop
    # on the empty axis, failed where ORT answers.
    if opset < 11:
        node = helper.make_node("Pad", ["x"], ["y"], name="pad", mode=mode, pads=pads)
        inputs, feeds = [tensor("x", shape=["a", "b", "c"])], {}
    else:
        node = helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode=mode)
        inputs, feeds = [tensor("x", shape=["a", "b", "c"]), tensor("pads", TensorProto.INT64, [6])], {
            "pads": np.array(pads, np.int64)}
    model = make_model([node], inputs, [tensor("y")], opset=opset)
    feeds["x"] = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    if cpu_outputs_or_mlx_fails_too(model, feeds) is not None:
        assert_same_as_cpu(model, feeds)


def test_pad_wraps_an_empty_input_into_an_empty_output():
    # ORT's path for an empty input has no wrap mode ("Unexpected mode of 3"); the answer is
    # an empty tensor of the padded shape, which the EP gives.
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode="wrap")
    model = make_model([node], [tensor("x", shape=["a", "b", "c"]), tensor("pads", TensorProto.INT64, [6])],
                       [tensor("y")], opset=19)
    feeds = {"x": np.zeros((2, 0, 4), np.float32), "pads": np.array([0, 0, 1, 0, 0, 2], np.int64)}
    with pytest.raises(Exception, match="Unexpected mode"):
        cpu_outputs(model, feeds)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert run.outputs[0].shape == (2, 0, 7)


# --- Split with both a split input and num_outputs (s167-Split-13-4) --------------------------


def test_split_with_both_a_split_input_and_num_outputs_is_left_to_ort():
    # ONNX allows one of them; ORT refuses the node, the EP split by the input.
    node = helper.make_node("Split", ["x", "split"], ["a", "b", "c"], name="split", axis=1, num_outputs=3)
    model = make_model([node], [tensor("x", shape=[2, 6])], [tensor(o) for o in "abc"],
                       initializers=[numpy_helper.from_array(np.array([1, 2, 3], np.int64), "split")], opset=18)
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(2, 6)}
    assert cpu_outputs_or_mlx_fails_too(model, feeds, match="num_outputs") is None


# --- FusedConv's Z: the output's shape, no broadcast (s165-com.microsoft.FusedConv-1-5) --------


@pytest.mark.parametrize("z_shape", [(2, 4, 4, 1), (1, 4, 4, 4), (2, 4, 4, 4)])
def test_fused_conv_sums_a_z_of_the_output_shape_only(z_shape):
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], name="fconv", domain="com.microsoft",
                            activation="Relu")
    inputs = [tensor("x", shape=[2, 3, 6, 6]), tensor("w", shape=[4, 3, 3, 3]), tensor("b", shape=[4]),
              tensor("z", shape=list(z_shape))]
    model = make_model([node], inputs, [tensor("y")], domains=[("com.microsoft", 1)])
    rng = np.random.default_rng(165)
    feeds = {"x": rng.integers(-3, 4, (2, 3, 6, 6)).astype(np.float32), "w": rng.integers(-2, 3, (4, 3, 3, 3)).astype(np.float32),
             "b": np.arange(4, dtype=np.float32), "z": rng.integers(-5, 6, z_shape).astype(np.float32)}
    if cpu_outputs_or_mlx_fails_too(model, feeds, match="output shape") is not None:
        assert_same_as_cpu(model, feeds)  # small integers: exact on both


# --- Resize: an aspect-ratio policy over negative axes (s188-Resize-13-3) ----------------------


@pytest.mark.parametrize("axes,policy,claimed", [([-4, 3], "not_smaller", False), ([-2, -1], "not_larger", False),
                                                 ([2, 3], "not_smaller", True), ([-2, -1], "stretch", True)])
def test_resize_policy_over_negative_axes_is_left_to_ort(axes, policy, claimed):
    # ORT's kernel compares the policy's axes with dims unnormalised, so a negative axis keeps
    # its dim and stays out of the common scale ([-2, -1] not_smaller leaves [1, 2, 4, 5] as it
    # is); ONNX counts it from the end, as the EP did. The EP now declines such a node.
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize", axes=axes,
                            keep_aspect_ratio_policy=policy)
    model = make_model([node], [tensor("x", shape=[1, 2, 4, 5]), tensor("sizes", TensorProto.INT64, [2])],
                       [tensor("y")], opset=18)
    feeds = {"x": np.arange(40, dtype=np.float32).reshape(1, 2, 4, 5), "sizes": np.array([7, 7], np.int64)}
    run = Run(model, feeds)
    assert run.providers_of_kernels() == {MLX if claimed else "CPUExecutionProvider"}, run.kernels
    want = cpu_outputs(model, feeds)[0]
    assert run.outputs[0].shape == want.shape
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-6, atol=1e-5)


def test_fused_conv_with_an_empty_activation_name_is_left_to_ort():
    # s194-com.microsoft.FusedConv-1-4: ORT's kernel refuses activation="" (an absent attribute
    # is no activation); the EP read "" as none.
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], name="fconv", domain="com.microsoft", activation="")
    model = make_model([node], [tensor("x", shape=[1, 2, 5, 5]), tensor("w", shape=[3, 2, 3, 3])], [tensor("y")],
                       domains=[("com.microsoft", 1)])
    feeds = {"x": np.ones((1, 2, 5, 5), np.float32), "w": np.ones((3, 2, 3, 3), np.float32)}
    assert cpu_outputs_or_mlx_fails_too(model, feeds, match="GetFusedActivationAttr") is None


@pytest.mark.parametrize("ids_shape", [(0, 5), (2, 0)])
def test_embed_layer_norm_with_no_tokens_reads_no_position_id(ids_shape):
    # s226-com.microsoft.EmbedLayerNormalization-1-4: with no tokens ORT's kernel reads no
    # position id, so ids out of range beside them are answered; the EP checked them.
    model, feeds = embed_layer_norm({**EMBED_TABLES, "input_ids": ids_shape, "position_ids": (1, ids_shape[1])},
                                    declared=False)
    feeds["position_ids"] = np.full((1, ids_shape[1]), 2**31 - 1, np.int32)
    assert_same_as_cpu(model, feeds)
