"""What each op-table entry is tested with: input domains, attribute variants, shapes, tolerance
class and a numpy reference.

The reference is used when ORT's CPU EP has no kernel for the op and dtype (bfloat16, several
float16 ops, com.microsoft.BiasAdd), and in self-check mode it is compared with ORT's CPU EP
wherever both exist. References receive floats as float64 (the exact values of the generated,
dtype-rounded inputs), integers and bools in their own dtype (so integer arithmetic wraps as in
ONNX); the harness rounds the result to the output's dtype.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from onnx import numpy_helper

from op_table import FLOATS, INTS, SIGNED_INTS, UNSIGNED_INTS, np_dtype, tensor_type

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


def cast_source(dtype, shape, rng, dtypes):
    """Cast/CastLike input: values valid for both the source (T1) and the target (T2): integers
    in [-100, 100] (non-negative when either side is unsigned), fractions when the source is a
    float (truncation), zeros (to-bool), and NaN/inf/overflow when both sides are floats."""
    src, dst = dtypes["T1"], dtypes["T2"]
    if src == "bool":
        return rng.random(shape) < 0.5
    unsigned = src in UNSIGNED_INTS or dst in UNSIGNED_INTS
    lo = 0 if unsigned else -100
    if src in FLOATS:
        x = rng.uniform(lo, 100, shape)
        specials = [0.0, 0.5, 0.75 if unsigned else -0.75, 1.0, 2.5]
        if dst in FLOATS:
            specials += [np.nan, np.inf, -np.inf, 70000.0, 1e-8, 1.00048828125]  # f16 overflow/underflow, a tie
        return round_to(_sprinkle(x, rng, specials, 0.4), src)
    x = rng.integers(lo, 100, size=shape, endpoint=True)
    return round_to(_sprinkle(x, rng, [0, 1, 0, 100], 0.3), src)


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


def int_trunc_div(a, b):
    """C-style integer quotient (toward zero); 0 where ``b == 0``; ``MIN / -1`` wraps to MIN."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    with np.errstate(all="ignore"):
        safe = np.where(b == 0, 1, b).astype(b.dtype)
        q = a // safe
        r = a - q * safe
        if a.dtype.kind == "i":
            adjust = (r != 0) & ((a < 0) != (safe < 0))
            q = q + adjust.astype(q.dtype)
            q = np.where(safe == -1, (0 - a.astype(q.dtype)).astype(q.dtype), q)
        return np.where(b == 0, 0, q).astype(a.dtype)


def int_mod(a, b, fmod: int):
    """ONNX integer Mod: divisor's sign (fmod=0) or dividend's (fmod=1); 0 where ``b == 0``."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    with np.errstate(all="ignore"):
        safe = np.where((b == 0) | ((b == -1) if a.dtype.kind == "i" else False), 1, b).astype(b.dtype)
        r = np.mod(a, safe) if fmod == 0 else np.fmod(a, safe)
        return np.where(b == 0, 0, r).astype(a.dtype)


def bit_shift(x, y, direction: str):
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    bits = x.dtype.itemsize * 8
    too_far = y >= bits
    ys = np.where(too_far, 0, y).astype(x.dtype)
    r = np.left_shift(x, ys) if direction == "LEFT" else np.right_shift(x, ys)
    return np.where(too_far, 0, r).astype(x.dtype)


def _softmax_like(x, axis, legacy, f):
    x = np.asarray(x)
    if legacy:
        axis = axis + x.ndim if axis < 0 else axis
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = x.reshape(outer, int(np.prod(x.shape[axis:], dtype=np.int64)))
        return f(flat, 1).reshape(x.shape)
    return f(x, axis)


def _softmax(x, axis):
    if x.size == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    if x.size == 0:
        return x.copy()
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def _hardmax(x, axis):
    out = np.zeros_like(x)
    if x.size == 0:
        return out
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    np.put_along_axis(out, idx, 1.0, axis=axis)
    return out


def _shrink(x, attrs):
    bias, lambd = _f32(attrs.get("bias", 0.0)), _f32(attrs.get("lambd", 0.5))
    xf = x.astype(np.float64)
    return np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0.0))


def _is_inf(x, attrs):
    neg, pos = attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    return (np.isneginf(x) & bool(neg)) | (np.isposinf(x) & bool(pos))


def _clip11(xs, attrs):
    x, lo, hi = (xs + [None, None])[:3]
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


def _fold(f):
    def ref(xs, attrs):
        out = xs[0]
        for x in xs[1:]:
            out = f(out, x)
        return np.broadcast_to(out, np.broadcast_shapes(*[np.shape(x) for x in xs])).copy()

    return ref


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


UNARY_FLOAT = {
    "Abs": (np.abs, "any", True),
    "Neg": (np.negative, "any", True),
    "Sign": (np.sign, "any", True),
    "Reciprocal": (lambda x: 1.0 / x, "nonzero", False),
    "Sqrt": (np.sqrt, "positive", False),
    "Exp": (np.exp, "any", False),
    "Log": (np.log, "positive", False),
    "Ceil": (np.ceil, "halves", True),
    "Floor": (np.floor, "halves", True),
    "Round": (np.round, "halves", True),
    "Erf": (_erf, "any", False),
    "Sin": (np.sin, "any", False),
    "Cos": (np.cos, "any", False),
    "Tan": (np.tan, "tan", False),
    "Asin": (np.arcsin, "unit", False),
    "Acos": (np.arccos, "unit", False),
    "Atan": (np.arctan, "any", False),
    "Sinh": (np.sinh, "any", False),
    "Cosh": (np.cosh, "any", False),
    "Asinh": (np.arcsinh, "any", False),
    "Acosh": (np.arccosh, "gt1", False),
    "Atanh": (np.arctanh, "unit", False),
    "Sigmoid": (_sigmoid, "any", False),
    "Tanh": (np.tanh, "any", False),
    "Softplus": (_softplus, "any", False),
    "Softsign": (lambda x: x / (1.0 + np.abs(x)), "any", False),
    "HardSwish": (lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), "any", False),
    "Mish": (lambda x: x * np.tanh(_softplus(x)), "any", False),
    "Relu": (lambda x: np.maximum(x, 0).astype(x.dtype), "any", True),
}

SPECS: dict[tuple[str, str], OpSpec] = {}

for _op, (_f, _dom, _exact) in UNARY_FLOAT.items():
    SPECS[("", _op)] = OpSpec(ref=_unary(_f), exact=_exact, scheme="unary", domains={"*": _dom})

# Integer wrap at the minimum (Abs/Neg): compared with ORT's CPU EP on extreme values too.
for _op in ("Abs", "Neg"):
    SPECS[("", _op)].variants = [Variant(), Variant("extremes", when=_ints_only, domains={"*": "extremes"})]

SPECS[("", "IsNaN")] = OpSpec(ref=_unary(np.isnan), exact=True, scheme="unary", domains={"*": "special"})
SPECS[("", "IsInf")] = OpSpec(
    ref=lambda xs, a: _is_inf(xs[0], a), exact=True, scheme="unary", domains={"*": "special"},
    variants=[Variant()] + [
        Variant(f"neg{n}_pos{p}", {"detect_negative": n, "detect_positive": p})
        for n, p in ((1, 1), (1, 0), (0, 1), (0, 0))
    ],
)

# Activations with attributes.
SPECS[("", "LeakyRelu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] >= 0, xs[0], _f32(a.get("alpha", 0.01)) * xs[0]),
    scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 0.2})],
)
SPECS[("", "Elu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] < 0, _f32(a.get("alpha", 1.0)) * np.expm1(xs[0]), xs[0]),
    scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 0.5})],
)
SPECS[("", "Selu")] = OpSpec(
    ref=lambda xs, a: _f32(a.get("gamma", 1.0507009873554805))
    * np.where(xs[0] <= 0, _f32(a.get("alpha", 1.6732631921768188)) * np.expm1(xs[0]), xs[0]),
    scheme="unary", variants=[Variant(), Variant("alpha_gamma", {"alpha": 2.0, "gamma": 1.5})],
)
SPECS[("", "Celu")] = OpSpec(
    ref=lambda xs, a: np.maximum(xs[0], 0.0)
    + np.minimum(0.0, _f32(a.get("alpha", 1.0)) * np.expm1(xs[0] / _f32(a.get("alpha", 1.0)))),
    scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 2.0})],
)
SPECS[("", "Gelu")] = OpSpec(
    ref=lambda xs, a: _gelu_tanh(xs[0]) if a.get("approximate", "none") == "tanh" else _gelu(xs[0]),
    scheme="unary",
    variants=[Variant(), Variant("none", {"approximate": "none"}), Variant("tanh", {"approximate": "tanh"})],
)
SPECS[("", "HardSigmoid")] = OpSpec(
    ref=lambda xs, a: np.clip(_f32(a.get("alpha", 0.2)) * xs[0] + _f32(a.get("beta", 0.5)), 0.0, 1.0),
    scheme="unary", variants=[Variant(), Variant("alpha_beta", {"alpha": 0.3, "beta": 0.4})],
)
SPECS[("", "ThresholdedRelu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] > _f32(a.get("alpha", 1.0)), xs[0], 0.0),
    exact=True, scheme="unary", variants=[Variant(), Variant("alpha", {"alpha": 0.5})],
)
SPECS[("", "Shrink")] = OpSpec(
    ref=lambda xs, a: _shrink(xs[0], a), scheme="unary",
    variants=[Variant(), Variant("bias_lambd", {"bias": 1.5, "lambd": 1.5}), Variant("int_attrs", {"bias": 2.0, "lambd": 3.0})],
)
SPECS[("", "PRelu")] = OpSpec(
    ref=lambda xs, a: np.where(xs[0] < 0, xs[0] * xs[1], xs[0]), exact=True, scheme="prelu",
)
SPECS[("", "Clip")] = OpSpec(
    ref=lambda xs, a: _clip11(xs, a), exact=True, scheme="clip",
    domains={"min": scalar_bound({"float": -1.0, "signed": -3, "unsigned": 3}),
             "max": scalar_bound({"float": 1.5, "signed": 5, "unsigned": 12})},
    variants=[
        Variant("min_max"),
        Variant("min_only", present=("min",)),
        Variant("max_only", present=("max",)),
        Variant("no_bounds", present=()),
    ],
)
# Clip-6..10 reads its bounds from attributes (spec overridden per entry in spec_for()).
CLIP_LEGACY = OpSpec(
    ref=lambda xs, a: np.clip(xs[0], _f32(a.get("min", -3.4028234663852886e38)), _f32(a.get("max", 3.4028234663852886e38))),
    exact=True, scheme="unary",
    variants=[Variant(), Variant("min_max", {"min": -1.0, "max": 1.5}), Variant("min_only", {"min": 0.25})],
)
SPECS[("", "Where")] = OpSpec(ref=lambda xs, a: np.where(xs[0], xs[1], xs[2]), exact=True, scheme="nary")

# Arithmetic.
SPECS[("", "Add")] = OpSpec(ref=_binary(np.add), exact=True)
SPECS[("", "Sub")] = OpSpec(ref=_binary(np.subtract), exact=True)
SPECS[("", "Mul")] = OpSpec(ref=_binary(np.multiply), exact=True, domains={"*": "small"})
SPECS[("", "Div")] = OpSpec(
    ref=lambda xs, a: int_trunc_div(xs[0], xs[1]) if xs[0].dtype.kind in "iu" else xs[0] / xs[1],
    exact=True, domains={"B": "nonzero"},
    note="MIN / -1 is checked separately (test_documented_*): ORT's CPU EP traps; a zero divisor fails the run on both EPs",
)
SPECS[("", "Mod")] = OpSpec(
    ref=lambda xs, a: int_mod(xs[0], xs[1], a.get("fmod", 0)) if xs[0].dtype.kind in "iu" else np.fmod(xs[0], xs[1]),
    exact=True, domains={"B": "nonzero"},
    variants=[
        Variant("fmod1", {"fmod": 1}),
        Variant("fmod0", {"fmod": 0}, when=_ints_only),
        Variant("fmod_default", {}, when=_ints_only),
    ],
    note="fmod=0 on floats is invalid ONNX (declined); integer remainder by zero is checked separately",
)
SPECS[("", "Pow")] = OpSpec(
    ref=_binary(lambda x, y: np.power(x, y)),
    domains={"X": "base", "Y": "exponent"},
    combos=lambda d: (d["T"] == d["T1"] and d["T"] != "int64") or (d["T"] in FLOATS and d["T1"] in FLOATS),
    note="mixed integer/float operands and an int64 base (ORT raises it through double) are declined by the "
         "entry; test_declined_pow_runs_on_cpu and test_int64_pow_is_left_to_ort check that",
)
for _op, _f in (("Max", np.maximum), ("Min", np.minimum)):
    SPECS[("", _op)] = OpSpec(
        ref=_fold(_f), exact=True,
        variants=[
            # min_opset 8: the dynamic layout's last run broadcasts, which opsets 6-7 refuse.
            Variant(min_opset=8),
            Variant("one_input", n_variadic=1, sweep=False),
            Variant("three_inputs", n_variadic=3, sweep=False),
            Variant("nan", when=_float_only, domains={"*": "nan_mix"}),
        ],
        broadcast_since=8,
    )
for _op, _f in (("Sum", lambda xs, a: _fold(np.add)(xs, a)), ("Mean", lambda xs, a: _fold(np.add)(xs, a) / len(xs))):
    SPECS[("", _op)] = OpSpec(
        # min_opset 8: the dynamic layout's last run broadcasts, which opsets 6-7 refuse.
        ref=_f, variants=[Variant(min_opset=8), Variant("one_input", n_variadic=1), Variant("three_inputs", n_variadic=3)],
        broadcast_since=8,
    )

# Cast.
_CAST_REP = ("float", "bfloat16")


def _to(dtype: str) -> int:
    return tensor_type(dtype)


def _cast_like_combos(d):
    return d["T1"] == d["T2"] or d["T1"] in _CAST_REP or d["T2"] in _CAST_REP


SPECS[("", "Cast")] = OpSpec(
    ref=lambda xs, a: xs[0], exact=True, scheme="unary", domains={"input": cast_source},
    variants=[
        Variant(attrs=lambda d: {"to": _to(d["T2"])}),
        Variant("saturate", attrs=lambda d: {"to": _to(d["T2"]), "saturate": 1}, sweep=False),
    ],
)
SPECS[("", "CastLike")] = OpSpec(
    ref=lambda xs, a: xs[0], exact=True, scheme="castlike", domains={"input": cast_source},
    combos=_cast_like_combos,
    variants=[Variant(), Variant("saturate", {"saturate": 1}, sweep=False)],
    note="representative matrix: every pair with a float/bfloat16 side, plus T1 == T2",
)
SPECS[("", "Identity")] = OpSpec(ref=lambda xs, a: xs[0], exact=True, scheme="unary", domains={"*": "full"})

# Comparisons and logic.
for _op, _f in (("Equal", np.equal), ("Greater", np.greater), ("GreaterOrEqual", np.greater_equal),
                ("Less", np.less), ("LessOrEqual", np.less_equal)):
    SPECS[("", _op)] = OpSpec(
        ref=_binary(_f), exact=True, domains={"*": "ties"},
        variants=[Variant(), Variant("special", when=_float_only, domains={"*": "special"})],
    )
for _op, _f in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
    SPECS[("", _op)] = OpSpec(ref=_binary(_f), exact=True)
SPECS[("", "Not")] = OpSpec(ref=_unary(np.logical_not), exact=True, scheme="unary")
for _op, _f in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
    SPECS[("", _op)] = OpSpec(ref=_binary(_f), exact=True, domains={"*": "full"})
SPECS[("", "BitwiseNot")] = OpSpec(ref=_unary(np.invert), exact=True, scheme="unary", domains={"*": "full"})
SPECS[("", "BitShift")] = OpSpec(
    ref=lambda xs, a: bit_shift(xs[0], xs[1], a["direction"]), exact=True,
    domains={"X": "shiftable", "Y": "shift"},
    variants=[Variant("LEFT", {"direction": "LEFT"}), Variant("RIGHT", {"direction": "RIGHT"})],
    note="shifts by the bit width or more are checked separately (C leaves them undefined)",
)

# Softmax family: opset-13 form per axis, opsets 1-12 flattened at `axis` (entry decides).
for _op, _f in (("Softmax", _softmax), ("LogSoftmax", _log_softmax), ("Hardmax", _hardmax)):
    SPECS[("", _op)] = OpSpec(
        ref=(lambda f: lambda xs, a, legacy=False: _softmax_like(xs[0], a.get("axis", 1 if legacy else -1), legacy, f))(_f),
        exact=(_op == "Hardmax"), scheme="softmax",
        variants=[Variant(), Variant("axis0", {"axis": 0}), Variant("axis1", {"axis": 1}),
                  Variant("axis_neg2", {"axis": -2}, min_opset=11), Variant("peaked", domains={"*": "peaked"})],
    )

# com.microsoft.
SPECS[("com.microsoft", "Gelu")] = OpSpec(ref=_unary(_gelu), scheme="unary")
SPECS[("com.microsoft", "QuickGelu")] = OpSpec(
    ref=lambda xs, a: xs[0] * _sigmoid(_f32(a.get("alpha", 1.702)) * xs[0]), scheme="unary",
    variants=[Variant(), Variant("alpha", {"alpha": 1.0})],
)
SPECS[("com.microsoft", "FastGelu")] = OpSpec(
    ref=lambda xs, a: _gelu_tanh(xs[0] + xs[1] if len(xs) > 1 and xs[1] is not None else xs[0]),
    scheme="bias", variants=[Variant("bias"), Variant("no_bias", present=())],
)
SPECS[("com.microsoft", "BiasGelu")] = OpSpec(ref=lambda xs, a: _gelu(xs[0] + xs[1]), scheme="bias")
SPECS[("com.microsoft", "BiasAdd")] = OpSpec(ref=lambda xs, a: xs[0] + xs[1] + xs[2], scheme="bias")


def spec_for(entry) -> OpSpec | None:
    """The spec of an entry (None: the suite does not know the op yet)."""
    return _spec_for(entry)


# --------------------------------------------------------------------------------------------
# Shape family: data movement, exact. Target shapes, axes and split sizes are host-known
# (initializers), as the entries need them at trace time.


def _i64(*v):
    return np.array(v, dtype=np.int64)


def _by_layout(**values):
    """A constant that depends on the case's layout (``basic`` and ``default`` for the rest)."""

    def pick(case):
        return values.get(case.layout, values.get("default"))

    return pick


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


