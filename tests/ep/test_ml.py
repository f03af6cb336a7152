"""ai.onnx.ml's numeric ops through the EP (op-specs/src/ml/): each model runs with every node
on MLX and matches ORT's CPU EP; the string forms and malformed attributes stay on ORT's CPU EP
or fail the run as ORT's kernel does."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor

ML = "ai.onnx.ml"
F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
NP = {F: np.float32, I64: np.int64, I32: np.int32}


def ml_model(op, inputs, outputs, ml_opset=3, **attributes):
    """One ai.onnx.ml node over `inputs` [(name, type, shape)] giving `outputs` [(name, type)]."""
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _ in outputs], domain=ML, name="ml", **attributes)
    return make_model([node], [tensor(n, t, s) for n, t, s in inputs], [tensor(n, t) for n, t in outputs],
                      opset=17, domains=[(ML, ml_opset)])


def assert_on_mlx_matches_cpu(model, feeds, rtol=1e-6, atol=1e-6):
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def features(elem=F, rows=4, columns=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, columns)) * 4
    return (x if elem == F else np.round(x)).astype(NP[elem])


@pytest.mark.parametrize("elem", [F, I64, I32])
@pytest.mark.parametrize("offset, scale", [([0.5], [2.0]), ([0.5, -1.0, 2.0], [1.0, 0.25, -3.0])])
def test_scaler(elem, offset, scale):
    model = ml_model("Scaler", [("x", elem, [None, 3])], [("y", F)], offset=offset, scale=scale)
    assert_on_mlx_matches_cpu(model, {"x": features(elem)})


def assert_declined_and_refused_as_on_the_cpu_ep(model, match):
    """The EP declines the node, so ORT's CPU kernel refuses it as it does without the EP."""
    with pytest.raises(Exception, match=match):
        cpu_outputs(model, {})
    with pytest.raises(Exception, match=match):
        ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])


def test_scaler_with_offset_and_scale_of_different_lengths_is_left_to_orts_refusal():
    model = ml_model("Scaler", [("x", F, [None, 3])], [("y", F)], offset=[1.0, 2.0, 3.0], scale=[0.5])
    assert_declined_and_refused_as_on_the_cpu_ep(model, "Scale size")


@pytest.mark.parametrize("elem", [F, I64, I32])
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("shape", [[4, 3], [3]])
def test_normalizer(elem, norm, shape):
    x = features(elem).reshape(-1)[: int(np.prod(shape))].reshape(shape)
    if len(shape) == 2:
        x[1] = 0  # a row whose divisor is 0
        x[2] = -np.abs(x[2])  # a row of negatives: MAX divides by a negative maximum
    model = ml_model("Normalizer", [("x", elem, shape)], [("y", F)], norm=norm)
    assert_on_mlx_matches_cpu(model, {"x": x})


def test_binarizer():
    x = features()
    x[0, 0] = 0.5
    model = ml_model("Binarizer", [("x", F, [4, 3])], [("y", F)], threshold=0.5)
    assert_on_mlx_matches_cpu(model, {"x": x})


def assert_run_fails_as_on_the_cpu_ep(model, feeds, match):
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    with pytest.raises(Exception, match=match):
        session.run(None, feeds)


def test_binarizer_fails_on_nan_as_orts_kernel_does():
    x = features()
    x[1, 1] = np.nan
    model = ml_model("Binarizer", [("x", F, [4, 3])], [("y", F)], threshold=0.5)
    assert_run_fails_as_on_the_cpu_ep(model, {"x": x}, "NaN")


@pytest.mark.parametrize("replaced", [np.nan, 0.0, 2.0])
@pytest.mark.parametrize("imputed", [[9.0], [7.0, 8.0, 9.0]])
def test_imputer_floats(replaced, imputed):
    x = features()
    x[0, 0], x[1, 2], x[2, 1], x[3, 0] = np.nan, 0.0, 2.0, np.nan
    model = ml_model("Imputer", [("x", F, [4, 3])], [("y", F)], imputed_value_floats=imputed, replaced_value_float=replaced)
    assert_on_mlx_matches_cpu(model, {"x": x})


def test_imputer_integers():
    x = features(I64)
    x[0, 0] = x[2, 2] = -1
    model = ml_model("Imputer", [("x", I64, [4, 3])], [("y", I64)], imputed_value_int64s=[5, 6, 7], replaced_value_int64=-1)
    assert_on_mlx_matches_cpu(model, {"x": x})


