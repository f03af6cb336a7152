"""A fixed-seed slice of the fuzzer inside ``make test``, and tests of the fuzzer itself.

``test_fuzz_slice`` runs FUZZ_SLICE_CASES cases (default 2,500: under two minutes with two
workers on a 2-core machine) and fails listing every problem case with its repro command.
``make fuzz`` runs the long one.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from op_table import load_table

from .classify import CATEGORIES, classify, classify_lost_worker, is_problem
from .known import KNOWN
from .generate import entries, entry_for, make_case
from .pool import Task, run_tasks
from .report import Summary, repro_line, signature

SLICE_SEED = 20261201
SLICE_CASES = int(os.environ.get("FUZZ_SLICE_CASES", "2500"))
WORKERS = min(2, os.cpu_count() or 1)


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
    run_tasks(tasks, WORKERS, timeout, summary.add, op_of=lambda t: entry_for(t.seed, t.index).key)
    return summary


@needs_ep
def test_fuzz_slice(monkeypatch):
    # Every case still runs eagerly, compiled and replayed; MLX's kernel fusion (a C++ compile
    # per new kernel on the CPU backend, minutes on a cold machine) is left to `make fuzz`.
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_NO_FUSE", "1")
    summary = _run([Task(SLICE_SEED, i) for i in range(SLICE_CASES)])
    assert len(summary.results) == SLICE_CASES
    covered = {r["op"] for r in summary.results}
    assert covered == {e.key for e in entries()}, "the slice must reach every table entry"
    found = {r["id"]: r for r in summary.problems()}
    unexpected = [line for line, r in zip(summary.problem_lines(), summary.problems())
                  if r["id"] not in KNOWN or r["category"] in ("death", "hang")
                  or KNOWN[r["id"]][0] != r["category"]]
    in_slice = {f"s{SLICE_SEED}-{i}" for i in range(SLICE_CASES)}
    stale = sorted(case for case in KNOWN if case in in_slice and case not in found)
    assert not unexpected, "\n".join(["", summary.text(per_op=False), "", "problems not in known.py:"] + unexpected)
    assert not stale, f"fixed, so delete from tests/fuzz/known.py: {stale}"


# --------------------------------------------------------------------------------------------
# The generator


def test_same_seed_same_cases():
    for i in range(0, 400, 7):
        a, b = make_case(5, i), make_case(5, i)
        assert a.model.SerializeToString() == b.model.SerializeToString(), a.id
        assert a.mutations == b.mutations and a.order == b.order
        assert len(a.feeds) == len(b.feeds)
        for fa, fb in zip(a.feeds, b.feeds):
            assert fa.keys() == fb.keys()
            for k in fa:
                np.testing.assert_array_equal(fa[k], fb[k], err_msg=f"{a.id} feed {k}")
    assert any(make_case(5, i).model.SerializeToString() != make_case(6, i).model.SerializeToString() for i in range(20))


def test_every_table_entry_is_generated():
    """Any #entries consecutive cases of a seed test every entry once, and each builds."""
    n = len(entries())
    for seed in (0, SLICE_SEED):
        seen = [make_case(seed, i) for i in range(n)]
        assert {c.entry.key for c in seen} == {e.key for e in entries()}
        assert all(c.model.graph.node for c in seen)


def test_mutations_reach_the_edges():
    """Over a few thousand cases every kind of edge appears (a generator that silently stopped
    mutating would otherwise pass everything)."""
    text = "\n".join("; ".join(make_case(3, i).mutations) for i in range(1500))
    for needle in ("attr axis=", "host ", "shape zero_dim", "shape zero_huge", "shape scalar", "shape prepend_one",
                   "special floats", "integer extremes", "out-of-range indices", "zero divisors", "chain: ",
                   "-> op", "fed constants", "symbolic re-run"):
        assert needle in text, f"no case of seed 3 has {needle!r}"


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
    tasks = [Task(1, 0), Task(1, 1, crash=crash), Task(1, 2), Task(1, 3)]
    summary = Summary()
    run_tasks(tasks, 1, 5.0 if crash == "hang" else 30.0, summary.add, op_of=lambda t: entry_for(t.seed, t.index).key)
    by_id = {r["id"]: r for r in summary.results}
    assert set(by_id) == {"s1-0", "s1-1", "s1-2", "s1-3"}, summary.results
    assert by_id["s1-1"]["category"] == category, by_id["s1-1"]
    if crash != "hang":
        assert ("SIGSEGV" if crash == "segv" else "SIGABRT") in by_id["s1-1"]["detail"]
    # The replacement worker ran the rest.
    assert all(by_id[i]["category"] not in ("death", "hang", "fuzzer_error") for i in ("s1-0", "s1-2", "s1-3"))
