"""Tensors in the EP's own memory: allocated by MLX, so a session reads inputs placed there and
writes outputs bound there without copying them across ORT's host memory.

    x = mlx_ep.ortvalue_in_mlx_memory(np_array)           # or an empty one: shape=..., dtype=...
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", mlx_ep.ortvalue_in_mlx_memory(shape=[8, 10], dtype=np.float32))
    session.run_with_iobinding(binding)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from .registration import EP_NAME, mlx_ep_devices, register_execution_provider_library


def mlx_memory_info() -> ort.OrtMemoryInfo:
    """The memory info of the EP's own memory (its device's HOST_ACCESSIBLE memory, named "MLX")."""
    register_execution_provider_library()
    devices = mlx_ep_devices()
    if not devices:
        raise RuntimeError(f"the library offers no {EP_NAME} device")
    return devices[0].memory_info(ort.OrtDeviceMemoryType.HOST_ACCESSIBLE)


def ortvalue_in_mlx_memory(
    array: np.ndarray | None = None, *, shape: Sequence[int] | None = None, dtype: np.dtype | type | None = None
) -> ort.OrtValue:
    """A tensor in the EP's memory: a copy of ``array``, or uninitialised of ``shape`` and ``dtype``."""
    if array is not None:
        array = np.ascontiguousarray(array)
        shape, dtype = array.shape, array.dtype
    if shape is None or dtype is None:
        raise ValueError("give an array, or both shape and dtype")
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.dtype(dtype).type, memory_info=mlx_memory_info())
    if array is not None:
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(array)], [value], None)
    return value


def to_numpy(value: ort.OrtValue) -> np.ndarray:
    """A host copy of a tensor (in the EP's memory or not), made by ORT's copy."""
    host = ort.OrtValue.ortvalue_from_shape_and_type(value.shape(), _NUMPY_TYPES[value.data_type()])
    ort.copy_tensors([value], [host], None)
    return host.numpy()


_NUMPY_TYPES = {
    f"tensor({name})": getattr(np, numpy_name)
    for name, numpy_name in [
        ("float", "float32"), ("double", "float64"), ("float16", "float16"), ("bool", "bool_"),
        ("int8", "int8"), ("int16", "int16"), ("int32", "int32"), ("int64", "int64"),
        ("uint8", "uint8"), ("uint16", "uint16"), ("uint32", "uint32"), ("uint64", "uint64"),
    ]
}
