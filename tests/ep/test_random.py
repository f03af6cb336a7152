"""Random generators through the EP (op-specs/src/random.rs). MLX cannot repeat ORT's random
stream, so these test what ORT promises instead: the distribution (moments, ranges,
frequencies), the shape and type, and the seed contract (a seeded node gives the same sequence
of draws in every session; an unseeded one differs between sessions)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import MLX, Run, make_model, tensor

F, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def one_node(op, inputs=(), output_type=F, **attributes):
    node = helper.make_node(op, [name for name, _, _ in inputs], ["y"], **attributes)
    return make_model([node], [tensor(n, t, s) for n, t, s in inputs], [tensor("y", output_type)], opset=17)


def on_mlx(model, feeds=None):
    run = Run(model, feeds or {})
    run.assert_all_on_mlx()
    return run


@pytest.mark.parametrize("elem", [F, F16])
def test_random_normal_has_its_mean_and_scale(elem):
    y = on_mlx(one_node("RandomNormal", output_type=elem, shape=[200, 500], mean=2.0, scale=3.0, dtype=elem)).outputs[0]
    assert y.shape == (200, 500) and y.dtype == (np.float32 if elem == F else np.float16)
    y = y.astype(np.float64)
    assert abs(y.mean() - 2.0) < 0.05 and abs(y.std() - 3.0) < 0.05
    # A normal's fourth standardised moment is 3.
    assert abs((((y - y.mean()) / y.std()) ** 4).mean() - 3.0) < 0.1


@pytest.mark.parametrize("elem", [F, F16])
def test_random_uniform_stays_in_its_range(elem):
    y = on_mlx(one_node("RandomUniform", output_type=elem, shape=[100000], low=-2.0, high=5.0, dtype=elem)).outputs[0]
    assert y.min() >= -2.0 and y.max() <= 5.0
    assert abs(y.astype(np.float64).mean() - 1.5) < 0.05
    counts, _ = np.histogram(y, bins=7, range=(-2.0, 5.0))
    assert counts.min() > 0.9 * counts.mean()


def test_like_forms_take_the_inputs_shape():
    x = np.zeros((3, 40, 50), np.int64)
    normal = on_mlx(one_node("RandomNormalLike", [("x", TensorProto.INT64, [3, 40, 50])], dtype=F), {"x": x}).outputs[0]
    uniform = on_mlx(one_node("RandomUniformLike", [("x", TensorProto.INT64, [3, 40, 50])], dtype=F, low=1.0, high=2.0),
                     {"x": x}).outputs[0]
    assert normal.shape == uniform.shape == x.shape and normal.dtype == np.float32
    assert 1.0 <= uniform.min() and uniform.max() <= 2.0 and abs(normal.mean()) < 0.05


def runs(model, count=3):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    return [session.run(None, {})[0] for _ in range(count)]


def test_a_seed_repeats_the_sequence_of_draws_in_every_session():
    seeded = one_node("RandomNormal", shape=[64], seed=7.0)
    first, second = runs(seeded), runs(seeded)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1]), "each run draws anew"
    other = runs(one_node("RandomNormal", shape=[64], seed=8.0), 1)[0]
    assert not np.array_equal(first[0], other)


def test_without_a_seed_each_session_draws_differently():
    model = one_node("RandomUniform", shape=[64])
    assert not np.array_equal(runs(model, 1)[0], runs(model, 1)[0])


@pytest.mark.parametrize("output", [TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL])
def test_bernoulli_draws_each_element_with_its_probability(output):
    p = np.tile(np.array([0.0, 0.3, 0.75, 1.0], np.float32), (20000, 1))
    y = on_mlx(one_node("Bernoulli", [("p", F, [20000, 4])], output_type=output, dtype=output), {"p": p}).outputs[0]
    assert y.shape == p.shape
    means = y.astype(np.float64).mean(0)
    np.testing.assert_allclose(means, [0.0, 0.3, 0.75, 1.0], atol=0.015)


@pytest.mark.parametrize("output", [TensorProto.INT32, TensorProto.INT64])
def test_multinomial_draws_classes_with_their_probabilities(output):
    probabilities = np.array([[0.2, 0.5, 0.3], [0.7, 0.1, 0.2]], np.float32)
    model = one_node("Multinomial", [("x", F, [2, 3])], output_type=output, dtype=output, sample_size=20000, seed=3.0)
    y = on_mlx(model, {"x": np.log(probabilities)}).outputs[0]
    assert y.shape == (2, 20000) and y.dtype == (np.int32 if output == TensorProto.INT32 else np.int64)
    for row, want in zip(y, probabilities):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / row.size, want, atol=0.015)
