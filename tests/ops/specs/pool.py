"""Pooling (op-specs/src/pool.rs): MaxPool, AveragePool, LpPool, GlobalLpPool."""

from __future__ import annotations

import itertools
import math

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _GLOBAL_POOL_SCHEME, _rep


def _pool(kind):
    """ONNX MaxPool / AveragePool / LpPool ("max", "average", "lp"), one output element at a
    time (independent of the EP's strided-window lowering)."""

    def ref(xs, a):
        x = xs[0].astype(np.float64)
        size = x.shape[2:]
        n = len(size)
        kernel = a["kernel_shape"]
        strides, dil = a.get("strides", [1] * n), a.get("dilations", [1] * n)
        span = [(kernel[i] - 1) * dil[i] + 1 for i in range(n)]
        auto_pad, ceil = a.get("auto_pad", "NOTSET"), a.get("ceil_mode", 0)
        lo, hi, out = [], [], []
        for i in range(n):
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                count = -(-size[i] // strides[i])
                total = max(0, (count - 1) * strides[i] + span[i] - size[i])
                small = total // 2
                lo.append(small if auto_pad == "SAME_UPPER" else total - small)
                hi.append(total - lo[-1])
            else:
                pads = a.get("pads", [0] * 2 * n) if auto_pad == "NOTSET" else [0] * 2 * n
                lo.append(pads[i])
                hi.append(pads[i + n])
                room = size[i] + lo[i] + hi[i] - span[i]
                count = -(-room // strides[i]) + 1 if ceil else room // strides[i] + 1
                if ceil and (count - 1) * strides[i] >= size[i] + lo[i]:
                    count -= 1
            out.append(count)
        y = np.zeros(x.shape[:2] + tuple(out))
        indices = np.zeros(x.shape[:2] + tuple(out), np.int64)
        column_major = a.get("storage_order", 0) == 1
        # Flat index of every element of x, spatial axes column-major for storage_order 1.
        spatial_order = list(range(n))[::-1] if column_major else list(range(n))
        flat = np.zeros(x.shape, np.int64)
        stride = 1
        for i in reversed(spatial_order):
            shape = [1] * x.ndim
            shape[2 + i] = size[i]
            flat = flat + np.arange(size[i]).reshape(shape) * stride
            stride *= size[i]
        flat = flat + (np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], *[1] * n) * stride)
        for o in itertools.product(*(range(c) for c in out)):
            taps = [[o[i] * strides[i] - lo[i] + j * dil[i] for j in range(kernel[i])] for i in range(n)]
            inside = [[t for t in axis if 0 <= t < size[i]] for i, axis in enumerate(taps)]
            window = x[(Ellipsis,) + np.ix_(*inside)]
            window = window.reshape(x.shape[:2] + (math.prod(window.shape[2:]),))
            if kind == "max":
                y[(Ellipsis,) + o] = window.max(axis=-1)
                where = flat[(Ellipsis,) + np.ix_(*inside)].reshape(window.shape)
                first = window.argmax(axis=-1)[..., None]
                indices[(Ellipsis,) + o] = np.take_along_axis(where, first, axis=-1)[..., 0]
            elif kind == "lp":
                p = a.get("p", 2)
                y[(Ellipsis,) + o] = (np.abs(window) ** p).sum(axis=-1) ** (1.0 / p)
            else:
                counted = window.shape[-1]
                if a.get("count_include_pad", 0):
                    counted = np.prod([sum(-lo[i] <= t < size[i] + hi[i] for t in axis) for i, axis in enumerate(taps)])
                y[(Ellipsis,) + o] = window.sum(axis=-1) / counted
        return [y.astype(xs[0].dtype), indices] if kind == "max" else y.astype(xs[0].dtype)

    return ref


