"""Which provider ran each node, read from ORT's profiling JSON (``session.end_profiling()``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from os import PathLike
from typing import NamedTuple

_KERNEL_SUFFIX = "_kernel_time"


class NodePlacement(NamedTuple):
    """One kernel ORT ran. ``node`` is the profiler's name without ``_kernel_time``: the ONNX
    node's name for CPU nodes, ``MLXExecutionProvider_MLXExecutionProvider_<hash>_<i>_<j>`` for a
    fused MLX cluster. ``op`` is the profiler's ``op_name`` (the fused node's op type for
    clusters)."""

    node: str
    provider: str
    op: str


def node_providers(profile_json_path: str | PathLike[str]) -> list[NodePlacement]:
    """Every distinct kernel in the profile, in first-run order.

    Each run repeats every kernel event; one entry per node is what "where did it run" needs.
    """
    with open(profile_json_path, encoding="utf-8") as file:
        events = json.load(file)
    # Older ORT wrapped the array as {"traceEvents": [...]}; accept both.
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    placements: dict[str, NodePlacement] = {}
    for event in events:
        name = event.get("name", "")
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX) or "provider" not in args:
            continue
        node = name[: -len(_KERNEL_SUFFIX)]
        placements.setdefault(node, NodePlacement(node, args["provider"], args.get("op_name", "")))
    return list(placements.values())


def by_provider(placements: Iterable[NodePlacement]) -> dict[str, list[NodePlacement]]:
    """Group kernels by provider, keeping run order within each group."""
    groups: dict[str, list[NodePlacement]] = {}
    for placement in placements:
        groups.setdefault(placement.provider, []).append(placement)
    return groups
