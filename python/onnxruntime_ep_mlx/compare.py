"""How far the MLX session's outputs are from the CPU session's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OutputDifference:
    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs_diff: float  # inf when shapes differ or only one side is NaN
    note: str = ""
    largest: float = float("nan")  # the largest finite |expected| (nan: none, or not compared)

    @property
    def relative(self) -> float:
        """max_abs_diff against the output's scale: what `precision=fp16|bf16` is judged by."""
        return self.max_abs_diff / self.largest if self.largest > 0 else float("nan")


def max_abs_difference(expected: np.ndarray, actual: np.ndarray) -> float:
    """Largest |expected - actual|; matching NaNs and matching infinities count as equal."""
    if expected.shape != actual.shape:
        return float("inf")
    if expected.size == 0:
        return 0.0
    if expected.dtype == np.bool_ or actual.dtype == np.bool_:
        return float(np.any(expected != actual))
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    with np.errstate(invalid="ignore"):
        difference = np.abs(e - a)
    agree = (np.isnan(e) & np.isnan(a)) | (e == a)
    difference[agree] = 0.0
    return float(np.nan_to_num(difference, nan=np.inf).max())


def largest_finite(values: np.ndarray) -> float:
    """The largest finite |value| (nan when there is none or the values are not numbers)."""
    if values.dtype == np.bool_ or values.dtype.kind not in "iuf":
        return float("nan")
    magnitudes = np.abs(values.astype(np.float64))
    finite = magnitudes[np.isfinite(magnitudes)]
    return float(finite.max()) if finite.size else float("nan")


def compare_outputs(names: list[str], expected: list[object], actual: list[object]) -> list[OutputDifference]:
    differences = []
    for name, cpu_value, mlx_value in zip(names, expected, actual):
        if not isinstance(cpu_value, np.ndarray) or not isinstance(mlx_value, np.ndarray):
            differences.append(OutputDifference(name, (), type(cpu_value).__name__, float("nan"), "not a tensor: not compared"))
            continue
        note = "" if cpu_value.shape == mlx_value.shape else f"shape MLX {list(mlx_value.shape)} vs CPU {list(cpu_value.shape)}"
        if cpu_value.dtype != mlx_value.dtype:
            note = f"dtype MLX {mlx_value.dtype} vs CPU {cpu_value.dtype}"
        differences.append(OutputDifference(name, cpu_value.shape, str(cpu_value.dtype),
                                            max_abs_difference(cpu_value, mlx_value), note, largest_finite(cpu_value)))
    return differences
