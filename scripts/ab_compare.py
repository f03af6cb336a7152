"""Compares builds of the EP library on one command, fairly: each library in its own process,
in interleaved rounds (A B A B ...), after one unmeasured warm-up process.

Why: on the H200 the first process of a call ran ~20% slower than the same library run after it
(unmodified GPU clocks ramping up; 2026-12-03), so "library A in the first process, B in the
second" measured the order as much as the libraries. Each run's figure is the first match of
--metric (a regex with one group) in the command's output; a run that fails or prints no match
is reported as such, not dropped.

Usage: ab_compare.py --lib NAME=PATH [--lib NAME=PATH ...] [--rounds N] [--metric REGEX]
                     [--timeout S] -- COMMAND ...
  e.g. ab_compare.py --lib main=target/gpu/main/libonnxruntime_mlx_ep.so \\
         --lib new=target/gpu/new/libonnxruntime_mlx_ep.so --rounds 3 \\
         -- python3 scripts/profile_decode.py --layers 16 --past 3000 --warm 40
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

DEFAULT_METRIC = r"([0-9.]+) ms a step"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", action="append", required=True, metavar="NAME=PATH",
                        help="a library to compare (ORT_MLX_EP_LIBRARY for its runs)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each library")
    parser.add_argument("--metric", default=DEFAULT_METRIC, help="regex whose first group is the figure")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a run may take")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given (put it after --)")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def libraries(specs: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--lib {spec!r}: expected NAME=PATH")
        if not os.path.isfile(path):
            raise SystemExit(f"--lib {name}: no library at {path}")
        pairs.append((name, os.path.abspath(path)))
    return pairs


def run_once(command: list[str], library: str, metric: re.Pattern, timeout: float) -> tuple[float | None, str]:
    """The run's figure (None when it failed or printed none) and a word on how it ended."""
    env = dict(os.environ, ORT_MLX_EP_LIBRARY=library)
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    found = metric.search(done.stdout + done.stderr)
    if done.returncode != 0:
        return None, f"exit {done.returncode}"
    if found is None:
        return None, "no match for --metric"
    return float(found.group(1)), "ok"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    libs = libraries(args.lib)
    metric = re.compile(args.metric)
    # The warm-up takes the first process's cost (clocks, caches on disk) for every library.
    _, how = run_once(args.command, libs[0][1], metric, args.timeout)
    print(f"warm-up ({libs[0][0]}): {how}", flush=True)
    figures: dict[str, list[float]] = {name: [] for name, _ in libs}
    for round_index in range(args.rounds):
        for name, path in libs:
            value, how = run_once(args.command, path, metric, args.timeout)
            print(f"round {round_index + 1}, {name}: {value if value is not None else '-'} ({how})", flush=True)
            if value is not None:
                figures[name].append(value)
    print("| library | runs | median | min | max |")
    print("|---|---|---|---|---|")
    for name, values in figures.items():
        if values:
            print(f"| {name} | {len(values)} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |")
        else:
            print(f"| {name} | 0 | - | - | - |")
    return 0 if all(figures.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