def _rep(variant: Variant) -> Variant:
    """The same variant, on the representative dtype only."""
    variant.sweep = False
    return variant


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
SPECS[("", "Squeeze")] = OpSpec(
    ref=_squeeze, exact=True,
    scheme={"basic": [[2, 1, 3, 1]], "empty": [[0, 1, 3, 1]], "transposed": [[2, 1, 3, 1]],
            "dynamic": [[[2, 1, 3, 1]], [[4, 1, 2, 1]], [[1, 1, 5, 1]]]},
    constants={"axes": _i64(1, 3)},
    variants=[Variant(), _rep(Variant("no_axes", constants={"axes": None})),
              _rep(Variant("negative_axes", constants={"axes": _i64(-1)}))],
)
SPECS[("", "Unsqueeze")] = OpSpec(
    ref=_unsqueeze, exact=True,
    scheme={"basic": [[2, 3]], "scalar": [[]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3]], [[1, 5]], [[4, 1]]]},
    constants={"axes": _by_layout(default=_i64(0, 3), scalar=_i64(0))},
    variants=[Variant(), _rep(Variant("negative_axes", constants={"axes": _i64(-1)})),
              _rep(Variant("unsorted_axes", constants={"axes": _i64(3, 0, 1)}))],
)
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
SPLIT_13 = OpSpec(  # Split-13..17: `split` input
    ref=_split(lambda a: a["_n_outputs"]), exact=True, scheme=_SPLIT_SCHEME, constants={"split": _i64(1, 2, 3)},
    variants=[
        Variant("split_input", {"axis": 1}, n_outputs=3),
        _rep(Variant("equal", {"axis": 1}, n_outputs=3, constants={"split": None})),
        _rep(Variant("negative_axis", {"axis": -2}, n_outputs=3)),
    ],
)
SPECS[("", "Split")] = OpSpec(  # Split-18+: `split` input or `num_outputs`
    ref=_split(lambda a: a["_n_outputs"]), exact=True, scheme=_SPLIT_SCHEME, constants={"split": _i64(1, 2, 3)},
    variants=[
        Variant("split_input", {"axis": 1}, n_outputs=3),
        _rep(Variant("num_outputs", {"axis": 1, "num_outputs": 3}, n_outputs=3, constants={"split": None})),
        _rep(Variant("num_outputs_uneven", {"axis": 1, "num_outputs": 4}, n_outputs=4, constants={"split": None},
                     shapes=[[2, 7, 3]])),
    ],
)

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
SPECS[("", "Slice")] = OpSpec(  # Slice-10+: host-known starts/ends/axes/steps inputs
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

# Indexing.
SPECS[("", "Gather")] = OpSpec(
    ref=lambda xs, a: np.take(xs[0], xs[1].astype(np.int64), axis=a.get("axis", 0)), exact=True,
    domains={"indices": "index"},
    scheme={"basic": [[3, 4, 5], [2, 2]], "scalar": [[3, 4, 5], []], "empty": [[3, 4, 5], [0]],
            "transposed": [[3, 4, 5], [2, 2]], "dynamic": [[[3, 4, 5], [2, 2]], [[4, 3, 2], [3, 1]], [[5, 1, 1], [1, 1]]]},
    variants=[Variant(), _rep(Variant("axis1", {"axis": 1})), _rep(Variant("axis_neg1", {"axis": -1}, min_opset=11))],
    note="out-of-range indices: ORT raises, the entry clamps; not compared",
)

# --------------------------------------------------------------------------------------------
# Reductions.


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


REDUCERS = {
    "ReduceSum": (lambda x, ax, k: np.sum(x, axis=ax, keepdims=k, dtype=_native(x)), "any"),
    "ReduceMean": (lambda x, ax, k: np.mean(x, axis=ax, keepdims=k), "any"),
    "ReduceMax": (_extreme(np.max, -np.inf, "min"), "ties"),
    "ReduceMin": (_extreme(np.min, np.inf, "max"), "ties"),
    "ReduceProd": (lambda x, ax, k: np.prod(x, axis=ax, keepdims=k, dtype=_native(x)), "near_one"),
    "ReduceSumSquare": (lambda x, ax, k: np.sum(x * x, axis=ax, keepdims=k, dtype=_native(x)), "any"),
    "ReduceL1": (lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k, dtype=_native(x)), "any"),
    "ReduceL2": (lambda x, ax, k: np.sqrt(np.sum(x * x, axis=ax, keepdims=k)), "any"),
    "ReduceLogSum": (lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k)), "positive"),
    "ReduceLogSumExp": (lambda x, ax, k: np.log(np.sum(np.exp(x), axis=ax, keepdims=k)), "any"),
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
    if op != "ReduceMean":  # ONNX: the mean of an empty set is undefined (ORT gives 0, numpy NaN)
        variants.append(_rep(Variant("over_empty_axis", **_merge(axes([0]), {"keepdims": 0}), shapes=[[0, 3]])))
    if axes_input:
        variants.append(_rep(Variant("noop_with_empty_axes", {"noop_with_empty_axes": 1}, constants={"axes": None})))
    exact = op in ("ReduceMax", "ReduceMin")
    # ORT's CPU EP sums int64 and multiplies integers in floating point; the entries decline those
    # (int64 ReduceSum runs, checked at run time to stay where doubles are exact: the "any" domain).
    declined = {"ReduceSumSquare": ("int64",), "ReduceL1": ("int64",), "ReduceProd": ("int64", "int32")}
    return OpSpec(ref=_reduce(f), exact=exact, domains={"*": dom}, scheme=_REDUCE_SCHEME, variants=variants,
                  combos=lambda d: d["T"] not in declined.get(op, ()))


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


