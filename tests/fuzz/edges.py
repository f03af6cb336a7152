"""Catalogues of edge values: what the generator draws from when it mutates a well-formed case.

Each function takes the seeded ``rng`` and returns one choice, so a case is a pure function of
its seed. The values are those that broke EPs before: NaN/inf/-0.0/denormals, float16's
largest finite value, integer minimum/maximum, 2^31 (one past MLX's int32 shapes), axes one
past either end, zero strides and steps, and every value a string attribute's schema lists.
"""

from __future__ import annotations

import re

import numpy as np
from onnx import defs

from op_table import FLOATS, np_dtype

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

FLOAT_SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 6e-8, 65504.0, -65504.0,
                  65520.0, 3.4028235e38, -3.4028235e38, 1e30, 1e-30]

# Ops that combine many elements into one (sums, maxima, statistics, recurrences): a NaN or
# inf there gives NaN, inf or a finite value depending on evaluation order and on whether a
# kernel's max skips NaN, which ONNX leaves open; and big opposite values cancel differently.
# Their value edges are the quiet ones: signed zeros, denormals, and float16's largest value
# for float16 inputs (an accumulator kept in float16 overflows on it).
MIXING_FAMILIES = {"reduce", "normalization", "contrib_norm", "pool", "conv", "linalg", "recurrent", "softmax", "resize"}
MIXING_OPS = {"CumSum", "CumProd", "Hardmax", "LpNormalization", "BiasSoftmax", "EmbedLayerNormalization",
              "FusedConv", "FusedMatMul", "Einsum", "Gemm", "MatMul", "LRN", "MeanVarianceNormalization"}
QUIET_FLOATS = [-0.0, 0.0, 1e-45, -1e-45, 6e-8, -6e-8]


def is_mixing(family: str, op: str) -> bool:
    return family in MIXING_FAMILIES or op in MIXING_OPS


# Ports whose values set an output's size: a huge positive value there allocates gigabytes on
# ORT's CPU EP before anything fails, so they get only the values that stay small or fail fast.
SIZE_PORTS = {
    ("Range", "start"), ("Range", "limit"), ("Range", "delta"),
    ("ConstantOfShape", "input"), ("Expand", "shape"), ("Tile", "repeats"), ("OneHot", "depth"),
    ("Resize", "sizes"), ("Resize", "scales"), ("Upsample", "scales"), ("Pad", "pads"),
    ("CenterCropPad", "shape"), ("EyeLike", "input"),
    ("HannWindow", "size"), ("HammingWindow", "size"), ("BlackmanWindow", "size"),
}
SIZE_ATTRS = {"pads", "output_shape", "output_padding", "scales", "kernel_shape"}

INDEX_PORTS = {"indices", "index"}  # Gather, GatherElements, GatherND, Scatter*, OneHot


def int_specials(dtype: str) -> list[int]:
    info = np.iinfo(np_dtype(dtype))
    vals = [int(info.min), int(info.max), int(info.min) + 1, 0, 1]
    if info.min < 0:
        vals += [-1]
    return vals


def float_values(rng, dtype: str, x: np.ndarray, fraction: float, mixing: bool = False) -> np.ndarray:
    """``x`` with about ``fraction`` of its elements replaced by special floats (the quiet
    ones for ops that mix elements)."""
    pool = (QUIET_FLOATS + ([65504.0] if dtype == "float16" else [])) if mixing else FLOAT_SPECIALS
    return _sprinkle(rng, x, pool, fraction, dtype)


def int_values(rng, dtype: str, x: np.ndarray, fraction: float) -> np.ndarray:
    return _sprinkle(rng, x, int_specials(dtype), fraction, dtype)


def out_of_range_indices(rng, dtype: str, x: np.ndarray) -> np.ndarray:
    """Indices past either end of any small axis, and the dtype's own extremes."""
    info = np.iinfo(np_dtype(dtype))
    vals = [v for v in (3, 4, 7, 1000, -4, -7, -1000, int(info.max), int(info.min)) if info.min <= v <= info.max]
    return _sprinkle(rng, x, vals, 0.3, dtype)


def zero_divisors(rng, dtype: str, x: np.ndarray) -> np.ndarray:
    vals = [0, -1] if np.iinfo(np_dtype(dtype)).min < 0 else [0]
    return _sprinkle(rng, x, vals, 0.3, dtype)


def _sprinkle(rng, x, values, fraction, dtype):
    x = np.array(x, copy=True)
    flat = x.reshape(-1)
    if flat.size == 0:
        return x
    k = max(1, int(round(flat.size * fraction)))
    idx = rng.permutation(flat.size)[:k]
    picks = np.array([values[int(i)] for i in rng.integers(0, len(values), size=k)], dtype=object)
    with np.errstate(all="ignore"):
        if dtype in FLOATS:
            flat[idx] = np.array(picks, dtype=np.float64).astype(flat.dtype)
        else:
            flat[idx] = np.array([int(p) for p in picks], dtype=flat.dtype)
    return x


# --------------------------------------------------------------------------------------------
# Host-known integer inputs (shapes, axes, starts/ends, steps, k, pads, repeats)


