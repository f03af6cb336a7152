"""The attention family's specs (op-specs/src/attention/, one file per Rust file). Input
domains shared by them live here, as the Rust family's shared core lives in mod.rs."""

from __future__ import annotations

import numpy as np

from op_specs import round_to


def _uniform(lo, hi):
    def make(dtype, shape, rng, dtypes):
        return round_to(rng.uniform(lo, hi, shape), dtype)

    return make


def _ints(values):
    """A constant int32 mask (its shape is the variant's)."""

    def make(dtype, shape, rng, dtypes):
        out = np.asarray(values, dtype=np.int32)
        assert list(out.shape) == list(shape), (out.shape, shape)
        return out

    return make


def _bits(p_keep=0.7, full_rows=()):
    """0/1 entries, mostly 1; the batch entries in ``full_rows`` are all 0 (fully masked)."""

    def make(dtype, shape, rng, dtypes):
        out = (rng.random(shape) < p_keep).astype(np.int32)
        for b in full_rows:
            out[b] = 0
        return out

    return make


def _ends(total, lo=1):
    def make(dtype, shape, rng, dtypes):
        return rng.integers(lo, total, size=shape, endpoint=True).astype(np.int32)

    return make


_H = {"num_heads": 2}
_SMALL = _uniform(-0.5, 0.5)  # projection weights: scores of a few units, not a hard argmax
