"""com.microsoft MoE and QMoE: expert weights, scales and zero points as initializers, the
tokens and router logits fed, against ORT's CPU EP (bfloat16: a float64 reference; ORT has no
kernel). Float16 MoE without normalize_routing_weights is compared with a float64 reference in
tests/ep/test_moe.py (ORT 1.31.1's CPU kernel answers as if the input were zeros there), as are the QMoE layouts where ORT quantises the activations to
int8 (blocks at accuracy_level 4, 8-bit blocks at every level)."""

from __future__ import annotations

import zlib

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _gelu_tanh, _sigmoid
from specs.quantized import pack, pack_padded, unpack

E, H, I, T = 4, 16, 8, 3  # experts, hidden, inter, tokens of the basic layout


def _np(dtype: str):
    from op_table import np_dtype

    return np_dtype(dtype)


def _rng(case, what: str):
    return np.random.default_rng(zlib.crc32(f"{case.id}/{what}".encode()))


# --------------------------------------------------------------------------------------------
# The reference, in float64


def top_k(keys: np.ndarray, k: int) -> np.ndarray:
    """``[T, E]`` -> ``[T, k]``: the largest keys, an equal one going to the larger index, NaN
    last."""
    index = np.broadcast_to(np.arange(keys.shape[-1]), keys.shape)
    order = np.lexsort((-index, -keys), axis=-1)
    return order[:, :k]


QMOE_MIN_WEIGHT = 1e-8  # ORT's QMoE drops an expert whose weight is not above this


def route(logits, a, quantized, router_weights=None):
    """ORT's CPU routing, special floats included: ``(picked, weights, keep)``, each ``[T, k]``;
    an expert not kept adds nothing to its row (not ``0·y``)."""
    k = a.get("k", 1)
    normalise = a.get("normalize_routing_weights", 0) == 1  # ORT: 2 and -1 do not renormalise
    take = lambda v, picked: np.take_along_axis(v, picked, -1)  # noqa: E731
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if not quantized:  # MoE ranks the probabilities; NaN, +inf or a row of -inf: all NaN
            top = np.where(np.isnan(logits), -np.inf, logits).max(-1, keepdims=True)
            poisoned = np.isnan(logits).any(-1, keepdims=True) | np.isinf(top)
            e = np.exp(logits - top)
            p = e / e.sum(-1, keepdims=True)
            picked = top_k(p, k)
            w = take(p, picked)
            if normalise:
                w = w / w.sum(-1, keepdims=True)
            return picked, w, (w > 0) & ~poisoned
        picked = top_k(logits, k)
        if router_weights is not None:  # ORT's QMoE: the logits only rank
            w = take(router_weights, picked)
            if normalise:
                total = w.sum(-1, keepdims=True)
                w = np.where(total == 0, 0.0, w / np.where(total == 0, 1.0, total))
            return picked, w, w > QMOE_MIN_WEIGHT
        # The softmax over the picked logits, whatever the flag says. ORT's partial_sort keeps a
        # NaN of the first k columns (and no later one): such a row, or one topped by ±inf, is 0.
        chosen = take(logits, picked)
        top = chosen[:, :1]
        poisoned = np.isnan(logits[:, :k]).any(-1, keepdims=True) | np.isinf(top)
        e = np.exp(chosen - top)
        w = e / e.sum(-1, keepdims=True)
        return picked, w, (w > QMOE_MIN_WEIGHT) & ~poisoned


def activate(h, a):
    kind = a.get("activation_type", "relu")
    if kind == "relu":  # ORT's std::max(0.0f, x): NaN gives 0
        return np.where(h > 0, h, 0.0)
    if kind == "gelu":
        return _gelu_tanh(h)
    if kind == "silu":
        return h * _sigmoid(h)
    if kind == "identity":
        return h
    limit = np.float64(np.float32(a.get("swiglu_limit", np.inf)))
    limit = np.inf if np.isnan(limit) else limit  # ORT's std::min/std::clamp with NaN: no limit
    alpha = np.float64(np.float32(a.get("activation_alpha", 1.0)))
    beta = np.float64(np.float32(a.get("activation_beta", 0.0)))
    gate = np.minimum(h[..., 0::2], limit)
    linear = np.clip(h[..., 1::2], -limit, limit)
    return gate * _sigmoid(alpha * gate) * (linear + beta)


