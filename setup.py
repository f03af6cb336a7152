"""The wheel's build: the version from Cargo.toml (single-sourced), the cdylib by setuptools-rust."""

import tomllib
from pathlib import Path

from setuptools import setup
from setuptools_rust import Binding, RustExtension, Strip

VERSION = tomllib.loads(Path(__file__).with_name("Cargo.toml").read_text())["workspace"]["package"]["version"]

setup(
    version=VERSION,
    rust_extensions=[
        RustExtension(
            # Installed as onnxruntime_ep_mlx/libonnxruntime_mlx_ep.abi3.so: no Python ABI is used,
            # so one wheel serves every CPython 3 (library.py finds it by its stem).
            "onnxruntime_ep_mlx.libonnxruntime_mlx_ep",
            path="ep/Cargo.toml",
            binding=Binding.NoBinding,
            py_limited_api=True,
            args=["--locked"],
            strip=Strip.Debug,
        )
    ],
    zip_safe=False,
    # Tagged cp310-abi3: the library uses no Python ABI, so one wheel installs on CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
