"""Runs one fuzz case inside a worker: the MLX-first session, then ORT's CPU EP as the oracle.

The MLX session goes first so that a crash in ORT's own CPU kernels (integer division by zero
traps) cannot hide what the EP did: the worker announces each phase to its parent before
entering it, and the parent attributes a death to the phase it happened in.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Callable

import numpy as np

import onnxruntime as ort

from op_harness import CPU, EP, OP_NODE, compare, is_not_implemented, reference

from .classify import classify
from .generate import FuzzCase

HELPER_NODES = ("fz_pre", "fz_post")


def _session(model: bytes, providers: list[str]):
    so = ort.SessionOptions()
    # As the op suite: no ORT rewrites (constant folding would remove the node under test).
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    # One thread and no spinning: with a worker per core, ORT's spinning pool threads took
    # most of the machine from each other (12 cases/s with two workers instead of ~50 with one).
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, so, providers=providers)


def first_line(err: BaseException, limit: int = 300) -> str:
    """The error's own message: ORT's "Status Message:" part when there is one, without the
    fused node's generated name and the EP's standard advice."""
    text = str(err).strip()
    if "Status Message: " in text:
        text = text.split("Status Message: ", 1)[1]
    text = re.sub(r"^MLXExecutionProvider: MLXExecutionProvider_\w+: ", "", text)
    text = text.split(" Set ONNXRUNTIME_EP_MLX_DISABLE=1", 1)[0]
    lines = text.splitlines()
    return f"{type(err).__name__}: {(lines[0] if lines else '')[:limit]}"


def read_claims(path: Path) -> dict[str, dict]:
    """The EP's claim decisions by node name (a later GetCapability call's record wins)."""
    out: dict[str, dict] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        out[str(rec.get("node", ""))] = rec
    return out


def run_case(fc: FuzzCase, explain: Path, phase: Callable[..., None]) -> dict:
    data = fc.model.SerializeToString()
    started = time.monotonic()
    explain.write_text("")  # the EP appends its decisions for this session only

    phase("mlx_session")
    mlx_error, results, sess = None, [], None
    try:
        sess = _session(data, [EP, CPU])
        sess.disable_fallback()  # else ORT's binding retries a failed run on CPU alone
    except Exception as err:
        mlx_error = f"session creation: {first_line(err)}"
    claims = read_claims(explain)
    # Nodes ORT made itself (a function op's body, inlined before GetCapability) have no name.
    claimed = sorted(n or f"(unnamed {r.get('op')})" for n, r in claims.items() if r.get("claimed"))
    if not claimed and mlx_error and "MLXExecutionProvider" in mlx_error:
        claimed = ["(the EP failed before reporting claims)"]
    op_rec = claims.get(OP_NODE, {})
    phase("mlx_run", claimed=claimed)
    if sess is not None:
        for r, k in enumerate(fc.order):
            try:
                results.append(sess.run(None, fc.feeds[k]))
            except Exception as err:
                mlx_error = f"run {r + 1} (feed {k + 1}): {first_line(err)}"
                break

    phase("cpu", claimed=claimed, mlx_error=mlx_error)
    cpu_error, missing_kernel, expected, oracle = None, False, None, "cpu"
    try:
        cpu = _session(data, [CPU])
        expected = [cpu.run(None, f) for f in fc.feeds]
    except Exception as err:
        cpu_error = first_line(err)
        missing_kernel = is_not_implemented(err) or (sess is not None and _cpu_cannot_build(str(err)))
    if expected is None and missing_kernel and not fc.chained:
        expected, oracle = _numpy_reference(fc), "numpy"

    mismatch = None
    if expected is not None and mlx_error is None:
        mismatch = _first_mismatch(fc, results, expected, oracle)
    category, detail = classify(
        claimed=claimed, op_claimed=OP_NODE in claimed or "fz_again" in claimed, mlx_error=mlx_error,
        cpu_error=cpu_error, cpu_missing_kernel=missing_kernel, has_oracle=expected is not None,
        mismatch=mismatch)
    return {
        "id": fc.id, "op": fc.op, "category": category, "detail": detail, "claimed": claimed,
        "decline_reason": None if op_rec.get("claimed", True) else op_rec.get("reason"),
        "oracle": oracle if expected is not None else None, "mutations": fc.mutations,
        "seconds": round(time.monotonic() - started, 3),
    }


def cpu_probe(fc: FuzzCase, phase: Callable[..., None]) -> None:
    """Loads and runs the case on ORT's CPU EP alone, errors ignored: after the case's worker
    died with the MLX EP, whether this process survives says whose crash it was."""
    phase("cpu_probe")
    try:
        cpu = _session(fc.model.SerializeToString(), [CPU])
        for feeds in fc.feeds:
            cpu.run(None, feeds)
    except Exception:  # an error is not a crash: the probe survived
        pass


# ORT's CPU EP failing to build a model that ORT itself accepted (the MLX session was created
# from the same bytes): no kernel for the type, a function body it cannot inline for it
# (Clip-11 bfloat16), float16 Casts it inserts with a bad attribute. No oracle, not an answer.
_CANNOT_BUILD = ("InsertedPrecisionFreeCast", "Type Error: Type", "are not supported", "is not supported",
                 "Could not find an implementation", "NOT_IMPLEMENTED")


def _cpu_cannot_build(message: str) -> bool:
    # Errors raised while running are kernels validating data: an answer, not a missing kernel.
    running = "Non-zero status code returned while running" in message
    return not running and any(k in message for k in _CANNOT_BUILD)


def _numpy_reference(fc: FuzzCase):
    """The op suite's numpy reference per feed, or None when it cannot follow the mutation."""
    try:
        with np.errstate(all="ignore"):
            return [reference(fc.base, inputs) for inputs in fc.op_inputs] if fc.base.spec.ref else None
    except Exception:
        return None


def _first_mismatch(fc: FuzzCase, results, expected, oracle: str) -> str | None:
    # Sums over inf, -inf and float32's largest values give inf or NaN by evaluation order; for
    # ops that are not correctly rounded, a non-finite answer where the oracle's is non-finite
    # too counts as agreeing. (Exact ops keep NaN positions strict: Sign(NaN) is caught.)
    relaxed = not fc.exact and any(m.startswith("values") and "special floats" in m for m in fc.mutations)
    for r, (k, outs) in enumerate(zip(fc.order, results)):
        for (name, dtype), got, want in zip(fc.outputs, outs, expected[k]):
            if relaxed and np.shape(got) == np.shape(want) and np.asarray(want).dtype.kind == "f":
                got = np.where(~np.isfinite(got) & ~np.isfinite(want), want, got)
            p = compare(got, want, dtype, fc.exact, fc.op_inputs[k], f"run {r + 1} (feed {k + 1}) output {name} vs {oracle}",
                        fc.tolerance_scale)
            if p:
                return p
    return None


def worker_env_summary() -> str:
    keys = ("ONNXRUNTIME_EP_MLX_NO_COMPILE", "ONNXRUNTIME_EP_MLX_DEVICE", "ONNXRUNTIME_EP_MLX_COMPILE_AFTER")
    return ", ".join(f"{k}={os.environ[k]}" for k in keys if k in os.environ) or "defaults"