def _spec_for(entry) -> OpSpec | None:
    op, legacy_until = entry.op, entry.until
    if entry.domain == "" and op == "Pad" and legacy_until is not None and legacy_until <= 10:
        return PAD_LEGACY
    if entry.domain == "" and op == "TopK" and legacy_until is not None and legacy_until <= 9:
        return TOPK_LEGACY
    if entry.domain == "" and op == "Dropout" and legacy_until is not None and legacy_until <= 11:
        return DROPOUT_LEGACY
    if entry.domain == "" and op == "Resize" and legacy_until is not None and legacy_until <= 12:
        return RESIZE_10 if legacy_until <= 10 else RESIZE_11
    if entry.domain == "" and op == "Upsample" and legacy_until is not None and legacy_until <= 8:
        return UPSAMPLE_7
    if entry.domain == "" and op == "GroupNormalization" and legacy_until is not None and legacy_until <= 20:
        return GROUP_NORM_18
    if entry.domain == "" and op == "Clip" and legacy_until is not None and legacy_until <= 10:
        return CLIP_LEGACY
    if entry.domain == "" and op == "Slice" and legacy_until is not None and legacy_until <= 9:
        return SLICE_LEGACY
    if entry.domain == "" and op == "Split" and legacy_until is not None:
        return SPLIT_LEGACY if legacy_until <= 12 else SPLIT_13
    if entry.domain == "" and op in REDUCERS:
        # The axes move from an attribute to an input at opset 18 (ReduceSum: 13).
        return reduce_spec(op, axes_input=any(p.name == "axes" for p in entry.inputs))
    if entry.domain == "" and op in ("Squeeze", "Unsqueeze") and legacy_until is not None and legacy_until <= 12:
        base = SPECS[("", op)]
        attrs = {"Squeeze": [("default", [1, 3]), ("no_axes", None)], "Unsqueeze": [("default", [0, 3]), ("unsorted_axes", [3, 0, 1])]}[op]
        variants = [Variant(n, {} if v is None else {"axes": v}, sweep=(n == "default")) for n, v in attrs]
        scheme = dict(base.scheme)
        scheme.pop("scalar", None)  # the axes attribute does not follow the layout
        return OpSpec(ref=base.ref, exact=True, scheme=scheme, variants=variants)
    spec = SPECS.get((entry.domain, op))
    if spec is None:
        return None
    if op in ("Softmax", "LogSoftmax", "Hardmax") and legacy_until is not None and legacy_until <= 12:
        legacy = OpSpec(**{**spec.__dict__})
        inner = spec.ref
        legacy.ref = lambda xs, a: inner(xs, a, legacy=True)
        return legacy
    return spec


# --------------------------------------------------------------------------------------------
# Linear algebra and normalisation


def _gemm(xs, a):
    lhs, rhs = xs[0], xs[1]
    if a.get("transA"):
        lhs = lhs.T
    if a.get("transB"):
        rhs = rhs.T
    y = a.get("alpha", 1.0) * (lhs @ rhs)
    if len(xs) > 2 and xs[2] is not None:
        y = y + a.get("beta", 1.0) * xs[2]
    return y


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


SPECS[("", "MatMul")] = OpSpec(
    ref=lambda xs, a: np.matmul(xs[0], xs[1]),
    scheme={
        "basic": [[2, 3, 4], [4, 5]], "broadcast": [[2, 1, 3, 4], [3, 4, 5]], "broadcast2": [[4], [2, 4, 3]],
        "empty": [[0, 4], [4, 3]], "transposed": [[3, 4], [4, 2]],
        "dynamic": [[[2, 3], [3, 4]], [[5, 3], [3, 2]], [[1, 2], [2, 6]]],
    },
)
SPECS[("", "Gemm")] = OpSpec(
    ref=_gemm,
    scheme={
        "basic": [[3, 4], [4, 5], [5]], "broadcast": [[3, 4], [4, 5], [3, 1]], "transposed": [[3, 4], [4, 5], [3, 5]],
        "dynamic": [[[3, 4], [4, 5], [5]], [[2, 4], [4, 6], [6]], [[1, 2], [2, 3], [3]]],
    },
    variants=[
        Variant(),
        _rep(Variant("trans_alpha_beta", {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, shapes=[[4, 3], [5, 4], [5]])),
        _rep(Variant("no_c", {"alpha": 2.0}, present=(), shapes=[[3, 4], [4, 5]], min_opset=11)),  # C optional from Gemm-11
    ],
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


# --------------------------------------------------------------------------------------------
# Convolution and per-channel ops (channels-first, as ONNX has them)


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
_GLOBAL_POOL_SCHEME = {"basic": [[2, 3, 4, 5]], "dynamic": [[[2, 3, 4, 5]], [[1, 2, 3, 1]], [[1, 4, 2, 6]]]}
SPECS[("", "GlobalAveragePool")] = OpSpec(
    ref=lambda xs, a: xs[0].mean(axis=tuple(range(2, xs[0].ndim)), keepdims=True), scheme=_GLOBAL_POOL_SCHEME
)
SPECS[("", "GlobalMaxPool")] = OpSpec(
    ref=lambda xs, a: xs[0].max(axis=tuple(range(2, xs[0].ndim)), keepdims=True), exact=True, scheme=_GLOBAL_POOL_SCHEME
)


def _pool(kind):
    """ONNX MaxPool / AveragePool / LpPool ("max", "average", "lp"), one output element at a
    time (independent of the EP's strided-window lowering)."""

    def ref(xs, a):
        x = xs[0].astype(np.float64)
        size = x.shape[2:]
        n = len(size)
        kernel = a["kernel_shape"]
        strides, dil = a.get("strides", [1] * n), a.get("dilations", [1] * n)
        span = [(kernel[i] - 1) * dil[i] + 1 for i in range(n)]
        auto_pad, ceil = a.get("auto_pad", "NOTSET"), a.get("ceil_mode", 0)
        lo, hi, out = [], [], []
        for i in range(n):
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                count = -(-size[i] // strides[i])
                total = max(0, (count - 1) * strides[i] + span[i] - size[i])
                small = total // 2
                lo.append(small if auto_pad == "SAME_UPPER" else total - small)
                hi.append(total - lo[-1])
            else:
                pads = a.get("pads", [0] * 2 * n) if auto_pad == "NOTSET" else [0] * 2 * n
                lo.append(pads[i])
                hi.append(pads[i + n])
                room = size[i] + lo[i] + hi[i] - span[i]
                count = -(-room // strides[i]) + 1 if ceil else room // strides[i] + 1
                if ceil and (count - 1) * strides[i] >= size[i] + lo[i]:
                    count -= 1
            out.append(count)
        y = np.zeros(x.shape[:2] + tuple(out))
        indices = np.zeros(x.shape[:2] + tuple(out), np.int64)
        column_major = a.get("storage_order", 0) == 1
        # Flat index of every element of x, spatial axes column-major for storage_order 1.
        spatial_order = list(range(n))[::-1] if column_major else list(range(n))
        flat = np.zeros(x.shape, np.int64)
        stride = 1
        for i in reversed(spatial_order):
            shape = [1] * x.ndim
            shape[2 + i] = size[i]
            flat = flat + np.arange(size[i]).reshape(shape) * stride
            stride *= size[i]
        flat = flat + (np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], *[1] * n) * stride)
        for o in itertools.product(*(range(c) for c in out)):
            taps = [[o[i] * strides[i] - lo[i] + j * dil[i] for j in range(kernel[i])] for i in range(n)]
            inside = [[t for t in axis if 0 <= t < size[i]] for i, axis in enumerate(taps)]
            window = x[(Ellipsis,) + np.ix_(*inside)]
            window = window.reshape(x.shape[:2] + (math.prod(window.shape[2:]),))
            if kind == "max":
                y[(Ellipsis,) + o] = window.max(axis=-1)
                where = flat[(Ellipsis,) + np.ix_(*inside)].reshape(window.shape)
                first = window.argmax(axis=-1)[..., None]
                indices[(Ellipsis,) + o] = np.take_along_axis(where, first, axis=-1)[..., 0]
            elif kind == "lp":
                p = a.get("p", 2)
                y[(Ellipsis,) + o] = (np.abs(window) ** p).sum(axis=-1) ** (1.0 / p)
            else:
                counted = window.shape[-1]
                if a.get("count_include_pad", 0):
                    counted = np.prod([sum(-lo[i] <= t < size[i] + hi[i] for t in axis) for i, axis in enumerate(taps)])
                y[(Ellipsis,) + o] = window.sum(axis=-1) / counted
        return [y.astype(xs[0].dtype), indices] if kind == "max" else y.astype(xs[0].dtype)

    return ref


_POOL_SCHEME = {"basic": [[2, 3, 7, 8]], "empty": [[0, 3, 7, 8]], "dynamic": [[[2, 3, 7, 8]], [[1, 2, 5, 5]], [[1, 4, 9, 6]]]}
_POOL_VARIANTS = [
    Variant(attrs={"kernel_shape": [2, 2]}, outputs=()),
    _rep(Variant("strided_pads", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, outputs=())),
    _rep(Variant("asymmetric_pads", {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [0, 1, 2, 1]}, outputs=())),
    _rep(Variant("ceil_mode", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, outputs=(), min_opset=10)),
    _rep(Variant("ceil_mode_pads", {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
                 outputs=(), min_opset=10)),
    _rep(Variant("same_upper", {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, outputs=())),
    _rep(Variant("same_lower", {"kernel_shape": [2, 3], "strides": [1, 2], "auto_pad": "SAME_LOWER"}, outputs=())),
    _rep(Variant("valid", {"kernel_shape": [3, 3], "strides": [2, 1], "auto_pad": "VALID"}, outputs=())),
    _rep(Variant("pool1d", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, outputs=(), shapes=[[2, 3, 9]])),
    _rep(Variant("pool3d", {"kernel_shape": [2, 2, 2]}, outputs=(), shapes=[[1, 2, 3, 4, 5]])),
]
SPECS[("", "MaxPool")] = OpSpec(
    ref=_pool("max"),
    exact=True,
    scheme=_POOL_SCHEME,
    domains={"X": "ties"},  # repeated values: the first maximum in window order must win
    variants=_POOL_VARIANTS + [
        _rep(Variant("dilations", {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 1, 0, 2]}, outputs=(), min_opset=10)),
        Variant("indices", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, min_opset=8),
        _rep(Variant("indices_column_major", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1],
                                              "storage_order": 1}, min_opset=8)),
        _rep(Variant("indices_ceil_dilations", {"kernel_shape": [2, 2], "strides": [2, 2], "dilations": [2, 1],
                                                "ceil_mode": 1}, min_opset=10)),
        _rep(Variant("indices_3d", {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2]}, shapes=[[1, 2, 3, 4, 5]], min_opset=8)),
        _rep(Variant("indices_3d_column_major", {"kernel_shape": [2, 2, 2], "storage_order": 1}, shapes=[[1, 2, 3, 4, 5]],
                     min_opset=8)),
    ],
)
SPECS[("", "AveragePool")] = OpSpec(
    ref=_pool("average"),
    scheme=_POOL_SCHEME,
    variants=_POOL_VARIANTS + [
        _rep(Variant("count_include_pad", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 2, 1, 0], "count_include_pad": 1},
                     outputs=())),
        _rep(Variant("count_include_pad_ceil", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                                 "count_include_pad": 1, "ceil_mode": 1}, outputs=(), min_opset=10)),
        _rep(Variant("dilations", {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 1, 0, 2]}, outputs=(), min_opset=19)),
    ],
)
_LP_POOL_VARIANTS = [v for v in _POOL_VARIANTS if "ceil_mode" not in v.name] + [
    _rep(Variant("ceil_mode", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, outputs=(), min_opset=18)),
    _rep(Variant("dilations", {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 1, 0, 2]}, outputs=(), min_opset=18)),
    _rep(Variant("p1", {"kernel_shape": [2, 3], "p": 1, "strides": [1, 2]}, outputs=())),
    _rep(Variant("p3", {"kernel_shape": [3, 2], "p": 3, "pads": [1, 0, 1, 1]}, outputs=())),
]
SPECS[("", "LpPool")] = OpSpec(ref=_pool("lp"), scheme=_POOL_SCHEME, variants=_LP_POOL_VARIANTS)
SPECS[("", "GlobalLpPool")] = OpSpec(
    ref=lambda xs, a: (np.abs(xs[0].astype(np.float64)) ** a.get("p", 2)).sum(axis=tuple(range(2, xs[0].ndim)), keepdims=True)
    ** (1.0 / a.get("p", 2)),
    scheme=_GLOBAL_POOL_SCHEME,
    variants=[Variant(), _rep(Variant("p1", {"p": 1})), _rep(Variant("p3", {"p": 3}))],
)


# --------------------------------------------------------------------------------------------
# Generated tensors and structural ops


def _fixed(value):
    """A domain that always gives ``value`` (as the port's dtype)."""
    return lambda dtype, shape, rng, dtypes: np.full(shape, value).astype(np_dtype(dtype))


def _range(xs, a):
    start, limit, delta = (v.item() for v in xs)
    n = max(int(math.ceil((limit - start) / delta)), 0)
    out, value = [], start
    for _ in range(n):
        out.append(value)
        value = type(start)(value + delta)
    return np.array(out, dtype=xs[0].dtype)


