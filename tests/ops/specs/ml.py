"""ai.onnx.ml's numeric ops (op-specs/src/ml/). Their attributes are a model (coefficients, a
forest, category and key lists, per-feature offsets) that a generic one-node case cannot make
up, and ORT's kernels refuse most made-up ones at session start: each op is tested in
tests/ep/test_ml.py against ORT's CPU EP, attribute by attribute and with scikit-learn models
exported by skl2onnx."""

from __future__ import annotations

from op_specs import SPECS, OpSpec

_WHY = ("the attributes are a model (coefficients, forests, categories, per-feature values) a generic case cannot "
        "invent; each op is tested against ORT's CPU EP per rule and through scikit-learn models")
for _op in ["Scaler", "Normalizer", "Binarizer", "Imputer", "ArrayFeatureExtractor", "FeatureVectorizer", "OneHotEncoder",
            "LabelEncoder", "LinearRegressor", "LinearClassifier", "SVMRegressor", "SVMClassifier", "TreeEnsemble",
            "TreeEnsembleRegressor", "TreeEnsembleClassifier"]:
    SPECS[("ai.onnx.ml", _op)] = OpSpec(ref=None, elsewhere=("tests/ep/test_ml.py", _WHY))
