"""Register the plugin library with ONNX Runtime and attach its EP to sessions."""

from __future__ import annotations

from collections.abc import Mapping

import onnxruntime as ort

from .library import library_path, preload_mlx, workspace_version

EP_NAME = "MLXExecutionProvider"
DEFAULT_REGISTRATION_NAME = "mlx"
# ORT puts the factory's GetVersion() under this key of every OrtEpDevice's metadata (ORT ≥ 1.23).
_VERSION_METADATA_KEY = "version"

# ORT refuses to register the same name twice in one process, so remember what we registered.
_registered_as: str | None = None


def ep_name() -> str:
    """The name sessions select the EP by (the factory's name, not the registration name)."""
    return EP_NAME


def providers() -> list[str]:
    """Provider list for ``ort.InferenceSession``: MLX first, CPU for whatever MLX declines."""
    return [EP_NAME, "CPUExecutionProvider"]


def mlx_ep_devices() -> list[ort.OrtEpDevice]:
    """The OrtEpDevices our factory exposes (empty until the library is registered)."""
    return [device for device in ort.get_ep_devices() if device.ep_name == EP_NAME]


def register_execution_provider_library(registration_name: str = DEFAULT_REGISTRATION_NAME) -> str:
    """Register the library once per process; returns the name it is registered under.

    Later calls return the first registration's name, whatever they pass: a second
    registration of the same library would load a second factory.
    """
    global _registered_as
    if _registered_as is not None:
        return _registered_as
    if mlx_ep_devices():  # someone registered it without us (e.g. ort directly): reuse theirs
        _registered_as = registration_name
        return registration_name
    preload_mlx()
    ort.register_execution_provider_library(registration_name, library_path())
    _registered_as = registration_name
    return registration_name


def append_to_session_options(so: ort.SessionOptions, options: Mapping[str, str] | None = None) -> None:
    """Add the MLX EP to ``so`` for all its devices; ``options`` reach the EP as session config
    entries ``ep.mlxexecutionprovider.<key>`` (ORT lowercases the EP name). ORT appends its CPU EP after it by itself."""
    register_execution_provider_library()
    devices = mlx_ep_devices()
    if not devices:
        raise RuntimeError(f"{library_path()} is registered but offers no {EP_NAME} device")
    so.add_provider_for_devices(devices, {key: str(value) for key, value in (options or {}).items()})


def version() -> str:
    """The library's version as its EP factory reports it through ORT.

    Falls back to the workspace's Cargo.toml when the library cannot be registered (not built
    yet, or built without the EP entry points).
    """
    try:
        register_execution_provider_library()
        for device in mlx_ep_devices():
            reported = device.ep_metadata.get(_VERSION_METADATA_KEY)
            if reported:
                return reported
    except Exception:  # noqa: BLE001 - any load failure means "ask the sources instead"
        pass
    return workspace_version()