@pytest.mark.parametrize("elem", [F, I64, I32])
@pytest.mark.parametrize("shape", [[4, 3], [2, 2, 3], [3]])
def test_array_feature_extractor(elem, shape):
    x = features(elem, rows=4, columns=3).reshape(-1)[: int(np.prod(shape))].reshape(shape)
    model = ml_model("ArrayFeatureExtractor", [("x", elem, shape), ("i", I64, [None])], [("z", elem)])
    assert_on_mlx_matches_cpu(model, {"x": x, "i": np.array([2, 0, 2], np.int64)})


def test_array_feature_extractor_out_of_range_fails_the_run_as_orts_kernel_does():
    model = ml_model("ArrayFeatureExtractor", [("x", F, [4, 3]), ("i", I64, [None])], [("z", F)])
    assert_run_fails_as_on_the_cpu_ep(model, {"x": features(), "i": np.array([3], np.int64)}, "out of range")


def test_feature_vectorizer_cuts_and_pads_each_input_to_its_width():
    for elem in [F, I64, I32]:
        model = ml_model("FeatureVectorizer", [("a", elem, [4, 3]), ("b", elem, [4, 2]), ("c", elem, [4, 1])], [("y", F)],
                         inputdimensions=[2, 2, 3])
        feeds = {"a": features(elem), "b": features(elem, columns=2, seed=1), "c": features(elem, columns=1, seed=2)}
        assert_on_mlx_matches_cpu(model, feeds)


@pytest.mark.parametrize("elem", [F, I64])
@pytest.mark.parametrize("shape", [[5], [5, 1], [2, 3]])
def test_one_hot_encoder(elem, shape):
    x = np.array([3, 1, 4, 1, 5, 9][: int(np.prod(shape))], NP[elem]).reshape(shape)
    model = ml_model("OneHotEncoder", [("x", elem, shape)], [("y", F)], cats_int64s=[1, 3, 4, 5, 9, 2], zeros=1)
    assert_on_mlx_matches_cpu(model, {"x": x})


def test_one_hot_encoder_with_zeros_0_fails_on_an_unknown_category_as_orts_kernel_does():
    model = ml_model("OneHotEncoder", [("x", I64, [3])], [("y", F)], cats_int64s=[1, 2], zeros=0)
    assert_on_mlx_matches_cpu(model, {"x": np.array([1, 2, 1], np.int64)})
    assert_run_fails_as_on_the_cpu_ep(model, {"x": np.array([1, 7, 1], np.int64)}, "cats_int64s")


@pytest.mark.parametrize("keys, values, x", [
    ("keys_int64s", "values_floats", np.array([[1, 2], [5, 7]], np.int64)),
    ("keys_int64s", "values_int64s", np.array([1, 9, 3, 7], np.int64)),
    ("keys_floats", "values_int64s", np.array([1.5, np.nan, 2.0, 0.25], np.float32)),
    ("keys_floats", "values_floats", np.array([1.5, np.nan, 2.0, -0.0], np.float32)),
])
@pytest.mark.parametrize("ml_opset", [2, 4])
def test_label_encoder_numeric(keys, values, x, ml_opset):
    key_values = [1, 3, 7] if keys == "keys_int64s" else [1.5, np.nan, 0.25]
    value_values = [10, 30, 70] if values == "values_int64s" else [0.5, -3.0, 7.25]
    out = I64 if values == "values_int64s" else F
    model = ml_model("LabelEncoder", [("x", I64 if keys == "keys_int64s" else F, list(x.shape))], [("y", out)],
                     ml_opset=ml_opset, **{keys: key_values, values: value_values})
    assert_on_mlx_matches_cpu(model, {"x": x})


def test_label_encoder_tensors_and_default():
    keys = helper.make_tensor("k", I64, [3], [4, 5, 6])
    values = helper.make_tensor("v", F, [3], [0.5, 1.5, 2.5])
    default = helper.make_tensor("d", F, [1], [42.0])
    model = ml_model("LabelEncoder", [("x", I64, [5])], [("y", F)], ml_opset=4, keys_tensor=keys, values_tensor=values,
                     default_tensor=default)
    assert_on_mlx_matches_cpu(model, {"x": np.array([4, 6, 9, 5, -1], np.int64)})


def test_per_feature_lists_follow_orts_channel_rule_on_rank_3():
    """ORT picks a per-feature value by `flat index % dims[1]`, not by the last axis's position."""
    x = features(rows=2, columns=12).reshape(2, 3, 4)
    model = ml_model("Scaler", [("x", F, [2, 3, 4])], [("y", F)], offset=[0.5, -1.0, 2.0], scale=[1.0, 0.25, -3.0])
    assert_on_mlx_matches_cpu(model, {"x": x})
    model = ml_model("Imputer", [("x", F, [2, 3, 4])], [("y", F)], imputed_value_floats=[7.0, 8.0, 9.0],
                     replaced_value_float=0.0)
    assert_on_mlx_matches_cpu(model, {"x": np.where(x > 1, 0.0, x).astype(np.float32)})


