"""Inputs for a session: random tensors that match its declared types and shapes, or a .npz."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

# ORT's type strings for the tensors numpy can hold (bfloat16 and the float8s it cannot).
_NUMPY_TYPES: dict[str, type[np.generic]] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


def parse_dims(assignments: Sequence[str]) -> dict[str, int]:
    """``["batch=4", "seq=128"]`` → ``{"batch": 4, "seq": 128}``."""
    dims = {}
    for assignment in assignments:
        name, separator, value = assignment.partition("=")
        if not separator or not name or not value.isdigit():
            raise ValueError(f"--dim expects NAME=VALUE with a non-negative integer, got {assignment!r}")
        dims[name] = int(value)
    return dims


def concrete_shape(shape: Sequence[int | str | None], dims: Mapping[str, int]) -> list[int]:
    """Symbolic dims take their ``--dim`` value, anything unknown becomes 1."""
    return [d if isinstance(d, int) and d >= 0 else dims.get(d, 1) if isinstance(d, str) else 1 for d in shape]


def random_tensor(node_arg: ort.NodeArg, dims: Mapping[str, int], rng: np.random.Generator) -> np.ndarray:
    dtype = _NUMPY_TYPES.get(node_arg.type)
    if dtype is None:
        raise ValueError(f"input {node_arg.name!r} has type {node_arg.type}, which numpy cannot feed; pass it with --inputs")
    shape = concrete_shape(node_arg.shape, dims)
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        # Small non-negative values are valid ids, indices and sizes for most models.
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def make_feeds(
    inputs: Sequence[ort.NodeArg],
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    npz: Path | None = None,
) -> dict[str, np.ndarray]:
    """Inputs from ``npz`` where it has them (by input name), random ones for the rest."""
    given: dict[str, np.ndarray] = {}
    if npz is not None:
        with np.load(npz) as archive:
            given = {name: archive[name] for name in archive.files}
        unknown = set(given) - {node_arg.name for node_arg in inputs}
        if unknown:
            raise ValueError(f"{npz} has arrays the model does not take: {', '.join(sorted(unknown))}")
    rng = np.random.default_rng(seed)
    return {
        node_arg.name: given[node_arg.name] if node_arg.name in given else random_tensor(node_arg, dims or {}, rng)
        for node_arg in inputs
    }
