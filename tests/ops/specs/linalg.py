"""Linear algebra (op-specs/src/linalg.rs): MatMul, Gemm, Einsum, com.microsoft FusedMatMul."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep
from op_table import np_dtype


def _gemm(xs, a):
    lhs, rhs = xs[0], xs[1]
    if a.get("transA"):
        lhs = lhs.T
    if a.get("transB"):
        rhs = rhs.T
    y = a.get("alpha", 1.0) * (lhs @ rhs)
    if len(xs) > 2 and xs[2] is not None:
        y = y + a.get("beta", 1.0) * xs[2]
    return y


SPECS[("", "MatMul")] = OpSpec(
    ref=lambda xs, a: np.matmul(xs[0], xs[1]),
    scheme={
        "basic": [[2, 3, 4], [4, 5]], "broadcast": [[2, 1, 3, 4], [3, 4, 5]], "broadcast2": [[4], [2, 4, 3]],
        "empty": [[0, 4], [4, 3]], "transposed": [[3, 4], [4, 2]],
        "dynamic": [[[2, 3], [3, 4]], [[5, 3], [3, 2]], [[1, 2], [2, 6]]],
    },
)
SPECS[("", "Gemm")] = OpSpec(
    ref=_gemm,
    scheme={
        "basic": [[3, 4], [4, 5], [5]], "broadcast": [[3, 4], [4, 5], [3, 1]], "transposed": [[3, 4], [4, 5], [3, 5]],
        "dynamic": [[[3, 4], [4, 5], [5]], [[2, 4], [4, 6], [6]], [[1, 2], [2, 3], [3]]],
    },
    variants=[
        Variant(),
        _rep(Variant("trans_alpha_beta", {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, shapes=[[4, 3], [5, 4], [5]])),
        _rep(Variant("no_c", {"alpha": 2.0}, present=(), shapes=[[3, 4], [4, 5]], min_opset=11)),  # C optional from Gemm-11
    ],
)


def _fused_matmul(xs, a):
    def operand(x, batch, trans):
        if batch and x.ndim >= 3:
            x = np.moveaxis(x, 0, -2)
        return np.swapaxes(x, -1, -2) if trans and x.ndim >= 2 else x

    a_ = operand(xs[0], a.get("transBatchA", 0), a.get("transA", 0))
    b_ = operand(xs[1], a.get("transBatchB", 0), a.get("transB", 0))
    return a.get("alpha", 1.0) * np.matmul(a_, b_)


SPECS[("com.microsoft", "FusedMatMul")] = OpSpec(
    ref=_fused_matmul,
    scheme={"basic": [[2, 3, 4], [4, 5]], "empty": [[0, 4], [4, 3]],
            "dynamic": [[[2, 3], [3, 4]], [[5, 3], [3, 2]], [[1, 2], [2, 6]]]},
    variants=[
        Variant("alpha", {"alpha": 0.5}),
        _rep(Variant("trans_both", {"transA": 1, "transB": 1}, shapes=[[2, 4, 3], [5, 4]])),
        _rep(Variant("trans_batch_a", {"transBatchA": 1, "alpha": 2.0}, shapes=[[3, 2, 4, 5], [2, 4, 5, 6]])),
        _rep(Variant("trans_batch_both", {"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1},
                     shapes=[[3, 2, 5, 4], [6, 2, 5, 3]])),
        _rep(Variant("vector", {}, shapes=[[4], [2, 4, 3]])),
    ],
)


def _einsum(xs, a):
    return np.einsum(a["equation"], *xs)


SPECS[("", "Einsum")] = OpSpec(
    ref=_einsum,
    scheme={"basic": [[2, 3, 4], [2, 4, 5]], "empty": [[2, 0, 4], [2, 4, 5]],
            "dynamic": [[[2, 3, 4], [2, 4, 5]], [[1, 5, 2], [1, 2, 3]], [[3, 1, 1], [3, 1, 4]]]},
    variants=[
        Variant("batched_matmul", {"equation": "bij,bjk->bik"}),
        _rep(Variant("attention_scores", {"equation": "bhid, bhjd -> bhij"}, shapes=[[1, 2, 3, 4], [1, 2, 5, 4]])),
        _rep(Variant("ellipsis", {"equation": "...ij,...jk->...ik"}, shapes=[[2, 3, 4, 5], [2, 3, 5, 2]])),
        _rep(Variant("diagonal", {"equation": "ii->i"}, n_variadic=1, shapes=[[4, 4]])),
        _rep(Variant("trace_implicit", {"equation": "ii"}, n_variadic=1, shapes=[[3, 3]])),
        _rep(Variant("transpose", {"equation": "ij->ji"}, n_variadic=1, shapes=[[2, 3]])),
        _rep(Variant("sum_all", {"equation": "ijk->"}, n_variadic=1, shapes=[[2, 3, 4]])),
        _rep(Variant("outer", {"equation": "i,j->ij"}, shapes=[[3], [4]])),
        _rep(Variant("dot", {"equation": "i,i"}, shapes=[[5], [5]])),
        _rep(Variant("three", {"equation": "ij,jk,kl->il"}, n_variadic=3, shapes=[[2, 3], [3, 4], [4, 2]])),
        _rep(Variant("broadcast_ellipsis", {"equation": "ab...,b->a..."}, shapes=[[2, 3, 4], [3]])),
    ],
)


def _singular(dtype, shape, rng, dtypes):
    """Small integers with one column all zeros (an exact 0) or two equal rows."""
    x = rng.integers(-3, 4, size=shape).astype(np.float32)
    x[..., :, 0] = 0
    x[..., 1, :] = x[..., -1, :]
    return x.astype(np_dtype(dtype))


def _det(xs, a):
    return np.linalg.det(xs[0].astype(np.float64)).astype(xs[0].dtype)


SPECS[("", "Det")] = OpSpec(
    ref=_det, tolerance_scale=10.0,
    scheme={"basic": [[3, 3]], "dynamic": [[[2, 4, 4]], [[3, 2, 2]], [[1, 1, 1]]]},
    variants=[
        Variant(),
        _rep(Variant("batched", shapes=[[2, 3, 5, 5]])),
        _rep(Variant("one_by_one", shapes=[[4, 1, 1]])),
        _rep(Variant("empty_matrix", shapes=[[2, 0, 0]])),
        _rep(Variant("singular", shapes=[[3, 4, 4]], domains={"X": _singular})),
    ],
)
