"""Every op-table entry through ORT with the MLX EP first, against ORT's CPU EP.

``test_op`` runs one case per entry x dtype combination x variant, plus layouts (broadcasting,
0-d, zero-size, a CPU Transpose on each side) for a representative float and integer dtype, and
the newest opset of each entry. Cases whose model ONNX itself rejects (a dtype the entry claims
but no opset in its range allows) are skipped with that reason.

Semantics that legitimately differ from ORT's CPU EP are tested against numpy only
(``test_documented_*``): ORT traps or is undefined there.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from op_harness import CPU, SELFCHECK, Case, _finish, _schema, build_cases, describe
from op_specs import Variant, spec_for
from op_table import (INTS, SIGNED_INTS, UNSIGNED_INTS, declared_rows, declaring_file, load_table, np_dtype,
                      parse_coverage)
from specs.logic import bit_shift

TABLE = load_table()
CASES = build_cases(TABLE.entries)


def _param(case: Case):
    marks = [pytest.mark.skip(reason=case.skip)] if case.skip else []
    return pytest.param(case, id=case.id, marks=marks)


def _assert_ok(case: Case, out):
    if out.skipped:
        pytest.skip(out.skipped)
    assert not out.problems, f"{describe(case)} [oracle: {out.oracle}]\n  " + "\n  ".join(out.problems)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_op(case, runner):
    _assert_ok(case, runner.check(case))


# --------------------------------------------------------------------------------------------
# The table itself


def test_ep_library_exports_the_ep_and_its_table():
    if SELFCHECK:
        pytest.skip("self-check mode runs without the EP")
    assert TABLE.library is not None, "EP library not built: run `make build` or set ORT_MLX_EP_LIBRARY"
    missing = [name for name, ok in TABLE.exports.items() if not ok]
    assert not missing, f"{TABLE.library} does not export {missing}"
    assert TABLE.source == "json", f"OrtMlxEp_OpTableJson unreadable: {TABLE.json_error}"


def test_library_table_matches_coverage_doc():
    """The table seen from inside the loaded library (inventory in a cdylib) is the documented one."""
    if TABLE.source != "json":
        pytest.skip("the library does not export its table yet (suite runs from docs/COVERAGE.md)")
    doc = {(e.domain, e.op, e.since, e.until): e for e in parse_coverage()}
    lib = {(e.domain, e.op, e.since, e.until): e for e in declared_rows(TABLE.library)}
    assert sorted(lib, key=str) == sorted(doc, key=str), (
        f"only in library: {sorted(set(lib) - set(doc), key=str)}; only in COVERAGE.md: {sorted(set(doc) - set(lib), key=str)}")
    diffs = []
    for k, e in lib.items():
        d = doc[k]
        if {v: sorted(t) for v, t in e.types.items()} != {v: sorted(t) for v, t in d.types.items()}:
            diffs.append(f"{e.key}: types {e.types} vs doc {d.types}")
        if [(a.name, a.required) for a in e.attributes] != [(a.name, a.required) for a in d.attributes]:
            diffs.append(f"{e.key}: attributes {e.attributes} vs doc {d.attributes}")
        if e.shape != d.shape:
            diffs.append(f"{e.key}: shape {e.shape} vs doc {d.shape}")
    assert not diffs, "\n".join(diffs)


def test_ports_match_onnx_schemas():
    """Declared ports bind in order: their count and kinds (required/optional/variadic) must be
    the schema's, and every port's type variable must be declared. Names only warn (they are
    documentation: ONNX binds by position)."""
    if TABLE.source != "json":
        pytest.skip("ports come from ONNX's schemas when the table is read from COVERAGE.md")
    kinds = {"Single": "required", "Optional": "optional", "Variadic": "variadic"}
    diffs, names = [], []
    for e in TABLE.entries:
        # com.microsoft's schemas are all version 1; ONNX's domains version theirs.
        s = _schema(e.op, 1 if e.domain == "com.microsoft" else e.since, e.domain)
        if s is None:
            diffs.append(f"{e.key}: ORT knows no schema for it")
            continue
        want = ([kinds[p.option.name] for p in s.inputs], [kinds[p.option.name] for p in s.outputs])
        got = ([p.kind for p in e.inputs], [p.kind for p in e.outputs])
        if got != want:
            diffs.append(f"{e.key}: port kinds {got}, schema {e.op}-{s.since_version}: {want}")
        want_names = ([p.name for p in s.inputs], [p.name for p in s.outputs])
        got_names = ([p.name for p in e.inputs], [p.name for p in e.outputs])
        if got_names != want_names:
            names.append(f"{e.key}: {got_names} vs schema {want_names}")
        for p in e.inputs + e.outputs:
            if p.type_var not in e.types:
                diffs.append(f"{e.key}: port {p.name} uses undeclared type variable {p.type_var}")
    if names:
        warnings.warn("port names differ from ONNX's (cosmetic): " + "; ".join(names))
    assert not diffs, "\n".join(diffs)


def test_entries_do_not_overlap():
    by_op: dict = {}
    for e in TABLE.entries:
        by_op.setdefault((e.domain, e.op), []).append(e)
    bad = []
    for es in by_op.values():
        for a in es:
            for b in es:
                if a is not b and a.since <= (b.until or 10**9) and b.since <= (a.until or 10**9):
                    bad.append(f"{a.key} overlaps {b.key}")
    assert not bad, bad


def test_every_entry_has_a_spec():
    """A new entry needs input domains and a reference in tests/ops/specs/<family>.py, named as
    the Rust file declaring it (until then it runs with generic inputs against ORT's CPU EP only)."""
    missing = [f"{e.key} (in tests/ops/specs/{_spec_file_of(e)})" for e in TABLE.entries if spec_for(e) is None]
    assert not missing, f"no spec for: {missing}"


def _spec_file_of(entry) -> str:
    source = declaring_file(entry) or "?"
    return source.split("op-specs/src/", 1)[-1].replace("/mod.rs", ".rs").removesuffix(".rs") + ".py"


def test_every_entry_has_a_runnable_case():
    runnable = {c.entry.key for c in CASES if not c.skip or c.spec.elsewhere is not None}
    missing = [e.key for e in TABLE.entries if e.key not in runnable]
    assert not missing, f"entries with every case skipped: {missing}"


# --------------------------------------------------------------------------------------------
# Documented behaviour where ORT's CPU EP traps or is undefined: compared with numpy only.


def _entry(op: str, domain: str = ""):
    found = [e for e in TABLE.entries if e.op == op and e.domain == domain]
    if not found:
        pytest.skip(f"no {op} entry in the table")
    return max(found, key=lambda e: e.since)


def _edge_case(entry, dtypes: dict, data: dict, variant: Variant, name: str) -> Case:
    spec = spec_for(entry)
    case = Case(entry, spec, dtypes, variant, data=data, oracle="numpy")
    case = _finish(case)
    case.id = f"{entry.key}:{name}"
    return case


def _only_mlx():
    if SELFCHECK:
        pytest.skip("ORT's CPU EP traps or is undefined here: MLX-only check")


def _div_data(dtype):
    """Divisors that trap in C (MIN / -1) beside ordinary ones; no zero divisor, which fails the
    run on either EP (tests/ep/test_runtime_checks.py)."""
    info = np.iinfo(np_dtype(dtype))
    if dtype in SIGNED_INTS:
        a = [7, -7, 5, int(info.min), int(info.min), 6, -6, int(info.max)]
        b = [3, -2, 2, -1, 1, -1, -4, -1]
    else:
        a = [7, 0, 5, int(info.max), 9]
        b = [3, 5, 2, 1, 9]
    return np.array(a, dtype=np_dtype(dtype)), np.array(b, dtype=np_dtype(dtype))


@pytest.mark.parametrize("dtype", INTS)
def test_documented_integer_min_by_minus_one(dtype, runner):
    """Div doc: integers divide truncating toward zero and MIN / -1 wraps (ORT's CPU EP traps)."""
    _only_mlx()
    e = _entry("Div")
    if dtype not in e.types["T"]:
        pytest.skip(f"Div does not claim {dtype}")
    a, b = _div_data(dtype)
    case = _edge_case(e, {"T": dtype}, {"A": a, "B": b}, Variant(), f"T={dtype}:min_by_minus_one")
    _assert_ok(case, runner.check(case))


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", INTS)
def test_documented_integer_mod_by_minus_one(dtype, fmod, runner):
    """Mod doc: anything modulo -1 is 0, MIN included (ORT's CPU EP traps on MIN % -1)."""
    _only_mlx()
    e = _entry("Mod")
    if dtype not in e.types["T"]:
        pytest.skip(f"Mod does not claim {dtype}")
    a, b = _div_data(dtype)
    case = _edge_case(e, {"T": dtype}, {"A": a, "B": b}, Variant(f"fmod{fmod}", {"fmod": fmod}), f"T={dtype}:mod_by_minus_one_fmod{fmod}")
    _assert_ok(case, runner.check(case))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", UNSIGNED_INTS)
def test_documented_bitshift_past_the_width_is_zero(dtype, direction, runner):
    """BitShift doc: shifting by the bit width or more moves every bit out (C: undefined)."""
    _only_mlx()
    e = _entry("BitShift")
    if dtype not in e.types["T"]:
        pytest.skip(f"BitShift does not claim {dtype}")
    bits = np.dtype(np_dtype(dtype)).itemsize * 8
    info = np.iinfo(np_dtype(dtype))
    x = np.array([1, 3, int(info.max), int(info.max), 5, 1], dtype=np_dtype(dtype))
    y = np.array([bits, bits + 1, bits, min(int(info.max), 255), bits - 1, 0], dtype=np_dtype(dtype))
    case = _edge_case(e, {"T": dtype}, {"X": x, "Y": y}, Variant(direction, {"direction": direction}), f"T={dtype}:{direction}_past_width")
    _assert_ok(case, runner.check(case))
    assert not bit_shift(x, y, direction)[:4].any()


# --------------------------------------------------------------------------------------------
# Declines: nodes outside an entry run on ORT's CPU EP, with the right answer.

DECLINED = [
    ("Pow", {"T": "int32", "T1": "float"}, "an exponent type different from the base's (integer base)"),
    ("Pow", {"T": "float", "T1": "int64"}, "an exponent type different from the base's (float base)"),
    ("Add", {"T": "double"}, "float64 is in no dtype set"),
    ("Sqrt", {"T": "double"}, "float64 is in no dtype set"),
    ("Softmax", {"T": "double"}, "float64 is in no dtype set"),
    ("Cast", {"T1": "double", "T2": "float"}, "float64 is in no dtype set"),
]


@pytest.mark.parametrize("op,dtypes,why", DECLINED, ids=[f"{o}:{','.join(f'{k}={v}' for k, v in d.items())}" for o, d, _ in DECLINED])
def test_declined_node_runs_on_cpu(op, dtypes, why, runner):
    e = _entry(op)
    claimed = all(v in e.types.get(k, []) for k, v in dtypes.items())
    spec = spec_for(e)
    if claimed and (spec.combos is None or spec.combos(dtypes)):
        pytest.skip(f"{e.key} claims {dtypes} now")
    variant = spec.variants[0]
    case = _finish(Case(e, spec, dict(dtypes), variant, expect_provider=CPU))
    case.id = f"{e.key}:declined:{dtypes}"
    if case.skip:
        pytest.skip(case.skip)
    _assert_ok(case, runner.check(case))


# Declined for their attributes with these dtypes.
ATTRIBUTE_DECLINED = [
    ("ScatterElements", {"T": "int64", "Tind": "int64"}, {"axis": 1, "reduction": "add"},
     "64-bit scatter reductions: MLX's GPU scatter has no 64-bit kernels"),
    ("ScatterND", {"T": "uint64", "I": "int64"}, {"reduction": "max"}, "64-bit scatter reductions, as above"),
]


@pytest.mark.parametrize("op,dtypes,attrs,why", ATTRIBUTE_DECLINED, ids=[o for o, _, _, _ in ATTRIBUTE_DECLINED])
def test_declined_for_attributes_runs_on_cpu(op, dtypes, attrs, why, runner):
    e = _entry(op)
    variant = Variant("declined", attrs, min_opset=18)
    case = _finish(Case(e, spec_for(e), dict(dtypes), variant, expect_provider=CPU))
    case.id = f"{e.key}:declined:{attrs}"
    if case.skip:
        pytest.skip(case.skip)
    _assert_ok(case, runner.check(case))


# --------------------------------------------------------------------------------------------
# Recurrent ops (RNN, GRU, LSTM): zero-size inputs, which ORT's CPU EP aborts the process on
# (GRU, and LSTM with no batch), against numpy; nodes whose meaning ORT and ONNX disagree on
# (defaults of activation parameters) run on the CPU EP.

_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.mark.parametrize("steps,batch", [(0, 2), (3, 0)], ids=["seq0", "batch0"])
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_documented_recurrent_zero_size(op, steps, batch, runner):
    """Recurrent docs: no step gives an empty Y and zero states (not initial_h); no batch
    gives empty outputs."""
    _only_mlx()
    e = _entry(op)
    rng = np.random.default_rng(7)
    width = _RNN_GATES[op] * 5
    data = {
        "X": np.zeros((steps, batch, 3), np.float32),
        "W": rng.uniform(-1, 1, (1, width, 3)).astype(np.float32),
        "R": rng.uniform(-1, 1, (1, width, 5)).astype(np.float32),
        "initial_h": rng.uniform(-1, 1, (1, batch, 5)).astype(np.float32),
    }
    variant = Variant("zero_size", {"hidden_size": 5}, present=("initial_h",))
    case = _edge_case(e, {"T": "float", "T1": "int32"}, data, variant, f"zero_size_{steps}x{batch}")
    _assert_ok(case, runner.check(case))


RECURRENT_DECLINED = [
    ("RNN", {"activations": ["LeakyRelu"]}, "ORT's RNN takes alpha 0 by default, ONNX's LeakyRelu 0.01"),
    ("RNN", {"direction": "bidirectional", "activations": ["Tanh", "LeakyRelu"], "activation_alpha": [0.1, 0.2]},
     "ORT's RNN gives LeakyRelu alpha[1], ONNX the first alpha"),
    ("GRU", {"activations": ["Sigmoid", "ThresholdedRelu"]}, "ORT defaults ThresholdedRelu's alpha to 0, ONNX to 1"),
    ("LSTM", {"activations": ["Affine", "Tanh", "Tanh"]}, "ORT defaults Affine's alpha to 0, ONNX to 1"),
]


@pytest.mark.parametrize("op,attrs,why", RECURRENT_DECLINED, ids=[f"{o}:{i}" for i, (o, _, _) in enumerate(RECURRENT_DECLINED)])
def test_recurrent_declined_node_runs_on_cpu(op, attrs, why, runner):
    e = _entry(op)
    spec = spec_for(e)
    # ORT's CPU EP is the only oracle: the numpy reference follows ONNX where the two disagree.
    cpu_only = type(spec)(**{**spec.__dict__, "ref": None})
    bidirectional = attrs.get("direction") == "bidirectional"
    variant = Variant("declined", dict({"hidden_size": 5}, **attrs), present=() if bidirectional else None)
    if bidirectional:
        width = _RNN_GATES[op] * 5
        variant.shapes = [[4, 3, 3], [2, width, 3], [2, width, 5]]
    case = _finish(Case(e, cpu_only, {"T": "float", "T1": "int32"}, variant, expect_provider=CPU))
    case.id = f"{e.key}:declined:{attrs}"
    if case.skip:
        pytest.skip(case.skip)
    _assert_ok(case, runner.check(case))
