"""Summaries of a fuzz run: counts per category and per op, and every problem case grouped by
what went wrong, each with the one-line command that rebuilds and reruns it from its seed."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from .classify import CATEGORIES, PROBLEMS, is_problem
from .known import KNOWN, KNOWN_FULL_RUN

# Crashing or hanging the host is never a known problem, whatever the ledger says.
NEVER_KNOWN = ("death", "hang")


def ledger_reason(result: dict) -> str | None:
    """Why a problem case is known (tests/fuzz/known.py), or None when it is new."""
    entry = KNOWN.get(result["id"]) or KNOWN_FULL_RUN.get(result["id"])
    # A case may fail one way here and another on the H200's older ORT: "wrong|cpu_only_error".
    if entry is None or result["category"] in NEVER_KNOWN or result["category"] not in entry[0].split("|"):
        return None
    return entry[1]

REPRO = ".venv/bin/python -m tests.fuzz repro {id}"


def repro_line(case_id: str) -> str:
    return REPRO.format(id=case_id)


def signature(detail: str) -> str:
    """The detail with its numbers, shapes and quoted values blanked: cases that fail the same
    way share it."""
    s = re.sub(r"\n.*", "", detail or "", flags=re.S)
    s = re.sub(r"\[inputs there:.*", "", s)
    s = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", s)
    s = re.sub(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|\bnan\b|\binf\b", "#", s)
    s = re.sub(r"\(#(, #)*,?\)|\{[^}]*\}", "(…)", s)
    return s[:140]


class Summary:
    def __init__(self):
        self.results: list[dict] = []

    def add(self, result: dict) -> None:
        self.results.append(result)

    def counts(self) -> Counter:
        return Counter(r["category"] for r in self.results)

    def per_op(self) -> dict[str, Counter]:
        out: dict[str, Counter] = defaultdict(Counter)
        for r in self.results:
            out[r["op"]][r["category"]] += 1
        return dict(sorted(out.items()))

    def problems(self) -> list[dict]:
        return sorted((r for r in self.results if is_problem(r["category"])), key=lambda r: (r["category"], r["op"], _k(r["id"])))

    def groups(self) -> list[tuple[tuple[str, str, str], list[dict]]]:
        g: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
        for r in self.problems():
            g[(r["category"], r["op"], signature(r["detail"]))].append(r)
        return sorted(g.items(), key=lambda kv: (PROBLEMS.index(kv[0][0]), kv[0][1]))

    def new_problems(self) -> list[dict]:
        """Problems the ledger does not explain: what a run must not have."""
        return [r for r in self.problems() if ledger_reason(r) is None]

    def headline(self) -> str:
        c = self.counts()
        line = f"{len(self.results)} cases: " + ", ".join(f"{k} {c[k]}" for k in CATEGORIES if c[k])
        problems, new = len(self.problems()), len(self.new_problems())
        if problems:
            line += f"; problems {problems}: {problems - new} known (tests/fuzz/known.py), {new} new"
        return line

    def text(self, per_op: bool = True, max_ids: int = 8) -> str:
        lines = [self.headline()]
        if per_op:
            lines.append("\nper op (only ops with a problem, or with every case declined):")
            for op, c in self.per_op().items():
                if any(c[p] for p in PROBLEMS) or set(c) <= {"declined", "both_failed"}:
                    lines.append(f"  {op:42s} " + ", ".join(f"{k} {c[k]}" for k in CATEGORIES if c[k]))
        groups = self.groups()
        if groups:
            lines.append(f"\n{len(self.problems())} problem cases in {len(groups)} groups:")
        for (category, op, _sig), rs in groups:
            first = rs[0]
            known = sum(ledger_reason(r) is not None for r in rs)
            tag = "" if not known else (" (known)" if known == len(rs) else f" ({known} known)")
            lines.append(f"\n[{category}] {op} x{len(rs)}{tag}: {first['detail'].splitlines()[0][:400]}")
            lines.append(f"  mutations: {'; '.join(first.get('mutations') or []) or '(see repro)'}")
            if first.get("log_tail"):
                lines.append(f"  worker log: {first['log_tail'][:300]}")
            lines.append(f"  repro: {repro_line(first['id'])}")
            if len(rs) > 1:
                more = ", ".join(r["id"] for r in rs[1:max_ids])
                lines.append(f"  also: {more}" + (f" (+{len(rs) - max_ids} more)" if len(rs) > max_ids else ""))
        return "\n".join(lines)

    def problem_lines(self) -> list[str]:
        """Every problem case on one line: category, op, what happened, and its repro command."""
        return [f"{r['category']} {r['op']} {r['id']}: {r['detail'].splitlines()[0][:240]} | {repro_line(r['id'])}"
                for r in self.problems()]

    def write_json(self, path: Path, meta: dict) -> None:
        data = {"meta": meta, "counts": dict(self.counts()), "per_op": {k: dict(v) for k, v in self.per_op().items()},
                "problems": [dict(r, repro=repro_line(r["id"])) for r in self.problems()],
                "results": self.results}
        Path(path).write_text(json.dumps(data, indent=1, default=_jsonable))


def _k(case_id: str) -> int:
    try:
        return int(case_id.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    return str(x)