def test_imputer_with_a_list_of_another_length_takes_its_first_value_as_orts_kernel_does():
    x = features()
    x[0, 0] = x[3, 2] = np.nan
    model = ml_model("Imputer", [("x", F, [4, 3])], [("y", F)], imputed_value_floats=[7.0, 8.0], replaced_value_float=np.nan)
    assert_on_mlx_matches_cpu(model, {"x": x})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_edges(norm):
    """NaN (skipped by MAX), tiny values whose squares underflow, and int32 squares that wrap."""
    x = np.array([[np.nan, 2.0, -1.0], [1e-30, 0.0, 0.0], [-0.0, 3.0, 4.0]], np.float32)
    assert_on_mlx_matches_cpu(ml_model("Normalizer", [("x", F, [3, 3])], [("y", F)], norm=norm), {"x": x})
    big = np.array([[70000, 3, -5], [-2**31, 1, 2]], np.int32)
    assert_on_mlx_matches_cpu(ml_model("Normalizer", [("x", I32, [2, 3])], [("y", F)], norm=norm), {"x": big})


def test_one_hot_encoder_duplicates_truncation_and_non_numbers():
    x = np.array([1.9, -1.5, 2.0, np.nan, np.inf, 1e30, 3.0], np.float32)
    model = ml_model("OneHotEncoder", [("x", F, [7])], [("y", F)], cats_int64s=[1, 2, -1, 1, 3], zeros=1)
    assert_on_mlx_matches_cpu(model, {"x": x})


def test_feature_vectorizer_flattens_rows_and_takes_a_1d_input_as_one_row():
    model = ml_model("FeatureVectorizer", [("a", F, [1, 2, 3]), ("b", F, [2])], [("y", F)], inputdimensions=[4, 3])
    assert_on_mlx_matches_cpu(model, {"a": features(rows=1, columns=6).reshape(1, 2, 3), "b": np.array([5, 6], np.float32)})


def test_feature_vectorizer_refuses_inputs_of_different_rows_as_orts_kernel_does():
    model = ml_model("FeatureVectorizer", [("a", F, [2, 3]), ("b", F, [3, 1])], [("y", F)], inputdimensions=[3, 1])
    assert_run_fails_as_on_the_cpu_ep(model, {"a": features(rows=2), "b": features(rows=3, columns=1)}, "rows")


def test_array_feature_extractor_refuses_empty_indices_as_orts_kernel_does():
    model = ml_model("ArrayFeatureExtractor", [("x", F, [4, 3]), ("i", I64, [None])], [("z", F)])
    assert_run_fails_as_on_the_cpu_ep(model, {"x": features(), "i": np.zeros([0], np.int64)}, "indices")


@pytest.mark.parametrize("ml_opset", [2, 4])
def test_label_encoder_takes_the_first_of_duplicate_keys(ml_opset):
    model = ml_model("LabelEncoder", [("x", I64, [3])], [("y", I64)], ml_opset=ml_opset, keys_int64s=[1, 2, 1],
                     values_int64s=[10, 20, 30])
    assert_on_mlx_matches_cpu(model, {"x": np.array([1, 2, 3], np.int64)})


TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


@pytest.mark.parametrize("post_transform", TRANSFORMS)
@pytest.mark.parametrize("targets, intercepts", [(1, [0.5]), (3, [0.5, -1.0, 0.25]), (3, [1.0]), (2, None)])
@pytest.mark.parametrize("shape", [[5, 4], [4]])
def test_linear_regressor(post_transform, targets, intercepts, shape):
    rng = np.random.default_rng(targets)
    coefficients = (rng.standard_normal(targets * 4) * 0.3).tolist()
    extra = {} if intercepts is None else {"intercepts": intercepts}
    model = ml_model("LinearRegressor", [("x", F, shape)], [("y", F)], coefficients=coefficients, targets=targets,
                     post_transform=post_transform, **extra)
    x = features(rows=5, columns=4).reshape(-1)[: int(np.prod(shape))].reshape(shape)
    if post_transform == "PROBIT":
        x = (np.abs(x) * 0.02).astype(np.float32)  # scores within (0, 1), where probit is defined
    assert_on_mlx_matches_cpu(model, {"x": x}, rtol=1e-5, atol=1e-6)


