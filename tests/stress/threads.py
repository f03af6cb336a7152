"""Sessions under thread load, for a given number of seconds (run as a script, so that a crash is
the caller's finding rather than the caller's death).

    threads.py SECONDS [OWN_THREADS] [INTRUDERS]

- OWN_THREADS threads each create sessions of their own (a mix of models: an elementwise chain
  with dynamic shapes, a softmax, a matmul, a gather that sometimes gets an out-of-range index),
  run them at changing shapes (eager, then compiled and replayed), destroy them and start again;
  every output is compared with ORT's CPU EP computed up front.
- One shared session is owned by the main thread, which keeps running it, while INTRUDERS
  threads run it too: each of their runs must fail with the EP's thread-affinity error, and
  the owner's answers must stay right.

Prints one JSON line: runs, wrong answers, unexpected errors (each kind once, with a count).
Exit status 0 only when nothing went wrong.
"""

from __future__ import annotations

import collections
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402

MLX = "MLXExecutionProvider"
CPU = "CPUExecutionProvider"


def model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "stress", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def value(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


CHAIN = model(
    [helper.make_node("Mul", ["x", "x"], ["m"]), helper.make_node("Tanh", ["m"], ["t"]),
     helper.make_node("Add", ["t", "x"], ["y"])],
    [value("x", shape=["a", "b"])], [value("y")])
SOFTMAX = model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [value("x", shape=["a", "b"])], [value("y")])
WEIGHT = numpy_helper.from_array(np.linspace(-1, 1, 32 * 16, dtype=np.float32).reshape(32, 16), "w")
MATMUL = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [value("x", shape=["a", 32])], [value("y")], [WEIGHT])
GATHER = model([helper.make_node("Gather", ["x", "i"], ["y"], name="pick")],
               [value("x", shape=[8, 4]), value("i", TensorProto.INT64, ["n"])], [value("y")])


def feeds_for(name, rng):
    if name == "matmul":
        return {"x": rng.standard_normal((int(rng.integers(1, 9)), 32)).astype(np.float32)}
    if name == "gather":
        n = int(rng.integers(1, 6))
        index = rng.integers(-8, 8, n)
        if rng.random() < 0.2:
            index[0] = 8  # out of range: the run must fail on both EPs
        return {"x": np.arange(32, dtype=np.float32).reshape(8, 4), "i": index.astype(np.int64)}
    shape = (int(rng.integers(1, 5)), int(rng.integers(1, 33)))
    return {"x": rng.standard_normal(shape).astype(np.float32)}


MODELS = {"chain": CHAIN, "softmax": SOFTMAX, "matmul": MATMUL, "gather": GATHER}


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.runs = 0
        self.expected_errors = 0
        self.problems = collections.Counter()

    def ran(self):
        with self.lock:
            self.runs += 1

    def expected(self):
        with self.lock:
            self.expected_errors += 1

    def problem(self, kind):
        with self.lock:
            self.problems[kind[:300]] += 1


def cpu_answer(cpu, feeds):
    try:
        return cpu.run(None, feeds)[0], None
    except Exception as error:  # ORT's own exception types
        return None, str(error)


def own_sessions(seed, deadline, tally):
    rng = np.random.default_rng(seed)
    cpus = {name: ort.InferenceSession(m, providers=[CPU]) for name, m in MODELS.items()}
    while time.monotonic() < deadline:
        name = list(MODELS)[int(rng.integers(len(MODELS)))]
        try:
            session = ort.InferenceSession(MODELS[name], providers=[MLX, CPU])
            session.disable_fallback()
        except Exception as error:
            tally.problem(f"session creation: {error}")
            continue
        if session.get_providers()[0] != MLX:
            tally.problem(f"providers {session.get_providers()}")
        for _ in range(int(rng.integers(3, 12))):
            feeds = feeds_for(name, rng)
            want, cpu_error = cpu_answer(cpus[name], feeds)
            try:
                got = session.run(None, feeds)[0]
            except Exception as error:
                if cpu_error is not None and "out of range" in str(error):
                    tally.expected()
                else:
                    tally.problem(f"{name}: {error}")
                continue
            tally.ran()
            if cpu_error is not None:
                tally.problem(f"{name}: MLX answered where ORT's CPU EP failed ({cpu_error})")
            elif got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                tally.problem(f"{name}: wrong answer")
        del session


def intruder(shared, feeds, deadline, tally):
    while time.monotonic() < deadline:
        try:
            shared.run(None, feeds)
            tally.problem("a second thread ran a thread-bound session")
        except Exception as error:
            if "thread-affine" in str(error):
                tally.expected()
            else:
                tally.problem(f"intruder: {error}")


def main(seconds: float, own: int, intruders: int) -> int:
    ort.set_default_logger_severity(4)  # every intruder's run logs its (expected) error otherwise
    mlx_ep.register_execution_provider_library()
    tally = Tally()
    deadline = time.monotonic() + seconds
    shared = ort.InferenceSession(CHAIN, providers=[MLX, CPU])
    shared.disable_fallback()
    feeds = {"x": np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)}
    want = ort.InferenceSession(CHAIN, providers=[CPU]).run(None, feeds)[0]
    shared.run(None, feeds)  # the main thread owns its MLX state from here on
    threads = [threading.Thread(target=own_sessions, args=(seed, deadline, tally)) for seed in range(own)]
    threads += [threading.Thread(target=intruder, args=(shared, feeds, deadline, tally)) for _ in range(intruders)]
    for thread in threads:
        thread.start()
    while time.monotonic() < deadline:
        try:
            if not np.allclose(shared.run(None, feeds)[0], want, rtol=1e-5, atol=1e-5):
                tally.problem("owner: wrong answer")
            tally.ran()
        except Exception as error:
            tally.problem(f"owner: {error}")
    for thread in threads:
        thread.join()
    del shared
    print(json.dumps({"seconds": seconds, "threads": own, "intruders": intruders, "runs": tally.runs,
                      "expected_errors": tally.expected_errors, "problems": dict(tally.problems)}))
    return 1 if tally.problems else 0


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:]]
    sys.exit(main(args[0], int(args[1]) if len(args) > 1 else 6, int(args[2]) if len(args) > 2 else 2))
