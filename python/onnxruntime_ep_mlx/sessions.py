"""The two sessions the CLI compares (MLX first, CPU only), and how it times them."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .registration import append_to_session_options

OPTIMIZATION_LEVELS: dict[str, ort.GraphOptimizationLevel] = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# Makes session.get_provider_graph_assignment_info() list every node with its EP.
_RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"
# ORT's warnings (shape merges, "some nodes were not assigned ...") would bury the CLI's own
# summary, which reports placement itself; errors still show.
_LOG_ERRORS_ONLY = 3


def _session_options(optimization: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    so.add_session_config_entry(_RECORD_ASSIGNMENT, "1")
    so.log_severity_level = _LOG_ERRORS_ONLY
    return so


def mlx_session(
    model: str | Path,
    ep_options: Mapping[str, str] | None = None,
    optimization: str = "all",
    profile_prefix: Path | None = None,
) -> ort.InferenceSession:
    """MLX EP first (ORT adds its CPU EP after it). With ``profile_prefix``, ORT profiles every
    run until ``end_profiling()``."""
    so = _session_options(optimization)
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    append_to_session_options(so, ep_options)
    return ort.InferenceSession(str(model), so)


def cpu_session(model: str | Path, optimization: str = "all") -> ort.InferenceSession:
    return ort.InferenceSession(str(model), _session_options(optimization), providers=["CPUExecutionProvider"])


def nodes_per_provider(session: ort.InferenceSession) -> dict[str, int]:
    """How many of the (optimised) graph's nodes ORT assigned to each EP; empty when this ORT
    does not record assignments."""
    counts: dict[str, int] = {}
    try:
        subgraphs = session.get_provider_graph_assignment_info()
    except Exception:  # noqa: BLE001 - older ORT, or recording not enabled: the caller copes
        return counts
    for subgraph in subgraphs:
        counts[subgraph.ep_name] = counts.get(subgraph.ep_name, 0) + len(subgraph.get_nodes())
    return counts


def median_run_ms(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray], runs: int) -> float:
    """Median wall time of ``runs`` calls; the caller has already run once (warm-up)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, dict(feeds))
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
