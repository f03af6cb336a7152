"""Generated tensors and structural ops (op-specs/src/generate.rs): ConstantOfShape, Range, Tile, Trilu,
CumSum, CumProd, OneHot."""

from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from op_specs import SPECS, OpSpec, Variant, _by_layout, _i64, _rep
from op_table import np_dtype


def _fixed(value):
    """A domain that always gives ``value`` (as the port's dtype)."""
    return lambda dtype, shape, rng, dtypes: np.full(shape, value).astype(np_dtype(dtype))


def _range(xs, a):
    start, limit, delta = (v.item() for v in xs)
    n = max(int(math.ceil((limit - start) / delta)), 0)
    out, value = [], start
    for _ in range(n):
        out.append(value)
        value = type(start)(value + delta)
    return np.array(out, dtype=xs[0].dtype)


def _cumsum(xs, a):
    x, axis = xs[0], int(np.asarray(xs[1]).item()) % xs[0].ndim
    if a.get("reverse"):
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if a.get("exclusive"):
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.take(y, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(y, axis) if a.get("reverse") else y


def _constant_of_shape(xs, a):
    value = a.get("value")
    fill = numpy_helper.to_array(value).reshape(()) if value is not None else np.float32(0)
    return np.full([int(v) for v in xs[0]], fill)


SPECS[("", "ConstantOfShape")] = OpSpec(
    ref=_constant_of_shape, exact=True, scheme={"basic": [[2]]}, constants={"input": _i64(2, 3)},
    variants=[
        Variant(when=lambda d: d["T"] == "float"),  # no value attribute: float32 zeros
        Variant("value", lambda d: {"value": numpy_helper.from_array(np.array([3], dtype=np_dtype(d["T"])))}),
    ],
)
SPECS[("", "Range")] = OpSpec(
    ref=_range, exact=True, scheme={"basic": [[], [], []]},
    domains={"start": _fixed(2), "limit": _fixed(11), "delta": _fixed(3)},
    variants=[Variant(), _rep(Variant("backwards", domains={"start": _fixed(10), "limit": _fixed(-3), "delta": _fixed(-4)})),
              _rep(Variant("empty", domains={"start": _fixed(5), "limit": _fixed(1), "delta": _fixed(2)}))],
)
SPECS[("", "Tile")] = OpSpec(
    ref=lambda xs, a: np.tile(xs[0], [int(v) for v in xs[1]]), exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    constants={"repeats": _by_layout(default=_i64(2, 1, 3), empty=_i64(2, 2), transposed=_i64(1, 2))},
)
SPECS[("", "Trilu")] = OpSpec(
    ref=lambda xs, a: (np.triu if a.get("upper", 1) else np.tril)(xs[0], int(xs[1]) if len(xs) > 1 and xs[1] is not None else 0),
    exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    constants={"k": np.array(-1, np.int64)},
    variants=[Variant(), _rep(Variant("lower", {"upper": 0})), _rep(Variant("no_k", constants={"k": None}))],
)
SPECS[("", "CumSum")] = OpSpec(
    ref=_cumsum,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    constants={"axis": np.array(1, np.int64)},
    variants=[Variant(), _rep(Variant("exclusive_reverse", {"exclusive": 1, "reverse": 1})),
              _rep(Variant("negative_axis", constants={"axis": np.array(-1, np.int64)}))],
)


def _one_hot(xs, a):
    # Float indices are compared as they are, as ORT's CPU kernel does (2.7 or 6e-8 is hot
    # nowhere), not truncated to integers.
    idx = xs[0].astype(np.float64 if xs[0].dtype.kind == "f" else np.int64)
    depth, values = int(np.asarray(xs[1]).item()), xs[2]
    idx = np.where(idx < 0, idx + depth, idx)
    axis = a.get("axis", -1) % (idx.ndim + 1)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([depth if i == axis else 1 for i in range(idx.ndim + 1)])
    return np.where(hot, values[1], values[0])
SPECS[("", "OneHot")] = OpSpec(
    ref=_one_hot, exact=True, scheme={"basic": [[2, 3], [], [2]]},
    domains={"indices": lambda dtype, shape, rng, d: rng.integers(-4, 4, size=shape).astype(np_dtype(dtype)), "depth": _fixed(4)},
    combos=lambda d: d["T1"] in ("int64", "int32", "float") and d["T2"] in ("int64", "float"),
    variants=[Variant(), _rep(Variant("axis0", {"axis": 0}))],
)
SPECS[("", "CumProd")] = OpSpec(
    ref=lambda xs, a: _cumsum_like(np.cumprod, xs, a, 1),
    scheme={"basic": [[2, 3, 4]], "transposed": [[3, 4]], "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    domains={"x": "near_one"}, constants={"axis": np.array(1, np.int64)},
    variants=[Variant(), _rep(Variant("exclusive_reverse", {"exclusive": 1, "reverse": 1}))],
)


def _cumsum_like(scan, xs, a, identity):
    x, axis = xs[0], int(np.asarray(xs[1]).item()) % xs[0].ndim
    if a.get("reverse"):
        x = np.flip(x, axis)
    y = scan(x, axis=axis, dtype=x.dtype)
    if a.get("exclusive"):
        first = np.full_like(np.take(y, [0], axis=axis), identity)
        y = np.concatenate([first, np.take(y, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(y, axis) if a.get("reverse") else y