_POOL_SCHEME = {"basic": [[2, 3, 7, 8]], "empty": [[0, 3, 7, 8]], "dynamic": [[[2, 3, 7, 8]], [[1, 2, 5, 5]], [[1, 4, 9, 6]]]}
_POOL_VARIANTS = [
    Variant(attrs={"kernel_shape": [2, 2]}, outputs=()),
    _rep(Variant("strided_pads", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, outputs=())),
    _rep(Variant("asymmetric_pads", {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [0, 1, 2, 1]}, outputs=())),
    _rep(Variant("ceil_mode", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, outputs=(), min_opset=10)),
    _rep(Variant("ceil_mode_pads", {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
                 outputs=(), min_opset=10)),
    _rep(Variant("same_upper", {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, outputs=())),
    _rep(Variant("same_lower", {"kernel_shape": [2, 3], "strides": [1, 2], "auto_pad": "SAME_LOWER"}, outputs=())),
    _rep(Variant("valid", {"kernel_shape": [3, 3], "strides": [2, 1], "auto_pad": "VALID"}, outputs=())),
    _rep(Variant("pool1d", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, outputs=(), shapes=[[2, 3, 9]])),
    _rep(Variant("pool3d", {"kernel_shape": [2, 2, 2]}, outputs=(), shapes=[[1, 2, 3, 4, 5]])),
]
SPECS[("", "MaxPool")] = OpSpec(
    ref=_pool("max"),
    exact=True,
    scheme=_POOL_SCHEME,
    domains={"X": "ties"},  # repeated values: the first maximum in window order must win
    variants=_POOL_VARIANTS + [
        _rep(Variant("dilations", {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 1, 0, 2]}, outputs=(), min_opset=10)),
        Variant("indices", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, min_opset=8),
        _rep(Variant("indices_column_major", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1],
                                              "storage_order": 1}, min_opset=8)),
        _rep(Variant("indices_ceil_dilations", {"kernel_shape": [2, 2], "strides": [2, 2], "dilations": [2, 1],
                                                "ceil_mode": 1}, min_opset=10)),
        _rep(Variant("indices_3d", {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2]}, shapes=[[1, 2, 3, 4, 5]], min_opset=8)),
        _rep(Variant("indices_3d_column_major", {"kernel_shape": [2, 2, 2], "storage_order": 1}, shapes=[[1, 2, 3, 4, 5]],
                     min_opset=8)),
    ],
)
SPECS[("", "AveragePool")] = OpSpec(
    ref=_pool("average"),
    scheme=_POOL_SCHEME,
    variants=_POOL_VARIANTS + [
        _rep(Variant("count_include_pad", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 2, 1, 0], "count_include_pad": 1},
                     outputs=())),
        _rep(Variant("count_include_pad_ceil", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                                 "count_include_pad": 1, "ceil_mode": 1}, outputs=(), min_opset=10)),
        _rep(Variant("dilations", {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 1, 0, 2]}, outputs=(), min_opset=19)),
    ],
)
_LP_POOL_VARIANTS = [v for v in _POOL_VARIANTS if "ceil_mode" not in v.name] + [
    _rep(Variant("ceil_mode", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, outputs=(), min_opset=18)),
    _rep(Variant("dilations", {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 1, 0, 2]}, outputs=(), min_opset=18)),
    _rep(Variant("p1", {"kernel_shape": [2, 3], "p": 1, "strides": [1, 2]}, outputs=())),
    _rep(Variant("p3", {"kernel_shape": [3, 2], "p": 3, "pads": [1, 0, 1, 1]}, outputs=())),
]
SPECS[("", "LpPool")] = OpSpec(ref=_pool("lp"), scheme=_POOL_SCHEME, variants=_LP_POOL_VARIANTS)
SPECS[("", "GlobalLpPool")] = OpSpec(
    ref=lambda xs, a: (np.abs(xs[0].astype(np.float64)) ** a.get("p", 2)).sum(axis=tuple(range(2, xs[0].ndim)), keepdims=True)
    ** (1.0 / a.get("p", 2)),
    scheme=_GLOBAL_POOL_SCHEME,
    variants=[Variant(), _rep(Variant("p1", {"p": 1})), _rep(Variant("p3", {"p": 3}))],
)


def _max_unpool(xs, a):
    x, idx = xs[0], xs[1].astype(np.int64)
    k, r = a["kernel_shape"], len(a["kernel_shape"])
    strides, pads = a.get("strides", [1] * r), a.get("pads", [0] * (2 * r))
    if len(xs) > 2 and xs[2] is not None:
        shape = [int(v) for v in xs[2]]
    else:
        shape = list(x.shape[:2]) + [(x.shape[2 + d] - 1) * strides[d] + k[d] - pads[d] - pads[r + d] for d in range(r)]
    y = np.zeros(int(np.prod(shape)), x.dtype)
    for i, v in zip(idx.reshape(-1), x.reshape(-1)):  # the last write wins, as in ORT's loop
        y[i] = v
    return y.reshape(shape)


def _unpool_indices(total, repeats=False):
    """Flat indices into an output of `total` elements: distinct, or (repeats) with duplicates."""

    def make(dtype, shape, rng, dtypes):
        n = int(np.prod(shape))
        picked = rng.integers(0, total, size=n) if repeats else rng.choice(total, size=n, replace=False)
        return picked.reshape(shape).astype(np.int64)

    return make


SPECS[("", "MaxUnpool")] = OpSpec(
    ref=_max_unpool, exact=True,
    domains={"I": _unpool_indices(2 * 3 * 4 * 6)},
    scheme={"basic": [[2, 3, 2, 3], [2, 3, 2, 3]]},
    variants=[
        Variant(attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, present=("X", "I")),
        _rep(Variant("repeated_indices", {"kernel_shape": [2, 2], "strides": [2, 2]}, present=("X", "I"),
                     domains={"I": _unpool_indices(2 * 3 * 4 * 6, repeats=True)})),
        _rep(Variant("pads", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 1]}, present=("X", "I"),
                     domains={"I": _unpool_indices(2 * 3 * 4 * 5)})),
        _rep(Variant("output_shape", {"kernel_shape": [2, 2], "strides": [2, 2]},
                     constants={"output_shape": np.array([2, 3, 5, 7], np.int64)},
                     domains={"I": _unpool_indices(2 * 3 * 5 * 7)})),
        _rep(Variant("one_d", {"kernel_shape": [3], "strides": [2]}, present=("X", "I"),
                     shapes=[[1, 2, 4], [1, 2, 4]], domains={"I": _unpool_indices(1 * 2 * 9)})),
    ],
)
