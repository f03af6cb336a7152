"""Indexing (op-specs/src/indexing.rs): Gather, GatherND, Scatter, ScatterElements, ScatterND."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep
from op_table import np_dtype

SPECS[("", "Gather")] = OpSpec(
    ref=lambda xs, a: np.take(xs[0], xs[1].astype(np.int64), axis=a.get("axis", 0)), exact=True,
    domains={"indices": "index"},
    scheme={"basic": [[3, 4, 5], [2, 2]], "scalar": [[3, 4, 5], []], "empty": [[3, 4, 5], [0]],
            "transposed": [[3, 4, 5], [2, 2]], "dynamic": [[[3, 4, 5], [2, 2]], [[4, 3, 2], [3, 1]], [[5, 1, 1], [1, 1]]]},
    variants=[Variant(), _rep(Variant("axis1", {"axis": 1})), _rep(Variant("axis_neg1", {"axis": -1}, min_opset=11))],
    note="out-of-range indices: ORT raises, the entry clamps; not compared",
)


def _gather_nd(xs, a):
    data, idx, b = xs[0], xs[1].astype(np.int64), a.get("batch_dims", 0)
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    flat_data = data.reshape((batch,) + data.shape[b:])
    flat_idx = idx.reshape((batch,) + idx.shape[b:])
    out = []
    for i in range(batch):
        rows = flat_idx[i].reshape(-1, idx.shape[-1])
        out.append(np.stack([flat_data[i][tuple(int(c) for c in r)] for r in rows]))
    return np.stack(out).reshape(idx.shape[:-1] + data.shape[b + idx.shape[-1]:])


def _scatter_elements(xs, a):
    data, idx, upd = xs[0].copy(), xs[1].astype(np.int64), xs[2]
    axis = a.get("axis", 0) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(a.get("reduction", "none"))
    for pos in np.ndindex(idx.shape):
        target = list(pos)
        target[axis] = idx[pos]
        t = tuple(target)
        data[t] = combine(data[t], upd[pos]) if combine else upd[pos]
    return data


def _distinct_axis1_indices(dtype, shape, rng, dtypes):
    """A different row per column (a scatter with no duplicate targets), negatives included."""
    out = np.stack([rng.permutation(3)[: shape[1]] for _ in range(shape[0] * shape[2])]).reshape(shape[0], shape[2], shape[1]).transpose(0, 2, 1)
    return (out - 3 * (out % 2)).astype(np_dtype(dtype))


def _nd_indices(dtype, shape, rng, dtypes):
    """Valid (row, column) pairs into a [2, 3, 4] tensor, negatives included."""
    rows = rng.integers(-2, 2, size=shape[:-1])
    cols = rng.integers(-3, 3, size=shape[:-1])
    return np.stack([rows, cols], axis=-1).astype(np_dtype(dtype))


SPECS[("", "GatherND")] = OpSpec(
    ref=_gather_nd, exact=True, domains={"indices": _nd_indices},
    scheme={"basic": [[2, 3, 4], [5, 2]], "dynamic": [[[2, 3, 4], [5, 2]], [[2, 3, 4], [1, 2]], [[2, 3, 4], [3, 2]]]},
)
def _WIDE_SCATTER(attrs=None):  # noqa: N802 - a Variant factory, read like a constant
    """64-bit data over the whole range: MLX's GPU scatter has no 64-bit kernels, so the entry
    scatters the two 32-bit halves; every bit must come back."""
    return Variant("wide_values", attrs or {}, domains={"data": "full", "updates": "full"},
                   when=lambda d: d["T"] in ("int64", "uint64"))


SPECS[("", "ScatterElements")] = OpSpec(
    ref=_scatter_elements, exact=True, domains={"indices": _distinct_axis1_indices},
    scheme={"basic": [[2, 3, 4], [2, 2, 4], [2, 2, 4]], "dynamic": [[[2, 3, 4], [2, 2, 4], [2, 2, 4]], [[2, 3, 4], [2, 1, 4], [2, 1, 4]], [[2, 3, 4], [2, 3, 4], [2, 3, 4]]]},
    variants=[Variant(attrs={"axis": 1}), _WIDE_SCATTER(attrs={"axis": 1}),
              _rep(Variant("add", {"axis": 1, "reduction": "add"}, min_opset=16)),
              _rep(Variant("mul", {"axis": 1, "reduction": "mul"}, min_opset=16)),
              _rep(Variant("max", {"axis": 1, "reduction": "max"}, min_opset=18)),
              _rep(Variant("min", {"axis": 1, "reduction": "min"}, min_opset=18))],
)


def _scatter_nd(xs, a):
    data, idx, upd = xs[0].copy(), xs[1].astype(np.int64), xs[2]
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(a.get("reduction", "none"))
    for pos in np.ndindex(idx.shape[:-1]):
        target = tuple(int(c) % data.shape[j] for j, c in enumerate(idx[pos]))
        data[target] = combine(data[target], upd[pos]) if combine else upd[pos]
    return data


def _distinct_rows(dtype, shape, rng, dtypes):
    """Distinct (row, column) pairs into a [2, 3, 4] tensor, some negative."""
    pairs = [(r, c) for r in range(2) for c in range(3)]
    picked = [pairs[i] for i in rng.permutation(len(pairs))[: int(np.prod(shape[:-1]))]]
    out = np.array([(r - 2 * (r % 2), c) for r, c in picked]).reshape(shape)
    return out.astype(np_dtype(dtype))


SPECS[("", "ScatterND")] = OpSpec(
    ref=_scatter_nd, exact=True, domains={"indices": _distinct_rows},
    scheme={"basic": [[2, 3, 4], [3, 2], [3, 4]], "dynamic": [[[2, 3, 4], [3, 2], [3, 4]], [[2, 3, 4], [1, 2], [1, 4]], [[2, 3, 4], [5, 2], [5, 4]]]},
    variants=[Variant(), _WIDE_SCATTER(),
              _rep(Variant("add", {"reduction": "add"}, min_opset=16)),
              _rep(Variant("mul", {"reduction": "mul"}, min_opset=16)), _rep(Variant("max", {"reduction": "max"}, min_opset=18))],
)
SPECS[("", "Scatter")] = OpSpec(
    ref=_scatter_elements, exact=True, domains={"indices": _distinct_axis1_indices},
    scheme={"basic": [[2, 3, 4], [2, 2, 4], [2, 2, 4]]},
    variants=[Variant(attrs={"axis": 1})],
)


def _tensor_scatter(xs, a):
    past, update = xs[0], xs[1]
    axis = a.get("axis", -2) % past.ndim
    starts = xs[2] if len(xs) > 2 and xs[2] is not None else np.zeros(past.shape[0], np.int64)
    out = past.copy()
    capacity, rows = past.shape[axis], update.shape[axis]
    for b in range(past.shape[0]):
        for r in range(rows):
            j = int(starts[b]) + r
            if a.get("mode", "linear") == "circular":
                j %= capacity
            dst = [b] + [slice(None)] * (past.ndim - 1)
            src = list(dst)
            dst[axis], src[axis] = j, r
            out[tuple(dst)] = update[tuple(src)]
    return out


def _write_starts(limit):
    def make(dtype, shape, rng, dtypes):
        return rng.integers(0, limit + 1, size=shape).astype(np.int64)

    return make


SPECS[("", "TensorScatter")] = OpSpec(
    ref=_tensor_scatter, exact=True,
    domains={"write_indices": _write_starts(3)},  # capacity 5, 2 rows: starts 0..3 stay inside
    scheme={"basic": [[2, 3, 5, 4], [2, 3, 2, 4], [2]]},
    variants=[
        Variant(),
        _rep(Variant("circular", {"mode": "circular"}, domains={"write_indices": _write_starts(9)})),
        _rep(Variant("no_write_indices", present=("past_cache", "update"))),
        _rep(Variant("axis1", {"axis": 1}, shapes=[[2, 6, 3], [2, 4, 3], [2]], domains={"write_indices": _write_starts(2)})),
        _rep(Variant("last_axis", {"axis": -1}, shapes=[[3, 2, 7], [3, 2, 7], [3]], domains={"write_indices": _write_starts(0)})),
    ],
)
