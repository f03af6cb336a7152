"""Host work sized by a node's attributes or host-read values stays bounded: a lowering that
sized a host table or loop by an attribute alone could abort the process (Rust aborts on a
failed allocation) or run for hours. Each case either runs on MLX within its input's and
output's size, matching ORT's CPU EP, or is declined (ORT's CPU EP runs it) or fails naming
the node. Found by reading the lowerings after fuzz case s34-MaxRoiPool-1-4 aborted."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor

ML = "ai.onnx.ml"


def assert_on_mlx_like_cpu(model, feeds):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def assert_declined(model, capfd, monkeypatch, op, reason):
    """The claim declines the node (session creation alone: running it on ORT would be slow)."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_CLAIM_DEBUG", "1")
    ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    err = capfd.readouterr().err
    assert f"{op}): " in err and "declined" in err and reason in err, err


def tf_idf_model(x_shape, **attributes):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", **attributes)
    return make_model([node], [tensor("x", TensorProto.INT64, x_shape)], [tensor("y")], opset=9)


def test_tf_idf_with_a_large_vocabulary_routes_its_counts_without_a_square_table():
    # Output slots were filled by a matmul with a [pool n-grams, slots] one-hot matrix: 360 GB
    # for this vocabulary. Two n-grams share a slot, which TF sums.
    vocabulary = 300_000
    indexes = np.arange(vocabulary)
    indexes[7] = 3
    model = tf_idf_model([2, 6], mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0,
                         ngram_counts=[0], pool_int64s=list(range(vocabulary)), ngram_indexes=indexes.tolist())
    x = np.array([[3, 7, 7, 299_999, 12, 3], [0, 1, 2, 3, 4, 5]], np.int64)
    assert_on_mlx_like_cpu(model, {"x": x})


def test_tf_idf_with_a_huge_skip_count_stops_at_the_row_width():
    # Every stride was visited up to max_skip_count + 1 (2^40 loop turns); only strides whose
    # window fits the row count. ORT's kernel takes every skip too (about an hour here), so
    # its answer comes from a skip count past the row's width, which counts the same windows.
    def model(skip):
        return tf_idf_model([2, 6], mode="TF", min_gram_length=2, max_gram_length=2, max_skip_count=skip,
                            ngram_counts=[0, 0], pool_int64s=[1, 2, 2, 1], ngram_indexes=[0, 1])

    feeds = {"x": np.array([[1, 2, 1, 9, 2, 1], [2, 2, 2, 1, 1, 1]], np.int64)}
    run = Run(model(2**40), feeds)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model(10), feeds)[0])


def test_tf_idf_with_the_largest_skip_count_is_left_to_ort(capfd, monkeypatch):
    # s72-TfIdfVectorizer-9-3: ORT's kernel adds 1 to max_skip_count, which wraps negative at
    # int64's maximum, so it counts nothing; the EP counted every window. Declined, ORT answers.
    model = tf_idf_model([2, 6], mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=2**63 - 1,
                         ngram_counts=[0, 3], pool_int64s=[1, 2, 3, 1, 2, 2, 3], ngram_indexes=[0, 1, 2, 3, 4])
    assert_declined(model, capfd, monkeypatch, "TfIdfVectorizer", "max_skip_count at int64's maximum")
    feeds = {"x": np.array([[2, 1, 0, 2, 3, 1], [1, 2, 3, 1, 2, 2]], np.int64)}
    assert not Run(model, feeds).outputs[0].any()  # ORT's own answer: nothing counted


def test_lrn_with_a_window_of_billions_of_channels_is_declined(capfd, monkeypatch):
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn", size=2**31 - 1)
    model = make_model([node], [tensor("x", shape=[1, 1, 1, 1])], [tensor("y")], opset=13)
    assert_declined(model, capfd, monkeypatch, "LRN", "windows past 65536 channels")


def test_dft_of_an_empty_batch_with_a_huge_length_is_empty_at_once():
    # With no samples the dense path built 2^31 twiddles on the host for an empty output.
    node = helper.make_node("DFT", ["x", "n"], ["y"], name="dft", axis=1)
    model = make_model([node], [tensor("x", shape=[0, 0, 1])], [tensor("y")],
                       [numpy_helper.from_array(np.array(2**31 - 1, np.int64), "n")], opset=17)
    assert_on_mlx_like_cpu(model, {"x": np.zeros((0, 0, 1), np.float32)})


def test_affine_grid_of_a_run_time_size_past_32_bits_fails_naming_the_node():
    # A size known only at run time escapes ORT's shape checks; the host built one coordinate
    # per point of each axis (4 TB here) before MLX could refuse the shape.
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid")
    model = make_model([node], [tensor("theta", shape=[1, 2, 3]), tensor("size", TensorProto.INT64, [4])],
                       [tensor("grid")], opset=20)
    feeds = {"theta": np.eye(2, 3, dtype=np.float32)[None], "size": np.array([1, 1, 2**40, 1], np.int64)}
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match=r"node 'grid' \(AffineGrid\).*past MLX's 32-bit dimensions"):
        session.run(None, feeds)


def ml_model(op, inputs, outputs, **attributes):
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _ in outputs], domain=ML, name="ml", **attributes)
    return make_model([node], [tensor(n, t, s) for n, t, s in inputs], [tensor(n, t) for n, t in outputs],
                      opset=17, domains=[(ML, 3)])


def test_a_forest_with_a_table_past_the_limit_is_declined(capfd, monkeypatch):
    # One leaf, 2^28 + 1 targets: the per-node sums table would hold 2^28 + 1 entries.
    targets = 2**28 + 1
    model = ml_model("TreeEnsembleRegressor", [("x", TensorProto.FLOAT, [1, 1])], [("y", TensorProto.FLOAT)],
                     n_targets=targets, nodes_treeids=[0], nodes_nodeids=[0], nodes_featureids=[0],
                     nodes_values=[0.0], nodes_modes=["LEAF"], nodes_truenodeids=[0], nodes_falsenodeids=[0],
                     target_treeids=[0], target_nodeids=[0], target_ids=[targets - 1], target_weights=[1.0])
    assert_declined(model, capfd, monkeypatch, "TreeEnsembleRegressor", "table entries, past the EP's 268435456")


def test_an_svm_with_one_vs_one_tables_past_the_limit_is_declined(capfd, monkeypatch):
    # 820 classes of one support vector each: 335,790 class pairs by 820 classes.
    labels = 820
    pairs = labels * (labels - 1) // 2
    model = ml_model("SVMClassifier", [("x", TensorProto.FLOAT, [1, 1])],
                     [("label", TensorProto.INT64), ("scores", TensorProto.FLOAT)],
                     classlabels_ints=list(range(labels)), vectors_per_class=[1] * labels,
                     support_vectors=[0.0] * labels, coefficients=[1.0] * ((labels - 1) * labels),
                     rho=[0.0] * pairs, kernel_type="LINEAR", kernel_params=[0.1, 0.0, 1.0])
    assert_declined(model, capfd, monkeypatch, "SVMClassifier", "one-vs-one tables of")
