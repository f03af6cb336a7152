"""Tensors placed in the EP's own memory (its device's HOST_ACCESSIBLE memory info, allocated by
MLX) and bound to a session: inputs become MLX arrays and outputs are written by MLX, with no
copy across ORT's host memory, and the same answers as ORT's CPU EP."""

import gc
import platform
import re
from importlib.metadata import version

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, cpu_outputs, kernel_placements, make_model, mlx_devices, profile_prefix, tensor
from onnxruntime_ep_mlx import mlx_memory_info, to_numpy as to_host
from onnxruntime_ep_mlx import ortvalue_in_mlx_memory as in_our_memory

F = TensorProto.FLOAT


def our_memory():
    return mlx_devices()[0].memory_info(ort.OrtDeviceMemoryType.HOST_ACCESSIBLE)


def session(model, **options):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = profile_prefix("mlx_ep_bound")
    so.add_provider_for_devices(mlx_devices(), {"verbose": "1", **options})
    made = ort.InferenceSession(model, so)
    assert made.get_providers()[0] == MLX
    return made


def traffic(capfd, hand_written=True):
    """(MiB copied in, MiB copied out, inputs in MLX memory, outputs in MLX memory) from the
    session summary, printed when the session is released. On MLX's CUDA backend the run's own
    evaluation writes the outputs: with MLX 0.32.4, whose stream the EP can reach, every output
    by a copy on that stream (into MLX memory or ORT's); otherwise those in MLX memory by a
    store kernel. Elsewhere, or for a session without the hand-written GPU work
    (`hand_written=False`: `no_cuda_kernels`), they are copied after it. Checked here for every
    summary."""
    gc.collect()
    summary = capfd.readouterr().err
    found = re.search(r"device (\w+);.*host copies ([\d.]+) MiB in, ([\d.]+) MiB out \((\d+) output\(s\) by a copy "
                      r"on MLX's stream\); in MLX memory \(no host copy\): (\d+) input\(s\), (\d+) output\(s\), "
                      r"(\d+) of them stored by MLX's evaluation \((\d+) by a copy on its stream\)", summary)
    assert found, summary
    device, copied_in, copied_out, read_on_stream, bound_in, bound_out, stored, on_stream = found.groups()
    on_cuda = device == "gpu" and platform.system() == "Linux" and hand_written
    reachable = on_cuda and version("mlx") == "0.32.4"
    assert int(stored) == (int(bound_out) if on_cuda else 0), summary
    assert int(on_stream) == (int(stored) if reachable else 0), summary
    # Copies out are in MiB to two places: a small one shows as 0.00.
    if reachable and float(copied_out) > 0:
        assert int(read_on_stream) > 0, summary
    if not reachable:
        assert int(read_on_stream) == 0, summary
    return float(copied_in), float(copied_out), int(bound_in), int(bound_out)


