"""Create, run and destroy MLX-EP sessions N times, each run also with its input and output in the
EP's own memory; print the RSS (kB) after each reporting step.

Usage: python cycles.py N [REPORT_EVERY]. Used by test_leaks.py and `make leaks` (valgrind).
"""

import gc
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402


def model() -> bytes:
    w = numpy_helper.from_array(np.linspace(-1, 1, 1024, dtype=np.float32), "w")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["m"]),
        helper.make_node("Tanh", ["m"], ["t"]),
        helper.make_node("Add", ["t", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cycle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    cycles = int(sys.argv[1])
    every = int(sys.argv[2]) if len(sys.argv) > 2 else cycles
    mlx_ep.register_execution_provider_library()
    data = model()
    x = np.ones(1024, np.float32)
    for i in range(1, cycles + 1):
        session = ort.InferenceSession(data, providers=mlx_ep.providers())
        assert session.get_providers()[0] == mlx_ep.EP_NAME
        expected = session.run(None, {"x": x})[0]
        # The same through tensors in the EP's own memory (its allocator: MLX buffers).
        binding = session.io_binding()
        binding.bind_ortvalue_input("x", mlx_ep.ortvalue_in_mlx_memory(x))
        y = mlx_ep.ortvalue_in_mlx_memory(shape=[1024], dtype=np.float32)
        binding.bind_ortvalue_output("y", y)
        session.run_with_iobinding(binding)
        assert np.array_equal(mlx_ep.to_numpy(y), expected)
        del session, binding, y
        if i % every == 0:
            gc.collect()
            print(i, rss_kb(), flush=True)


if __name__ == "__main__":
    main()