def host_int(rng, op: str, port: str, rank: int, current: int) -> int:
    """One replacement element for a host-known integer input."""
    if (op, port) in SIZE_PORTS:
        pool = [0, 1, -1, 2, current + 1, I32_MIN, I64_MIN]
    elif port in ("axes", "axis", "split"):
        pool = [-rank, -1, rank - 1, rank, -rank - 1, 0, I64_MAX, I64_MIN]
    elif port in ("starts", "ends"):
        pool = [I64_MIN, I64_MAX, -1, 0, 2**31, I32_MIN - 1, I32_MAX, current - 1, -current - 7]
    elif port == "steps":
        pool = [1, -1, 2, -2, 2**31, I32_MIN, I64_MAX, I64_MIN, 0]
    elif port in ("k", "K"):
        pool = [0, 1, -1, 2**31, I64_MAX, current + 1]
    else:
        pool = [0, 1, -1, 2**31, I64_MIN, I64_MAX, current + 1]
    return int(pool[int(rng.integers(len(pool)))])


def host_float(rng) -> float:
    pool = [0.0, -1.0, np.nan, 0.5, 1e-3, 3.0, -0.0]
    return float(pool[int(rng.integers(len(pool)))])


# --------------------------------------------------------------------------------------------
# Attributes


_BOOL_LIKE = {"keepdims", "select_last_index", "noop_with_empty_axes", "largest", "sorted",
              "exclusive", "reverse", "upper", "detect_negative", "detect_positive", "transA",
              "transB", "ceil_mode", "count_include_pad", "allowzero", "saturate", "fmod",
              "layout", "input_forget", "linear_before_reset", "antialias", "exclude_outside",
              "training_mode", "stash_type", "simplified", "is_test", "spatial", "normalize_variance",
              "center_point_box", "interleaved"}


DIM_ATTRS = {"K", "N", "block_size", "bits"}  # int attributes that size generated tensors


def attr_int(rng, name: str, rank: int, current) -> int:
    if name == "axis" or name.endswith("_axis") or name in ("axis_w",):
        pool = [-rank, -1, rank - 1, rank, -rank - 1, 0, I64_MAX]
    elif name in _BOOL_LIKE:
        pool = [0, 1, 2, -1]
    elif name in ("to",):
        pool = [1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 16, 0, 8]  # includes invalid UNDEFINED/STRING
    elif name in DIM_ATTRS:
        # The op suite sizes its weights by these (MatMulNBits' K x N): a huge one would make the
        # generator itself allocate gigabytes, so only small, zero and negative edges.
        pool = [0, 1, -1, 2, 3, 5, 7, 16, 4096, I64_MIN]
    else:
        pool = [0, 1, -1, 2, 3, 2**31, I32_MAX, I64_MAX, I64_MIN]
    return int(pool[int(rng.integers(len(pool)))])


def attr_ints(rng, name: str, rank: int, current: list[int] | None) -> list[int]:
    spatial = max(rank - 2, 1)
    base = list(current) if current else ([1] * (2 * spatial if name == "pads" else spatial))
    if name in ("axes", "perm"):
        base = list(current) if current else list(range(rank))
    choice = int(rng.integers(4))
    if choice == 0 and base:  # one element to an edge
        i = int(rng.integers(len(base)))
        if name in SIZE_ATTRS:
            pool = [0, -1, 1, 2, I32_MIN]
        elif name in ("axes", "perm"):
            pool = [-rank, -1, rank, -rank - 1, 0, base[i]]
        else:
            pool = [0, -1, 1, 2, 2**31, I32_MAX, I64_MAX, I64_MIN]
        base[i] = int(pool[int(rng.integers(len(pool)))])
    elif choice == 1:  # one element too many or too few
        base = base[:-1] if base and rng.random() < 0.5 else base + [base[-1] if base else 1]
    elif choice == 2:  # a single element (an empty list has no attribute type in ONNX)
        base = [int(base[0]) if base else 0]
    else:  # a duplicate (axes, perm) or a second edge
        base = base + base[:1] if base else [0]
    return base


def attr_float(rng) -> float:
    pool = [0.0, -0.0, -1.0, np.nan, np.inf, -np.inf, 1e-45, 1e38, 0.5, 2.0]
    return float(pool[int(rng.integers(len(pool)))])


def attr_floats(rng, current: list[float] | None) -> list[float]:
    base = list(current) if current else [1.0]
    i = int(rng.integers(len(base)))
    base[i] = attr_float(rng)
    return base


_ENUM_CACHE: dict[tuple[str, str, int, str], list[str]] = {}


def enum_values(domain: str, op: str, opset: int, name: str, default: str | None) -> list[str]:
    """The quoted values a string attribute's schema description lists (plus its default and a
    value no schema allows)."""
    key = (domain, op, opset, name)
    if key not in _ENUM_CACHE:
        values: list[str] = []
        try:
            schema = defs.get_schema(op, opset, domain)
            attr = schema.attributes.get(name)
            if attr is not None:
                values = re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', attr.description)
                if attr.default_value.s:
                    values.append(attr.default_value.s.decode())
        except Exception:
            pass
        if default:
            values.append(default.strip('"'))
        if name in ("activations", "activation"):
            values += ["Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
                       "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus"]
        values.append("no_such_value")
        _ENUM_CACHE[key] = sorted(set(values))
    return _ENUM_CACHE[key]
