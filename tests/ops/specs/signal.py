"""Signal processing (op-specs/src/signal/): the cosine-sum windows, DFT, STFT and MelWeightMatrix.

The reference is ORT's CPU kernel's formula: float32 coefficients, the phase in float64 with
π written 3.14159265, `size` (periodic) or `size - 1` (symmetric) as the denominator."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep, by_opset
from op_table import np_dtype, tensor_type

_PI_AS_ORT = 3.14159265


def _window(a0, a1, a2):
    def ref(xs, a):
        size = int(xs[0])
        denominator = size if a.get("periodic", 1) else size - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            phase = np.arange(size, dtype=np.float64) * (2 * _PI_AS_ORT / np.float64(denominator))
        c0, c1, c2 = (np.float64(np.float32(c)) for c in (a0, a1, a2))
        return c0 - c1 * np.cos(phase) + (c2 * np.cos(2 * phase) if a2 else 0.0)

    return ref


def _size(n):
    return lambda case: np.array(n, np_dtype(case.dtypes["T1"]))


def _typed(extra=None):
    return lambda d: {"output_datatype": tensor_type(d["T2"]), **(extra or {})}


for _op, _coefficients in [("HannWindow", (0.5, 0.5, 0.0)), ("HammingWindow", (25 / 46, 21 / 46, 0.0)),
                           ("BlackmanWindow", (0.42, 0.5, 0.08))]:
    SPECS[("", _op)] = OpSpec(
        ref=_window(*_coefficients), scheme={"basic": [[]]}, constants={"size": _size(10)},
        variants=[
            Variant("periodic", _typed()),
            _rep(Variant("symmetric", _typed({"periodic": 0}))),
            _rep(Variant("odd", _typed({"periodic": 0}), constants={"size": _size(7)})),
            _rep(Variant("one_sample", _typed(), constants={"size": _size(1)})),
            _rep(Variant("one_sample_symmetric", _typed({"periodic": 0}), constants={"size": _size(1)})),
        ],
    )


# --------------------------------------------------------------------------------------------
# DFT and STFT (op-specs/src/signal/dft.rs): references in float64 through numpy's FFT. ORT's
# float32 kernels drift from the exact transform by ~1e-6 of the signal's scale at these
# lengths: tolerances ×10.


def _complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)


def _parts(z):
    return np.stack([z.real, z.imag], -1)


def _dft(xs, a, default_axis):
    x = xs[0]
    length = int(xs[1]) if len(xs) > 1 and xs[1] is not None else None
    axis = int(xs[2]) if len(xs) > 2 and xs[2] is not None else a.get("axis", default_axis)
    axis = axis % x.ndim
    z = np.moveaxis(_complex(x), axis, -1)
    inverse, onesided = a.get("inverse", 0), a.get("onesided", 0)
    if inverse and onesided:
        y = np.fft.irfft(z, n=length or 2 * (z.shape[-1] - 1))[..., None]
        return np.moveaxis(y, -2, axis)
    y = (np.fft.ifft if inverse else np.fft.fft)(z, n=length or z.shape[-1])
    if onesided:
        y = y[..., : y.shape[-1] // 2 + 1]
    return np.moveaxis(_parts(y), -2, axis)


def _i64(v):
    return np.array(v, np.int64)


def _dft_variants(axis_port: bool):
    """The forms of DFT: `axis` is an input from opset 20, an attribute before."""
    def axis(v):
        return {"constants": {"axis": _i64(v)}} if axis_port else {"attrs": {"axis": v}}

    def variant(name, shape, attrs=None, length=None, axis_at=None):
        extra = axis(axis_at) if axis_at is not None else {}
        constants = {"dft_length": None if length is None else _i64(length), **extra.get("constants", {})}
        if axis_port and "axis" not in constants:
            constants["axis"] = None
        return Variant(name, {**(attrs or {}), **extra.get("attrs", {})}, constants=constants, shapes=[shape])

    return [
        variant("real", [2, 8, 1], axis_at=1),
        variant("complex", [2, 8, 2], axis_at=1),
        variant("inverse", [2, 8, 2], {"inverse": 1}, axis_at=1),
        variant("rfft", [2, 8, 1], {"onesided": 1}, axis_at=1),
        variant("irfft", [2, 5, 2], {"inverse": 1, "onesided": 1}, axis_at=1),
        variant("irfft_longer", [2, 6, 2], {"inverse": 1, "onesided": 1}, axis_at=1),
        variant("padded", [2, 6, 1], length=10, axis_at=1),
        variant("truncated", [2, 9, 2], length=5, axis_at=1),
        variant("odd_length", [3, 7, 2], axis_at=1),
        variant("first_axis", [6, 3, 2], axis_at=0),
        variant("rank4_negative_axis", [2, 6, 3, 2], {"inverse": 1}, axis_at=-3),
    ] + ([variant("default_axis", [2, 3, 6, 2])] if axis_port else [variant("default_axis", [2, 6, 3, 2])])


_DFT_20 = OpSpec(
    ref=lambda xs, a: _dft(xs, a, -2), scheme={"basic": [[2, 8, 2]], "dynamic": [[[2, 8, 2]], [[3, 6, 2]], [[1, 9, 2]]]},
    constants={"dft_length": None, "axis": None}, variants=_dft_variants(True), tolerance_scale=10,
)
_DFT_17 = OpSpec(
    ref=lambda xs, a: _dft(xs, a, 1), scheme={"basic": [[2, 8, 2]], "dynamic": [[[2, 8, 2]], [[3, 6, 2]], [[1, 9, 2]]]},
    constants={"dft_length": None}, variants=_dft_variants(False), tolerance_scale=10,
)
SPECS[("", "DFT")] = by_opset(_DFT_20, (19, _DFT_17))


def _stft(xs, a):
    signal, step = xs[0], int(xs[1])
    window = xs[2] if len(xs) > 2 else None
    length = int(xs[3]) if len(xs) > 3 and xs[3] is not None else len(window)
    z = _complex(signal if signal.ndim == 3 else signal[..., None])
    frames = (z.shape[1] - length) // step + 1
    framed = np.stack([z[:, f * step: f * step + length] for f in range(frames)], 1)
    if window is not None:
        framed = framed * window
    y = np.fft.fft(framed, axis=-1)
    if a.get("onesided", 1):
        y = y[..., : length // 2 + 1]
    return _parts(y)


def _stft_variant(name, shapes, attrs=None, step=4, length=16, **kw):
    constants = {"frame_step": _i64(step), "frame_length": None if length is None else _i64(length)}
    return Variant(name, attrs or {}, constants=constants, shapes=shapes, **kw)


SPECS[("", "STFT")] = OpSpec(
    ref=_stft, scheme={"basic": [[2, 64, 1], [16]], "dynamic": [[[2, 64, 1], [16]], [[1, 40, 1], [16]], [[3, 16, 1], [16]]]},
    domains={"window": "positive"}, tolerance_scale=10,
    variants=[
        _stft_variant("window", [[2, 64, 1], [16]]),
        _stft_variant("window_only", [[2, 64, 1], [16]], length=None),
        _stft_variant("no_window", [[2, 64, 1]], present=("signal", "frame_step", "frame_length")),
        _stft_variant("two_sided", [[2, 64, 1], [16]], {"onesided": 0}),
        _stft_variant("complex", [[2, 50, 2], [16]], {"onesided": 0}, step=5),
        _stft_variant("complex_onesided", [[2, 50, 2], [16]], step=5),
        _stft_variant("odd_frame", [[2, 45, 1], [9]], step=3, length=9),
        _stft_variant("one_frame", [[1, 16, 1], [16]], step=7),
        _stft_variant("rank2_signal", [[2, 64], [16]]),
    ],
)


def _mel(xs, a):
    """ORT's CPU kernel's filter bank: float32 edge checks, float64 mel points, float32 slopes."""
    bins, length, rate, low, high = int(xs[0]), int(xs[1]), int(xs[2]), np.float32(xs[3]), np.float32(xs[4])
    to_mel = lambda hz: 2595 * np.log10(1 + np.float64(hz) / 700)  # noqa: E731
    spectrum = length // 2 + 1
    lo_mel, hi_mel = to_mel(low), to_mel(high)
    step = (hi_mel - lo_mel) / np.float64(np.float32(bins + 2))
    corners = [int(np.floor((length + 1) * 700 * (10 ** ((lo_mel + step * i) / 2595) - 1) / rate)) for i in range(bins + 2)]
    out = np.zeros((spectrum, bins), np.float32)
    for m in range(bins):
        start, peak, end = corners[m: m + 3]
        if peak == start:
            out[peak, m] = 1
        for j in range(start, peak + 1) if peak != start else []:
            out[j, m] = np.float32(j - start) / np.float32(peak - start)
        for j in range(peak, end):
            out[j, m] = np.float32(end - j) / np.float32(end - peak)
    return out


def _mel_scalars(bins, length, rate, low, high):
    return {"num_mel_bins": lambda c: np.array(bins, np_dtype(c.dtypes["T1"])),
            "dft_length": lambda c: np.array(length, np_dtype(c.dtypes["T1"])),
            "sample_rate": lambda c: np.array(rate, np_dtype(c.dtypes["T1"])),
            "lower_edge_hertz": np.array(low, np.float32), "upper_edge_hertz": np.array(high, np.float32)}


def _mel_typed(d):
    return {"output_datatype": tensor_type(d["T3"])}


SPECS[("", "MelWeightMatrix")] = OpSpec(
    ref=_mel, exact=True, scheme={"basic": [[]]}, constants=_mel_scalars(8, 64, 8000, 0.0, 4000.0),
    variants=[
        Variant("speech", _mel_typed),
        _rep(Variant("whisper_like", _mel_typed, constants=_mel_scalars(80, 400, 16000, 0.0, 8000.0))),
        _rep(Variant("narrow_band", _mel_typed, constants=_mel_scalars(10, 512, 16000, 300.0, 3400.0))),
        _rep(Variant("more_bins_than_spectrum", _mel_typed, constants=_mel_scalars(20, 16, 8000, 100.0, 3900.0))),
        _rep(Variant("no_bins", _mel_typed, constants=_mel_scalars(0, 64, 8000, 0.0, 4000.0))),
    ],
)
