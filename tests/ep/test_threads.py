"""MLX state is thread-affine: a session used from a second thread fails cleanly; one session
per thread runs in parallel."""

import threading

import numpy as np
import onnxruntime as ort
from onnx import helper

from conftest import MLX, make_model, tensor

MODEL = make_model(
    [helper.make_node("Mul", ["x", "x"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
    [tensor("x", shape=[64])],
    [tensor("y")],
)


def session():
    return ort.InferenceSession(MODEL, providers=[MLX, "CPUExecutionProvider"])


def test_run_from_another_thread_is_a_clean_error():
    shared = session()
    shared.disable_fallback()  # else ORT's Python binding retries the run on CPU, hiding the error
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    shared.run(None, {"x": x})  # this thread owns the MLX state now
    caught = []

    def other():
        try:
            shared.run(None, {"x": x})
        except Exception as e:  # ORT raises its own exception types
            caught.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert caught and "thread-affine" in caught[0], caught
    # The owner keeps working.
    np.testing.assert_allclose(shared.run(None, {"x": x})[0], np.tanh(x * x), rtol=1e-6)


def test_one_session_per_thread_runs_in_parallel():
    results, errors = {}, []

    def worker(i):
        try:
            s = session()
            x = np.full(64, i / 10, np.float32)
            for _ in range(20):
                results[i] = s.run(None, {"x": x})[0]
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, y in results.items():
        np.testing.assert_allclose(y, np.tanh(np.full(64, i / 10, np.float32) ** 2), rtol=1e-6)
