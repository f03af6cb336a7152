"""The EP's own account of its claim decisions.

During GetCapability the EP appends one JSON object per node to the file named by
``ONNXRUNTIME_EP_MLX_EXPLAIN``: ``{"node", "op", "domain", "opset", "claimed", "reason",
"cluster"}``. This module points that variable at a file, reads the records back and renders them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .tables import format_table, shorten

EXPLAIN_ENV = "ONNXRUNTIME_EP_MLX_EXPLAIN"


@dataclass(frozen=True)
class ExplainRecord:
    node: str
    op: str
    domain: str
    opset: int
    claimed: bool
    reason: str | None
    cluster: int | None

    @property
    def qualified_op(self) -> str:
        """``Add`` for the default domain, ``com.microsoft.Gelu`` otherwise."""
        return self.op if self.domain in ("", "ai.onnx") else f"{self.domain}.{self.op}"


@contextmanager
def explain_to(path: Path) -> Iterator[Path]:
    """Set ``ONNXRUNTIME_EP_MLX_EXPLAIN`` to ``path`` for the duration (the EP reads it at
    GetCapability, i.e. while a session is created), then restore the previous value."""
    previous = os.environ.get(EXPLAIN_ENV)
    os.environ[EXPLAIN_ENV] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(EXPLAIN_ENV, None)
        else:
            os.environ[EXPLAIN_ENV] = previous


def read_explain_records(path: Path) -> list[ExplainRecord]:
    """Parse the JSON lines; one record per node.

    ORT may call GetCapability more than once for a graph, so a named node seen again replaces
    its earlier record (the last decision is the one that stands). Unnamed nodes cannot be
    matched across calls and are all kept.
    """
    if not path.exists():
        return []
    by_key: dict[object, ExplainRecord] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            record = ExplainRecord(
                node=str(raw["node"]),
                op=str(raw["op"]),
                domain=str(raw.get("domain") or ""),
                opset=int(raw["opset"]),
                claimed=bool(raw["claimed"]),
                reason=raw.get("reason"),
                cluster=raw.get("cluster"),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not an explain record ({error}): {line[:200]}") from error
        by_key[record.node or ("unnamed", number)] = record
    return list(by_key.values())


def format_explanation(records: Sequence[ExplainRecord], model_node_names: Sequence[str] = ()) -> str:
    """A per-node table, then totals and the decline reasons grouped."""
    rows = [
        (
            record.node or "(unnamed)",
            record.qualified_op,
            record.opset,
            f"MLX #{record.cluster}" if record.claimed and record.cluster is not None else ("MLX" if record.claimed else "CPU"),
            record.reason if not record.claimed else "",
        )
        for record in records
    ]
    lines = [format_table(["node", "op", "since", "runs on", "why not MLX"], rows), ""]

    claimed = [record for record in records if record.claimed]
    clusters = {record.cluster for record in claimed if record.cluster is not None}
    lines.append(f"claimed {len(claimed)}/{len(records)} nodes in {len(clusters)} cluster(s)")

    declined_by_reason: dict[str, list[ExplainRecord]] = {}
    for record in records:
        if not record.claimed:
            declined_by_reason.setdefault(record.reason or "(no reason given)", []).append(record)
    for reason, declined in sorted(declined_by_reason.items(), key=lambda item: -len(item[1])):
        ops = sorted({record.qualified_op for record in declined})
        lines.append(f"  {len(declined):4d} × {reason}  [{shorten(ops, 6)}]")

    # Nodes ORT removed or fused before partitioning never reach GetCapability.
    seen = {record.node for record in records}
    unseen = [name for name in model_node_names if name and name not in seen]
    if unseen:
        lines.append(f"{len(unseen)} model node(s) never reached the EP (ORT optimised them away first): {shorten(unseen, 8)}")
    return "\n".join(lines)
