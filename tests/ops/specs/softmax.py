"""Softmax, LogSoftmax, Hardmax (opset-13 form per axis, opsets 1-12 flattened at `axis`) and
com.microsoft BiasSoftmax (op-specs/src/softmax.rs)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep, by_opset


def _softmax_like(x, axis, legacy, f):
    x = np.asarray(x)
    # ORT's kernels keep the axis in 32 bits (2^63 - 1 is -1), and the EP with them: the
    # reference judges the float16/bfloat16 models ORT has no kernel for by the same reading.
    axis = (int(axis) + 2**31) % 2**32 - 2**31
    if legacy:
        axis = axis + x.ndim if axis < 0 else axis
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = x.reshape(outer, int(np.prod(x.shape[axis:], dtype=np.int64)))
        return f(flat, 1).reshape(x.shape)
    return f(x, axis)


def _softmax(x, axis):
    if x.size == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    if x.size == 0:
        return x.copy()
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def _hardmax(x, axis):
    out = np.zeros_like(x)
    if x.size == 0:
        return out
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    np.put_along_axis(out, idx, 1.0, axis=axis)
    return out


def _flattened(spec: OpSpec) -> OpSpec:
    """Opsets 1-12: the same cases, the input flattened to 2-D at `axis` (default 1)."""
    legacy = OpSpec(**{**spec.__dict__})
    inner = spec.ref
    legacy.ref = lambda xs, a: inner(xs, a, legacy=True)
    return legacy


for _op, _f in (("Softmax", _softmax), ("LogSoftmax", _log_softmax), ("Hardmax", _hardmax)):
    _spec = OpSpec(
        ref=(lambda f: lambda xs, a, legacy=False: _softmax_like(xs[0], a.get("axis", 1 if legacy else -1), legacy, f))(_f),
        exact=(_op == "Hardmax"), scheme="softmax",
        variants=[Variant(), Variant("axis0", {"axis": 0}), Variant("axis1", {"axis": 1}),
                  Variant("axis_neg2", {"axis": -2}, min_opset=11), Variant("peaked", domains={"*": "peaked"})],
    )
    SPECS[("", _op)] = by_opset(_spec, (12, _flattened(_spec)))


def _bias_softmax(xs, a):
    total = xs[0] + xs[1]
    axis = a.get("axis", 1) % total.ndim
    flat = total.reshape(int(np.prod(total.shape[:axis])), -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(total.shape)


SPECS[("com.microsoft", "BiasSoftmax")] = OpSpec(
    ref=_bias_softmax,
    scheme={"basic": [[2, 3, 4, 5], [2, 3, 4, 5]],
            "dynamic": [[[2, 3, 4, 5], [2, 3, 4, 5]], [[1, 3, 2, 2], [1, 3, 2, 2]], [[2, 1, 1, 6], [2, 1, 1, 6]]]},
    variants=[
        Variant("last_axis", {"axis": 3, "is_inner_broadcast": 0}),
        _rep(Variant("outer_broadcast", {"axis": -1, "is_inner_broadcast": 0}, shapes=[[2, 3, 4, 5], [4, 5]])),
        _rep(Variant("inner_broadcast", {"axis": 3, "is_inner_broadcast": 1}, shapes=[[2, 3, 4, 5], [2, 1, 4, 5]])),
        _rep(Variant("flattened", {"axis": 2, "is_inner_broadcast": 0})),
    ],
)