def _cumsum(xs, a):
    x, axis = xs[0], int(np.asarray(xs[1]).item()) % xs[0].ndim
    if a.get("reverse"):
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if a.get("exclusive"):
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.take(y, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(y, axis) if a.get("reverse") else y


def _constant_of_shape(xs, a):
    value = a.get("value")
    fill = numpy_helper.to_array(value).reshape(()) if value is not None else np.float32(0)
    return np.full([int(v) for v in xs[0]], fill)


SPECS[("", "ConstantOfShape")] = OpSpec(
    ref=_constant_of_shape, exact=True, scheme={"basic": [[2]]}, constants={"input": _i64(2, 3)},
    variants=[
        Variant(when=lambda d: d["T"] == "float"),  # no value attribute: float32 zeros
        Variant("value", lambda d: {"value": numpy_helper.from_array(np.array([3], dtype=np_dtype(d["T"])))}),
    ],
)
SPECS[("", "Range")] = OpSpec(
    ref=_range, exact=True, scheme={"basic": [[], [], []]},
    domains={"start": _fixed(2), "limit": _fixed(11), "delta": _fixed(3)},
    variants=[Variant(), _rep(Variant("backwards", domains={"start": _fixed(10), "limit": _fixed(-3), "delta": _fixed(-4)})),
              _rep(Variant("empty", domains={"start": _fixed(5), "limit": _fixed(1), "delta": _fixed(2)}))],
)
SPECS[("", "Tile")] = OpSpec(
    ref=lambda xs, a: np.tile(xs[0], [int(v) for v in xs[1]]), exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    constants={"repeats": _by_layout(default=_i64(2, 1, 3), empty=_i64(2, 2), transposed=_i64(1, 2))},
)
SPECS[("", "Trilu")] = OpSpec(
    ref=lambda xs, a: (np.triu if a.get("upper", 1) else np.tril)(xs[0], int(xs[1]) if len(xs) > 1 and xs[1] is not None else 0),
    exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    constants={"k": np.array(-1, np.int64)},
    variants=[Variant(), _rep(Variant("lower", {"upper": 0})), _rep(Variant("no_k", constants={"k": None}))],
)
SPECS[("", "CumSum")] = OpSpec(
    ref=_cumsum,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]],
            "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    constants={"axis": np.array(1, np.int64)},
    variants=[Variant(), _rep(Variant("exclusive_reverse", {"exclusive": 1, "reverse": 1})),
              _rep(Variant("negative_axis", constants={"axis": np.array(-1, np.int64)}))],
)



# --------------------------------------------------------------------------------------------
# Pad, depth/space moves, EyeLike, GatherElements


def _pad(xs, a):
    x = xs[0]
    pads = [int(v) for v in (xs[1] if len(xs) > 1 and not isinstance(xs[1], type(None)) and "pads" not in a else a["pads"])]
    value = xs[2] if len(xs) > 2 and xs[2] is not None else a.get("value", 0)
    axes = [int(v) % x.ndim for v in xs[3]] if len(xs) > 3 and xs[3] is not None else list(range(x.ndim))
    n = len(axes)
    mode = a.get("mode", "constant")
    for i, axis in enumerate(axes):
        lo, hi = pads[i], pads[i + n]
        index = [slice(None)] * x.ndim
        index[axis] = slice(max(-lo, 0), x.shape[axis] - max(-hi, 0))
        x = x[tuple(index)]
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        np_mode = {"edge": "edge", "reflect": "reflect", "wrap": "wrap"}.get(mode, "constant")
        x = np.pad(x, widths, mode=np_mode, **({"constant_values": np.asarray(value).item()} if np_mode == "constant" else {}))
    return x


def _depth_to_space(xs, a):
    x, b = xs[0], a["blocksize"]
    n, c, h, w = x.shape
    if a.get("mode", "DCR") == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(xs, a):
    x, b = xs[0], a["blocksize"]
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


def _gather_elements(xs, a):
    data, idx = xs[0], xs[1].astype(np.int64)
    axis = a.get("axis", 0) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return np.take_along_axis(data, idx, axis=axis)


def _in_range_indices(dtype, shape, rng, dtypes):
    """Indices valid for axis 1 of the [2, 3, 4] data, negatives included."""
    return rng.integers(-3, 3, size=shape).astype(np_dtype(dtype))


_PAD_SCHEME = {"basic": [[2, 3, 4]], "transposed": [[3, 4]], "dynamic": [[[2, 3, 4]], [[3, 5, 2]], [[2, 2, 3]]]}
_PAD_PADS = _by_layout(default=_i64(0, 1, 2, 1, 1, 1), transposed=_i64(1, 2, 0, 1))
PAD_LEGACY = OpSpec(
    ref=_pad, exact=True, scheme={"basic": [[2, 3, 4]]},
    variants=[Variant(attrs={"pads": [0, 1, 2, 1, 1, 1], "value": 1.5}), _rep(Variant("edge", {"pads": [0, 1, 1, 0, 1, 1], "mode": "edge"})),
              _rep(Variant("reflect", {"pads": [0, 1, 1, 0, 1, 2], "mode": "reflect"}))],
)
SPECS[("", "Pad")] = OpSpec(
    ref=_pad, exact=True, scheme=_PAD_SCHEME, constants={"pads": _PAD_PADS, "constant_value": None, "axes": None},
    variants=[
        Variant(),
        _rep(Variant("edge", {"mode": "edge"})),
        _rep(Variant("reflect", {"mode": "reflect"})),
        _rep(Variant("crop", constants={"pads": _i64(0, -1, 1, 1, 0, -2), "constant_value": None, "axes": None}, shapes=[[2, 3, 4]])),
    ],
)
SPECS[("", "DepthToSpace")] = OpSpec(
    ref=_depth_to_space, exact=True, scheme={"basic": [[2, 8, 2, 3]], "dynamic": [[[2, 8, 2, 3]], [[1, 8, 3, 1]], [[3, 8, 1, 2]]]},
    variants=[Variant(attrs={"blocksize": 2}), _rep(Variant("crd", {"blocksize": 2, "mode": "CRD"}, min_opset=11))],
)
SPECS[("", "SpaceToDepth")] = OpSpec(
    ref=_space_to_depth, exact=True, scheme={"basic": [[2, 3, 4, 6]], "dynamic": [[[2, 3, 4, 6]], [[1, 2, 2, 2]], [[3, 1, 6, 4]]]},
    variants=[Variant(attrs={"blocksize": 2})],
)
SPECS[("", "EyeLike")] = OpSpec(
    ref=lambda xs, a: np.eye(xs[0].shape[0], xs[0].shape[1], k=a.get("k", 0)), exact=True,
    combos=lambda d: d["T1"] == d["T2"],
    scheme={"basic": [[3, 5]], "dynamic": [[[3, 5]], [[4, 2]], [[1, 1]]]},
    variants=[Variant(), _rep(Variant("k", {"k": -1}))],
)
SPECS[("", "GatherElements")] = OpSpec(
    ref=_gather_elements, exact=True, domains={"indices": _in_range_indices},
    scheme={"basic": [[2, 3, 4], [2, 2, 4]], "dynamic": [[[2, 3, 4], [2, 2, 4]], [[2, 3, 4], [2, 5, 4]], [[2, 3, 4], [2, 1, 4]]]},
    variants=[Variant(attrs={"axis": 1})],
)


# --------------------------------------------------------------------------------------------
# GatherND, ScatterElements, OneHot, CumProd


def _gather_nd(xs, a):
    data, idx, b = xs[0], xs[1].astype(np.int64), a.get("batch_dims", 0)
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    flat_data = data.reshape((batch,) + data.shape[b:])
    flat_idx = idx.reshape((batch,) + idx.shape[b:])
    out = []
    for i in range(batch):
        rows = flat_idx[i].reshape(-1, idx.shape[-1])
        out.append(np.stack([flat_data[i][tuple(int(c) for c in r)] for r in rows]))
    return np.stack(out).reshape(idx.shape[:-1] + data.shape[b + idx.shape[-1]:])


def _scatter_elements(xs, a):
    data, idx, upd = xs[0].copy(), xs[1].astype(np.int64), xs[2]
    axis = a.get("axis", 0) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(a.get("reduction", "none"))
    for pos in np.ndindex(idx.shape):
        target = list(pos)
        target[axis] = idx[pos]
        t = tuple(target)
        data[t] = combine(data[t], upd[pos]) if combine else upd[pos]
    return data


def _one_hot(xs, a):
    idx, depth, values = xs[0].astype(np.int64), int(np.asarray(xs[1]).item()), xs[2]
    idx = np.where(idx < 0, idx + depth, idx)
    axis = a.get("axis", -1) % (idx.ndim + 1)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([depth if i == axis else 1 for i in range(idx.ndim + 1)])
    return np.where(hot, values[1], values[0])


def _distinct_axis1_indices(dtype, shape, rng, dtypes):
    """A different row per column (a scatter with no duplicate targets), negatives included."""
    out = np.stack([rng.permutation(3)[: shape[1]] for _ in range(shape[0] * shape[2])]).reshape(shape[0], shape[2], shape[1]).transpose(0, 2, 1)
    return (out - 3 * (out % 2)).astype(np_dtype(dtype))


def _nd_indices(dtype, shape, rng, dtypes):
    """Valid (row, column) pairs into a [2, 3, 4] tensor, negatives included."""
    rows = rng.integers(-2, 2, size=shape[:-1])
    cols = rng.integers(-3, 3, size=shape[:-1])
    return np.stack([rows, cols], axis=-1).astype(np_dtype(dtype))


SPECS[("", "GatherND")] = OpSpec(
    ref=_gather_nd, exact=True, domains={"indices": _nd_indices},
    scheme={"basic": [[2, 3, 4], [5, 2]], "dynamic": [[[2, 3, 4], [5, 2]], [[2, 3, 4], [1, 2]], [[2, 3, 4], [3, 2]]]},
)
def _WIDE_SCATTER(attrs=None):  # noqa: N802 - a Variant factory, read like a constant
    """64-bit data over the whole range: MLX's GPU scatter has no 64-bit kernels, so the entry
    scatters the two 32-bit halves; every bit must come back."""
    return Variant("wide_values", attrs or {}, domains={"data": "full", "updates": "full"},
                   when=lambda d: d["T"] in ("int64", "uint64"))


