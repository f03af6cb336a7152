"""The op suite's spec language, and the specs' discovery.

Each op-table entry is tested with an ``OpSpec``: input domains, attribute/optional-input
variants, shapes, tolerance class and a numpy reference. The specs themselves live beside the op:
``specs/<family>.py`` for ``op-specs/src/<family>.rs`` (``specs/attention/gqa.py`` for
``op-specs/src/attention/gqa.rs``), each registering ``SPECS[(domain, op)]``; every module under
``specs/`` is imported at the end of this one. ``test_spec_files.py`` holds the two trees to the
same names.

The reference is used when ORT's CPU EP has no kernel for the op and dtype (bfloat16, several
float16 ops, com.microsoft.BiasAdd), and in self-check mode it is compared with ORT's CPU EP
wherever both exist. References receive floats as float64 (the exact values of the generated,
dtype-rounded inputs), integers and bools in their own dtype (so integer arithmetic wraps as in
ONNX); the harness rounds the result to the output's dtype.
"""

from __future__ import annotations

import importlib
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from op_table import FLOATS, INTS, SIGNED_INTS, Entry, np_dtype

# --------------------------------------------------------------------------------------------
# Input domains


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` (kept as that dtype; overflow to inf is intended)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np_dtype(dtype))


def _int_range(dtype: str, lo: int, hi: int) -> tuple[int, int]:
    info = np.iinfo(np_dtype(dtype))
    return max(lo, int(info.min)), min(hi, int(info.max))


def _ints(rng, dtype, shape, lo, hi):
    lo, hi = _int_range(dtype, lo, hi)
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(np_dtype(dtype))


def _sprinkle(x: np.ndarray, rng, values, fraction=0.3) -> np.ndarray:
    """Replace about ``fraction`` of ``x`` with picks from ``values`` (first ones guaranteed)."""
    x = np.array(x, copy=True)
    flat = x.reshape(-1)
    n = flat.size
    if n == 0:
        return x
    k = max(1, int(n * fraction))
    idx = rng.permutation(n)[:k]
    picks = [values[i % len(values)] for i in range(k)]
    flat[idx] = np.array(picks, dtype=flat.dtype if flat.dtype.kind in "iu" else np.float64)
    return x


def gen(kind, dtype: str, shape, rng, dtypes: dict[str, str]) -> np.ndarray:
    """An array of ``dtype`` and ``shape`` drawn from the named domain ``kind`` (or a callable
    ``kind(dtype, shape, rng, dtypes)``), already rounded to ``dtype``."""
    if callable(kind):
        return kind(dtype, shape, rng, dtypes)
    shape = tuple(shape)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in FLOATS:
        if kind in ("any", "small", "full", "shiftable"):
            x = rng.uniform(-3, 3, shape)
        elif kind in ("positive", "base"):
            x = rng.uniform(0.1, 3, shape)
        elif kind == "nonzero":
            x = rng.uniform(0.5, 3, shape) * rng.choice([-1.0, 1.0], shape)
        elif kind == "unit":
            x = rng.uniform(-0.95, 0.95, shape)
        elif kind == "gt1":
            x = rng.uniform(1.05, 4, shape)
        elif kind == "tan":
            x = rng.uniform(-1.2, 1.2, shape)
        elif kind == "exponent":
            x = rng.uniform(-2, 2, shape)
        elif kind == "halves":
            # Exact halves (ties for Round), integers and random values.
            x = _sprinkle(rng.uniform(-4, 4, shape), rng, [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.0, -0.0], 0.5)
        elif kind == "ties":
            x = rng.integers(-2, 2, size=shape, endpoint=True).astype(np.float64)
        elif kind == "near_one":  # products of many stay in range
            x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        elif kind == "special":
            x = _sprinkle(rng.uniform(-3, 3, shape), rng, [np.nan, np.inf, -np.inf, 0.0, -0.0], 0.5)
        elif kind == "peaked":
            # About a quarter of the values dominate their neighbours: LogSoftmax ~ 0 there
            # (x - logsumexp(x) cancels), Softmax ~ 1.
            x = _sprinkle(rng.uniform(-3, 3, shape), rng, [6.0, 6.5, 7.0, 5.5], 0.25)
        elif kind == "nan_mix":
            x = _sprinkle(rng.uniform(-3, 3, shape), rng, [np.nan], 0.25)
        else:
            raise ValueError(f"no float domain {kind!r}")
        return round_to(x, dtype)
    if dtype in INTS:
        signed = dtype in SIGNED_INTS
        bits = np_dtype(dtype).itemsize * 8
        if kind == "any":
            return _ints(rng, dtype, shape, -10 if signed else 0, 10 if signed else 20)
        if kind in ("positive",):
            return _ints(rng, dtype, shape, 1, 20)
        if kind == "nonzero":
            x = _ints(rng, dtype, shape, 1, 10 if signed else 20)
            if signed:
                x = (x * rng.choice([-1, 1], shape)).astype(np_dtype(dtype))
            return x
        if kind == "small":  # products stay in range: |x| <= 11 (signed), x <= 15 (unsigned)
            return _ints(rng, dtype, shape, -11 if signed else 0, 11 if signed else 15)
        if kind == "base":
            return _ints(rng, dtype, shape, -4 if signed else 0, 4)
        if kind == "exponent":
            return _ints(rng, dtype, shape, 0, 3)
        if kind == "ties":
            return _ints(rng, dtype, shape, -2 if signed else 0, 2 if signed else 4)
        if kind == "full":
            info = np.iinfo(np_dtype(dtype))
            return rng.integers(int(info.min), int(info.max), size=shape, endpoint=True, dtype=np_dtype(dtype))
        if kind == "shift":
            return _ints(rng, dtype, shape, 0, bits - 1)
        if kind == "shiftable":  # values whose shifted bits are interesting: any of the type
            info = np.iinfo(np_dtype(dtype))
            return rng.integers(0, int(info.max), size=shape, endpoint=True, dtype=np_dtype(dtype))
        if kind == "extremes":
            info = np.iinfo(np_dtype(dtype))
            x = _ints(rng, dtype, shape, -10 if signed else 0, 10 if signed else 20)
            return _sprinkle(x, rng, [int(info.min), int(info.max), int(info.min) + 1, 0, 1] + ([-1] if signed else []), 0.5)
        if kind == "row":  # embedding rows: tables have at least 3
            return _ints(rng, dtype, shape, 0, 2)
        if kind == "index":  # Gather indices, negative ones included (every gathered dim >= 3)
            return _ints(rng, dtype, shape, -3, 2)
        if kind == "near_one":
            return _ints(rng, dtype, shape, -2 if signed else 0, 2)
        if kind in ("halves", "special", "nan_mix", "unit", "gt1", "tan", "peaked"):
            return _ints(rng, dtype, shape, -10 if signed else 0, 10 if signed else 20)
        raise ValueError(f"no integer domain {kind!r}")
    raise ValueError(f"no generator for dtype {dtype}")


def scalar_bound(value_by_class: dict):
    """A domain that returns one constant (per dtype class) broadcast to the shape."""

    def make(dtype, shape, rng, dtypes):
        cls = "float" if dtype in FLOATS else "signed" if dtype in SIGNED_INTS else "unsigned"
        return round_to(np.full(shape, value_by_class[cls], dtype=np.float64), dtype)

    return make


# --------------------------------------------------------------------------------------------
# References


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if np.size(x) else np.asarray(x, np.float64)


def _f32(v) -> float:
    """An attribute value as ONNX stores it (float32)."""
    return float(np.float32(v))


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.logaddexp(x, 0.0)


def _unary(f):
    return lambda xs, attrs: f(xs[0])


def _binary(f):
    return lambda xs, attrs: f(xs[0], xs[1])


# --------------------------------------------------------------------------------------------
# Specs


@dataclass
class Variant:
    """One attribute / optional-input configuration of an op."""

    name: str = "default"
    attrs: dict | Callable[[dict], dict] = field(default_factory=dict)
    present: tuple[str, ...] | None = None  # optional inputs present (None: all)
    n_variadic: int = 2
    n_outputs: int = 1  # instances of a variadic output
    outputs: tuple[str, ...] | None = None  # optional outputs produced (None: all)
    constants: dict = field(default_factory=dict)  # host-known inputs by port (None: absent)
    shapes: list | None = None  # fed input shapes of the basic layout (default: the scheme's)
    min_opset: int = 0  # e.g. 11 for negative axes, which older schemas reject
    max_opset: int | None = None  # e.g. 19 for GridSample's `bilinear`, which ORT refuses from 20
    sweep: bool = True  # every dtype combination, or only the representative one
    when: Callable[[dict], bool] | None = None  # dtype-combination filter
    domains: dict = field(default_factory=dict)  # per-port domain overrides

    def attrs_for(self, dtypes: dict) -> dict:
        return self.attrs(dtypes) if callable(self.attrs) else dict(self.attrs)


@dataclass
class OpSpec:
    ref: Callable | None  # (inputs, attrs) -> array or list of arrays
    exact: bool = False  # float results must match bit for bit (correctly rounded ops)
    domains: dict = field(default_factory=dict)  # port name -> domain (default "any")
    variants: list[Variant] = field(default_factory=lambda: [Variant()])
    scheme: str | dict = "nary"  # how shapes are laid out: op_harness.SCHEMES, or {layout: shapes}
    constants: dict = field(default_factory=dict)  # host-known inputs: port -> array or f(case)
    combos: Callable[[dict], bool] | None = None  # which dtype combinations the entry claims
    broadcast_since: int = 0  # first opset whose schema lets the inputs' shapes differ
    tolerance_scale: float = 1.0  # sums over many terms: float tolerances times this
    note: str = ""
    # Tested by a dedicated file instead (path from the repo root, and why): the suite then
    # lists one skipped case naming it, and checks the file exists.
    elsewhere: tuple[str, str] | None = None


# The op's dtype of the representative combination is float when it has one.
def _float_only(d):
    return all(v in FLOATS or v == "bool" for v in d.values())


def _ints_only(d):
    return d["T"] in INTS


# --------------------------------------------------------------------------------------------
# Shared by several families


def _i64(*v):
    return np.array(v, dtype=np.int64)


def _by_layout(**values):
    """A constant that depends on the case's layout (``basic`` and ``default`` for the rest)."""

    def pick(case):
        return values.get(case.layout, values.get("default"))

    return pick


def _rep(variant: Variant) -> Variant:
    """The same variant, on the representative dtype only."""
    variant.sweep = False
    return variant


# GlobalAveragePool/GlobalMaxPool (conv.rs) and GlobalLpPool (pool.rs).
_GLOBAL_POOL_SCHEME = {"basic": [[2, 3, 4, 5]], "dynamic": [[[2, 3, 4, 5]], [[1, 2, 3, 1]], [[1, 4, 2, 6]]]}


# LayerNormalization's relatives (normalization.rs) and ORT's fused ones (contrib_norm.rs).
def _standardise(x, axes, eps, centred=True):
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True) if centred else np.zeros([1] * x.ndim)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (x - mean) * inv, mean, inv


# --------------------------------------------------------------------------------------------
# The registry

# An entry's spec: one OpSpec for every entry of the op, or a function of the entry (its opset
# range and ports) choosing one; `by_opset` is the usual such function.
Selector = Callable[[Entry], "OpSpec | None"]


class _Registry(dict):
    """``SPECS``: (domain, op) -> OpSpec or selector; remembers which file set each key."""

    def __init__(self):
        super().__init__()
        self.origins: dict[tuple[str, str], list[str]] = {}

    def __setitem__(self, key, value):
        where = sys._getframe(1).f_globals.get("__file__") or "?"
        files = self.origins.setdefault(key, [])
        if where not in files:
            files.append(where)
        super().__setitem__(key, value)


SPECS: dict[tuple[str, str], OpSpec | Selector] = _Registry()


def by_opset(newest: OpSpec, *older: tuple[int, OpSpec]) -> Selector:
    """A selector by the entry's last opset: the spec of the first ``(until, spec)`` of ``older``
    (by increasing ``until``) whose ``until`` the entry ends at or before, else ``newest`` (so
    open-ended entries get ``newest``). For ops whose inputs or attributes changed at an opset."""
    bounds = sorted(older, key=lambda pair: pair[0])

    def select(entry):
        if entry.until is not None:
            for until, spec in bounds:
                if entry.until <= until:
                    return spec
        return newest

    return select


def spec_for(entry) -> OpSpec | None:
    """The spec of an entry (None: the suite does not know the op yet)."""
    spec = SPECS.get((entry.domain, entry.op))
    return spec(entry) if callable(spec) else spec


def spec_files(key: tuple[str, str]) -> list[Path]:
    """The files that registered ``SPECS[key]``."""
    return [Path(f) for f in SPECS.origins.get(key, [])]


# --------------------------------------------------------------------------------------------
# Discovery: every module under specs/ (recursively), imported last so that the language above
# is defined when they import it.

SPECS_DIR = Path(__file__).resolve().parent / "specs"


def _import_specs() -> None:
    for path in sorted(SPECS_DIR.rglob("*.py")):
        parts = path.relative_to(SPECS_DIR.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        importlib.import_module(".".join(parts))


_import_specs()
