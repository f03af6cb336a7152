"""The real public models of tests/models/sources.py: claim rate, max |MLX - CPU| and the median
latency of warm runs, MLX EP vs ORT's CPU EP, measured in one run.

    .venv/bin/python scripts/real_models.py [--runs 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "tests" / "models")]

from sources import MODELS, fetch  # noqa: E402

from onnxruntime_ep_mlx import EP_NAME, register_execution_provider_library  # noqa: E402
from onnxruntime_ep_mlx.explain import explain_to, read_explain_records  # noqa: E402
from onnxruntime_ep_mlx.sessions import cpu_session, median_run_ms, mlx_session  # noqa: E402
from onnxruntime_ep_mlx.tables import format_table  # noqa: E402


def measure(model, runs: int) -> dict:
    path = fetch(model)
    feeds = model.feeds()
    with tempfile.TemporaryDirectory() as scratch, explain_to(Path(scratch) / "explain.jsonl") as report:
        mlx = mlx_session(path)
        records = read_explain_records(report)
    cpu = cpu_session(path)
    got, want = mlx.run(None, feeds), cpu.run(None, feeds)  # also the warm-up runs
    difference = max(float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()) for g, w in zip(got, want))
    claimed = sum(r.claimed for r in records)
    return {
        "model": model.name,
        "package": model.package,
        "first_provider": mlx.get_providers()[0],
        "nodes": len(records),
        "claimed": claimed,
        "declined": sorted({f"{r.qualified_op}: {r.reason}" for r in records if not r.claimed}),
        "max_abs_diff": difference,
        "cpu_ms": median_run_ms(cpu, feeds, runs),
        "mlx_ms": median_run_ms(mlx, feeds, runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="warm runs per session (median)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    register_execution_provider_library()
    results = [measure(model, args.runs) for model in MODELS]
    rows = [
        (
            r["model"],
            f"{r['claimed']}/{r['nodes']} ({100 * r['claimed'] / max(r['nodes'], 1):.0f}%)",
            f"{r['max_abs_diff']:.3g}",
            f"{r['cpu_ms']:.3f}",
            f"{r['mlx_ms']:.3f}",
            f"{r['mlx_ms'] / r['cpu_ms']:.2f}x",
        )
        for r in results
    ]
    print(format_table(["model", "nodes on MLX", "max |MLX - CPU|", "CPU EP ms", "MLX EP ms", "MLX / CPU"], rows))
    for r in results:
        if r["first_provider"] != EP_NAME:
            print(f"  {r['model']}: providers start with {r['first_provider']}, not {EP_NAME}")
        for reason in r["declined"]:
            print(f"  {r['model']} declined {reason}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
