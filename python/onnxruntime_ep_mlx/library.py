"""Locate (and prepare to load) the onnxruntime-ep-mlx plugin library."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

_LIBRARY_NAME = "libonnxruntime_mlx_ep.dylib" if sys.platform == "darwin" else "libonnxruntime_mlx_ep.so"
_REPO_ROOT = Path(__file__).resolve().parents[2]


def library_path() -> str:
    """Path of the built EP library.

    ``ORT_MLX_EP_LIBRARY`` wins; otherwise the library next to this package (an installed
    wheel), then the workspace's release build.
    """
    override = os.environ.get("ORT_MLX_EP_LIBRARY")
    candidates = [Path(override)] if override else []
    # A wheel installs it as libonnxruntime_mlx_ep.abi3.so (setuptools-rust names it as a Python
    # extension, `.so` on macOS too).
    stem = _LIBRARY_NAME.split(".", 1)[0]
    candidates += sorted(p for p in Path(__file__).parent.glob(f"{stem}.*") if p.suffix in (".so", ".dylib"))
    candidates += [_REPO_ROOT / "target" / "release" / _LIBRARY_NAME]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(
        f"{_LIBRARY_NAME} not found (looked at {', '.join(map(str, candidates))}); run `make build` "
        "or set ORT_MLX_EP_LIBRARY"
    )


def preload_mlx() -> None:
    """Load ``$MLX_LIB_DIR/libmlx`` first, so the EP binds that MLX (e.g. the CUDA build)
    instead of the one it was linked against. A no-op when ``MLX_LIB_DIR`` is unset."""
    lib_dir = os.environ.get("MLX_LIB_DIR")
    if lib_dir:
        name = "libmlx.dylib" if sys.platform == "darwin" else "libmlx.so"
        ctypes.CDLL(os.path.join(lib_dir, name), mode=ctypes.RTLD_GLOBAL)


def workspace_version() -> str:
    """``[workspace.package] version`` of the checkout's Cargo.toml: the version the library is
    built with, readable without loading it."""
    text = (_REPO_ROOT / "Cargo.toml").read_text()
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # Python 3.10: a line scan of the one section is enough
        section = ""
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("["):
                section = stripped
            elif section == "[workspace.package]" and stripped.startswith("version"):
                return stripped.split("=", 1)[1].strip().strip('"')
        raise KeyError("no [workspace.package] version in Cargo.toml") from None
    return tomllib.loads(text)["workspace"]["package"]["version"]
