"""com.microsoft MatMulNBits and GatherBlockQuantized: block-quantised weights as initializers
(packed uint8 values or int4/uint4 tables, scales, zero points), activations or indices fed,
against ORT's CPU EP
(accuracy_level unset or 1: ORT dequantises exactly) or, for bfloat16, a float64 reference.
accuracy_level 4 (ORT quantises A to int8) is compared with the float64 reference in
tests/ep/test_quantized.py."""

from __future__ import annotations

import zlib

import numpy as np

from op_specs import SPECS, OpSpec, Variant

# --------------------------------------------------------------------------------------------
# Packing, as ORT's kernels read it: `8 / bits` values per byte, low bits first.


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """``q [..., L]`` (L a multiple of 8 / bits) -> uint8 ``[..., L * bits / 8]``."""
    per = 8 // bits
    q = np.asarray(q).astype(np.uint8).reshape(q.shape[:-1] + (q.shape[-1] // per, per))
    out = np.zeros(q.shape[:-1], np.uint8)
    for j in range(per):
        out |= (q[..., j] << (bits * j)).astype(np.uint8)
    return out


def unpack(b: np.ndarray, bits: int) -> np.ndarray:
    """uint8 ``[..., L]`` -> int64 ``[..., L * 8 / bits]``."""
    per = 8 // bits
    b = np.asarray(b).astype(np.int64)
    parts = [(b >> (bits * j)) & ((1 << bits) - 1) for j in range(per)]
    return np.stack(parts, -1).reshape(b.shape[:-1] + (b.shape[-1] * per,))


def pack_padded(q: np.ndarray, bits: int) -> np.ndarray:
    """Packs ``q [..., L]``, padding L with zeros to whole bytes."""
    per = 8 // bits
    width = -(-q.shape[-1] // per) * per
    padded = np.zeros(q.shape[:-1] + (width,), np.int64)
    padded[..., : q.shape[-1]] = q
    return pack(padded, bits)


def _rng(case, what: str):
    return np.random.default_rng(zlib.crc32(f"{case.id}/{what}".encode()))


def _np(dtype: str):
    from op_table import np_dtype

    return np_dtype(dtype)


# --------------------------------------------------------------------------------------------
# MatMulNBits


def _nbits_dims(a: dict):
    k, n, bs, bits = a["K"], a["N"], a["block_size"], a.get("bits", 4)
    return k, n, bs, bits, -(-k // bs)


def _b(case):
    k, n, bs, bits, kb = _nbits_dims(case.attrs)
    q = _rng(case, "B").integers(0, 2**bits, (n, kb * bs))
    return pack(q, bits).reshape(n, kb, bs * bits // 8)


def _scales(case):
    k, n, bs, bits, kb = _nbits_dims(case.attrs)
    s = _rng(case, "scales").uniform(0.02, 0.2, (n, kb)) * 2.0 ** (4 - bits)
    s = s.astype(_np(case.dtypes["T1"]))
    return s.reshape(-1) if case.variant.name.startswith("scales1d") else s


def _zp_packed(case):
    k, n, bs, bits, kb = _nbits_dims(case.attrs)
    return pack_padded(_rng(case, "zp").integers(0, 2**bits, (n, kb)), bits)


def _zp_float(case):
    k, n, bs, bits, kb = _nbits_dims(case.attrs)
    return _rng(case, "zp").uniform(0, 2**bits - 1, (n, kb)).astype(_np(case.dtypes["T1"]))


def _bias(case):
    n = case.attrs["N"]
    return _rng(case, "bias").uniform(-1, 1, (n,)).astype(_np(case.dtypes["T1"]))


def _g_idx(padded: bool):
    def make(case):
        k, n, bs, bits, kb = _nbits_dims(case.attrs)
        g = _rng(case, "g_idx").integers(0, kb, kb * bs if padded else k)
        return g.astype(np.int32)

    return make


def matmul_nbits_ref(xs, a):
    """float64 ``A · dequant(B)ᵀ + bias``."""
    A, B, scales = xs[0], xs[1], xs[2]
    zp = xs[3] if len(xs) > 3 else None
    g_idx = xs[4] if len(xs) > 4 else None
    bias = xs[5] if len(xs) > 5 else None
    k, n, bs, bits, kb = _nbits_dims(a)
    q = unpack(np.asarray(B).reshape(n, -1), bits)[:, :k].astype(np.float64)
    scales = np.asarray(scales, np.float64).reshape(n, kb)
    if zp is None:
        zp = np.full((n, kb), 2.0 ** (bits - 1))
    elif np.asarray(zp).dtype == np.uint8:
        zp = unpack(np.asarray(zp).reshape(n, -1), bits)[:, :kb].astype(np.float64)
    else:
        zp = np.asarray(zp, np.float64).reshape(n, kb)
    block_of = np.clip(np.asarray(g_idx)[:k], 0, kb - 1) if g_idx is not None else np.arange(k) // bs
    w = (q - zp[:, block_of]) * scales[:, block_of]
    y = np.asarray(A, np.float64) @ w.T
    return y + np.asarray(bias, np.float64) if bias is not None else y


def _mnb(name, k=64, n=24, bs=32, bits=4, rows=3, zp=None, bias=False, g_idx=None, acc=None, shapes=None):
    attrs = {"K": k, "N": n, "block_size": bs, "bits": bits}
    if acc is not None:
        attrs["accuracy_level"] = acc
    constants = {"B": _b, "scales": _scales, "zero_points": None, "g_idx": None, "bias": None}
    if zp == "uint8":
        constants["zero_points"] = _zp_packed
    elif zp == "float":
        constants["zero_points"] = _zp_float
    if g_idx is not None:
        constants["g_idx"] = _g_idx(padded=g_idx == "padded")
    if bias:
        constants["bias"] = _bias
    # T3 is the zero points' type: uint8 when they are packed, T1 otherwise (absent ones too).
    when = (lambda d: d["T3"] == "uint8") if zp == "uint8" else (lambda d: d["T3"] == d["T1"])
    return Variant(name, attrs, constants=constants, shapes=shapes or [[rows, k]], when=when)


_MNB_VARIANTS = [_mnb("default")]
for _bits in (2, 4, 8):
    for _bs in (16, 32, 64, 128, 256):
        if (_bits, _bs) != (4, 32):
            _MNB_VARIANTS.append(_mnb(f"b{_bits}_bs{_bs}", k=max(64, _bs), bits=_bits, bs=_bs))
    _MNB_VARIANTS += [
        _mnb(f"b{_bits}_zp_uint8", k=96, bits=_bits, zp="uint8"),  # 3 blocks: a half-used zero point byte
        _mnb(f"b{_bits}_ragged_k", k=100, bits=_bits),  # K % block != 0: the last block padded
        _mnb(f"b{_bits}_ragged_k_bs16", k=40, bits=_bits, bs=16, zp="uint8"),
        _mnb(f"b{_bits}_ragged_k_bs256", k=300, bits=_bits, bs=256, zp="uint8", bias=True),
    ]
    if _bits != 8:  # ORT's CPU kernel fails on 8-bit float zero points (declined)
        _MNB_VARIANTS += [
            _mnb(f"b{_bits}_zp_float", k=96, bits=_bits, zp="float"),
            _mnb(f"b{_bits}_zp_float_bs16", k=48, bits=_bits, bs=16, zp="float"),
        ]
_MNB_VARIANTS += [
    _mnb("bias", bias=True),
    _mnb("bias_zp_bs128", k=256, bs=128, zp="uint8", bias=True),
    _mnb("decode_row", k=128, n=40, shapes=[[1, 128]]),
    _mnb("decode_3d", k=128, n=40, bs=64, shapes=[[1, 1, 128]], bias=True),
    _mnb("prefill_3d", k=128, n=40, bs=128, zp="uint8", shapes=[[2, 7, 128]]),
    _mnb("a_1d", shapes=[[64]]),
    _mnb("scales1d", k=96, zp="uint8"),
    _mnb("accuracy_level1", acc=1),
    _mnb("empty_rows", shapes=[[0, 64]]),
    _mnb("g_idx", k=64, bs=16, g_idx="k"),
    _mnb("g_idx_padded_ragged", k=56, bs=16, g_idx="padded", bias=True),
    _mnb("g_idx_zp_float", k=96, bs=32, g_idx="k", zp="float"),
    _mnb("g_idx_bs128", k=200, bs=128, g_idx="k"),
]

SPECS[("com.microsoft", "MatMulNBits")] = OpSpec(
    ref=matmul_nbits_ref,
    scheme={"basic": [[3, 64]], "dynamic": [[[3, 64]], [[1, 64]], [[5, 64]]]},
    combos=lambda d: d["T3"] in ("uint8", d["T1"]),
    variants=_MNB_VARIANTS,
    # Sums of up to 300 products (in another order than ORT's): float tolerances x 20.
    tolerance_scale=20.0,
    note="weights are initializers; accuracy_level 4 is in tests/ep/test_quantized.py",
)
_DEFAULT = SPECS[("com.microsoft", "MatMulNBits")].variants[0]
_DEFAULT.shapes = None  # the basic and dynamic layouts take the scheme's shapes (K = 64)

# --------------------------------------------------------------------------------------------
# GatherBlockQuantized

_ROWS = 6  # indices are drawn from [-8, 7]: a few out of range (rows of zeros, as ORT)


def _indices(dtype, shape, rng, dtypes):
    return rng.integers(-_ROWS - 2, _ROWS + 1, size=shape, endpoint=True).astype(_np(dtype))


def _gbq_dims(case):
    a = case.attrs
    bits, bs = a.get("bits", 4), a.get("block_size", 128)
    width = case.variant.name.split("_w")[-1] if "_w" in case.variant.name else "64"
    mid = [3] if "3d" in case.variant.name else []
    return bits, bs, [_ROWS] + mid, int(width)


def _gbq_q(case):
    bits, bs, lead, width = _gbq_dims(case)
    return _rng(case, "q").integers(0, 2**bits, lead + [width])


def _gbq_data(case):
    return pack(_gbq_q(case), _gbq_dims(case)[0])


def _gbq_scales(case):
    bits, bs, lead, width = _gbq_dims(case)
    s = _rng(case, "scales").uniform(0.05, 1.0, lead + [-(-width // bs)]) * 2.0 ** (4 - bits)
    return s.astype(_np(case.dtypes["T2"]))


def _gbq_zp(case):
    bits, bs, lead, width = _gbq_dims(case)
    return pack_padded(_rng(case, "zp").integers(0, 2**bits, lead + [-(-width // bs)]), bits)


def gather_block_quantized_ref(xs, a):
    data, indices, scales = xs[0], np.asarray(xs[1]), np.asarray(xs[2], np.float64)
    zp = xs[3] if len(xs) > 3 else None
    if np.asarray(data).dtype in (_np("int4"), _np("uint4")):
        return _gather_four_bit_ref(np.asarray(data), indices, scales, zp, a)
    bits, bs = a.get("bits", 4), a.get("block_size", 128)
    q = unpack(data, bits).astype(np.float64)
    width = q.shape[-1]
    if zp is None:
        z = np.full(scales.shape, 2.0 ** (bits - 1))
    else:
        z = unpack(np.asarray(zp), bits)[..., : scales.shape[-1]].astype(np.float64)
    per = lambda v: np.repeat(v, bs, axis=-1)[..., :width]  # noqa: E731
    w = (q - per(z)) * per(scales)
    rows = w.shape[0]
    inside = (indices >= -rows) & (indices < rows)
    picked = w[np.where(inside, indices, 0)]
    return np.where(inside.reshape(inside.shape + (1,) * (w.ndim - 1)), picked, 0.0)


def _gather_four_bit_ref(data, indices, scales, zp, a):
    """int4/uint4 tables: any gather and quantize axes, zero points 0 when absent."""
    bs = a.get("block_size", 128)
    g, qa = a.get("gather_axis", 0) % data.ndim, a.get("quantize_axis", 1) % data.ndim
    dim = data.shape[qa]
    per = lambda v: np.repeat(np.asarray(v).astype(np.float64), bs, axis=qa).take(range(dim), axis=qa)  # noqa: E731
    w = data.astype(np.float64) * 1.0
    if zp is not None:
        w = w - per(zp)
    w = w * per(scales)
    n = data.shape[g]
    inside = (indices >= -n) & (indices < n)
    picked = np.take(w, np.where(inside, indices, 0), axis=g)
    keep = inside.reshape((1,) * g + inside.shape + (1,) * (data.ndim - g - 1))
    return np.where(keep, picked, 0.0)


def _gbq(name, bits=4, bs=32, zp=False, **attrs):
    attrs = dict({"bits": bits, "block_size": bs}, **attrs)
    constants = {"data": _gbq_data, "scales": _gbq_scales, "zero_points": _gbq_zp if zp else None}
    return Variant(name, attrs, constants=constants, when=lambda d: d["T1"] == "uint8")


# int4/uint4 tables: (data shape, gather_axis, quantize_axis, block_size); the gathered axis has
# _ROWS entries.
_FOUR_BIT_LAYOUTS = {
    "n4": ([_ROWS, 40], 0, 1, 16),
    "n4_bs32": ([_ROWS, 64], 0, -1, 32),
    "n4_qa0": ([40, _ROWS], 1, 0, 16),
    "n4_same_axis": ([_ROWS, 5], 0, 0, 16),
    "n4_3d": ([2, _ROWS, 33], 1, 2, 16),
}


def _four_bit(case, what: str):
    shape, g, qa, bs = _FOUR_BIT_LAYOUTS[case.variant.name.removesuffix("_zp")]
    t = case.dtypes["T1"]
    low, high = (-8, 7) if t == "int4" else (0, 15)
    blocked = list(shape)
    blocked[qa] = -(-shape[qa] // bs)
    rng = _rng(case, what)
    if what == "data":
        return rng.integers(low, high, shape, endpoint=True).astype(_np(t))
    if what == "zp":
        return rng.integers(low, high, blocked, endpoint=True).astype(_np(t))
    return rng.uniform(0.05, 1.0, blocked).astype(_np(case.dtypes["T2"]))


def _gbq_four_bit(name, zp):
    shape, g, qa, bs = _FOUR_BIT_LAYOUTS[name]
    constants = {"data": lambda c: _four_bit(c, "data"), "scales": lambda c: _four_bit(c, "scales"),
                 "zero_points": (lambda c: _four_bit(c, "zp")) if zp else None}
    return Variant(name + ("_zp" if zp else ""), {"bits": 4, "block_size": bs, "gather_axis": g, "quantize_axis": qa},
                   constants=constants, when=lambda d: d["T1"] in ("int4", "uint4"))


_GBQ_VARIANTS = [_gbq("default")]
for _bits in (2, 4, 8):
    for _zp in (False, True):
        for _bs in (16, 32, 128):
            name = f"b{_bits}_bs{_bs}" + ("_zp" if _zp else "")
            if name != "b4_bs32":
                _GBQ_VARIANTS.append(_gbq(name, _bits, _bs, _zp))
_GBQ_VARIANTS += [
    _gbq("ragged_w40", bits=4, bs=32, zp=True),
    _gbq("ragged_bs16_w40", bits=2, bs=16, zp=True),
    _gbq("3d", bits=4, bs=16, zp=True, quantize_axis=2),
    _gbq("3d_b8", bits=8, bs=32, quantize_axis=-1),
    _gbq("negative_axes", bits=4, bs=16, gather_axis=-2, quantize_axis=-1),
    # Blocks wider than MLX's group of 64 with zero points: each block's zero point spans groups.
    _gbq("zp_bs128_w256", bits=4, bs=128, zp=True),
    _gbq("b2_zp_bs128_w256", bits=2, bs=128, zp=True),
    _gbq("b8_zp_bs64_w128", bits=8, bs=64, zp=True),
    # bits 4, block_size 128, quantize_axis 1, gather_axis 0 by default
    Variant("defaults_w128", {}, constants={"data": _gbq_data, "scales": _gbq_scales, "zero_points": None},
            when=lambda d: d["T1"] == "uint8"),
]
_GBQ_VARIANTS += [_gbq_four_bit(name, zp) for name in _FOUR_BIT_LAYOUTS for zp in (False, True)]

SPECS[("com.microsoft", "GatherBlockQuantized")] = OpSpec(
    ref=gather_block_quantized_ref,
    exact=True,  # (q - zp) * scale is one rounding, as ORT's float32 arithmetic
    domains={"indices": _indices},
    scheme={"basic": [[2, 3]], "scalar": [[]], "empty": [[0, 2]], "dynamic": [[[2, 3]], [[1, 5]], [[4, 1]]]},
    variants=_GBQ_VARIANTS,
)
