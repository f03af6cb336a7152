"""Normalisations (op-specs/src/normalization.rs): LayerNormalization, RMSNormalization, LpNormalization,
LRN, InstanceNormalization, MeanVarianceNormalization, GroupNormalization, Dropout (inference)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep, _standardise, by_opset
from op_table import np_dtype


def _layer_norm(xs, a):
    x, scale = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 and xs[2] is not None else 0.0
    axis = a.get("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True) if x.size else np.zeros([d if i < axis else 1 for i, d in enumerate(x.shape)])
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True) if x.size else mean
    inv = 1.0 / np.sqrt(var + a.get("epsilon", 1e-5))
    return [(x - mean) * inv * scale + bias, mean.astype(np.float32), inv.astype(np.float32)]


def _rms_norm(xs, a):
    x, scale = xs[0].astype(np.float64), xs[1]
    axes = tuple(range(a.get("axis", -1) % x.ndim, x.ndim))
    mean_square = (x * x).mean(axis=axes, keepdims=True) if x.size else 0.0
    return (x / np.sqrt(mean_square + a.get("epsilon", 1e-5)) * scale).astype(scale.dtype)


SPECS[("", "RMSNormalization")] = OpSpec(
    ref=_rms_norm,
    scheme={"basic": [[2, 3, 8], [8]], "empty": [[0, 8], [8]],
            "dynamic": [[[2, 3, 8], [8]], [[1, 5, 8], [8]], [[4, 1, 8], [8]]]},
    variants=[
        Variant(),
        _rep(Variant("axis1", {"axis": 1, "epsilon": 1e-3}, shapes=[[2, 3, 4], [3, 4]])),
        _rep(Variant("axis_neg2_broadcast_scale", {"axis": -2}, shapes=[[2, 3, 4], [1, 4]])),
        _rep(Variant("axis0", {"axis": 0}, shapes=[[3, 4], [3, 4]])),
    ],
)


def _lp_normalization(xs, a):
    x = xs[0].astype(np.float64)
    axis, p = a.get("axis", -1), a.get("p", 2)
    norm = (np.abs(x) ** p).sum(axis=axis, keepdims=True) ** (1.0 / p)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm == 0, 0.0, x / norm).astype(xs[0].dtype)


def _with_zero_rows(dtype, shape, rng, dtypes):
    """Random values with ``x[0]`` all zeros: zero norms along every axis but the first."""
    x = rng.standard_normal(shape).astype(np_dtype(dtype))
    if x.ndim and x.shape[0]:
        x[0] = 0
    return x


SPECS[("", "LpNormalization")] = OpSpec(
    ref=_lp_normalization,
    domains={"input": _with_zero_rows},
    scheme={"basic": [[3, 4, 5]], "empty": [[0, 5]], "dynamic": [[[3, 4, 5]], [[1, 2, 7]], [[2, 6, 1]]]},
    variants=[
        Variant(),
        _rep(Variant("p1", {"p": 1})),
        _rep(Variant("axis0", {"axis": 0})),
        _rep(Variant("axis1_p1", {"axis": 1, "p": 1})),
    ],
)


def _lrn(xs, a):
    x = xs[0].astype(np.float64)
    size, channels = a["size"], x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    window_sum = np.zeros_like(x)
    for c in range(channels):
        window_sum[:, c] = (x[:, max(0, c - before):min(channels, c + after + 1)] ** 2).sum(axis=1)
    scale = a.get("bias", 1.0) + a.get("alpha", 1e-4) / size * window_sum
    return (x / scale ** a.get("beta", 0.75)).astype(xs[0].dtype)


SPECS[("", "LRN")] = OpSpec(
    ref=_lrn,
    scheme={"basic": [[2, 5, 3, 4]], "empty": [[0, 5, 3, 4]], "dynamic": [[[2, 5, 3, 4]], [[1, 2, 2, 2]], [[3, 6, 1, 5]]]},
    variants=[
        Variant(attrs={"size": 3}),
        _rep(Variant("size5_params", {"size": 5, "alpha": 0.5, "beta": 0.6, "bias": 2.0})),
        _rep(Variant("size_past_channels", {"size": 11, "alpha": 2.0})),
    ],
    note="an even size (refused when the session is created) and ranks other than 4 (refused at run time) "
         "fail on ORT's CPU EP; tests/ep/test_fuzz_findings_numeric.py checks both",
)
SPECS[("", "LayerNormalization")] = OpSpec(
    ref=_layer_norm,
    scheme={"basic": [[2, 3, 8], [8], [8]], "empty": [[0, 8], [8], [8]],
            "dynamic": [[[2, 3, 8], [8], [8]], [[1, 5, 8], [8], [8]], [[4, 1, 8], [8], [8]]]},
    variants=[
        Variant(),
        _rep(Variant("axis1", {"axis": 1, "epsilon": 1e-3}, shapes=[[2, 3, 4], [3, 4], [3, 4]])),
        _rep(Variant("no_bias", {}, present=())),
    ],
)


def _instance_norm(xs, a):
    x, scale, bias = xs
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    shape = [1, -1] + [1] * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5)) * scale.reshape(shape) + bias.reshape(shape)


def _mvn(xs, a):
    """ORT's float32 kernel, which float16 and bfloat16 (no ORT kernel) follow: two passes in float32, sums
    over the count, no epsilon, so a constant block is 0 / 0 = NaN (the spec's function body takes
    E[x^2] - E[x]^2, which loses every digit far from zero); rounded once to the input's type."""
    x, axes = xs[0].astype(np.float32), tuple(a.get("axes", [0, 2, 3]))
    count = np.float32(np.prod([x.shape[i] for i in axes]))
    centred = x - x.sum(axis=axes, keepdims=True, dtype=np.float32) / count
    variance = (centred * centred).sum(axis=axes, keepdims=True, dtype=np.float32) / count
    return centred / np.sqrt(variance)


