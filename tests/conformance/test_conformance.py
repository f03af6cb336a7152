"""ONNX's backend tests through ORT with the MLX EP first, held to tests/conformance/manifest.tsv.

Every case runs again (in worker processes, ~15 s on 2 cores). The test fails when a case's class
differs from the manifest — worse (mlx → partial/cpu, partial → cpu, anything → fail) and better
alike, so that the manifest stays true — and when docs/CONFORMANCE.md is not what this run
generates. Regenerate both with ``.venv/bin/python tests/conformance/run.py --update``.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("conformance_run", Path(__file__).with_name("run.py"))
conformance = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = conformance  # dataclasses look their module up by name
_spec.loader.exec_module(conformance)


@pytest.fixture(scope="module")
def results():
    return conformance.run_all(conformance.KINDS, jobs=2)


def test_every_case_keeps_its_class_in_the_manifest(results):
    assert conformance.MANIFEST.exists(), f"no manifest: {conformance.REGENERATE}"
    found = conformance.changes(conformance.read_manifest(), results)
    assert not found, "\n" + conformance.describe_changes(found)


def test_conformance_doc_is_current(results):
    expected = conformance.render_doc(results, conformance.KINDS)
    actual = conformance.DOC.read_text(encoding="utf-8") if conformance.DOC.exists() else ""
    if actual != expected:
        changed = [
            f"  line {number}: {old!r} → {new!r}"
            for number, (old, new) in enumerate(zip(actual.splitlines(), expected.splitlines()), start=1)
            if old != new
        ][:10]
        pytest.fail(
            "docs/CONFORMANCE.md is stale (first differing lines below); regenerate it with "
            f"{conformance.REGENERATE}\n" + "\n".join(changed),
            pytrace=False,
        )


def test_comparison_follows_onnx_runner_semantics():
    import numpy as np

    compare = conformance.compare
    f = np.float32
    assert compare([np.array([1.0, np.nan], f)], [np.array([1.0005, np.nan], f)], 1e-3, 1e-7) is None
    assert "differ" in compare([np.array([1.0, 2.0], f)], [np.array([1.0, 2.1], f)], 1e-3, 1e-7)
    assert "dtype" in compare([np.array([1.0], np.float64)], [np.array([1.0], f)], 1e-3, 1e-7)
    assert "shape" in compare([np.zeros((2, 1), f)], [np.zeros((2,), f)], 1e-3, 1e-7)
    assert compare([[np.ones(2, f)]], [[np.ones(2, f)]], 1e-3, 1e-7) is None
    assert "outputs" in compare([], [np.ones(1, f)], 1e-3, 1e-7)


def test_changes_tell_worse_from_better():
    R = conformance.Result
    manifest = {"a": ("mlx", "Add", ""), "b": ("cpu", "Add", ""), "c": ("partial", "Add", ""), "d": ("unsupported-by-ort", "X", "")}
    now = {"a": R("a", "Add", "partial"), "b": R("b", "Add", "mlx"), "c": R("c", "Add", "fail"), "d": R("d", "X", "cpu"), "e": R("e", "Y", "cpu")}
    found = conformance.changes(manifest, now)
    assert [line.split(" ")[0] for line in found["worse"]] == ["a", "c"]
    assert [line.split(" ")[0] for line in found["better"]] == ["b"]
    assert [line.split(" ")[0] for line in found["changed"]] == ["d"]
    assert found["new"] == ["e: cpu"]
    assert conformance.REGENERATE in conformance.describe_changes(found)


def test_a_case_that_kills_its_worker_is_a_fail_and_the_rest_still_run(monkeypatch):
    monkeypatch.setenv("MLX_CONFORMANCE_CRASH_IN", "test_abs")
    got = conformance.run_all(("node",), jobs=1, patterns=["test_abs", "test_acos"])
    assert got["test_abs"].cls == "fail" and "died (signal 6)" in got["test_abs"].reason, got["test_abs"]
    assert got["test_abs"].op == "Abs"
    assert {"test_acos", "test_acosh", "test_acos_example"} <= got.keys()
    assert all(result.cls != "fail" for key, result in got.items() if key != "test_abs"), got