def conv_block():
    """Conv -> Relu -> Add of the input's mean, and a second output: ~0.4 MiB in, 1.5 MiB out."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("ReduceMean", ["x"], ["m"], keepdims=1),
        helper.make_node("Sub", ["x", "m"], ["z"]),
    ]
    return make_model(nodes, [tensor("x", shape=[8, 3, 64, 64])],
                      [tensor("y", shape=[8, 16, 64, 64]), tensor("z", shape=[8, 3, 64, 64])],
                      initializers=[w], opset=17)


def test_the_device_offers_memory_of_its_own_and_no_device_default():
    memory = our_memory()
    assert memory is not None and memory.name == "MLX" == mlx_memory_info().name
    # No DEFAULT memory: the EP stays a CPU-memory EP, so ORT inserts no copies around it.
    assert mlx_devices()[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32, np.bool_])
def test_copies_into_and_out_of_our_memory_keep_every_byte(dtype):
    data = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    value = in_our_memory(data)
    assert value.shape() == [2, 3, 4]
    np.testing.assert_array_equal(to_host(value), data)


def test_bound_inputs_and_outputs_cross_no_host_memory(capfd):
    model = conv_block()
    x = np.random.default_rng(0).standard_normal((8, 3, 64, 64)).astype(np.float32)
    expected = cpu_outputs(model, {"x": x})
    plain = session(model)
    unbound = [plain.run(None, {"x": x}) for _ in range(3)]
    assert {p for _, p in kernel_placements(plain)} == {MLX}
    del plain
    copied_in, copied_out, bound_in, bound_out = traffic(capfd)
    assert (bound_in, bound_out) == (0, 0)
    # Each subgraph reading x copies it in (the partition may make more than one).
    readers = copied_in / (3 * x.nbytes / 2**20)
    assert readers >= 1 and readers == pytest.approx(round(readers), abs=0.01)
    assert copied_out == pytest.approx(3 * (8 * 16 + 8 * 3) * 64 * 64 * 4 / 2**20, abs=0.01)

    bound = session(model)
    x_ours = in_our_memory(x)
    y_ours = in_our_memory(shape=[8, 16, 64, 64], dtype=np.float32)
    z_ours = in_our_memory(shape=[8, 3, 64, 64], dtype=np.float32)
    binding = bound.io_binding()
    binding.bind_ortvalue_input("x", x_ours)
    binding.bind_ortvalue_output("y", y_ours)
    binding.bind_ortvalue_output("z", z_ours)
    # Eager, then compiled (the second run of a shape compiles by default), then replayed.
    for run in range(3):
        bound.run_with_iobinding(binding)
        y, z = to_host(y_ours), to_host(z_ours)
        np.testing.assert_array_equal(y, unbound[run][0])
        np.testing.assert_array_equal(z, unbound[run][1])
        np.testing.assert_allclose(y, expected[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(z, expected[1], rtol=1e-5, atol=1e-5)
    assert {p for _, p in kernel_placements(bound)} == {MLX}
    del bound, binding
    assert traffic(capfd) == (0.0, 0.0, 3 * round(readers), 6)


def test_a_sessions_kernel_choice_is_its_own(capfd):
    """`no_cuda_kernels` in one session leaves another session's kernels and copies on MLX's
    stream alone, whichever was made or ran last (on the GPU; elsewhere both copy after)."""
    model = conv_block()
    x = np.random.default_rng(1).standard_normal((8, 3, 64, 64)).astype(np.float32)
    expected = cpu_outputs(model, {"x": x})
    ours = session(model)
    plain = session(model, no_cuda_kernels="1")
    for run in range(3):
        for s in (ours, plain) if run % 2 else (plain, ours):
            y_ours = in_our_memory(shape=[8, 16, 64, 64], dtype=np.float32)
            binding = s.io_binding()
            binding.bind_ortvalue_input("x", in_our_memory(x))
            binding.bind_ortvalue_output("y", y_ours)
            binding.bind_output("z")
            s.run_with_iobinding(binding)
            np.testing.assert_allclose(to_host(y_ours), expected[0], rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(binding.copy_outputs_to_cpu()[1], expected[1], rtol=1e-5, atol=1e-5)
    del plain, s, binding
    assert traffic(capfd, hand_written=False)[3] == 3
    del ours
    assert traffic(capfd)[3] == 3


def test_a_bound_input_fed_without_io_binding_is_not_copied(capfd):
    model = make_model([helper.make_node("Mul", ["x", "x"], ["y"])],
                       [tensor("x", shape=[256, 256])], [tensor("y", shape=[256, 256])])
    x = np.linspace(-3, 3, 256 * 256, dtype=np.float32).reshape(256, 256)
    s = session(model)
    (y,) = s.run_with_ort_values(["y"], {"x": in_our_memory(x)})
    np.testing.assert_array_equal(y.numpy(), x * x)
    del s
    copied_in, copied_out, bound_in, bound_out = traffic(capfd)
    assert (copied_in, bound_in, bound_out) == (0.0, 1, 0)
    assert copied_out == pytest.approx(0.25)


def test_an_input_changed_in_our_memory_between_runs_is_read_again():
    model = make_model([helper.make_node("Add", ["x", "x"], ["y"])], [tensor("x", shape=[64])], [tensor("y", shape=[64])])
    s = session(model)
    x_ours = in_our_memory(np.zeros(64, np.float32))
    for step in range(4):
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(np.full(64, step, np.float32))], [x_ours], None)
        (y,) = s.run_with_ort_values(["y"], {"x": x_ours})
        np.testing.assert_array_equal(y.numpy(), np.full(64, 2 * step, np.float32))


def test_empty_and_half_tensors_in_our_memory():
    model = make_model([helper.make_node("Neg", ["x"], ["y"])],
                       [tensor("x", TensorProto.FLOAT16, ["n", 3])], [tensor("y", TensorProto.FLOAT16, ["n", 3])])
    s = session(model)
    for n in (0, 5):
        x = np.arange(n * 3, dtype=np.float16).reshape(n, 3)
        (y,) = s.run_with_ort_values(["y"], {"x": in_our_memory(x)})
        np.testing.assert_array_equal(y.numpy(), -x)


def test_a_node_left_to_the_cpu_ep_reads_our_memory_too(capfd):
    """ORT hands memory of ours straight to its CPU EP too (HOST_ACCESSIBLE is host memory):
    Mul, excluded from the EP, reads the bound input; the Relu after it runs on MLX."""
    model = make_model([helper.make_node("Mul", ["x", "x"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                       [tensor("x", shape=[4, 8])], [tensor("y", shape=[4, 8])])
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = profile_prefix("mlx_ep_bound")
    so.add_provider_for_devices(mlx_devices(), {"exclude_ops": "Mul", "verbose": "1"})
    s = ort.InferenceSession(model, so)
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    y_ours = in_our_memory(shape=[4, 8], dtype=np.float32)
    binding = s.io_binding()
    binding.bind_ortvalue_input("x", in_our_memory(x))
    binding.bind_ortvalue_output("y", y_ours)
    s.run_with_iobinding(binding)
    np.testing.assert_array_equal(to_host(y_ours), np.maximum(x * x, 0))
    assert {p for _, p in kernel_placements(s)} == {MLX, "CPUExecutionProvider"}
    del s, binding
    # The Relu's input came from the CPU EP (ORT's memory); its output went to ours.
    assert traffic(capfd)[2:] == (0, 1)