SPECS[("", "ScatterElements")] = OpSpec(
    ref=_scatter_elements, exact=True, domains={"indices": _distinct_axis1_indices},
    scheme={"basic": [[2, 3, 4], [2, 2, 4], [2, 2, 4]], "dynamic": [[[2, 3, 4], [2, 2, 4], [2, 2, 4]], [[2, 3, 4], [2, 1, 4], [2, 1, 4]], [[2, 3, 4], [2, 3, 4], [2, 3, 4]]]},
    variants=[Variant(attrs={"axis": 1}), _WIDE_SCATTER(attrs={"axis": 1}),
              _rep(Variant("add", {"axis": 1, "reduction": "add"}, min_opset=16)),
              _rep(Variant("mul", {"axis": 1, "reduction": "mul"}, min_opset=16)),
              _rep(Variant("max", {"axis": 1, "reduction": "max"}, min_opset=18)),
              _rep(Variant("min", {"axis": 1, "reduction": "min"}, min_opset=18))],
)
SPECS[("", "OneHot")] = OpSpec(
    ref=_one_hot, exact=True, scheme={"basic": [[2, 3], [], [2]]},
    domains={"indices": lambda dtype, shape, rng, d: rng.integers(-4, 4, size=shape).astype(np_dtype(dtype)), "depth": _fixed(4)},
    combos=lambda d: d["T1"] in ("int64", "int32", "float") and d["T2"] in ("int64", "float"),
    variants=[Variant(), _rep(Variant("axis0", {"axis": 0}))],
)
SPECS[("", "CumProd")] = OpSpec(
    ref=lambda xs, a: _cumsum_like(np.cumprod, xs, a, 1),
    scheme={"basic": [[2, 3, 4]], "transposed": [[3, 4]], "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    domains={"x": "near_one"}, constants={"axis": np.array(1, np.int64)},
    variants=[Variant(), _rep(Variant("exclusive_reverse", {"exclusive": 1, "reverse": 1}))],
)


def _cumsum_like(scan, xs, a, identity):
    x, axis = xs[0], int(np.asarray(xs[1]).item()) % xs[0].ndim
    if a.get("reverse"):
        x = np.flip(x, axis)
    y = scan(x, axis=axis, dtype=x.dtype)
    if a.get("exclusive"):
        first = np.full_like(np.take(y, [0], axis=axis), identity)
        y = np.concatenate([first, np.take(y, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(y, axis) if a.get("reverse") else y


def _scatter_nd(xs, a):
    data, idx, upd = xs[0].copy(), xs[1].astype(np.int64), xs[2]
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(a.get("reduction", "none"))
    for pos in np.ndindex(idx.shape[:-1]):
        target = tuple(int(c) % data.shape[j] for j, c in enumerate(idx[pos]))
        data[target] = combine(data[target], upd[pos]) if combine else upd[pos]
    return data


def _distinct_rows(dtype, shape, rng, dtypes):
    """Distinct (row, column) pairs into a [2, 3, 4] tensor, some negative."""
    pairs = [(r, c) for r in range(2) for c in range(3)]
    picked = [pairs[i] for i in rng.permutation(len(pairs))[: int(np.prod(shape[:-1]))]]
    out = np.array([(r - 2 * (r % 2), c) for r, c in picked]).reshape(shape)
    return out.astype(np_dtype(dtype))


SPECS[("", "ScatterND")] = OpSpec(
    ref=_scatter_nd, exact=True, domains={"indices": _distinct_rows},
    scheme={"basic": [[2, 3, 4], [3, 2], [3, 4]], "dynamic": [[[2, 3, 4], [3, 2], [3, 4]], [[2, 3, 4], [1, 2], [1, 4]], [[2, 3, 4], [5, 2], [5, 4]]]},
    variants=[Variant(), _WIDE_SCATTER(),
              _rep(Variant("add", {"reduction": "add"}, min_opset=16)),
              _rep(Variant("mul", {"reduction": "mul"}, min_opset=16)), _rep(Variant("max", {"reduction": "max"}, min_opset=18))],
)
SPECS[("", "Scatter")] = OpSpec(
    ref=_scatter_elements, exact=True, domains={"indices": _distinct_axis1_indices},
    scheme={"basic": [[2, 3, 4], [2, 2, 4], [2, 2, 4]]},
    variants=[Variant(attrs={"axis": 1})],
)



# --------------------------------------------------------------------------------------------
# TopK, ReverseSequence, Compress, CenterCropPad


def _top_k(xs, a):
    x = xs[0]
    k = int(np.asarray(xs[1]).reshape(-1)[0]) if len(xs) > 1 else a["k"]
    axis = a.get("axis", -1) % x.ndim
    key = -x if a.get("largest", 1) else x
    order = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(order, range(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def _ties(dtype, shape, rng, dtypes):
    """Few distinct values, so equal values (and their index order) are exercised."""
    return rng.integers(-3, 4, size=shape).astype(np_dtype(dtype))


def _reverse_sequence(xs, a):
    x, lens = xs[0].copy(), xs[1]
    b_ax, t_ax = a.get("batch_axis", 1), a.get("time_axis", 0)
    out = x.copy()
    for b, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[b_ax] = b
        src[t_ax] = slice(0, int(n))
        dst = list(src)
        out[tuple(dst)] = np.flip(x[tuple(src)], axis=t_ax - (1 if b_ax < t_ax else 0))
    return out


def _center_crop_pad(xs, a):
    x, shape = xs[0], [int(v) for v in xs[1]]
    axes = [v % x.ndim for v in a.get("axes", range(x.ndim))]
    for axis, target in zip(axes, shape):
        dim = x.shape[axis]
        if target <= dim:
            start = (dim - target) // 2
            x = np.take(x, range(start, start + target), axis=axis)
        else:
            widths = [(0, 0)] * x.ndim
            before = (target - dim) // 2
            widths[axis] = (before, target - dim - before)
            x = np.pad(x, widths)
    return x


TOPK_LEGACY = OpSpec(ref=_top_k, exact=True, domains={"X": _ties}, scheme={"basic": [[3, 8]]}, variants=[Variant(attrs={"k": 3})])
SPECS[("", "TopK")] = OpSpec(
    ref=_top_k, exact=True, domains={"X": _ties}, constants={"K": _i64(3)},
    scheme={"basic": [[3, 8]], "dynamic": [[[3, 8]], [[2, 5]], [[4, 3]]]},
    variants=[Variant(), _rep(Variant("smallest_axis0", {"largest": 0, "axis": 0}, min_opset=11, constants={"K": _i64(2)}))],
)
SPECS[("", "ReverseSequence")] = OpSpec(
    ref=_reverse_sequence, exact=True, scheme={"basic": [[4, 3, 2], [3]]},
    domains={"sequence_lens": lambda dtype, shape, rng, d: np.array([4, 2, 1])[: shape[0]].astype(np_dtype(dtype))},
    variants=[Variant()],
)
SPECS[("", "Compress")] = OpSpec(
    ref=lambda xs, a: np.compress(xs[1], xs[0], axis=a.get("axis")), exact=True, scheme={"basic": [[4, 3, 2], [3]]},
    variants=[Variant(attrs={"axis": 1})],
)
SPECS[("", "CenterCropPad")] = OpSpec(
    ref=_center_crop_pad, exact=True, scheme={"basic": [[4, 3, 2]]}, constants={"shape": _i64(3, 5, 2)},
    variants=[Variant(), _rep(Variant("axes", {"axes": [-1, 0]}, constants={"shape": _i64(5, 1)}))],
)



# --------------------------------------------------------------------------------------------
# InstanceNormalization, MeanVarianceNormalization, Dropout (inference)


def _instance_norm(xs, a):
    x, scale, bias = xs
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    shape = [1, -1] + [1] * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5)) * scale.reshape(shape) + bias.reshape(shape)


def _mvn(xs, a):
    x, axes = xs[0], tuple(a.get("axes", [0, 2, 3]))
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt((x * x).mean(axis=axes, keepdims=True) - mean * mean)
    return (x - mean) / (std + 1e-9)


SPECS[("", "InstanceNormalization")] = OpSpec(
    ref=_instance_norm, tolerance_scale=4.0,
    scheme={"basic": [[2, 3, 4, 5], [3], [3]], "dynamic": [[[2, 3, 4, 5], [3], [3]], [[1, 3, 2, 2], [3], [3]], [[3, 3, 1, 6], [3], [3]]]},
)
SPECS[("", "MeanVarianceNormalization")] = OpSpec(
    ref=_mvn, tolerance_scale=4.0, scheme={"basic": [[2, 3, 4, 5]], "dynamic": [[[2, 3, 4, 5]], [[1, 3, 2, 2]], [[3, 2, 1, 6]]]},
    variants=[Variant(), _rep(Variant("axes", {"axes": [1, 3]}))],
)
DROPOUT_LEGACY = OpSpec(ref=lambda xs, a: [xs[0]], exact=True, scheme={"basic": [[2, 3, 4]]}, variants=[Variant(outputs=())])
SPECS[("", "Dropout")] = OpSpec(
    ref=lambda xs, a: [xs[0], np.ones(xs[0].shape, dtype=bool)], exact=True,
    scheme={"basic": [[2, 3, 4]], "empty": [[0, 3]], "dynamic": [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]},
    variants=[Variant(present=())],
)


# --------------------------------------------------------------------------------------------
# GroupNormalization; ORT's fused normalisations: SimplifiedLayerNormalization,
# com.microsoft SkipLayerNormalization, SkipSimplifiedLayerNormalization,
# EmbedLayerNormalization, SkipGroupNorm


def _standardise(x, axes, eps, centred=True):
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True) if centred else np.zeros([1] * x.ndim)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (x - mean) * inv, mean, inv


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
SPECS[("", "GroupNormalization")] = OpSpec(
    ref=_group_norm(per_group=False), tolerance_scale=4.0, scheme=_GROUP_NORM_SCHEME,
    variants=[Variant("groups3", {"num_groups": 3}), _rep(Variant("groups1_eps", {"num_groups": 1, "epsilon": 1e-2})),
              _rep(Variant("groups6", {"num_groups": 6}))],
)
GROUP_NORM_18 = OpSpec(
    ref=_group_norm(per_group=True), tolerance_scale=4.0,
    scheme={"basic": [[2, 6, 3, 2], [3], [3]], "dynamic": [[[2, 6, 3, 2], [3], [3]], [[1, 6, 5, 1], [3], [3]], [[3, 6, 1, 1], [3], [3]]]},
    variants=[Variant("groups3", {"num_groups": 3})],
)


def _simplified_layer_norm(xs, a):
    x, scale = xs
    axes = tuple(range(a.get("axis", -1) % x.ndim, x.ndim))
    y, _, inv = _standardise(x, axes, a.get("epsilon", 1e-5), centred=False)
    return [(y * scale).astype(scale.dtype), inv.astype(np.float32)]


SPECS[("", "SimplifiedLayerNormalization")] = OpSpec(
    ref=_simplified_layer_norm,
    scheme={"basic": [[2, 3, 8], [8]], "empty": [[0, 8], [8]], "dynamic": [[[2, 3, 8], [8]], [[1, 5, 8], [8]], [[4, 1, 8], [8]]]},
    variants=[
        Variant(outputs=()),
        _rep(Variant("inv_std", {})),
        _rep(Variant("axis1", {"axis": 1, "epsilon": 1e-3}, shapes=[[2, 3, 4], [3, 4]])),
    ],
)


def _skip_norm(centred):
    def ref(xs, a):
        x, skip, gamma = xs[:3]
        rest = list(xs[3:]) + [None, None]
        beta = rest.pop(0) if centred else None
        bias = rest.pop(0)
        total = x.astype(np.float64) + skip + (0 if bias is None else bias)
        y, mean, inv = _standardise(total, (-1,), a.get("epsilon", 1e-12), centred)
        y = y * gamma + (0 if beta is None else beta)
        mean = np.broadcast_to(mean, inv.shape)
        return [y, mean.astype(np.float32), inv.astype(np.float32), total.astype(x.dtype)]

    return ref


_SKIP_SCHEME = {"basic": [[2, 3, 8], [2, 3, 8], [8], [8], [8]],
                "dynamic": [[[2, 3, 8], [2, 3, 8], [8], [8], [8]], [[1, 5, 8], [1, 5, 8], [8], [8], [8]], [[3, 1, 8], [3, 1, 8], [8], [8], [8]]]}
SPECS[("com.microsoft", "SkipLayerNormalization")] = OpSpec(
    ref=_skip_norm(centred=True), tolerance_scale=4.0, scheme=_SKIP_SCHEME,
    variants=[
        Variant(outputs=()),
        _rep(Variant("all_outputs", {"epsilon": 1e-5})),
        _rep(Variant("no_beta_no_bias", {}, present=(), outputs=("input_skip_bias_sum",))),
        _rep(Variant("skip_2d", {}, shapes=[[2, 3, 8], [3, 8], [8], [8], [8]], outputs=("inv_std_var",))),
    ],
)
SPECS[("com.microsoft", "SkipSimplifiedLayerNormalization")] = OpSpec(
    ref=_skip_norm(centred=False), tolerance_scale=4.0,
    scheme={"basic": [[2, 3, 8], [2, 3, 8], [8], [8]],
            "dynamic": [[[2, 3, 8], [2, 3, 8], [8], [8]], [[1, 5, 8], [1, 5, 8], [8], [8]], [[3, 1, 8], [3, 1, 8], [8], [8]]]},
    variants=[
        Variant(outputs=()),
        _rep(Variant("inv_and_sum", {"epsilon": 1e-5}, outputs=("inv_std_var", "input_skip_bias_sum"))),
        _rep(Variant("no_bias", {}, present=(), outputs=("input_skip_bias_sum",))),
    ],
)


def _embed_layer_norm(xs, a):
    ids, seg, word, pos, seg_table, gamma, beta, mask, pos_ids = (list(xs) + [None] * 9)[:9]
    total = word[ids].astype(np.float64)
    total = total + (pos[pos_ids] if pos_ids is not None else pos[: ids.shape[1]])
    if seg is not None and seg_table is not None:
        total = total + seg_table[seg]
    y = _standardise(total, (-1,), a.get("epsilon", 1e-12))[0] * gamma + beta
    mask_index = (mask == 1).sum(axis=1).astype(np.int32) if mask is not None else np.zeros(ids.shape[0], np.int32)
    return [y, mask_index, total.astype(word.dtype)]


SPECS[("com.microsoft", "EmbedLayerNormalization")] = OpSpec(
    ref=_embed_layer_norm, tolerance_scale=4.0,
    domains={"input_ids": "row", "segment_ids": "row", "position_ids": "row", "mask": "exponent"},
    # Fed inputs in port order: ids, segment ids, word, position, segment tables, gamma, beta,
    # mask, position ids (as present). No dynamic layout: ORT's shape inference needs the
    # tables' dims.
    scheme={"basic": [[2, 4], [2, 4], [5, 8], [6, 8], [3, 8], [8], [8], [2, 4]]},
    variants=[
        Variant("all", {}, present=("segment_ids", "segment_embedding", "mask")),
        _rep(Variant("no_segment_no_mask", {"epsilon": 1e-5}, present=(), shapes=[[2, 4], [5, 8], [6, 8], [8], [8]])),
        _rep(Variant("position_ids", {}, present=("segment_ids", "segment_embedding", "mask", "position_ids"),
                     shapes=[[2, 4], [2, 4], [5, 8], [6, 8], [3, 8], [8], [8], [2, 4], [2, 4]])),
        _rep(Variant("broadcast_position_ids", {}, present=("mask", "position_ids"),
                     shapes=[[3, 5], [5, 8], [6, 8], [8], [8], [3, 5], [1, 5]])),
    ],
)


def _skip_group_norm(xs, a):
    x, gamma, beta, skip = xs[:4]
    bias = xs[4] if len(xs) > 4 and xs[4] is not None else 0
    if skip.ndim == 2:
        skip = skip[:, None, None, :]
    total = x.astype(np.float64) + skip + bias
    n, h, w, c = total.shape
    g = a["groups"]
    grouped = total.reshape(n, h * w, g, c // g)
    y = _standardise(grouped, (1, 3), a.get("epsilon", 1e-5))[0].reshape(total.shape) * gamma + beta
    if a.get("activation") == 1:
        y = y / (1 + np.exp(-y))
    return [y, total.astype(x.dtype)]


SPECS[("com.microsoft", "SkipGroupNorm")] = OpSpec(
    ref=_skip_group_norm, tolerance_scale=4.0,
    scheme={"basic": [[2, 3, 2, 8], [8], [8], [2, 3, 2, 8], [8]],
            "dynamic": [[[2, 3, 2, 8], [8], [8], [2, 3, 2, 8], [8]], [[1, 2, 5, 8], [8], [8], [1, 2, 5, 8], [8]],
                        [[3, 1, 1, 8], [8], [8], [3, 1, 1, 8], [8]]]},
    variants=[
        Variant("silu", {"activation": 1, "groups": 4}),
        _rep(Variant("plain_no_bias", {"activation": 0, "groups": 2}, present=())),
        _rep(Variant("skip_nc", {"activation": 1, "groups": 8}, shapes=[[2, 3, 2, 8], [8], [8], [2, 8], [8]], outputs=())),
        _rep(Variant("skip_n11c", {"activation": 0, "groups": 1}, shapes=[[2, 3, 2, 8], [8], [8], [2, 1, 1, 8], [8]])),
    ],
)


# --------------------------------------------------------------------------------------------
# Einsum, com.microsoft FusedMatMul, BiasSoftmax, BiasSplitGelu


def _fused_matmul(xs, a):
    def operand(x, batch, trans):
        if batch and x.ndim >= 3:
            x = np.moveaxis(x, 0, -2)
        return np.swapaxes(x, -1, -2) if trans and x.ndim >= 2 else x

    a_ = operand(xs[0], a.get("transBatchA", 0), a.get("transA", 0))
    b_ = operand(xs[1], a.get("transBatchB", 0), a.get("transB", 0))
    return a.get("alpha", 1.0) * np.matmul(a_, b_)


SPECS[("com.microsoft", "FusedMatMul")] = OpSpec(
    ref=_fused_matmul,
    scheme={"basic": [[2, 3, 4], [4, 5]], "empty": [[0, 4], [4, 3]],
            "dynamic": [[[2, 3], [3, 4]], [[5, 3], [3, 2]], [[1, 2], [2, 6]]]},
    variants=[
        Variant("alpha", {"alpha": 0.5}),
        _rep(Variant("trans_both", {"transA": 1, "transB": 1}, shapes=[[2, 4, 3], [5, 4]])),
        _rep(Variant("trans_batch_a", {"transBatchA": 1, "alpha": 2.0}, shapes=[[3, 2, 4, 5], [2, 4, 5, 6]])),
        _rep(Variant("trans_batch_both", {"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1},
                     shapes=[[3, 2, 5, 4], [6, 2, 5, 3]])),
        _rep(Variant("vector", {}, shapes=[[4], [2, 4, 3]])),
    ],
)


def _einsum(xs, a):
    return np.einsum(a["equation"], *xs)


SPECS[("", "Einsum")] = OpSpec(
    ref=_einsum,
    scheme={"basic": [[2, 3, 4], [2, 4, 5]], "empty": [[2, 0, 4], [2, 4, 5]],
            "dynamic": [[[2, 3, 4], [2, 4, 5]], [[1, 5, 2], [1, 2, 3]], [[3, 1, 1], [3, 1, 4]]]},
    variants=[
        Variant("batched_matmul", {"equation": "bij,bjk->bik"}),
        _rep(Variant("attention_scores", {"equation": "bhid, bhjd -> bhij"}, shapes=[[1, 2, 3, 4], [1, 2, 5, 4]])),
        _rep(Variant("ellipsis", {"equation": "...ij,...jk->...ik"}, shapes=[[2, 3, 4, 5], [2, 3, 5, 2]])),
        _rep(Variant("diagonal", {"equation": "ii->i"}, n_variadic=1, shapes=[[4, 4]])),
        _rep(Variant("trace_implicit", {"equation": "ii"}, n_variadic=1, shapes=[[3, 3]])),
        _rep(Variant("transpose", {"equation": "ij->ji"}, n_variadic=1, shapes=[[2, 3]])),
        _rep(Variant("sum_all", {"equation": "ijk->"}, n_variadic=1, shapes=[[2, 3, 4]])),
        _rep(Variant("outer", {"equation": "i,j->ij"}, shapes=[[3], [4]])),
        _rep(Variant("dot", {"equation": "i,i"}, shapes=[[5], [5]])),
        _rep(Variant("three", {"equation": "ij,jk,kl->il"}, n_variadic=3, shapes=[[2, 3], [3, 4], [4, 2]])),
        _rep(Variant("broadcast_ellipsis", {"equation": "ab...,b->a..."}, shapes=[[2, 3, 4], [3]])),
    ],
)


def _bias_softmax(xs, a):
    total = xs[0] + xs[1]
    axis = a.get("axis", 1) % total.ndim
    flat = total.reshape(int(np.prod(total.shape[:axis])), -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(total.shape)


SPECS[("com.microsoft", "BiasSoftmax")] = OpSpec(
    ref=_bias_softmax,
    scheme={"basic": [[2, 3, 4, 5], [2, 3, 4, 5]],
            "dynamic": [[[2, 3, 4, 5], [2, 3, 4, 5]], [[1, 3, 2, 2], [1, 3, 2, 2]], [[2, 1, 1, 6], [2, 1, 1, 6]]]},
    variants=[
        Variant("last_axis", {"axis": 3, "is_inner_broadcast": 0}),
        _rep(Variant("outer_broadcast", {"axis": -1, "is_inner_broadcast": 0}, shapes=[[2, 3, 4, 5], [4, 5]])),
        _rep(Variant("inner_broadcast", {"axis": 3, "is_inner_broadcast": 1}, shapes=[[2, 3, 4, 5], [2, 1, 4, 5]])),
        _rep(Variant("flattened", {"axis": 2, "is_inner_broadcast": 0})),
    ],
)


def _bias_split_gelu(xs, a):
    total = xs[0] + xs[1]
    left, right = np.split(total, 2, axis=-1)
    return left * _gelu(right)


SPECS[("com.microsoft", "BiasSplitGelu")] = OpSpec(
    ref=_bias_split_gelu,
    scheme={"basic": [[2, 3, 8], [8]], "dynamic": [[[2, 3, 8], [8]], [[1, 5, 8], [8]], [[3, 1, 8], [8]]]},
)


# --------------------------------------------------------------------------------------------
# --- resize: Resize, Upsample ---
#
# The reference is written from ONNX's Resize description, separable per axis, in float64
# except where ORT (the oracle) fixes the arithmetic: output lengths and source coordinates
# are float32 (nearest picks flip on one-ulp differences), `align_corners` and
# `tf_crop_and_resize` use the floored output length (ONNX's reference uses the unfloored one
# with scales; ORT fails those two conformance cases), an axis whose scale is exactly 1 (or,
# antialiased, whose length does not change) is copied, and Resize-10/Upsample round nearest
# by truncation (ceiling when an axis shrinks). Host-known scales/sizes/roi are initializers.

_F32 = np.float32


def _rz_source(transform, x, scale, n_out, n_in, roi):
    """Where output coordinate ``x`` reads the input, in float32 (float64 where ORT promotes)."""
    x, scale, n_out, n_in = _F32(x), _F32(scale), _F32(n_out), _F32(n_in)
    half, one = _F32(0.5), _F32(1)
    if transform == "asymmetric":
        return x / scale
    if transform == "half_pixel":
        return (x + half) / scale - half
    if transform == "tf_half_pixel_for_nn":
        return (x + half) / scale
    if transform == "pytorch_half_pixel":
        return (x + half) / scale - half if n_out > 1 else _F32(0)
    if transform == "align_corners":
        return _F32(0) if n_out == 1 else x * (n_in - one) / (n_out - one)
    if transform == "tf_crop_and_resize":
        start, end = _F32(roi[0]), _F32(roi[1])
        if n_out > 1:
            return start * (n_in - one) + (x * (end - start) * (n_in - one)) / (n_out - one)
        return _F32(0.5 * float(start + end) * float(n_in - one))
    if transform == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        offset = (n_in / _F32(2)) * (one - adjustment)
        return _F32(float(offset) + (float(x) + 0.5) / float(scale) - 0.5)
    raise ValueError(transform)


def _rz_round(rule, c, shrinking):
    c = float(c)
    if rule == "legacy":
        return math.ceil(c) if shrinking else int(c)
    if rule == "floor":
        return math.floor(c)
    if rule == "ceil":
        return math.ceil(c)
    if c - math.floor(c) == 0.5:  # a tie
        return math.floor(c) if rule == "round_prefer_floor" else math.ceil(c)
    return math.floor(c + 0.5)


def _rz_keys(t, a):
    """Keys' cubic convolution kernel at distance ``t``."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def _rz_rows(a, legacy, n_in, n_out, scale, roi):
    """Per output position: ([(input index, weight)], outside?)."""
    mode = a.get("mode", "nearest")
    transform = "asymmetric" if legacy else a.get("coordinate_transformation_mode", "half_pixel")
    rule = "legacy" if legacy else a.get("nearest_mode", "round_prefer_floor")
    cubic_a, exclude = a.get("cubic_coeff_a", -0.75), a.get("exclude_outside", 0)
    antialias = a.get("antialias", 0) and mode != "nearest"
    last = n_in - 1
    rows = []
    for j in range(n_out):
        c = float(_rz_source(transform, j, scale, n_out, n_in, roi))
        outside = transform == "tf_crop_and_resize" and not (0 <= c <= last)
        if mode == "nearest":
            taps = [(min(max(_rz_round(rule, c, scale < 1), 0), last), 1.0)]
        elif antialias:
            # The kernel widened by the downsampling factor, normalised over its taps.
            stretch = min(float(scale), 1.0)
            support = (2.0 if mode == "cubic" else 1.0) / stretch
            kernel = (lambda t: _rz_keys(t, cubic_a)) if mode == "cubic" else (lambda t: max(0.0, 1 - abs(t)))
            ks = range(math.floor(c - support), math.ceil(c + support) + 1)
            taps = [(k, kernel((k - c) * stretch)) for k in ks if not exclude or 0 <= k <= last]
            total = sum(w for _, w in taps) or 1.0
            taps = [(min(max(k, 0), last), w / total) for k, w in taps]
        elif mode == "linear":
            v = min(max(c, 0.0), last)
            lo = min(int(math.floor(v)), last)
            frac = v - lo
            taps = [(lo, 1 - frac), (min(lo + 1, last), frac)]
        else:
            base = math.floor(c)
            taps = [(k, _rz_keys(k - c, cubic_a)) for k in range(base - 1, base + 3)]
            if exclude:
                taps = [(k, w) for k, w in taps if 0 <= k <= last]
                total = sum(w for _, w in taps)
                taps = [(k, w / total) for k, w in taps]
            taps = [(min(max(k, 0), last), w) for k, w in taps]
        rows.append((taps, outside))
    return rows


def _rz_geometry(x_shape, scales, sizes, a):
    """Output dims and per-axis float32 scales, as ORT computes them."""
    rank = len(x_shape)
    axes = [int(v) % rank for v in a["axes"]] if "axes" in a else list(range(rank))
    if scales is not None and np.size(scales):
        full = [_F32(1)] * rank
        for i, s in zip(axes, np.asarray(scales).reshape(-1)):
            full[i] = _F32(s)
        return [int(full[i] * _F32(d)) for i, d in enumerate(x_shape)], full
    out = list(x_shape)
    for i, s in zip(axes, np.asarray(sizes).reshape(-1)):
        out[i] = int(s)
    full = [_F32(o) / _F32(d) if d else _F32(1) for o, d in zip(out, x_shape)]
    policy = a.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        s = pick(full[i] for i in axes)
        for i in range(rank):
            full[i] = s if i in axes else _F32(1)
            out[i] = int(math.floor(float(s * _F32(x_shape[i])) + 0.5)) if i in axes else x_shape[i]
    return out, full


def _resize_ref(legacy=False):
    def ref(xs, a):
        x = xs[0]
        if legacy:  # Resize-10 [X, scales], Upsample-9 [X, scales], Upsample-7 (attribute)
            scales, sizes, roi = (xs[1] if len(xs) > 1 else np.array(a["scales"])), None, None
        else:
            roi, scales, sizes = (list(xs[1:]) + [None] * 3)[:3]
        out, full = _rz_geometry(x.shape, scales, sizes, a)
        rank = x.ndim
        full_roi = [0.0] * rank + [1.0] * rank
        if roi is not None and np.size(roi):
            axes = [int(v) % rank for v in a["axes"]] if "axes" in a else list(range(rank))
            roi = np.asarray(roi, dtype=np.float32).reshape(-1)
            for k, i in enumerate(axes):
                full_roi[i], full_roi[rank + i] = roi[k], roi[len(axes) + k]
        if list(out) == list(x.shape):
            return x
        if 0 in out:
            return np.zeros(out, dtype=x.dtype)
        y = x.astype(np.float64) if a.get("mode", "nearest") != "nearest" else x
        outside = np.zeros([1] * rank, dtype=bool)
        for i in range(rank):
            if full[i] == 1 or (a.get("antialias", 0) and out[i] == x.shape[i]):
                continue
            rows = _rz_rows(a, legacy, x.shape[i], out[i], full[i], (full_roi[i], full_roi[rank + i]))
            picked = [sum(w * np.take(y, k, axis=i) for k, w in taps) if len(taps) > 1 or taps[0][1] != 1.0
                      else np.take(y, taps[0][0], axis=i) for taps, _ in rows]
            y = np.stack(picked, axis=i)
            mask_shape = [1] * rank
            mask_shape[i] = out[i]
            outside = outside | np.array([o for _, o in rows]).reshape(mask_shape)
        if outside.any():
            fill = a.get("extrapolation_value", 0.0)
            if x.dtype.kind in "iu":  # ORT's static_cast: truncate, then wrap
                fill = np.array(math.trunc(fill), dtype=np.int64).astype(x.dtype)
            y = np.where(outside, fill, y)
        return y.astype(x.dtype) if x.dtype.kind in "iub" else y

    return ref


def _f32s(*v):
    return np.array(v, dtype=np.float32)


_RESIZE_SCHEME = {"basic": [[1, 2, 4, 5]], "empty": [[0, 2, 4, 5]],
                  "dynamic": [[[1, 2, 4, 5]], [[2, 1, 3, 6]], [[1, 3, 5, 2]]]}
_UP_DOWN = _f32s(1, 1, 1.6, 0.7)  # one axis grows, one shrinks
_TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
_ROUNDINGS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_variants():
    sc = {"roi": None, "sizes": None}
    by_sizes = {"roi": None, "scales": None}
    v = [Variant(constants=dict(sc, scales=_f32s(1, 1, 2, 0.6)))]
    v += [_rep(Variant(f"nearest_{t}_{r}", {"mode": "nearest", "coordinate_transformation_mode": t, "nearest_mode": r},
                       constants=dict(sc, scales=_UP_DOWN))) for t in _TRANSFORMS for r in _ROUNDINGS]
    for mode in ("linear", "cubic"):
        v += [_rep(Variant(f"{mode}_{t}", {"mode": mode, "coordinate_transformation_mode": t},
                           constants=dict(sc, scales=_UP_DOWN))) for t in _TRANSFORMS]
        v += [_rep(Variant(f"{mode}_sizes", {"mode": mode}, constants=dict(by_sizes, sizes=_i64(1, 2, 7, 3)))),
              _rep(Variant(f"{mode}_downsample", {"mode": mode}, constants=dict(sc, scales=_f32s(1, 1, 0.5, 0.4)),
                           shapes=[[1, 2, 8, 10]]))]
    for mode in ("nearest", "linear", "cubic"):
        v += [_rep(Variant(f"{mode}_half_pixel_symmetric", {"mode": mode, "coordinate_transformation_mode": "half_pixel_symmetric"},
                           constants=dict(sc, scales=_UP_DOWN), min_opset=19)),
              _rep(Variant(f"{mode}_tf_crop_and_resize", {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
                                                          "extrapolation_value": 2.5},
                           constants={"roi": _f32s(0, 0, -0.2, 0.3, 1, 1, 0.9, 1.25), "scales": None, "sizes": _i64(1, 2, 6, 4)}))]
    v += [
        _rep(Variant("nearest_sizes", {}, constants=dict(by_sizes, sizes=_i64(1, 2, 9, 2)))),
        _rep(Variant("cubic_a_exclude_outside", {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
                     constants=dict(sc, scales=_UP_DOWN))),
        _rep(Variant("nearest_tf_half_pixel_for_nn", {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
                     constants=dict(sc, scales=_UP_DOWN))),
        _rep(Variant("linear_3d", {"mode": "linear"}, constants=dict(sc, scales=_f32s(1.5, 0.5, 2)), shapes=[[3, 4, 5]])),
        _rep(Variant("linear_5d", {"mode": "linear"}, constants=dict(sc, scales=_f32s(1, 1, 2, 0.5, 1.5)), shapes=[[1, 2, 3, 4, 4]])),
        _rep(Variant("cubic_2d", {"mode": "cubic"}, constants=dict(sc, scales=_f32s(2.2, 0.45)), shapes=[[5, 9]])),
        _rep(Variant("linear_nhwc", {"mode": "linear"}, constants=dict(sc, scales=_f32s(1, 1.5, 0.5, 1)), shapes=[[1, 4, 6, 3]])),
        _rep(Variant("nearest_rank1", {}, constants=dict(sc, scales=_f32s(2.5)), shapes=[[5]])),
        _rep(Variant("nearest_to_empty", {}, constants=dict(sc, scales=_f32s(1, 1, 0.2, 1)))),
        # Opset 18: axes, keep_aspect_ratio_policy, antialias.
        _rep(Variant("axes_scales", {"axes": [3, 2]}, constants=dict(sc, scales=_f32s(0.6, 1.5)))),
        _rep(Variant("axes_negative_sizes", {"mode": "linear", "axes": [-1]}, constants=dict(by_sizes, sizes=_i64(8)))),
        _rep(Variant("axes_tf_crop_and_resize", {"axes": [2, 3], "coordinate_transformation_mode": "tf_crop_and_resize",
                                                 "extrapolation_value": -1.0},
                     constants={"roi": _f32s(0.1, -0.1, 0.8, 1.2), "scales": None, "sizes": _i64(5, 6)})),
    ]
    for policy in ("not_larger", "not_smaller"):
        v += [_rep(Variant(f"{policy}_axes", {"keep_aspect_ratio_policy": policy, "axes": [2, 3]},
                           constants=dict(by_sizes, sizes=_i64(7, 7)))),
              # One scale over every axis: not_smaller scales N and C too, a layout ORT's linear
              # kernel refuses (ScalesValidation), so that policy is checked in nearest mode.
              _rep(Variant(f"{policy}_all_axes", {"mode": "linear" if policy == "not_larger" else "nearest",
                                                  "keep_aspect_ratio_policy": policy},
                           constants=dict(by_sizes, sizes=_i64(1, 2, 6, 9))))]
    for mode in ("linear", "cubic"):
        for exclude in (0, 1):
            v += [_rep(Variant(f"antialias_{mode}_exclude{exclude}", {"mode": mode, "antialias": 1, "exclude_outside": exclude},
                               constants=dict(sc, scales=_f32s(1, 1, 0.4, 0.3)), shapes=[[1, 2, 10, 13]]))]
        v += [_rep(Variant(f"antialias_{mode}_sizes_align_corners",
                           {"mode": mode, "antialias": 1, "coordinate_transformation_mode": "align_corners"},
                           constants=dict(by_sizes, sizes=_i64(1, 2, 3, 5)), shapes=[[1, 2, 10, 13]])),
              _rep(Variant(f"antialias_{mode}_upsample", {"mode": mode, "antialias": 1},
                           constants=dict(sc, scales=_UP_DOWN)))]
    v += [_rep(Variant("antialias_tf_crop_and_resize", {"mode": "linear", "antialias": 1, "extrapolation_value": 4.0,
                                                        "coordinate_transformation_mode": "tf_crop_and_resize"},
                       constants={"roi": _f32s(0, 0, 0.1, -0.2, 1, 1, 1.1, 0.9), "scales": None, "sizes": _i64(1, 2, 4, 5)},
                       shapes=[[1, 2, 12, 13]]))]
    return v


SPECS[("", "Resize")] = OpSpec(
    ref=_resize_ref(), scheme=_RESIZE_SCHEME, variants=_resize_variants(),
    combos=lambda d: d.get("T2", "float") == "float",  # roi is absent or float32 in every variant
    tolerance_scale=4.0,  # cubic sums of 16 float32 products can cancel to near zero
)
# Resize-11/12: roi and scales are required inputs (empty when unused).
RESIZE_11 = OpSpec(
    ref=_resize_ref(), scheme=_RESIZE_SCHEME, combos=lambda d: d.get("T2", "float") == "float", tolerance_scale=4.0,
    constants={"roi": np.zeros(0, np.float32), "sizes": None},
    variants=[
        Variant(constants={"scales": _f32s(1, 1, 2, 0.6)}),
        _rep(Variant("linear_sizes", {"mode": "linear"}, constants={"scales": np.zeros(0, np.float32), "sizes": _i64(1, 2, 7, 3)})),
        _rep(Variant("cubic_align_corners", {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
                     constants={"scales": _UP_DOWN})),
        _rep(Variant("nearest_tf_half_pixel_for_nn_ceil", {"coordinate_transformation_mode": "tf_half_pixel_for_nn", "nearest_mode": "ceil"},
                     constants={"scales": _UP_DOWN})),
        _rep(Variant("tf_crop_and_resize", {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                                            "extrapolation_value": 1.5},
                     constants={"roi": _f32s(0, 0, -0.2, 0.3, 1, 1, 0.9, 1.25), "scales": _UP_DOWN})),
    ],
)
RESIZE_10 = OpSpec(
    ref=_resize_ref(legacy=True), scheme=_RESIZE_SCHEME, constants={"scales": _f32s(1, 1, 2, 0.6)},
    variants=[Variant(), _rep(Variant("nearest_down", {}, constants={"scales": _f32s(1, 1, 0.6, 0.4)})),
              _rep(Variant("linear", {"mode": "linear"}, constants={"scales": _UP_DOWN}))],
)
UPSAMPLE_7 = OpSpec(
    ref=_resize_ref(legacy=True), scheme=_RESIZE_SCHEME,
    variants=[Variant(attrs={"scales": [1.0, 1.0, 2.0, 3.0]}),
              _rep(Variant("linear", {"mode": "linear", "scales": [1.0, 1.0, 1.5, 2.5]}))],
)
SPECS[("", "Upsample")] = OpSpec(  # Upsample-9: scales as an input
    ref=_resize_ref(legacy=True), scheme=_RESIZE_SCHEME, constants={"scales": _f32s(1, 1, 2, 1.5)},
    variants=[Variant(), _rep(Variant("linear", {"mode": "linear"}, constants={"scales": _f32s(1, 1, 1.5, 2.5)}))],
)

# Resize/Upsample entries whose ports differ from the newest schema get their own specs; the
# dispatcher above predates this section, so it is wrapped rather than edited.


# --------------------------------------------------------------------------------------------
# --- recurrent: RNN, GRU, LSTM ---
#
# The reference is a plain loop over batch entries and steps, per ONNX's equations, with the
# details ORT's CPU EP settles: steps at and past an entry's sequence length give zeros in Y and
# leave its state alone (a reverse pass starts at the entry's own last step); a zero length gives
# zero Y_h/Y_c; clip bounds the gate pre-activations only; input_forget couples f = 1 - i.
# ORT's CPU EP rejects layout 1 (batch first), so those cases compare with this reference.

_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RNN_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
# name -> (function of (x, alpha, beta), alpha default or None when unused, beta default or None)
_RNN_ACTS = {
    "Relu": (lambda x, a, b: np.maximum(x, 0.0), None, None),
    "Tanh": (lambda x, a, b: np.tanh(x), None, None),
    "Sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "Softsign": (lambda x, a, b: x / (1.0 + np.abs(x)), None, None),
    "Softplus": (lambda x, a, b: _softplus(x), None, None),
    "Affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "ThresholdedRelu": (lambda x, a, b: np.where(x > a, x, 0.0), 1.0, None),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: np.clip(a * x + b, 0.0, 1.0), 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0.0))), 1.0, None),
}


def _rnn_activations(op, directions, a):
    """One function per activation slot; alpha/beta consumed in order by the activations that
    take them (ONNX's words), ONNX's defaults past the end of the lists."""
    names = list(a.get("activations", _RNN_DEFAULT_ACTS[op] * directions))
    if op == "RNN" and directions == 1:
        names = names[:1]
    alphas, betas = [_f32(v) for v in a.get("activation_alpha", [])], [_f32(v) for v in a.get("activation_beta", [])]
    funcs = []
    for name in names:
        f, alpha_default, beta_default = _RNN_ACTS[name]
        alpha = (alphas.pop(0) if alphas else alpha_default) if alpha_default is not None else 0.0
        beta = (betas.pop(0) if betas else beta_default) if beta_default is not None else 0.0
        funcs.append(lambda x, f=f, al=alpha, be=beta: f(x, al, be))
    return funcs


def _rnn_cell(op, acts, a, x, h, c, w, r, wb, rb, p):
    """One step of one batch entry: the new hidden and cell states."""
    hidden = a["hidden_size"]
    bound = a.get("clip")
    clip = (lambda v: np.clip(v, -_f32(bound), _f32(bound))) if bound is not None else (lambda v: v)
    gate = lambda k, extra=0.0: x @ w[k * hidden:(k + 1) * hidden].T + wb[k * hidden:(k + 1) * hidden] + extra  # noqa: E731
    rec = lambda k, state: state @ r[k * hidden:(k + 1) * hidden].T + rb[k * hidden:(k + 1) * hidden]  # noqa: E731
    if op == "RNN":
        return acts[0](clip(gate(0) + rec(0, h))), c
    if op == "GRU":
        f, g = acts
        z = f(clip(gate(0) + rec(0, h)))
        reset = f(clip(gate(1) + rec(1, h)))
        if a.get("linear_before_reset", 0):
            candidate = g(clip(gate(2) + reset * rec(2, h)))
        else:
            candidate = g(clip(gate(2) + rec(2, reset * h)))
        return (1.0 - z) * candidate + z * h, c
    f, g, hact = acts
    pi, po, pf = (p[:hidden], p[hidden:2 * hidden], p[2 * hidden:]) if p is not None else (0.0, 0.0, 0.0)
    i = f(clip(gate(0) + rec(0, h) + pi * c))
    forget = 1.0 - i if a.get("input_forget", 0) else f(clip(gate(2) + rec(2, h) + pf * c))
    cell = forget * c + i * g(clip(gate(3) + rec(3, h)))
    o = f(clip(gate(1) + rec(1, h) + po * cell))
    return o * hact(cell), cell


def _recurrent(op):
    def ref(xs, a):
        get = lambda i: xs[i] if len(xs) > i else None  # noqa: E731
        x, w, r, b, lens, h0 = xs[0], xs[1], xs[2], get(3), get(4), get(5)
        c0, p = (get(6), get(7)) if op == "LSTM" else (None, None)
        batch_first = a.get("layout", 0) == 1
        if batch_first:
            x = x.transpose(1, 0, 2)
            h0 = None if h0 is None else h0.transpose(1, 0, 2)
            c0 = None if c0 is None else c0.transpose(1, 0, 2)
        steps, batch, hidden = x.shape[0], x.shape[1], a["hidden_size"]
        reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[a.get("direction", "forward")]
        acts = _rnn_activations(op, len(reverse), a)
        per, width = len(_RNN_DEFAULT_ACTS[op]), _RNN_GATES[op] * hidden
        y = np.zeros((steps, len(reverse), batch, hidden))
        y_h, y_c = np.zeros((len(reverse), batch, hidden)), np.zeros((len(reverse), batch, hidden))
        for d, backwards in enumerate(reverse):
            bias = b[d] if b is not None else np.zeros(2 * width)
            for n in range(batch):
                h = h0[d, n] if h0 is not None else np.zeros(hidden)
                c = c0[d, n] if c0 is not None else np.zeros(hidden)
                length = int(lens[n]) if lens is not None else steps
                for t in (range(length - 1, -1, -1) if backwards else range(length)):
                    h, c = _rnn_cell(op, acts[d * per:(d + 1) * per], a, x[t, n], h, c, w[d], r[d],
                                     bias[:width], bias[width:], None if p is None else p[d])
                    y[t, d, n] = h
                if length > 0:
                    y_h[d, n], y_c[d, n] = h, c
        if batch_first:
            y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)
        return [y, y_h, y_c]  # the harness keeps the outputs the node has and asks for

    return ref


def _rnn_lengths(dtype, shape, rng, dtypes):
    """Mixed sequence lengths, a full one (4, the shortest seq_length of the cases) and 0 among them."""
    pattern = [4, 0, 2, 1, 3]
    return np.array([pattern[i % len(pattern)] for i in range(shape[0])], dtype=np_dtype(dtype))


def _rnn_inputs(op):
    return ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c", "P"] if op == "LSTM" else [])


def _rnn_shapes(op, present=None, directions=1, steps=4, batch=3, inputs=3, hidden=5, batch_first=False):
    """Fed input shapes (X, W, R, then the present optional inputs, in port order)."""
    width = _RNN_GATES[op] * hidden
    state = [batch, directions, hidden] if batch_first else [directions, batch, hidden]
    shapes = {"X": [batch, steps, inputs] if batch_first else [steps, batch, inputs],
              "W": [directions, width, inputs], "R": [directions, width, hidden], "B": [directions, 2 * width],
              "sequence_lens": [batch], "initial_h": state, "initial_c": state, "P": [directions, 3 * hidden]}
    return [shapes[n] for n in _rnn_inputs(op) if n in ("X", "W", "R") or present is None or n in present]


def _rnn_variant(op, name, attrs=None, present=None, outputs=None, min_opset=0, **shape):
    attrs = dict({"hidden_size": 5}, **(attrs or {}))
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    shapes = _rnn_shapes(op, present, directions, batch_first=attrs.get("layout") == 1, **shape)
    return _rep(Variant(name, attrs, present=present, outputs=outputs, shapes=shapes, min_opset=min_opset))


def _rnn_spec(op, extra):
    bidi = {"direction": "bidirectional"}
    no_lens = tuple(n for n in _rnn_inputs(op)[3:] if n != "sequence_lens")
    variants = [
        Variant(attrs={"hidden_size": 5}),  # forward, every optional input, every output
        _rnn_variant(op, "reverse", {"direction": "reverse"}),
        _rnn_variant(op, "bidirectional", bidi),
        _rnn_variant(op, "bidirectional_no_lens", bidi, present=no_lens),
        _rnn_variant(op, "bidirectional_no_optional_inputs", bidi, present=()),
        _rnn_variant(op, "reverse_no_bias", {"direction": "reverse"}, present=tuple(n for n in _rnn_inputs(op)[3:] if n != "B")),
        _rnn_variant(op, "only_Y_h", bidi, outputs=("Y_h",)),
        _rnn_variant(op, "only_Y", {"direction": "reverse"}, outputs=("Y",)),
        _rnn_variant(op, "clip", dict(bidi, clip=0.7)),
        _rnn_variant(op, "layout1", dict(bidi, layout=1), min_opset=14),
        _rnn_variant(op, "layout1_forward_no_lens", {"layout": 1}, present=no_lens, min_opset=14),
        _rnn_variant(op, "long_wide", {"direction": "reverse"}, steps=9, batch=5, inputs=7, hidden=5),
    ] + [_rnn_variant(op, name, attrs, **kw) for name, attrs, kw in extra]
    default_shapes = _rnn_shapes(op)
    return OpSpec(
        ref=_recurrent(op),
        # Steps compound float32 rounding: ORT's own float32 answer is 1.2e-5 (relative) off the
        # float64 reference on the Affine/LeakyRelu LSTM case.
        tolerance_scale=4.0,
        domains={"W": "unit", "R": "unit", "B": "unit", "P": "unit", "sequence_lens": _rnn_lengths},
        scheme={"basic": default_shapes,
                # seq_length and batch change between runs (a shape-keyed retrace each time).
                "dynamic": [default_shapes, _rnn_shapes(op, steps=6, batch=2), _rnn_shapes(op, steps=5, batch=4)]},
        variants=variants,
    )


SPECS[("", "RNN")] = _rnn_spec("RNN", [
    ("relu", {"activations": ["Relu"]}, {}),
    ("leaky_relu_alpha", {"activations": ["LeakyRelu"], "activation_alpha": [0.3]}, {}),
    ("hard_sigmoid_both_directions", {"direction": "bidirectional", "activations": ["HardSigmoid", "HardSigmoid"],
                                      "activation_alpha": [0.4, 0.3], "activation_beta": [0.45, 0.6]}, {}),
    ("affine_scaled_tanh", {"direction": "bidirectional", "activations": ["Affine", "ScaledTanh"],
                            "activation_alpha": [0.8, 1.3], "activation_beta": [0.1, 0.7]}, {}),
    ("elu_thresholded_relu", {"direction": "bidirectional", "activations": ["Elu", "ThresholdedRelu"],
                              "activation_alpha": [0.6, 0.2]}, {}),
    ("softsign_softplus", {"direction": "bidirectional", "activations": ["Softsign", "Softplus"]}, {}),
    # Only direction 0's activation takes a beta: ORT's beta[direction] and ONNX's in-order
    # consumption both give it beta[0].
    ("affine_leaky_relu_one_beta", {"direction": "bidirectional", "activations": ["Affine", "LeakyRelu"],
                                    "activation_alpha": [0.5, 0.2], "activation_beta": [0.25]}, {}),
])
SPECS[("", "GRU")] = _rnn_spec("GRU", [
    ("linear_before_reset", {"direction": "bidirectional", "linear_before_reset": 1}, {}),
    ("linear_before_reset_no_bias", {"linear_before_reset": 1}, {"present": ("sequence_lens", "initial_h")}),
    ("hard_sigmoid_elu", {"activations": ["HardSigmoid", "Elu"], "activation_alpha": [0.3, 0.8], "activation_beta": [0.4]}, {}),
    ("defaults_past_the_lists", {"direction": "bidirectional", "activations": ["LeakyRelu", "Softsign", "HardSigmoid", "Elu"],
                                 "activation_alpha": [0.2]}, {}),
    ("affine_thresholded_relu", {"activations": ["Affine", "ThresholdedRelu"], "activation_alpha": [0.4, 0.1],
                                 "activation_beta": [0.3]}, {}),
    ("scaled_tanh_relu_softplus", {"direction": "bidirectional", "activations": ["ScaledTanh", "Relu", "Sigmoid", "Softplus"],
                                   "activation_alpha": [0.9], "activation_beta": [1.2]}, {}),
])
SPECS[("", "LSTM")] = _rnn_spec("LSTM", [
    ("no_peepholes", {"direction": "bidirectional"}, {"present": ("B", "sequence_lens", "initial_h", "initial_c")}),
    ("initial_h_only", {}, {"present": ("B", "initial_h")}),
    ("input_forget", {"direction": "bidirectional", "input_forget": 1}, {}),
    ("only_Y_c", {"direction": "bidirectional"}, {"outputs": ("Y_c",)}),
    ("Y_and_Y_c", {"direction": "reverse"}, {"outputs": ("Y", "Y_c")}),
    ("clip_peepholes", {"direction": "reverse", "clip": 0.4}, {}),
    ("hard_sigmoid_softsign_softplus", {"activations": ["HardSigmoid", "Softsign", "Softplus"],
                                        "activation_alpha": [0.3], "activation_beta": [0.55]}, {}),
    ("affine_relu_scaled_tanh", {"direction": "bidirectional",
                                 "activations": ["Affine", "Relu", "ScaledTanh", "LeakyRelu", "ThresholdedRelu", "Elu"],
                                 # Affine gates near 0.5: a well-conditioned cell state.
                                 "activation_alpha": [0.15, 0.9, 0.2, 0.1, 0.7], "activation_beta": [0.5, 1.1]}, {}),
])


# --------------------------------------------------------------------------------------------
# Op families whose specs live in their own module (tests/ops/families/<family>.py): each
# registers into SPECS when imported. Imported last, so the helpers above are all defined.


def _import_families() -> None:
    import importlib
    import pathlib

    for path in sorted((pathlib.Path(__file__).parent / "families").glob("*.py")):
        if path.stem != "__init__":
            importlib.import_module(f"families.{path.stem}")


_import_families()
