"""``python -m tests.fuzz``: run, repro, show (and the internal ``worker``).

    .venv/bin/python -m tests.fuzz run --per-entry 50 --seed 1 --workers 2 --json fuzz.json
    .venv/bin/python -m tests.fuzz run --cases 10000 --seed 1       # the same: whole rounds over the table
    .venv/bin/python -m tests.fuzz repro s1-Softmax-13-4 [--save DIR]
    .venv/bin/python -m tests.fuzz show s1-Softmax-13-4

A case id is ``s<seed>-<entry key>-<k>``: the k-th case of that entry, independent of the rest
of the table. A run is cases ``start..start+K-1`` of every entry (``--op`` narrows the entries).

The EP's own environment (ONNXRUNTIME_EP_MLX_NO_COMPILE, ONNXRUNTIME_EP_MLX_DEVICE, ...) passes
through to the workers, so the same run works on MLX's CUDA backend.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tests.fuzz"

from . import REPO  # noqa: E402  (sets up sys.path for the op suite's modules)


def _tasks(seed: int, rounds: int, start: int, op: str | None):
    from .generate import tasks
    from .pool import Task

    return [Task(*t) for t in tasks(seed, rounds, start, op)]


def rounds_for(cases: int, op: str | None = None) -> int:
    """Whole rounds over the (matching) entries that make at least ``cases`` cases."""
    from .generate import tasks

    per_round = max(1, len(tasks(0, 1, 0, op)))
    return max(1, -(-cases // per_round))


def fuzz(seed: int, rounds: int, workers: int, timeout: float, start: int = 0, op: str | None = None,
         progress: bool = False):
    """Run cases ``start..start+rounds-1`` of every (matching) entry; returns the Summary."""
    from .generate import make_case, parse_case_id
    from .pool import run_tasks
    from .report import Summary

    summary = Summary()
    began = time.monotonic()
    todo = _tasks(seed, rounds, start, op)
    cases = len(todo)

    def on_result(r):
        if "mutations" not in r and r["id"].startswith("s"):  # a lost worker's case: say what it was
            try:
                r["mutations"] = make_case(*parse_case_id(r["id"])).mutations
            except Exception:
                pass
        summary.add(r)
        n = len(summary.results)
        if progress and (n % 500 == 0 or n == cases):
            print(f"  {n}/{cases} in {time.monotonic() - began:.0f} s: {summary.headline()}", file=sys.stderr, flush=True)

    run_tasks(todo, workers, timeout, on_result)
    return summary


def save_case(case_id: str, directory: Path) -> Path:
    import numpy as np
    import onnx

    from .generate import make_case, parse_case_id

    fc = make_case(*parse_case_id(case_id))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{case_id}.onnx"
    onnx.save(fc.model, path)
    np.savez(directory / f"{case_id}.feeds.npz", **{f"feed{k}__{n}": v for k, f in enumerate(fc.feeds) for n, v in f.items()})
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run generated cases in worker processes")
    run.add_argument("--per-entry", type=int, help="cases per table entry (rounds over the table)")
    run.add_argument("--cases", type=int, default=1000,
                     help="at least this many cases, in whole rounds over the table (when --per-entry is not given)")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--start", type=int, default=0, help="each entry's first case k")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    run.add_argument("--op", help="only entries whose key matches this regex (e.g. '^Softmax')")
    run.add_argument("--json", type=Path, help="write every result here")
    run.add_argument("--save-dir", type=Path, help="save each problem case's .onnx and feeds here")
    rep = sub.add_parser("repro", help="rebuild one case from its id and run it in a fresh worker")
    rep.add_argument("case_id", help="s<seed>-<entry key>-<k>, as a report prints it")
    rep.add_argument("--save", type=Path, help="also save the .onnx and feeds into this folder")
    rep.add_argument("--timeout", type=float, default=60.0)
    show = sub.add_parser("show", help="describe one case without running it")
    show.add_argument("case_id")
    wk = sub.add_parser("worker", help="(internal) a worker process")
    wk.add_argument("--fd", type=int, required=True)
    args = ap.parse_args(argv)

    if args.cmd == "worker":
        from .worker import main as worker_main

        return worker_main(args.fd)

    from .classify import is_problem
    from .generate import make_case, parse_case_id

    if args.cmd == "show":
        fc = make_case(*parse_case_id(args.case_id))
        print(fc.describe())
        import onnx

        print(onnx.helper.printable_graph(fc.model.graph))
        return 0

    if args.cmd == "repro":
        from .pool import Task, run_tasks
        from .report import Summary

        seed, key, k = parse_case_id(args.case_id)
        fc = make_case(seed, key, k)
        print(fc.describe())
        if args.save:
            print(f"saved {save_case(args.case_id, args.save)}")
        summary = Summary()
        run_tasks([Task(seed, key, k)], 1, args.timeout, summary.add)
        r = summary.results[0]
        print(f"{r['category']}: {r['detail']}")
        if r.get("claimed"):
            print(f"claimed: {', '.join(r['claimed'])}")
        if r.get("decline_reason"):
            print(f"op declined: {r['decline_reason']}")
        if r.get("log_tail"):
            print(f"worker log: {r['log_tail']}")
        return 1 if is_problem(r["category"]) else 0

    from .execute import worker_env_summary

    began = time.monotonic()
    rounds = args.per_entry if args.per_entry is not None else rounds_for(args.cases, args.op)
    print(f"fuzz: seed {args.seed}, cases {args.start}..{args.start + rounds - 1} of each entry, {args.workers} workers, "
          f"EP env: {worker_env_summary()}", file=sys.stderr, flush=True)
    summary = fuzz(args.seed, rounds, args.workers, args.timeout, args.start, args.op, progress=True)
    elapsed = time.monotonic() - began
    print(summary.text())
    print(f"\n{elapsed:.1f} s ({len(summary.results) / max(elapsed, 1e-9):.1f} cases/s)")
    if args.json:
        summary.write_json(args.json, {"seed": args.seed, "start": args.start, "per_entry": rounds,
                                       "cases": len(summary.results),
                                       "workers": args.workers, "seconds": round(elapsed, 1), "env": worker_env_summary()})
        print(f"results in {args.json}")
    if args.save_dir:
        for r in summary.problems():
            save_case(r["id"], args.save_dir)
        print(f"problem models in {args.save_dir}")
    # Known problems (each with its reason in tests/fuzz/known.py) do not fail a run; new ones,
    # deaths and hangs do.
    return 1 if summary.new_problems() else 0


if __name__ == "__main__":
    sys.exit(main())