def linear_classifier(classes, labels, post_transform, elem=F, shape=(6, 4)):
    rng = np.random.default_rng(classes)
    attributes = dict(coefficients=(rng.standard_normal(classes * 4) * 0.5).tolist(),
                      intercepts=(rng.standard_normal(classes) * 0.1).tolist(), post_transform=post_transform)
    if labels:
        attributes["classlabels_ints"] = labels
    return ml_model("LinearClassifier", [("x", elem, list(shape))], [("label", I64), ("scores", F)], ml_opset=1,
                    **attributes)


@pytest.mark.parametrize("post_transform", TRANSFORMS)
@pytest.mark.parametrize("classes, labels", [(3, [5, 7, 9]), (2, [0, 1]), (1, [4, 8]), (1, None), (4, [1, 2, 3, 4, 99])])
def test_linear_classifier(post_transform, classes, labels):
    if classes == 1 and labels and post_transform == "PROBIT":
        pytest.skip("declined: ORT leaves half the output unwritten (test_linear_classifier_declines_...)")
    model = linear_classifier(classes, labels, post_transform)
    x = features(rows=6, columns=4)
    x[2] = 0  # scores equal to the intercepts: ties when those are equal, 0 for the binary rule
    if post_transform == "PROBIT":
        x = (np.abs(x) * 0.02).astype(np.float32)
    assert_on_mlx_matches_cpu(model, {"x": x}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("elem", [I64, I32])
def test_linear_classifier_integer_features_and_one_row(elem):
    assert_on_mlx_matches_cpu(linear_classifier(3, [1, 2, 3], "SOFTMAX", elem), {"x": features(elem, rows=6, columns=4)})
    assert_on_mlx_matches_cpu(linear_classifier(3, [1, 2, 3], "NONE", elem, shape=[4]),
                              {"x": features(elem, rows=1, columns=4).reshape(4)})


def test_linear_classifier_labels_ties_and_nan_as_orts_scan():
    """Equal scores go to the first; a NaN score after the first never wins; a NaN first wins."""
    model = ml_model("LinearClassifier", [("x", F, [4, 2])], [("label", I64), ("scores", F)], ml_opset=1,
                     coefficients=[1.0, 0.0, 1.0, 0.0, 0.0, 1.0], intercepts=[0.0, 0.0, 0.0], classlabels_ints=[10, 20, 30])
    x = np.array([[1.0, 1.0], [np.nan, 5.0], [1.0, np.nan], [2.0, 3.0]], np.float32)
    assert_on_mlx_matches_cpu(model, {"x": x})


def test_linear_classifier_declines_probit_on_a_binary_model_and_strings():
    declined = [linear_classifier(1, [4, 8], "PROBIT"),
                ml_model("LinearClassifier", [("x", F, [6, 4])], [("label", TensorProto.STRING), ("scores", F)], ml_opset=1,
                         coefficients=[0.5] * 8, intercepts=[0.0, 1.0], classlabels_strings=["a", "b"])]
    for model in declined:
        run = Run(model, {"x": features(rows=6, columns=4)})
        assert run.providers_of_kernels() == {"CPUExecutionProvider"}


KERNELS = [("LINEAR", [0.0, 0.0, 0.0]), ("POLY", [0.3, 1.0, 2.0]), ("POLY", [0.2, 0.5, 3.0]), ("POLY", [0.1, 1.0, 4.0]),
           ("RBF", [0.25, 0.0, 0.0]), ("SIGMOID", [0.05, 0.1, 0.0])]


@pytest.mark.parametrize("kernel, params", KERNELS)
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, params, one_class):
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((5, 4)).astype(np.float32)
    model = ml_model("SVMRegressor", [("x", F, [None, 4])], [("y", F)], ml_opset=1, kernel_type=kernel, kernel_params=params,
                     support_vectors=vectors.reshape(-1).tolist(), n_supports=5, coefficients=rng.standard_normal(5).tolist(),
                     rho=[0.3], one_class=one_class, post_transform="LOGISTIC")
    assert_on_mlx_matches_cpu(model, {"x": features(rows=6, columns=4)}, rtol=1e-5, atol=1e-5)


def test_svm_regressor_linear_without_support_vectors():
    model = ml_model("SVMRegressor", [("x", F, [4])], [("y", F)], ml_opset=1, kernel_params=[0.0, 0.0, 0.0], coefficients=[0.5, -1.0, 2.0, 0.25],
                     rho=[-0.5], n_supports=0)
    assert_on_mlx_matches_cpu(model, {"x": np.array([1.0, 2.0, 3.0, 4.0], np.float32)})


