"""onnxruntime-ep-mlx: run ONNX models on MLX through an ONNX Runtime plugin execution provider.

    import onnxruntime as ort
    import onnxruntime_ep_mlx as mlx_ep

    so = ort.SessionOptions()
    mlx_ep.append_to_session_options(so)            # or: mlx_ep.register_execution_provider_library()
    session = ort.InferenceSession("model.onnx", so)  #     and providers=mlx_ep.providers()

``python -m onnxruntime_ep_mlx {info,run,explain}`` is the command line.
"""

from __future__ import annotations

from .library import library_path, preload_mlx
from .memory import mlx_memory_info, ortvalue_in_mlx_memory, to_numpy
from .profiling import NodePlacement, node_providers
from .registration import (
    EP_NAME,
    append_to_session_options,
    ep_name,
    mlx_ep_devices,
    providers,
    register_execution_provider_library,
    version,
)

__all__ = [
    "EP_NAME",
    "NodePlacement",
    "append_to_session_options",
    "ep_name",
    "library_path",
    "mlx_ep_devices",
    "mlx_memory_info",
    "node_providers",
    "ortvalue_in_mlx_memory",
    "preload_mlx",
    "providers",
    "register_execution_provider_library",
    "to_numpy",
    "version",
]
