"""Reductions (op-specs/src/reduce.rs): the Reduce* ops, ArgMax, ArgMin."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _i64, _rep


def _reduce(f, float_exact=False):
    def ref(xs, a):
        x = xs[0]
        axes = xs[1] if len(xs) > 1 and xs[1] is not None else a.get("axes")
        keep = bool(a.get("keepdims", 1))
        if axes is None or len(axes) == 0:
            if a.get("noop_with_empty_axes", 0):
                # Nothing is reduced, but the pre/post-processing still applies (|x| for L1,
                # log for LogSum, ...): ONNX's reference reduces over axes=().
                return f(x, (), keep)
            axes = range(x.ndim)
        axes = tuple(sorted({int(v) % x.ndim for v in axes})) if x.ndim else ()
        return f(x, axes, keep)

    return ref


def _native(x):
    return x.dtype if x.dtype.kind in "iu" else np.float64


def _extreme(fn, fill_float, int_attr):
    def f(x, axes, keep):
        if x.dtype == np.bool_:
            # Over an empty set: False for max, True for min (the bool extremes).
            return fn(x, axis=axes, keepdims=keep, initial=int_attr == "max")
        initial = fill_float if x.dtype.kind == "f" else getattr(np.iinfo(x.dtype), int_attr)
        return fn(x, axis=axes, keepdims=keep, initial=initial)

    return f


def _mean(x, axes, keep):
    """The mean, and 0 over an empty set as ORT's CPU EP gives it (ONNX leaves it undefined,
    numpy says NaN): the value a float16/bfloat16 model, which ORT has no kernel for, is held to."""
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return np.sum(x, axis=axes, keepdims=keep) / max(count, 1)


def _log_sum_exp(x, axes, keep):
    """Shifted by the finite maximum, as ORT's kernels compute it: the unshifted form overflows
    at exp(710) even in float64, where a float16 row of 65504s has a finite log-sum-exp (65504)."""
    top = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    top = np.where(np.isfinite(top), top, 0.0)
    out = top + np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True))
    return out if keep else np.squeeze(out, axis=axes)


REDUCERS = {
    "ReduceSum": (lambda x, ax, k: np.sum(x, axis=ax, keepdims=k, dtype=_native(x)), "any"),
    "ReduceMean": (_mean, "any"),
    "ReduceMax": (_extreme(np.max, -np.inf, "min"), "ties"),
    "ReduceMin": (_extreme(np.min, np.inf, "max"), "ties"),
    "ReduceProd": (lambda x, ax, k: np.prod(x, axis=ax, keepdims=k, dtype=_native(x)), "near_one"),
    "ReduceSumSquare": (lambda x, ax, k: np.sum(x * x, axis=ax, keepdims=k, dtype=_native(x)), "any"),
    "ReduceL1": (lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k, dtype=_native(x)), "any"),
    "ReduceL2": (lambda x, ax, k: np.sqrt(np.sum(x * x, axis=ax, keepdims=k)), "any"),
    "ReduceLogSum": (lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k)), "positive"),
    "ReduceLogSumExp": (_log_sum_exp, "any"),
}
_REDUCE_SCHEME = {"basic": [[2, 3, 4]], "scalar": [[]], "transposed": [[3, 4]],
                  "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]}


def reduce_spec(op: str, axes_input: bool) -> OpSpec:
    f, dom = REDUCERS[op]

    def axes(values):
        return {"constants": {"axes": _i64(*values)}} if axes_input else {"attrs": {"axes": list(values)}}

    variants = [
        Variant("all_axes", constants={"axes": None} if axes_input else {}),
        _rep(Variant("axis1_drop", **_merge(axes([1]), {"keepdims": 0}))),
        _rep(Variant("axes02", **axes([0, 2]))),
        _rep(Variant("axis_neg1", **axes([-1]), min_opset=11)),
        _rep(Variant("empty_rows", **axes([1]), shapes=[[0, 3]])),
    ]
    variants.append(_rep(Variant("over_empty_axis", **_merge(axes([0]), {"keepdims": 0}), shapes=[[0, 3]])))
    if axes_input:
        variants.append(_rep(Variant("noop_with_empty_axes", {"noop_with_empty_axes": 1}, constants={"axes": None})))
    exact = op in ("ReduceMax", "ReduceMin")
    # ORT's CPU EP sums int64 and multiplies integers in floating point; the entries decline those
    # (int64 ReduceSum runs, checked at run time to stay where doubles are exact: the "any" domain).
    declined = {"ReduceSumSquare": ("int64",), "ReduceL1": ("int64",), "ReduceProd": ("int64", "int32")}
    return OpSpec(ref=_reduce(f), exact=exact, domains={"*": dom}, scheme=_REDUCE_SCHEME, variants=variants,
                  combos=lambda d: d["T"] not in declined.get(op, ()))


def _reduce_selector(op: str):
    """The axes move from an attribute to an input at opset 18 (ReduceSum: 13)."""
    return lambda entry: reduce_spec(op, axes_input=any(p.name == "axes" for p in entry.inputs))


for _op in REDUCERS:
    SPECS[("", _op)] = _reduce_selector(_op)


def _merge(kw: dict, attrs: dict) -> dict:
    kw = {k: dict(v) for k, v in kw.items()}
    kw.setdefault("attrs", {}).update(attrs)
    return kw


def _arg(fn):
    def ref(xs, a):
        x = xs[0]
        axis = a.get("axis", 0) % x.ndim
        keep = bool(a.get("keepdims", 1))
        if a.get("select_last_index", 0):
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)
        idx = idx.astype(np.int64)
        return np.expand_dims(idx, axis) if keep else idx

    return ref


for _op, _f in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
    SPECS[("", _op)] = OpSpec(
        ref=_arg(_f), exact=True, domains={"*": "ties"},
        scheme={"basic": [[2, 3, 4]], "transposed": [[3, 4]], "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
        variants=[Variant(), _rep(Variant("axis1_drop", {"axis": 1, "keepdims": 0})),
                  _rep(Variant("axis_neg1", {"axis": -1}, min_opset=11)),
                  Variant("select_last_index", {"axis": 1, "select_last_index": 1})],
    )