def svm_classifier(labels, post_transform, kernel="RBF", params=(0.2, 0.0, 0.0), per_class=(2, 3, 1), elem=F):
    rng = np.random.default_rng(len(labels))
    per_class = list(per_class[: len(labels)])
    total = sum(per_class)
    return ml_model("SVMClassifier", [("x", elem, [None, 4])], [("label", I64), ("scores", F)], ml_opset=1,
                    classlabels_ints=labels, vectors_per_class=per_class, kernel_type=kernel, kernel_params=list(params),
                    support_vectors=rng.standard_normal(total * 4).tolist(),
                    coefficients=rng.standard_normal((len(labels) - 1) * total).tolist(),
                    rho=(rng.standard_normal(len(labels) * (len(labels) - 1) // 2) * 0.1).tolist(), post_transform=post_transform)


@pytest.mark.parametrize("post_transform", TRANSFORMS)
@pytest.mark.parametrize("labels", [[3, 5, 8], [0, 1], [1, 2, 3, 4]])
def test_svm_classifier(post_transform, labels):
    if len(labels) == 2 and post_transform == "PROBIT":
        pytest.skip("declined: ORT leaves half the output unwritten")
    per_class = (2, 3, 1, 2)
    model = svm_classifier(labels, post_transform, per_class=per_class)
    x = features(rows=8, columns=4)
    if post_transform == "PROBIT":
        x = (x * 0.01).astype(np.float32)
    assert_on_mlx_matches_cpu(model, {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, params", KERNELS)
@pytest.mark.parametrize("elem", [F, I64])
def test_svm_classifier_kernels(kernel, params, elem):
    assert_on_mlx_matches_cpu(svm_classifier([4, 5, 6], "NONE", kernel, params, elem=elem), {"x": features(elem, rows=8, columns=4)},
                              rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("labels, coefficients", [([6, 7], [0.5, -1.0, 2.0, 0.25, 1.0, 0.5, -0.5, 0.0]),
                                                  ([6, 7], [0.1, 0.2, 0.0, 0.05, 0.2, 0.1, 0.1, 0.1]),
                                                  ([1, 2, 3], [0.5, -1.0, 2.0, 0.25] * 3)])
def test_svm_classifier_linear_without_support_vectors(post_transform, labels, coefficients):
    """ORT's two-class linear rule: all weights ≥ 0 and a best score ≥ 0.5, or mixed weights and
    one above 0, pick the second class whatever the argmax says."""
    model = ml_model("SVMClassifier", [("x", F, [None, 4])], [("label", I64), ("scores", F)], ml_opset=1,
                     classlabels_ints=labels, kernel_params=[0.0, 0.0, 0.0], coefficients=coefficients, rho=[-0.2],
                     post_transform=post_transform)
    x = np.concatenate([features(rows=6, columns=4) * 0.3, np.zeros((1, 4)), np.full((1, 4), 0.5)]).astype(np.float32)
    assert_on_mlx_matches_cpu(model, {"x": x}, rtol=1e-5, atol=1e-6)


def test_svm_classifier_with_probabilities_stays_on_the_cpu_ep():
    model = onnx_with(svm_classifier([0, 1, 2], "NONE"), prob_a=[-1.0, -2.0, -1.5], prob_b=[0.1, 0.0, -0.2])
    run = Run(model, {"x": features(rows=3, columns=4)})
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}


def onnx_with(model, **attributes):
    """`model` (bytes) with `attributes` added to its one node."""
    import onnx
    proto = onnx.load_from_string(model)
    proto.graph.node[0].attribute.extend(helper.make_attribute(k, v) for k, v in attributes.items())
    return proto.SerializeToString()


# --------------------------------------------------------------------------------------------
# Tree ensembles, scikit-learn's through skl2onnx and hand-built ones for ORT's rules.

def sklearn_data(rows=300, columns=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, columns)).astype(np.float32)
    return x, x[:, 0] + 0.5 * x[:, 1] * x[:, 2] - x[:, 3]


def exported(estimator, x, **options):
    import warnings

    from skl2onnx import to_onnx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(estimator, x[:1], target_opset={"": 17, ML: 3}, options=options or None).SerializeToString()


def sklearn_models():
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier,
                                  RandomForestRegressor)
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC, SVR
    from sklearn.tree import DecisionTreeClassifier
    x, signal = sklearn_data()
    binary, three = (signal > 0).astype(np.int64), np.digitize(signal, [-0.7, 0.7]).astype(np.int64)
    two_targets = np.stack([signal, x[:, 4] - x[:, 5]], 1)
    no_zipmap = {"zipmap": False}
    return x, {
        "scaler+random_forest_binary": (make_pipeline(StandardScaler(), RandomForestClassifier(8, max_depth=6, random_state=0)).fit(x, binary), no_zipmap),
        "scaler+random_forest_3_classes": (make_pipeline(StandardScaler(), RandomForestClassifier(8, max_depth=6, random_state=0)).fit(x, three), no_zipmap),
        "gradient_boosting_binary": (GradientBoostingClassifier(n_estimators=10, random_state=0).fit(x, binary), no_zipmap),
        "gradient_boosting_3_classes": (GradientBoostingClassifier(n_estimators=10, random_state=0).fit(x, three), no_zipmap),
        "decision_tree_3_classes": (DecisionTreeClassifier(max_depth=8, random_state=0).fit(x, three), no_zipmap),
        "gradient_boosting_regressor": (GradientBoostingRegressor(n_estimators=20, random_state=0).fit(x, signal), {}),
        "random_forest_regressor_2_targets": (RandomForestRegressor(6, max_depth=7, random_state=0).fit(x, two_targets), {}),
        "scaler+logistic_regression": (make_pipeline(StandardScaler(), LogisticRegression()).fit(x, three), no_zipmap),
        "scaler+logistic_regression_binary": (make_pipeline(StandardScaler(), LogisticRegression()).fit(x, binary), no_zipmap),
        "scaler+linear_regression": (make_pipeline(StandardScaler(), LinearRegression()).fit(x, signal), {}),
        "svc_rbf_3_classes": (SVC(kernel="rbf").fit(x, three), no_zipmap),
        "svr_poly": (SVR(kernel="poly", degree=3).fit(x, signal), {}),
    }


SKLEARN = None


def sklearn_model(name):
    global SKLEARN
    if SKLEARN is None:
        x, models = sklearn_models()
        SKLEARN = x, {key: exported(estimator, x, **options) for key, (estimator, options) in models.items()}
    return SKLEARN[0], SKLEARN[1][name]


@pytest.mark.parametrize("name", ["scaler+random_forest_binary", "scaler+random_forest_3_classes", "gradient_boosting_binary",
                                  "gradient_boosting_3_classes", "decision_tree_3_classes", "gradient_boosting_regressor",
                                  "random_forest_regressor_2_targets", "scaler+logistic_regression",
                                  "scaler+logistic_regression_binary", "scaler+linear_regression", "svc_rbf_3_classes",
                                  "svr_poly"])
def test_sklearn_models_run_every_node_on_mlx(name):
    x, model = sklearn_model(name)
    feeds = {"X": x}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    for got, want in zip(run.outputs, cpu_outputs(model, feeds)):
        assert got.dtype == want.dtype and got.shape == want.shape
        if got.dtype == np.int64:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def forest(op, modes, thresholds, tracks=None, ml_opset=3, elem=F, **attributes):
    """One tree over feature 0: root (node 0) -> true node 1, false node 2, both leaves; the
    node list comes from `modes` / `thresholds` (3 entries)."""
    nodes = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_modes=modes,
                 nodes_values=thresholds, nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0])
    if tracks is not None:
        nodes["nodes_missing_value_tracks_true"] = tracks
    outputs = [("y", F)] if op == "TreeEnsembleRegressor" else [("label", I64), ("scores", F)]
    return ml_model(op, [("x", elem, [None, 1])], outputs, ml_opset=ml_opset, **nodes, **attributes)


EDGES = np.array([[0.4], [0.5], [0.6], [np.nan], [np.inf], [-np.inf]], np.float32)


@pytest.mark.parametrize("mode", ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"])
@pytest.mark.parametrize("tracks", [None, [1, 0, 0], [0, 0, 0]])
def test_tree_modes_and_nan_routing(mode, tracks):
    model = forest("TreeEnsembleRegressor", [mode, "LEAF", "LEAF"], [0.5, 0.0, 0.0], tracks, n_targets=1,
                   target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, 2.0])
    assert_on_mlx_matches_cpu(model, {"x": EDGES})


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post_transform", TRANSFORMS)
@pytest.mark.parametrize("targets", [1, 3])
def test_tree_regressor_aggregates_and_transforms(aggregate, post_transform, targets):
    """Three stumps; leaves vote for some targets only (a target without a vote is 0), one leaf
    has no weight (a single target then takes its nodes_values entry)."""
    trees, nodes = [t for t in range(3) for _ in range(3)], [0, 1, 2] * 3
    weights = dict(target_treeids=[0, 0, 0, 1, 1, 2], target_nodeids=[1, 2, 2, 1, 2, 1],
                   target_ids=[0, 1, 0, 0, 2, 0] if targets == 3 else [0] * 6,
                   target_weights=[0.2, 0.5, -0.1, 0.05, 0.3, 0.1])
    model = ml_model("TreeEnsembleRegressor", [("x", F, [None, 2])], [("y", F)], n_targets=targets,
                     aggregate_function=aggregate, post_transform=post_transform,
                     base_values=[0.1] * targets, nodes_treeids=trees, nodes_nodeids=nodes,
                     nodes_featureids=[0, 0, 0, 1, 0, 0, 0, 0, 0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 3,
                     nodes_values=[0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.25], nodes_truenodeids=[1, 0, 0] * 3,
                     nodes_falsenodeids=[2, 0, 0] * 3, **weights)
    x = features(rows=8, columns=2) * 0.25
    assert_on_mlx_matches_cpu(model, {"x": x.astype(np.float32)}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("ids, weights", [([0, 0], [0.3, 0.8]), ([0, 0], [-0.3, 0.8]), ([1, 1], [0.3, 0.8]),
                                          ([0, 1], [0.7, 0.3]), ([0, 1], [0.2, -0.6])])
@pytest.mark.parametrize("base", [None, [0.2], [0.1, -0.3]])
@pytest.mark.parametrize("elem", [F, I64])
def test_tree_classifier_two_classes_follow_orts_binary_rules(post_transform, ids, weights, base, elem):
    if base == [0.2] and len(set(ids)) == 2:
        pytest.skip("declined: ORT leaves the second score unwritten")
    extra = {} if base is None else {"base_values": base}
    model = forest("TreeEnsembleClassifier", ["BRANCH_LEQ", "LEAF", "LEAF"], [0.5, 0.0, 0.0], elem=elem,
                   classlabels_int64s=[10, 20], class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=ids,
                   class_weights=weights, post_transform=post_transform, **extra)
    x = np.array([[0.0], [1.0], [0.5], [3.0]], NP[elem])
    assert_on_mlx_matches_cpu(model, {"x": x}, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("base", [None, [0.0, 0.0, -5.0]])
def test_tree_classifier_three_classes_label_only_scored_classes(base):
    extra = {} if base is None else {"base_values": base}
    model = forest("TreeEnsembleClassifier", ["BRANCH_LEQ", "LEAF", "LEAF"], [0.5, 0.0, 0.0], classlabels_int64s=[1, 2, 3],
                   class_treeids=[0, 0, 0], class_nodeids=[1, 1, 2], class_ids=[2, 1, 2], class_weights=[-1.0, -1.0, 0.5],
                   post_transform="SOFTMAX", **extra)
    assert_on_mlx_matches_cpu(model, {"x": np.array([[0.0], [1.0]], np.float32)})


def test_tree_declines_what_orts_kernel_builds_by_accident():
    """A tree id in two runs (ORT splits it into two trees) stays on ORT's CPU EP."""
    model = ml_model("TreeEnsembleRegressor", [("x", F, [None, 1])], [("y", F)], n_targets=1,
                     nodes_treeids=[0, 1, 0], nodes_nodeids=[0, 0, 1], nodes_featureids=[0, 0, 0],
                     nodes_modes=["LEAF", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0], nodes_truenodeids=[0, 0, 0],
                     nodes_falsenodeids=[0, 0, 0], target_treeids=[0, 1, 0], target_nodeids=[0, 0, 1], target_ids=[0, 0, 0],
                     target_weights=[1.0, 100.0, 1.0])
    run = Run(model, {"x": np.zeros((2, 1), np.float32)})
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}


def v5_forest(rng, trees=4, depth=3, features=3, targets=2, members=True):
    """A random TreeEnsemble-5 forest: full binary trees of `depth` levels, every mode (MEMBER
    with small and big sets when `members`), some NaN flags; one (target, weight) a leaf."""
    modes, feats, splits, t_ids, t_leaf, f_ids, f_leaf, tracks, sets, roots = [], [], [], [], [], [], [], [], [], []
    leaf_targets, leaf_weights = [], []

    def grow(level):
        if level == depth:
            leaf_targets.append(int(rng.integers(targets)))
            leaf_weights.append(float(np.round(rng.standard_normal(), 3)))
            return len(leaf_weights) - 1, 1
        index = len(modes)
        mode = int(rng.integers(7 if members else 6))
        modes.append(mode)
        feats.append(int(rng.integers(features)))
        splits.append(float(rng.integers(-2, 3)) if mode in (4, 5) else float(np.round(rng.standard_normal(), 2)))
        tracks.append(int(rng.integers(2)))
        if mode == 6:
            sets.append([0.0, 1.0, 2.0] if rng.integers(2) else [-1.0, 1.0, 40.0])
        for ids, leafs in ((t_ids, t_leaf), (f_ids, f_leaf)):
            ids.append(0)
            leafs.append(0)
        child_t, leaf_t = grow(level + 1)
        child_f, leaf_f = grow(level + 1)
        t_ids[index], t_leaf[index], f_ids[index], f_leaf[index] = child_t, leaf_t, child_f, leaf_f
        return index, 0

    for _ in range(trees):
        roots.append(grow(0)[0])
    membership = [v for set_ in sets for v in set_ + [np.nan]]
    attributes = dict(
        tree_roots=roots, nodes_featureids=feats, nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [len(modes)], modes),
        nodes_splits=helper.make_tensor("s", F, [len(splits)], splits), nodes_truenodeids=t_ids, nodes_trueleafs=t_leaf,
        nodes_falsenodeids=f_ids, nodes_falseleafs=f_leaf, nodes_missing_value_tracks_true=tracks, leaf_targetids=leaf_targets,
        leaf_weights=helper.make_tensor("w", F, [len(leaf_weights)], leaf_weights), n_targets=targets)
    if membership:
        attributes["membership_values"] = helper.make_tensor("v", F, [len(membership)], membership)
    return attributes


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("post_transform", [0, 1, 2, 3, 4])
def test_tree_ensemble_5_matches_orts_kernel(seed, aggregate, post_transform):
    """Random forests of every branch mode and membership sets small (equality) and big
    (truncation), over rows with NaN, infinities, set members and their neighbours; ORT's
    post_transform numbering (1 LOGISTIC, 2 SOFTMAX)."""
    rng = np.random.default_rng(seed)
    targets = 1 if seed % 3 == 0 else 3
    attributes = v5_forest(rng, targets=targets)
    model = ml_model("TreeEnsemble", [("x", F, [None, 3])], [("y", F)], ml_opset=5, aggregate_function=aggregate,
                     post_transform=post_transform, **attributes)
    x = np.array([[0.0, 1.0, 2.0], [1.5, -0.999, 40.9], [np.nan, np.inf, -np.inf], [-1.5, 0.5, 30.0], [2.0, -2.0, 1.0],
                  [0.3, -0.7, 1.2]], np.float32)
    if post_transform == 4:
        x = np.abs(np.nan_to_num(x, nan=0.1, posinf=0.9, neginf=0.2)) % 1
    assert_on_mlx_matches_cpu(model, {"x": x.astype(np.float32)}, rtol=1e-5, atol=1e-6)


def test_the_benchmark_forest_runs_on_mlx():
    """`make bench`'s forest (scripts/bench_models.py), small: every node on MLX, as ORT's CPU EP."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from bench_models import forest
    bench = forest(rows=64, trees=4, depth=4)
    assert_on_mlx_matches_cpu(bench.model, bench.feeds, rtol=1e-5, atol=1e-6)


def scalar_input_models():
    """0-d inputs, which ORT's kernels refuse or treat as one value."""
    yield ml_model("Normalizer", [("x", F, [])], [("y", F)], norm="L2")
    yield ml_model("Binarizer", [("x", F, [])], [("y", F)], threshold=0.5)
    yield ml_model("Scaler", [("x", F, [])], [("y", F)], offset=[0.5], scale=[2.0])
    yield ml_model("FeatureVectorizer", [("a", F, []), ("b", F, [2])], [("y", F)], inputdimensions=[1, 2])
    yield ml_model("OneHotEncoder", [("x", I64, [])], [("y", F)], cats_int64s=[1, 2])
    yield ml_model("LinearRegressor", [("x", F, [])], [("y", F)], coefficients=[1.0])
    yield ml_model("SVMRegressor", [("x", F, [])], [("y", F)], ml_opset=1, kernel_params=[0.1, 0.0, 0.0], coefficients=[1.0],
                   rho=[0.0], n_supports=0)


@pytest.mark.parametrize("index", range(7))
def test_scalar_inputs_fail_or_match_never_crash(index):
    """A 0-d input: the EP gives ORT's answer, or fails the run (or declines) where ORT fails."""
    model = list(scalar_input_models())[index]
    import onnx
    proto = onnx.load_from_string(model)
    feeds = {}
    for value in proto.graph.input:
        elem = value.type.tensor_type.elem_type
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = np.ones(dims, NP[elem]) * 0.75 if elem == F else np.ones(dims, NP[elem])
    try:
        want = cpu_outputs(model, feeds)
    except Exception:
        want = None
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    if want is None:
        with pytest.raises(Exception):
            session.run(None, feeds)
    else:
        for got, w in zip(session.run(None, feeds), want):
            np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6)
