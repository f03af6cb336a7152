"""``python -m tests.fuzz``: run, repro, show (and the internal ``worker``).

    .venv/bin/python -m tests.fuzz run --cases 10000 --seed 1 --workers 2 --json fuzz.json
    .venv/bin/python -m tests.fuzz repro s1-4242 [--save DIR]
    .venv/bin/python -m tests.fuzz show s1-4242

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


def _tasks(seed: int, start: int, cases: int, op: str | None):
    from .generate import entry_for
    from .pool import Task

    pattern = re.compile(op) if op else None
    index = start
    made = 0
    while made < cases:
        if pattern is None or pattern.search(entry_for(seed, index).key):
            yield Task(seed, index)
            made += 1
        index += 1


def fuzz(seed: int, cases: int, workers: int, timeout: float, start: int = 0, op: str | None = None,
         progress: bool = False):
    """Run ``cases`` cases; returns the Summary."""
    from .generate import entry_for, make_case, parse_case_id
    from .pool import run_tasks
    from .report import Summary

    summary = Summary()
    began = time.monotonic()

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

    run_tasks(list(_tasks(seed, start, cases, op)), workers, timeout, on_result,
              op_of=lambda t: entry_for(t.seed, t.index).key)
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
    run.add_argument("--cases", type=int, default=1000)
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--start", type=int, default=0, help="first case index")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    run.add_argument("--op", help="only entries whose key matches this regex (e.g. '^Softmax')")
    run.add_argument("--json", type=Path, help="write every result here")
    run.add_argument("--save-dir", type=Path, help="save each problem case's .onnx and feeds here")
    rep = sub.add_parser("repro", help="rebuild one case from its id and run it in a fresh worker")
    rep.add_argument("case_id")
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

        seed, index = parse_case_id(args.case_id)
        fc = make_case(seed, index)
        print(fc.describe())
        if args.save:
            print(f"saved {save_case(args.case_id, args.save)}")
        summary = Summary()
        run_tasks([Task(seed, index)], 1, args.timeout, summary.add, op_of=lambda t: fc.op)
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
    print(f"fuzz: seed {args.seed}, cases {args.start}..{args.start + args.cases - 1}, {args.workers} workers, "
          f"EP env: {worker_env_summary()}", file=sys.stderr, flush=True)
    summary = fuzz(args.seed, args.cases, args.workers, args.timeout, args.start, args.op, progress=True)
    elapsed = time.monotonic() - began
    print(summary.text())
    print(f"\n{elapsed:.1f} s ({len(summary.results) / max(elapsed, 1e-9):.1f} cases/s)")
    if args.json:
        summary.write_json(args.json, {"seed": args.seed, "start": args.start, "cases": args.cases,
                                       "workers": args.workers, "seconds": round(elapsed, 1), "env": worker_env_summary()})
        print(f"results in {args.json}")
    if args.save_dir:
        for r in summary.problems():
            save_case(r["id"], args.save_dir)
        print(f"problem models in {args.save_dir}")
    return 1 if summary.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
