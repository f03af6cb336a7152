"""Fixtures of the op suite: the op table, and a runner with the MLX EP registered once per
process (or, with ORT_MLX_OPS_SELFCHECK=1, a CPU-only runner that checks the suite itself)."""

from __future__ import annotations

import os

import onnxruntime as ort
import pytest

from op_harness import EP, SELFCHECK, Runner
from op_table import load_table

EXPLAIN_ENV = "ONNXRUNTIME_EP_MLX_EXPLAIN"
_STATUS: list = []
ort.set_default_logger_severity(3)  # old-opset models warn on every load


def _has_ep_device() -> bool:
    try:
        return any(d.ep_name == EP for d in ort.get_ep_devices())
    except Exception:
        return False


def ep_unavailable() -> str | None:
    """Why the MLX EP cannot be used in this process (None once it is registered)."""
    if _STATUS:
        return _STATUS[0]
    info = load_table()
    reason = None
    if info.library is None:
        reason = "the EP library is not built (target/release or $ORT_MLX_EP_LIBRARY)"
    elif not info.exports["CreateEpFactories"]:
        reason = f"{info.library} does not export CreateEpFactories (the EP ABI is not in yet)"
    elif not _has_ep_device():
        # Another suite may have registered the library already under its own name.
        ort.register_execution_provider_library("mlx", str(info.library))
        if not _has_ep_device():
            pytest.fail(f"registered {info.library}, but ORT lists no {EP} device")
    _STATUS.append(reason)
    return reason


@pytest.fixture(scope="session")
def table():
    return load_table()


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    profiles = tmp_path_factory.mktemp("ort-profiles")
    explain = None
    if not SELFCHECK:
        # The EP's claim report gives the reason when a node is declined.
        explain = os.environ.setdefault(EXPLAIN_ENV, str(profiles / "claims.jsonl"))
        reason = ep_unavailable()
        if reason:
            pytest.skip(reason)
    return Runner(profiles, explain=explain)
