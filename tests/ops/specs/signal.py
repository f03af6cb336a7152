"""Signal processing (op-specs/src/signal.rs): the cosine-sum windows.

The reference is ORT's CPU kernel's formula: float32 coefficients, the phase in float64 with
π written 3.14159265, `size` (periodic) or `size - 1` (symmetric) as the denominator."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep
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