def mixture(x, logits, w1, b1, w2, b2, a, quantized=False, router_weights=None):
    """``x [..., H]`` through float64 expert weights ``w1 [E, N1, H]``, ``w2 [E, H, I]``."""
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    picked, weights, keep = route(logits, a, quantized, router_weights)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e, wt in zip(picked[t][keep[t]], weights[t][keep[t]]):
            h = w1[e] @ x[t] + (b1[e] if b1 is not None else 0)
            y = w2[e] @ activate(h, a) + (b2[e] if b2 is not None else 0)
            out[t] += wt * y
    return out.reshape(shape)


def moe_ref(xs, a):
    xs = list(xs) + [None] * (8 - len(xs))
    x, logits, w1, b1, w2, b2 = xs[:6]
    return mixture(x, logits, w1, b1, w2, b2, a)


def dequantise(q, scales, zp, bits, block):
    """uint8 ``[E, N, K·bits/8]`` -> float64 ``[E, N, K]``."""
    values = unpack(q, bits).astype(np.float64)
    e, n, k = values.shape
    width = block or k
    groups = -(-k // width)  # ORT takes a partial last block (and a block wider than K)
    if zp is None:
        zero = np.full((e, n, groups), 2.0 ** (bits - 1))
    elif block:
        zero = unpack(zp, bits)[..., :groups].astype(np.float64)
    else:
        zero = unpack(zp, bits)[..., :n].astype(np.float64).reshape(e, n, 1)
    scale = np.asarray(scales, np.float64).reshape(e, n, groups)
    group_of = np.arange(k) // width
    return (values - zero[..., group_of]) * scale[..., group_of]


def qmoe_ref(xs, a):
    xs = list(xs) + [None] * (21 - len(xs))
    x, logits = xs[0], xs[1]
    bits, block = a.get("expert_weight_bits", 4), a.get("block_size")
    # ORT reads 2-D scales column-wise whatever block_size says.
    w1 = dequantise(xs[2], xs[3], xs[11], bits, block if np.ndim(xs[3]) == 3 else None)
    w2 = dequantise(xs[5], xs[6], xs[12], bits, block if np.ndim(xs[6]) == 3 else None)
    return mixture(x, logits, w1, xs[4], w2, xs[7], a, quantized=True, router_weights=xs[14])


# --------------------------------------------------------------------------------------------
# Weights


def _fc1_rows(a, inter):
    return 2 * inter if a.get("activation_type") == "swiglu" else inter


def _floats(what, shape_of, scale=0.5):
    def make(case):
        shape = shape_of(case.attrs)
        return (_rng(case, what).uniform(-scale, scale, shape)).astype(_np(case.dtypes["T"]))

    return make


def _moe(name, e=E, h=H, i=I, t=T, bias=True, shapes=None, **attrs):
    constants = {
        "fc1_experts_weights": _floats("w1", lambda a: (e, _fc1_rows(a, i), h)),
        "fc1_experts_bias": _floats("b1", lambda a: (e, _fc1_rows(a, i))) if bias else None,
        "fc2_experts_weights": _floats("w2", lambda a: (e, h, i)),
        "fc2_experts_bias": _floats("b2", lambda a: (e, h)) if bias else None,
        "fc3_experts_weights": None,
        "fc3_experts_bias": None,
    }
    # ORT 1.31.1's float16 kernel answers as if the input were zeros unless it renormalises.
    when = None if attrs.get("normalize_routing_weights") else (lambda d: d["T"] != "float16")
    return Variant(name, attrs, constants=constants, shapes=shapes or [[t, h], [t, e]], when=when)


_ACTIVATIONS = ("relu", "gelu", "silu", "identity")
_SWIGLU = dict(activation_type="swiglu", swiglu_fusion=1)
_SWIGLU_OSS = dict(_SWIGLU, activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0)

_MOE_VARIANTS = [_moe("default")]
for _k in (1, 2):
    for _norm in (0, 1):
        for _act in _ACTIVATIONS:
            if (_k, _norm, _act) != (1, 0, "relu"):
                _MOE_VARIANTS.append(_moe(f"k{_k}_norm{_norm}_{_act}", k=_k, normalize_routing_weights=_norm,
                                          activation_type=_act))
_MOE_VARIANTS += [
    _moe("swiglu_k2", k=2, **_SWIGLU),
    _moe("swiglu_oss_norm", k=2, normalize_routing_weights=1, **_SWIGLU_OSS),
    _moe("swiglu_limit_small", k=2, **dict(_SWIGLU, swiglu_limit=0.25)),
    _moe("swiglu_limit_nan", k=2, **dict(_SWIGLU, swiglu_limit=float("nan"))),
    _moe("no_bias", k=2, bias=False, activation_type="silu"),
    _moe("no_bias_swiglu", k=2, bias=False, **_SWIGLU),
    _moe("k_all", k=E, normalize_routing_weights=1),
    _moe("one_row", k=2, t=1),
    _moe("many_rows", k=2, t=40, e=8, activation_type="silu"),
    _moe("input_3d", k=2, shapes=[[2, 3, H], [6, E]]),
    _moe("no_rows", k=2, shapes=[[0, H], [0, E]]),
]
# Router logits with repeated values: a tie at the k-th place goes to the larger expert index.
for _k in (1, 2, 3):
    _v = _moe(f"ties_k{_k}", k=_k, t=12)
    _v.domains = {"router_probs": "ties"}
    _MOE_VARIANTS.append(_v)

SPECS[("com.microsoft", "MoE")] = OpSpec(
    ref=moe_ref,
    scheme={"basic": [[T, H], [T, E]], "dynamic": [[[T, H], [T, E]], [[1, H], [1, E]], [[5, H], [5, E]]]},
    variants=_MOE_VARIANTS,
    tolerance_scale=10.0,  # two products of up to 16 terms and a softmax, in another order
    note="float16 without normalize_routing_weights vs a float64 reference in tests/ep/test_moe.py",
)
SPECS[("com.microsoft", "MoE")].variants[0].shapes = None

# --------------------------------------------------------------------------------------------
# QMoE

_QMOE_PORTS = ("fc1_experts_weights", "fc1_scales", "fc1_experts_bias", "fc2_experts_weights", "fc2_scales",
               "fc2_experts_bias", "fc3_experts_weights", "fc3_scales", "fc3_experts_bias", "fc1_zero_points",
               "fc2_zero_points", "fc3_zero_points", "router_weights", "fc1_global_scale", "fc2_global_scale",
               "fc1_act_scale", "fc2_act_scale", "fc1_act_block_scale", "fc2_act_block_scale")


def _quantized(what, rows_of, cols, bits):
    """Packed uint8 ``[E, rows, cols·bits/8]``."""

    def make(case):
        rows = rows_of(case.attrs)
        q = _rng(case, what).integers(0, 2**bits, (case_experts(case), rows, cols))
        return pack(q, bits)

    return make


def case_experts(case) -> int:
    return case.variant.shapes[1][-1] if case.variant.shapes else E


def _scales(what, rows_of, cols, bits, block, three_d=False):
    def make(case):
        rows = rows_of(case.attrs)
        shape = (case_experts(case), rows) + ((-(-cols // block),) if block else (1,) if three_d else ())
        # Sums of `cols` products keep the same size whatever cols is (float32 tolerances are
        # relative to the output, cancellation errors to the terms).
        s = _rng(case, what).uniform(0.02, 0.1, shape) * 2.0 ** (4 - bits) * np.sqrt(32 / cols)
        return s.astype(_np(case.dtypes["T"]))

    return make


def _zero_points(what, rows_of, cols, bits, block):
    def make(case):
        rows = rows_of(case.attrs)
        e = case_experts(case)
        if block:
            return pack_padded(_rng(case, what).integers(0, 2**bits, (e, rows, -(-cols // block))), bits)
        return pack_padded(_rng(case, what).integers(0, 2**bits, (e, rows)), bits)

    return make


def _router_weights(case):
    t = int(np.prod(case.variant.shapes[0][:-1]))
    return _rng(case, "rw").uniform(0.1, 1.0, (t, case_experts(case))).astype(_np(case.dtypes["T"]))


def _qmoe(name, bits=4, block=None, zp=False, bias=True, e=E, h=32, i=32, t=T, router_weights=False,
          shapes=None, block_attr=None, scales_3d=False, **attrs):
    """``block_attr``: a block_size attribute on column-wise (2-D) scales, which ORT reads
    column-wise; ``scales_3d``: column-wise scales shaped ``[E, rows, 1]``."""
    attrs = dict(attrs, expert_weight_bits=bits)
    if block or block_attr:
        attrs["block_size"] = block or block_attr
    rows1 = lambda a: _fc1_rows(a, i)  # noqa: E731
    constants = {port: None for port in _QMOE_PORTS}
    constants.update({
        "fc1_experts_weights": _quantized("q1", rows1, h, bits),
        "fc1_scales": _scales("s1", rows1, h, bits, block, scales_3d),
        "fc2_experts_weights": _quantized("q2", lambda a: h, i, bits),
        "fc2_scales": _scales("s2", lambda a: h, i, bits, block, scales_3d),
    })
    if bias:
        constants["fc1_experts_bias"] = _floats("b1", lambda a: (e, rows1(a)))
        constants["fc2_experts_bias"] = _floats("b2", lambda a: (e, h))
    if zp:
        constants["fc1_zero_points"] = _zero_points("z1", rows1, h, bits, block)
        constants["fc2_zero_points"] = _zero_points("z2", lambda a: h, i, bits, block)
    if router_weights:
        constants["router_weights"] = _router_weights
    return Variant(name, attrs, constants=constants, shapes=shapes or [[t, h], [t, e]])


_QMOE_VARIANTS = [_qmoe("default", k=2)]
for _bits in (2, 4, 8):
    for _zp in (False, True):
        _QMOE_VARIANTS.append(_qmoe(f"b{_bits}_columns" + ("_zp" if _zp else ""), bits=_bits, zp=_zp, k=2,
                                    activation_type="silu"))
    if _bits != 8:  # 8-bit blocks quantise the activations to int8 in ORT: tests/ep/test_moe.py
        for _block in (16, 32):
            for _zp in (False, True):
                _QMOE_VARIANTS.append(_qmoe(f"b{_bits}_bs{_block}" + ("_zp" if _zp else ""), bits=_bits,
                                            block=_block, zp=_zp, k=2, **_SWIGLU))
for _act in _ACTIVATIONS:
    _QMOE_VARIANTS.append(_qmoe(f"k1_{_act}", activation_type=_act))
_QMOE_VARIANTS += [
    _qmoe("norm0_k2_relu", k=2, normalize_routing_weights=0),
    _qmoe("norm1_k2_relu", k=2, normalize_routing_weights=1),
    _qmoe("swiglu_oss", k=2, block=32, zp=False, normalize_routing_weights=1, **_SWIGLU_OSS),
    _qmoe("swiglu_limit_small", k=2, **dict(_SWIGLU, swiglu_limit=0.25)),
    _qmoe("swiglu_limit_nan", k=2, **dict(_SWIGLU, swiglu_limit=float("nan"))),
    _qmoe("router_weights", k=2, router_weights=True, **_SWIGLU),
    _qmoe("router_weights_norm", k=2, router_weights=True, normalize_routing_weights=1, **_SWIGLU),
    _qmoe("no_bias", k=2, bias=False, block=16, zp=True, **_SWIGLU),
    _qmoe("accuracy_level4_columns", k=2, accuracy_level=4, zp=True),
    _qmoe("weights_prepacked0", k=2, weights_prepacked=0),
    _qmoe("quant_type_int", k=2, quant_type="int"),
    # ORT reads 2-D scales column-wise whatever block_size says, and [E, rows, 1] scales too.
    _qmoe("block_attr_column_scales", k=2, block_attr=16, zp=True),
    _qmoe("columns_scales_3d", k=2, scales_3d=True),  # with zero points: declined (moe.rs)
    # A partial last block, and a block wider than K (one scale per row), as ORT takes them.
    _qmoe("partial_block", h=48, i=48, block=32, zp=True, k=2),
    _qmoe("block_wider_than_k", block=4096, zp=True, k=2, **_SWIGLU),
    _qmoe("k_all", k=E, activation_type="silu"),
    _qmoe("one_row", k=2, t=1, block=32, **_SWIGLU),
    _qmoe("many_rows", k=4, t=40, e=8, block=32, zp=True, **_SWIGLU),
    _qmoe("input_3d", k=2, shapes=[[2, 3, 32], [6, E]]),
    _qmoe("no_rows", k=2, shapes=[[0, 32], [0, E]]),
]
# K >= 128 reaches MLX's gather_qmm (groups of 32 or 64; wider groups repeat their scale per 64).
_QMOE_VARIANTS += [
    _qmoe("affine_b4_columns", h=128, i=128, k=2, activation_type="silu"),
    _qmoe("affine_b8_columns_zp", h=128, i=128, bits=8, zp=True, k=2),
    _qmoe("affine_b2_columns_zp", h=128, i=128, bits=2, zp=True, k=2, activation_type="gelu"),
    _qmoe("affine_b4_columns_group32", h=160, i=160, k=2),  # 160 = 5 groups of 32
    _qmoe("affine_b4_columns_dequantised", h=136, i=136, k=2),  # 136: no MLX group, dequantised
    _qmoe("affine_b4_bs32", h=128, i=128, block=32, k=2, **_SWIGLU),
    _qmoe("affine_b4_bs64_zp", h=128, i=256, block=64, zp=True, k=2, **_SWIGLU),
    _qmoe("affine_b2_bs128_zp", h=256, i=128, block=128, zp=True, k=2),
    _qmoe("affine_b4_bs256", h=256, i=256, block=256, k=2, **_SWIGLU_OSS),
    _qmoe("affine_b4_bs16", h=128, i=128, block=16, zp=True, k=2),  # blocks of 16: dequantised
    _qmoe("affine_partial_block", h=160, i=160, block=64, zp=True, k=2),  # 160 = 2.5 blocks: groups of 32
    _qmoe("affine_block_wider_than_k", h=128, i=128, block=512, k=2),
    _qmoe("affine_many_rows", h=128, i=128, e=8, t=33, block=32, k=4, normalize_routing_weights=1, **_SWIGLU),
    _qmoe("affine_router_weights", h=128, i=128, block=64, k=2, router_weights=True, **_SWIGLU),
]
for _k in (1, 2):
    _v = _qmoe(f"ties_k{_k}", k=_k, t=12)
    _v.domains = {"router_probs": "ties"}
    _QMOE_VARIANTS.append(_v)

SPECS[("com.microsoft", "QMoE")] = OpSpec(
    ref=qmoe_ref,
    scheme={"basic": [[T, 32], [T, E]], "dynamic": [[[T, 32], [T, E]], [[1, 32], [1, E]], [[5, 32], [5, E]]]},
    variants=_QMOE_VARIANTS,
    tolerance_scale=20.0,  # two products of 32 terms of dequantised weights, in another order
    note="int8-activation layouts (blocks at accuracy_level 4, 8-bit blocks) in tests/ep/test_moe.py",
)
SPECS[("com.microsoft", "QMoE")].variants[0].shapes = None
