"""Shape ops (op-specs/src/shape.rs): data movement, exact. Target shapes, axes and split sizes are
host-known (initializers), as the entries need them at trace time."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _by_layout, _i64, _rep, by_opset


def _shape_of(xs, a):
    shape = np.array(xs[0].shape, dtype=np.int64)
    start, end = a.get("start", 0), a.get("end", None)
    return shape[start:end]


def _reshape(xs, a):
    x, target = xs[0], [int(v) for v in xs[1]]
    if not a.get("allowzero", 0):
        target = [x.shape[i] if v == 0 else v for i, v in enumerate(target)]
    if -1 in target:
        known = int(np.prod([v for v in target if v != -1], dtype=np.int64))
        target[target.index(-1)] = x.size // known if known else 0
    return x.reshape(target)


def _squeeze(xs, a):
    x = xs[0]
    axes = xs[1] if len(xs) > 1 and xs[1] is not None else a.get("axes")
    if axes is None:
        return x.reshape([d for d in x.shape if d != 1])
    return np.squeeze(x, axis=tuple(int(v) % x.ndim for v in axes))


def _unsqueeze(xs, a):
    x = xs[0]
    axes = xs[1] if len(xs) > 1 and xs[1] is not None else a["axes"]
    rank = x.ndim + len(axes)
    out = x
    for ax in sorted(int(v) % rank for v in axes):
        out = np.expand_dims(out, ax)
    return out


def _flatten(xs, a):
    x = xs[0]
    axis = a.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    return x.reshape(outer, inner)


def _split(n_outputs_of):
    def ref(xs, a):
        x = xs[0]
        axis = a.get("axis", 0) % x.ndim
        dim = x.shape[axis]
        sizes = xs[1] if len(xs) > 1 and xs[1] is not None else a.get("split")
        if sizes is None:
            n = a.get("num_outputs") or n_outputs_of(a)
            chunk = -(-dim // n)
            sizes = [min(chunk, dim - i * chunk) for i in range(n)]
        cuts = np.cumsum([int(s) for s in sizes])[:-1]
        return list(np.split(x, cuts, axis=axis))

    return ref


def _expand(xs, a):
    x, shape = xs[0], tuple(int(v) for v in xs[1])
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, shape)).copy()


UNARY_SHAPES = {
    "basic": [[2, 3, 4]], "scalar": [[]], "empty": [[0, 3]], "transposed": [[3, 4]],
    "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]],
}
SPECS[("", "Shape")] = OpSpec(
    ref=_shape_of, exact=True, scheme=UNARY_SHAPES,
    variants=[Variant()] + [_rep(Variant(n, a)) for n, a in (
        ("start1", {"start": 1}), ("end_neg1", {"end": -1}), ("clamped", {"start": -10, "end": 10}),
        ("start_after_end", {"start": 2, "end": 1}))],
)
SPECS[("", "Size")] = OpSpec(ref=lambda xs, a: np.array(xs[0].size, dtype=np.int64), exact=True, scheme=UNARY_SHAPES)
SPECS[("", "Reshape")] = OpSpec(
    ref=_reshape, exact=True,
    scheme={"basic": [[2, 3, 4]], "scalar": [[]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 4]], [[4, 1, 2]]]},
    constants={"shape": _by_layout(default=_i64(2, -1), scalar=_i64(1), empty=_i64(0, 1, 3))},
    variants=[
        Variant(),
        _rep(Variant("copy_zero", constants={"shape": _i64(0, -1)})),
        _rep(Variant("rank4", constants={"shape": _i64(3, 2, 2, 2)})),
        _rep(Variant("to_scalar", constants={"shape": np.zeros(0, np.int64)}, shapes=[[1, 1]])),
        _rep(Variant("allowzero", {"allowzero": 1}, constants={"shape": _i64(3, 0)}, shapes=[[0, 3]])),
    ],
)
SPECS[("", "Expand")] = OpSpec(
    ref=_expand, exact=True,
    scheme={"basic": [[3, 1]], "scalar": [[]], "empty": [[0, 1]], "transposed": [[3, 1]],
            "dynamic": [[[3, 1]], [[5, 1]], [[1, 1]]]},
    constants={"shape": _by_layout(default=_i64(2, 1, 4), scalar=_i64(2, 3), empty=_i64(0, 3))},
    variants=[
        Variant(),
        _rep(Variant("same_rank", constants={"shape": _i64(3, 4)})),
        _rep(Variant("shape_has_ones", constants={"shape": _i64(1, 1, 1)}, shapes=[[2, 3]])),
    ],
)
SQUEEZE = OpSpec(  # Squeeze-13+: axes as an input
    ref=_squeeze, exact=True,
    scheme={"basic": [[2, 1, 3, 1]], "empty": [[0, 1, 3, 1]], "transposed": [[2, 1, 3, 1]],
            "dynamic": [[[2, 1, 3, 1]], [[4, 1, 2, 1]], [[1, 1, 5, 1]]]},
    constants={"axes": _i64(1, 3)},
    variants=[Variant(), _rep(Variant("no_axes", constants={"axes": None})),
              _rep(Variant("negative_axes", constants={"axes": _i64(-1)}))],
)
UNSQUEEZE = OpSpec(  # Unsqueeze-13+: axes as an input
    ref=_unsqueeze, exact=True,
    scheme={"basic": [[2, 3]], "scalar": [[]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3]], [[1, 5]], [[4, 1]]]},
    constants={"axes": _by_layout(default=_i64(0, 3), scalar=_i64(0))},
    variants=[Variant(), _rep(Variant("negative_axes", constants={"axes": _i64(-1)})),
              _rep(Variant("unsorted_axes", constants={"axes": _i64(3, 0, 1)}))],
)


def _axes_attribute(spec: OpSpec, variants) -> OpSpec:
    """Squeeze/Unsqueeze-1..12: the axes as an attribute, which does not follow the layout (no
    scalar layout)."""
    scheme = dict(spec.scheme)
    scheme.pop("scalar", None)
    return OpSpec(ref=spec.ref, exact=True, scheme=scheme, variants=[
        Variant(n, {} if v is None else {"axes": v}, sweep=(n == "default")) for n, v in variants])


SPECS[("", "Squeeze")] = by_opset(SQUEEZE, (12, _axes_attribute(SQUEEZE, [("default", [1, 3]), ("no_axes", None)])))
SPECS[("", "Unsqueeze")] = by_opset(
    UNSQUEEZE, (12, _axes_attribute(UNSQUEEZE, [("default", [0, 3]), ("unsorted_axes", [3, 0, 1])])))
SPECS[("", "Flatten")] = OpSpec(
    ref=_flatten, exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3, 2]], "transposed": [[2, 3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    variants=[Variant()] + [_rep(Variant(n, {"axis": v})) for n, v in (("axis0", 0), ("axis3", 3))] + [
        _rep(Variant("axis_neg1", {"axis": -1}, min_opset=11))],
)
SPECS[("", "Transpose")] = OpSpec(
    ref=lambda xs, a: np.transpose(xs[0], a.get("perm")), exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    variants=[Variant(), _rep(Variant("perm102", {"perm": [1, 0, 2]})), _rep(Variant("perm021", {"perm": [0, 2, 1]}))],
)
SPECS[("", "Concat")] = OpSpec(
    ref=lambda xs, a: np.concatenate(xs, axis=a["axis"]), exact=True,
    scheme={"basic": [[2, 1], [2, 3], [2, 4]], "empty": [[2, 0], [2, 3], [2, 1]], "transposed": [[2, 1], [2, 3], [2, 4]],
            "dynamic": [[[2, 1], [2, 3], [2, 4]], [[3, 2], [3, 1], [3, 1]], [[1, 1], [1, 1], [1, 5]]]},
    variants=[
        Variant("axis1", {"axis": 1}, n_variadic=3),
        _rep(Variant("axis0", {"axis": 0}, n_variadic=3, shapes=[[1, 3], [2, 3], [4, 3]])),
        _rep(Variant("axis_neg1", {"axis": -1}, n_variadic=3, min_opset=11)),
        _rep(Variant("one_input", {"axis": 0}, n_variadic=1, shapes=[[2, 3]])),
    ],
)
_SPLIT_SCHEME = {"basic": [[2, 6, 3]], "empty": [[0, 6, 3]], "transposed": [[2, 6, 3]],
                 "dynamic": [[[2, 6, 3]], [[1, 6, 2]], [[3, 6, 1]]]}
SPLIT_LEGACY = OpSpec(  # Split-2..12: `split` attribute
    ref=_split(lambda a: a["_n_outputs"]), exact=True, scheme=_SPLIT_SCHEME,
    variants=[
        Variant("split_attr", {"axis": 1, "split": [1, 2, 3]}, n_outputs=3),
        _rep(Variant("equal", {"axis": 1}, n_outputs=3)),
        _rep(Variant("axis0_equal", {}, n_outputs=2)),
    ],
)
SPLIT = OpSpec(  # Split-13+: `split` input, or from opset 18 `num_outputs`
    ref=_split(lambda a: a["_n_outputs"]), exact=True, scheme=_SPLIT_SCHEME, constants={"split": _i64(1, 2, 3)},
    variants=[
        Variant("split_input", {"axis": 1}, n_outputs=3),
        _rep(Variant("equal", {"axis": 1}, n_outputs=3, constants={"split": None})),
        _rep(Variant("negative_axis", {"axis": -2}, n_outputs=3)),
        _rep(Variant("num_outputs", {"axis": 1, "num_outputs": 3}, n_outputs=3, constants={"split": None})),
        _rep(Variant("num_outputs_uneven", {"axis": 1, "num_outputs": 4}, n_outputs=4, constants={"split": None},
                     shapes=[[2, 7, 3]])),
    ],
)
SPECS[("", "Split")] = by_opset(SPLIT, (12, SPLIT_LEGACY))


def _slice(xs, a):
    x = xs[0]
    if len(xs) > 1:
        starts, ends = xs[1], xs[2]
        axes = xs[3] if len(xs) > 3 and xs[3] is not None else None
        steps = xs[4] if len(xs) > 4 and xs[4] is not None else None
    else:
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for s_, e_, ax, st in zip(starts, ends, axes, steps):
        index[int(ax) % x.ndim] = slice(int(s_), int(e_), int(st))  # numpy clamps as ONNX does
    return x[tuple(index)]


_INT_MAX, _INT_MIN = 2**31 - 1, -(2**31)  # fit int32 and int64 alike
_SLICE_SCHEME = {"basic": [[4, 5, 6]], "empty": [[0, 5, 6]], "transposed": [[4, 5, 6]],
                 "dynamic": [[[4, 5, 6]], [[3, 3, 3]], [[6, 2, 8]]]}
SLICE = OpSpec(  # Slice-10+: host-known starts/ends/axes/steps inputs
    ref=_slice, exact=True, scheme=_SLICE_SCHEME,
    constants={"starts": _i64(1, 0), "ends": _i64(3, -1), "axes": _i64(0, 2), "steps": None},
    variants=[
        Variant(),
        _rep(Variant("steps", constants={"steps": _i64(1, 2)})),
        _rep(Variant("negative_step", constants={"starts": _i64(-1), "ends": _i64(_INT_MIN), "axes": _i64(1), "steps": _i64(-2)})),
        _rep(Variant("no_axes", constants={"starts": _i64(0, 1, 2), "ends": _i64(2, 4, 5), "axes": None})),
        _rep(Variant("clamped", constants={"starts": _i64(-100, 2), "ends": _i64(_INT_MAX, 100), "axes": _i64(0, -1)})),
        _rep(Variant("empty_result", constants={"starts": _i64(3), "ends": _i64(1), "axes": _i64(1)})),
    ],
)
SLICE_LEGACY = OpSpec(  # Slice-1..9: attributes
    ref=_slice, exact=True, scheme=_SLICE_SCHEME,
    variants=[
        Variant(attrs={"starts": [1, 0], "ends": [3, -1], "axes": [0, 2]}),
        _rep(Variant("no_axes", {"starts": [0, 1, 2], "ends": [2, 4, 5]})),
        _rep(Variant("clamped", {"starts": [-100, 2], "ends": [_INT_MAX, 100], "axes": [0, 2]})),
    ],
)
SPECS[("", "Slice")] = by_opset(SLICE, (9, SLICE_LEGACY))
