"""Convolution and per-channel ops, channels-first as ONNX has them (op-specs/src/conv.rs): Conv,
ConvTranspose, com.microsoft FusedConv, BatchNormalization, GlobalAveragePool, GlobalMaxPool."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _GLOBAL_POOL_SCHEME, _rep


def _conv(xs, a):
    x, w = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 and xs[2] is not None else None
    n = x.ndim - 2
    strides, dil, group = a.get("strides", [1] * n), a.get("dilations", [1] * n), a.get("group", 1)
    pads = a.get("pads", [0] * 2 * n)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)])
    kernel = w.shape[2:]
    span = [(kernel[i] - 1) * dil[i] + 1 for i in range(n)]
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=tuple(range(2, 2 + n)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) + tuple(slice(None, None, d) for d in dil)]
    channels, out_channels = x.shape[1] // group, w.shape[0] // group
    out_idx, k_idx = "abcdefgh"[:n], "pqrstuvw"[:n]
    parts = [
        np.einsum(f"nc{out_idx}{k_idx},mc{k_idx}->nm{out_idx}", win[:, g * channels:(g + 1) * channels], w[g * out_channels:(g + 1) * out_channels])
        for g in range(group)
    ]
    y = np.concatenate(parts, axis=1)
    return y if bias is None else y + bias.reshape([1, -1] + [1] * n)


def _batch_norm(xs, a):
    x, scale, bias, mean, var = xs
    shape = [1, -1] + [1] * (x.ndim - 2)
    r = lambda p: p.reshape(shape)  # noqa: E731
    return (x - r(mean)) / np.sqrt(r(var) + a.get("epsilon", 1e-5)) * r(scale) + r(bias)


SPECS[("", "Conv")] = OpSpec(
    ref=_conv,
    tolerance_scale=10.0,  # each output sums 27-54 products: float32 rounding grows with them
    scheme={"basic": [[2, 3, 6, 6], [4, 3, 3, 3], [4]],
            "dynamic": [[[2, 3, 6, 6], [4, 3, 3, 3], [4]], [[1, 3, 5, 7], [4, 3, 3, 3], [4]], [[3, 3, 4, 4], [4, 3, 3, 3], [4]]]},
    variants=[
        Variant(),
        _rep(Variant("strided", {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}, shapes=[[1, 3, 9, 10], [4, 3, 3, 3], [4]])),
        _rep(Variant("groups", {"group": 3}, shapes=[[1, 6, 5, 5], [6, 2, 3, 3], [6]])),
        _rep(Variant("conv1d_no_bias", {"pads": [1, 1]}, present=(), shapes=[[2, 3, 8], [5, 3, 3]])),
    ],
)
def _conv_transpose(xs, a):
    x, w = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 and xs[2] is not None else None
    n = x.ndim - 2
    strides, dil, group = a.get("strides", [1] * n), a.get("dilations", [1] * n), a.get("group", 1)
    extra = a.get("output_padding", [0] * n)
    kernel = w.shape[2:]
    ins = x.shape[2:]
    full = [strides[i] * (ins[i] - 1) + extra[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(n)]
    auto_pad = a.get("auto_pad", "NOTSET")
    if "output_shape" in a or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = a["output_shape"][-n:] if "output_shape" in a else [ins[i] * strides[i] for i in range(n)]
        total = [full[i] - target[i] for i in range(n)]
        half = [int(t / 2) for t in total]
        if min(total) < 0:
            head = [0] * n; tail = total
        elif auto_pad == "SAME_UPPER":
            head = half; tail = [total[i] - half[i] for i in range(n)]
        else:
            head = [total[i] - half[i] for i in range(n)]; tail = half
        pads = head + tail
    else:
        pads = a.get("pads", [0] * 2 * n)
    cin_g, cout_g = x.shape[1] // group, w.shape[1]
    y = np.zeros((x.shape[0], cout_g * group, *full), np.float64)
    for g in range(group):
        xg = x[:, g * cin_g:(g + 1) * cin_g].astype(np.float64)
        wg = w[g * cin_g:(g + 1) * cin_g].astype(np.float64)
        for k in np.ndindex(*kernel):
            contrib = np.einsum("nc...,cm->nm...", xg, wg[(slice(None), slice(None)) + k])
            idx = tuple(slice(k[i] * dil[i], k[i] * dil[i] + strides[i] * (ins[i] - 1) + 1, strides[i]) for i in range(n))
            y[(slice(None), slice(g * cout_g, (g + 1) * cout_g)) + idx] += contrib
    # crop (or extend with zeros where the padding is negative)
    sl = []
    for i in range(n):
        lo, hi = pads[i], pads[n + i]
        if lo < 0 or hi < 0:
            y = np.pad(y, [(0, 0)] * (2 + i) + [(max(0, -lo), max(0, -hi))] + [(0, 0)] * (n - 1 - i))
            lo, hi = max(lo, 0), max(hi, 0)
        sl.append(slice(lo, y.shape[2 + i] - hi))
    y = y[(slice(None), slice(None)) + tuple(sl)]
    return y if bias is None else y + bias.reshape([1, -1] + [1] * n)


def _fused_conv(xs, a):
    x, w, b, z = (list(xs) + [None] * 4)[:4]
    y = _conv([x, w, b], a)
    y = y if z is None else y + z
    p = a.get("activation_params", [])
    act = {
        "Relu": lambda v: np.maximum(v, 0),
        "Tanh": np.tanh,
        "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "LeakyRelu": lambda v: np.where(v >= 0, v, p[0] * v),
        "HardSigmoid": lambda v: np.clip(p[0] * v + p[1], 0, 1),
        "Clip": lambda v: np.clip(v, p[0], p[1]),
    }.get(a.get("activation"), lambda v: v)
    return act(y)


SPECS[("", "ConvTranspose")] = OpSpec(
    ref=_conv_transpose,
    tolerance_scale=10.0,  # each output sums up to 27 products
    scheme={"basic": [[2, 3, 4, 4], [3, 2, 3, 3], [2]],
            "dynamic": [[[2, 3, 4, 4], [3, 2, 3, 3], [2]], [[1, 3, 5, 3], [3, 2, 3, 3], [2]], [[3, 3, 2, 2], [3, 2, 3, 3], [2]]]},
    variants=[
        Variant(),
        _rep(Variant("strided_padded", {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [1, 2], "output_padding": [1, 0]})),
        _rep(Variant("groups", {"group": 3, "strides": [2, 1]}, shapes=[[1, 6, 3, 3], [6, 2, 2, 2], [6]])),
        _rep(Variant("same_upper", {"auto_pad": "SAME_UPPER", "strides": [2]}, shapes=[[1, 2, 5], [2, 3, 3], [3]])),
        _rep(Variant("same_lower", {"auto_pad": "SAME_LOWER", "strides": [2]}, shapes=[[1, 2, 5], [2, 3, 3], [3]])),
        _rep(Variant("output_shape_odd", {"output_shape": [10], "strides": [2]}, shapes=[[1, 2, 5], [2, 3, 3], [3]])),
        _rep(Variant("output_shape_upper", {"output_shape": [10], "strides": [2], "auto_pad": "SAME_UPPER"}, shapes=[[1, 2, 5], [2, 3, 3], [3]])),
        _rep(Variant("output_shape_past_full", {"output_shape": [11], "strides": [2]}, shapes=[[1, 2, 5], [2, 3, 2], [3]])),
        _rep(Variant("conv3d_no_bias", {"strides": [1, 2, 1]}, present=(), shapes=[[1, 2, 2, 3, 2], [2, 2, 2, 2, 2]])),
    ],
)
SPECS[("com.microsoft", "FusedConv")] = OpSpec(
    ref=_fused_conv,
    tolerance_scale=10.0,
    scheme={"basic": [[2, 3, 6, 6], [4, 3, 3, 3], [4], [2, 4, 4, 4]],
            "dynamic": [[[2, 3, 6, 6], [4, 3, 3, 3], [4], [2, 4, 4, 4]], [[1, 3, 5, 5], [4, 3, 3, 3], [4], [1, 4, 3, 3]],
                        [[3, 3, 4, 3], [4, 3, 3, 3], [4], [3, 4, 2, 1]]]},
    variants=[
        Variant("relu", {"activation": "Relu"}),
        _rep(Variant("none_no_z", {}, present=("B",))),
        _rep(Variant("tanh", {"activation": "Tanh", "pads": [1, 1, 1, 1]}, present=("B",))),
        _rep(Variant("sigmoid", {"activation": "Sigmoid"}, present=("B",))),
        _rep(Variant("leaky", {"activation": "LeakyRelu", "activation_params": [0.1]})),
        _rep(Variant("hard_sigmoid", {"activation": "HardSigmoid", "activation_params": [0.2, 0.5]}, present=("B",))),
        _rep(Variant("clip", {"activation": "Clip", "activation_params": [-0.5, 0.5], "strides": [2, 2]}, present=("B",),
                     shapes=[[1, 3, 7, 7], [4, 3, 3, 3], [4]])),
    ],
)
SPECS[("", "BatchNormalization")] = OpSpec(
    ref=_batch_norm,
    domains={"input_var": "positive"},
    scheme={"basic": [[2, 3, 4, 5], [3], [3], [3], [3]], "empty": [[0, 3, 2], [3], [3], [3], [3]],
            "dynamic": [[[2, 3, 4, 5], [3], [3], [3], [3]], [[1, 3, 2, 2], [3], [3], [3], [3]], [[4, 3, 1, 1], [3], [3], [3], [3]]]},
    variants=[Variant(outputs=()), _rep(Variant("epsilon", {"epsilon": 1e-2}, outputs=()))],
)
SPECS[("", "GlobalAveragePool")] = OpSpec(
    ref=lambda xs, a: xs[0].mean(axis=tuple(range(2, xs[0].ndim)), keepdims=True), scheme=_GLOBAL_POOL_SCHEME
)
SPECS[("", "GlobalMaxPool")] = OpSpec(
    ref=lambda xs, a: xs[0].max(axis=tuple(range(2, xs[0].ndim)), keepdims=True), exact=True, scheme=_GLOBAL_POOL_SCHEME
)