SPECS[("", "InstanceNormalization")] = OpSpec(
    ref=_instance_norm, tolerance_scale=4.0,
    scheme={"basic": [[2, 3, 4, 5], [3], [3]], "dynamic": [[[2, 3, 4, 5], [3], [3]], [[1, 3, 2, 2], [3], [3]], [[3, 3, 1, 6], [3], [3]]]},
)
SPECS[("", "MeanVarianceNormalization")] = OpSpec(
    ref=_mvn, tolerance_scale=4.0, scheme={"basic": [[2, 3, 4, 5]], "dynamic": [[[2, 3, 4, 5]], [[1, 3, 2, 2]], [[3, 2, 1, 6]]]},
    variants=[Variant(), _rep(Variant("axes", {"axes": [1, 3]}))],
)
DROPOUT_LEGACY = OpSpec(  # Dropout-7..11: no optional inputs
    ref=lambda xs, a: [xs[0]], exact=True, scheme={"basic": [[2, 3, 4]]}, variants=[Variant(outputs=())])
DROPOUT = OpSpec(  # Dropout-12+: ratio and training_mode inputs
    ref=lambda xs, a: [xs[0], np.ones(xs[0].shape, dtype=bool)], exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    variants=[Variant(present=())],
)
SPECS[("", "Dropout")] = by_opset(DROPOUT, (11, DROPOUT_LEGACY))


def _group_norm(per_group):
    def ref(xs, a):
        x, scale, bias = xs
        g = a["num_groups"]
        grouped = x.reshape(x.shape[0], g, x.size // max(x.shape[0] * g, 1))
        y = _standardise(grouped, (2,), a.get("epsilon", 1e-5))[0]
        if per_group:
            y = y * scale.reshape(1, g, 1) + bias.reshape(1, g, 1)
            return y.reshape(x.shape)
        shape = [1, -1] + [1] * (x.ndim - 2)
        return y.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)

    return ref


# No "empty" layout: ORT's CPU EP (its function body's Reshape) refuses an empty X, and so does the
# entry (tests/ep/test_fuzz_findings_numeric.py checks both).
_GROUP_NORM_SCHEME = {"basic": [[2, 6, 3, 2], [6], [6]],
                      "dynamic": [[[2, 6, 3, 2], [6], [6]], [[1, 6, 5, 1], [6], [6]], [[3, 6, 1, 1], [6], [6]]]}
GROUP_NORM = OpSpec(  # GroupNormalization-21+: scale and bias per channel
    ref=_group_norm(per_group=False), tolerance_scale=4.0, scheme=_GROUP_NORM_SCHEME,
    variants=[Variant("groups3", {"num_groups": 3}), _rep(Variant("groups1_eps", {"num_groups": 1, "epsilon": 1e-2})),
              _rep(Variant("groups6", {"num_groups": 6}))],
)
GROUP_NORM_18 = OpSpec(  # GroupNormalization-18..20: scale and bias per group
    ref=_group_norm(per_group=True), tolerance_scale=4.0,
    scheme={"basic": [[2, 6, 3, 2], [3], [3]], "dynamic": [[[2, 6, 3, 2], [3], [3]], [[1, 6, 5, 1], [3], [3]], [[3, 6, 1, 1], [3], [3]]]},
    variants=[Variant("groups3", {"num_groups": 3})],
)
SPECS[("", "GroupNormalization")] = by_opset(GROUP_NORM, (20, GROUP_NORM_18))
