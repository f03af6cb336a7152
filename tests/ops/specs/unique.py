"""Unique (op-specs/src/unique.rs): ORT's grouping (an ordered map keyed by `<`)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep
from op_table import np_dtype


def _unique(xs, a):
    x = xs[0]
    axis = a.get("axis")
    if axis is None:
        slices = [(v,) for v in x.reshape(-1).tolist()]
    else:
        moved = np.moveaxis(x, axis, 0)
        slices = [tuple(s.reshape(-1).tolist()) for s in moved]
    first = {}  # value -> (first index, count); Python's == merges -0.0 and 0.0 as `<` does
    inverse_keys = []
    for i, key in enumerate(slices):
        if key not in first:
            first[key] = [i, 0]
        first[key][1] += 1
        inverse_keys.append(key)
    keys = sorted(first, key=lambda k: first[k][0])
    if a.get("sorted", 1) == 1:
        keys = sorted(keys)
    position = {k: p for p, k in enumerate(keys)}
    firsts = np.array([first[k][0] for k in keys], np.int64)
    y = np.take(x.reshape(-1) if axis is None else x, firsts, axis=0 if axis is None else axis)
    return [y, firsts, np.array([position[k] for k in inverse_keys], np.int64),
            np.array([first[k][1] for k in keys], np.int64)]


def _few_values(dtype, shape, rng, dtypes):
    """A handful of distinct values (signed zeros among the floats), so groups repeat."""
    pool = [-2, 0, 1, 3] if np_dtype(dtype) != np.float32 else [-2.5, -0.0, 0.0, 1.0, 3.25]
    return np.array(rng.choice(pool, size=shape), dtype=np_dtype(dtype))


def _binary_rows(dtype, shape, rng, dtypes):
    """0/1 entries, so whole slices along an axis repeat."""
    return rng.integers(0, 2, size=shape).astype(np_dtype(dtype))


SPECS[("", "Unique")] = OpSpec(
    ref=_unique, exact=True, domains={"X": _few_values},
    scheme={"basic": [[4, 5]], "scalar": [[]], "empty": [[0, 3]],
            "dynamic": [[[4, 5]], [[2, 7]], [[1, 1]]]},
    variants=[
        Variant(),
        _rep(Variant("unsorted", {"sorted": 0})),
        _rep(Variant("sorted_2_reads_as_unsorted", {"sorted": 2})),
        _rep(Variant("axis_rows", {"axis": 0}, shapes=[[6, 3]], domains={"X": _binary_rows})),
        _rep(Variant("axis_columns_unsorted", {"axis": 1, "sorted": 0}, shapes=[[2, 7]],
                     domains={"X": _binary_rows})),
        _rep(Variant("negative_axis_3d", {"axis": -2}, shapes=[[2, 5, 2]], domains={"X": _binary_rows},
                     min_opset=11)),
        # An empty axis (ORT's CPU EP aborts on empty slices along a non-empty one: [3, 0], axis 0).
        _rep(Variant("empty_axis", {"axis": 0}, shapes=[[0, 3]])),
        _rep(Variant("no_optional_outputs", outputs=())),
    ],
)
