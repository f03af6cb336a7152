"""A fixed-seed slice of the fuzzer inside ``make test``, and tests of the fuzzer itself.

``test_fuzz_slice`` runs cases 0..K-1 of every table entry for seed SLICE_SEED (K =
SLICE_PER_ENTRY, about 2,500 cases: under a minute with two workers on a 2-core machine) and fails
listing every problem case with its repro command. A case's id names its entry, so a new op adds
its own cases without renaming anyone else's. ``FUZZ_SLICE_PER_ENTRY`` (or ``FUZZ_SLICE_CASES``,
rounded to whole rounds: approximate, the
per-entry count is the stable knob) resizes it. ``make fuzz`` runs the long one.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from op_table import load_table

from .classify import CATEGORIES, classify, classify_lost_worker, is_problem
from .known import KNOWN
from .generate import entries, make_case, parse_case_id, tasks, unfuzzed
from .pool import Task, run_tasks
from .report import Summary, repro_line, signature

SLICE_SEED = 20261201
SLICE_PER_ENTRY = 12  # x 204 entries = 2,448 cases
WORKERS = min(2, os.cpu_count() or 1)


def slice_per_entry() -> int:
    if os.environ.get("FUZZ_SLICE_PER_ENTRY"):
        return int(os.environ["FUZZ_SLICE_PER_ENTRY"])
    if os.environ.get("FUZZ_SLICE_CASES"):
        return max(1, round(int(os.environ["FUZZ_SLICE_CASES"]) / len(entries())))
    return SLICE_PER_ENTRY


def _ep_missing() -> str | None:
    info = load_table()
    if info.library is None:
        return "the EP library is not built (make build)"
    if not info.exports.get("CreateEpFactories"):
        return f"{info.library} does not export CreateEpFactories"
    return None


needs_ep = pytest.mark.skipif(_ep_missing() is not None, reason=str(_ep_missing()))


def _run(tasks, timeout=30.0) -> Summary:
    summary = Summary()
    run_tasks(tasks, WORKERS, timeout, summary.add)
    return summary


@needs_ep
def test_fuzz_slice(monkeypatch):
    # Every case still runs eagerly, compiled and replayed; MLX's kernel fusion (a C++ compile
    # per new kernel on the CPU backend, minutes on a cold machine) is left to `make fuzz`.
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_NO_FUSE", "1")
    per_entry = slice_per_entry()
    todo = [Task(*t) for t in tasks(SLICE_SEED, per_entry)]
    summary = _run(todo)
    assert len(summary.results) == len(todo)
    covered = {r["op"] for r in summary.results}
    assert covered == {e.key for e in entries()} - set(unfuzzed()), "the slice must reach every table entry"
    found = {r["id"]: r for r in summary.problems()}
    unexpected = [line for line, r in zip(summary.problem_lines(), summary.problems())
                  if r["id"] not in KNOWN or r["category"] in ("death", "hang")
                  or r["category"] not in KNOWN[r["id"]][0].split("|")]
    in_slice = {t.id for t in todo}
    # "ok" among a case's categories: its outcome depends on the machine (ORT's kernels per ISA).
    stale = sorted(case for case in KNOWN if case in in_slice and case not in found
                   and "ok" not in KNOWN[case][0].split("|"))
    unknown = sorted(case for case in KNOWN if parse_case_id(case)[1] not in {e.key for e in entries()})
    assert not unexpected, "\n".join(["", summary.text(per_op=False), "", "problems not in known.py:"] + unexpected)
    assert not stale, f"fixed, so delete from tests/fuzz/known.py: {stale}"
    assert not unknown, f"tests/fuzz/known.py names entries the table no longer has: {unknown}"


# --------------------------------------------------------------------------------------------
# The generator


def test_same_seed_same_cases():
    for seed, key, k in tasks(5, 2)[::7]:
        a, b = make_case(seed, key, k), make_case(seed, key, k)
        assert a.model.SerializeToString() == b.model.SerializeToString(), a.id
        assert a.mutations == b.mutations and a.order == b.order
        assert len(a.feeds) == len(b.feeds)
        for fa, fb in zip(a.feeds, b.feeds):
            assert fa.keys() == fb.keys()
            for k in fa:
                np.testing.assert_array_equal(fa[k], fb[k], err_msg=f"{a.id} feed {k}")
    assert any(make_case(5, key, 0).model.SerializeToString() != make_case(6, key, 0).model.SerializeToString()
               for _, key, _ in tasks(5, 1)[:20])


def test_every_table_entry_is_generated():
    """One round of a seed tests every entry once, and each builds. An entry the op suite tests
    only in a file of its own (no case to start from) is the exception, and says where."""
    for key, why in unfuzzed().items():
        assert why.startswith("tested in tests/"), (key, why)
    # The exceptions are control flow (a body is a graph reading the enclosing one), sequences and
    # optionals (neither crosses a fused node's edge): none has a one-node case; and ops whose
    # inputs must agree with each other (packed/paged attention's cumulative lengths and block
    # tables, DMMHA's beam indirection): at most 2% of the table.
    no_one_node_case = {e.key for e in entries() if any(a.kind == "graph" for a in e.attributes)
                        or any(p.sequence or p.optional_value for p in e.inputs + e.outputs)}
    # Nor do two families the fuzzer cannot judge: random generators have no oracle (MLX cannot
    # repeat ORT's stream), and ai.onnx.ml's models are their attributes (forests,
    # coefficients, category lists), which no generic case can invent. Their own files
    # (tests/ep/test_random.py, tests/ep/test_ml.py) test them, bad attributes and 0-d inputs
    # included.
    no_oracle_case = {e.key for e in entries() if e.family == "random" or e.domain == "ai.onnx.ml"}
    agreeing = set(unfuzzed()) - no_one_node_case - no_oracle_case
    assert len(agreeing) <= len(entries()) // 50, f"most entries must be fuzzed: {sorted(agreeing)}"
    for seed in (0, SLICE_SEED):
        seen = [make_case(*t) for t in tasks(seed, 1)]
        assert {c.entry.key for c in seen} == {e.key for e in entries()} - set(unfuzzed())
        assert all(c.model.graph.node for c in seen)


def test_case_ids_name_their_entry():
    """A case is a function of (seed, key, k) alone, and its id round-trips (keys hold dashes)."""
    for key in ("Attention-23..23", "com.microsoft.GroupQueryAttention-1", "Softmax-13"):
        if key in {e.key for e in entries()}:
            fc = make_case(SLICE_SEED, key, 3)
            assert fc.id == f"s{SLICE_SEED}-{key}-3" and parse_case_id(fc.id) == (SLICE_SEED, key, 3)
            assert fc.entry.key == key
    assert all(parse_case_id(case)[0] == SLICE_SEED for case in KNOWN)


def test_mutations_reach_the_edges():
    """Over a few thousand cases every kind of edge appears (a generator that silently stopped
    mutating would otherwise pass everything)."""
    text = "\n".join("; ".join(make_case(*t).mutations) for t in tasks(3, 8))
    for needle in ("attr axis=", "host ", "shape zero_dim", "shape zero_huge", "shape scalar", "shape prepend_one",
                   "special floats", "integer extremes", "out-of-range indices", "zero divisors", "chain: ",
                   "-> op", "fed constants", "symbolic re-run"):
        assert needle in text, f"no case of seed 3 has {needle!r}"


def test_the_reference_sees_host_inputs_as_the_model_holds_them():
    """A host input mutated past its port's type is wrapped in the model's initializer; the numpy
    reference must get that value too (s32-CumSum-11-2: axis int64 min in an int32 port is 0 in
    the model, and the reference took it mod 3 as axis 1)."""
    from onnx import numpy_helper
    from op_harness import reference

    fc = make_case(32, "CumSum-11", 2)
    assert any(m.startswith("host axis[0]=-9223372036854775808") for m in fc.mutations), fc.mutations
    (axis,) = [numpy_helper.to_array(t) for t in fc.model.graph.initializer if t.name == "axis"]
    (want,) = reference(fc.base, fc.op_inputs[0])
    x = fc.op_inputs[0]["x"]
    np.testing.assert_array_equal(want, np.cumsum(x, axis=int(axis), dtype=x.dtype))


# --------------------------------------------------------------------------------------------
# Classification and reports


def test_classification_rules():
    kw = dict(claimed=["op_under_test"], op_claimed=True, mlx_error=None, cpu_error=None,
              cpu_missing_kernel=False, has_oracle=True, mismatch=None)
    assert classify(**kw)[0] == "ok"
    assert classify(**dict(kw, mismatch="differs"))[0] == "wrong"
    assert classify(**dict(kw, mlx_error="boom"))[0] == "lost_fallback"
    assert classify(**dict(kw, cpu_error="index out of range"))[0] == "cpu_only_error"
    assert classify(**dict(kw, cpu_error="x", mlx_error="y"))[0] == "both_failed"
    assert classify(**dict(kw, claimed=[], op_claimed=False))[0] == "declined"
    assert classify(**dict(kw, cpu_error="no kernel", cpu_missing_kernel=True, has_oracle=False))[0] == "no_oracle"
    assert classify(**dict(kw, op_claimed=False, claimed=["fz_post"]))[0] == "declined"
    # A worker lost while ORT's CPU EP ran the oracle is ORT's crash, not the EP's.
    assert classify_lost_worker("death", "cpu", ["op_under_test"], None, "died with SIGFPE")[0] == "cpu_only_error"
    assert classify_lost_worker("death", "mlx_run", [], None, "died with SIGFPE")[0] == "declined"
    assert classify_lost_worker("death", "mlx_run", ["op_under_test"], None, "died with SIGSEGV")[0] == "death"
    assert classify_lost_worker("hang", "mlx_session", None, None, "timed out")[0] == "hang"
    assert all(c in CATEGORIES for c in ("death", "hang", "wrong", "lost_fallback", "cpu_only_error"))


def test_report_lists_every_problem_with_its_repro():
    s = Summary()
    s.add({"id": "s1-3", "op": "Sign-9", "category": "wrong", "detail": "run 1: 2/6 elements differ"})
    s.add({"id": "s1-9", "op": "Sign-9", "category": "wrong", "detail": "run 1: 3/6 elements differ"})
    s.add({"id": "s1-4", "op": "Abs-6", "category": "ok", "detail": ""})
    text = s.text()
    assert repro_line("s1-3") in text and "s1-9" in text and "s1-4" not in text
    assert signature("2/6 elements differ at (0, 1)") == signature("3/7 elements differ at (1, 2)")
    assert is_problem("death") and not is_problem("declined")


# --------------------------------------------------------------------------------------------
# Isolation


@needs_ep
@pytest.mark.parametrize("crash,category", [("segv", "death"), ("abort", "death"), ("hang", "hang")])
def test_a_lost_worker_is_reported_and_replaced(crash, category):
    todo = [Task(1, "Abs-6", 0), Task(1, "Abs-6", 1, crash=crash), Task(1, "Abs-6", 2), Task(1, "Add-7", 0)]
    summary = Summary()
    run_tasks(todo, 1, 5.0 if crash == "hang" else 30.0, summary.add)
    by_id = {r["id"]: r for r in summary.results}
    assert set(by_id) == {"s1-Abs-6-0", "s1-Abs-6-1", "s1-Abs-6-2", "s1-Add-7-0"}, summary.results
    assert by_id["s1-Abs-6-1"]["category"] == category, by_id["s1-Abs-6-1"]
    if crash != "hang":
        assert ("SIGSEGV" if crash == "segv" else "SIGABRT") in by_id["s1-Abs-6-1"]["detail"]
    # The replacement worker ran the rest.
    assert all(by_id[i]["category"] not in ("death", "hang", "fuzzer_error")
               for i in ("s1-Abs-6-0", "s1-Abs-6-2", "s1-Add-7-0"))
