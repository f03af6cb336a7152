"""Generation through onnxruntime-genai 0.18.0 (the real LLM client) with the MLX EP: a tiny
genai-shaped fp32 decoder (scripts/make_decoder.py, shared KV buffer as genai's default) claimed
entirely by MLX, greedy tokens equal to ORT's CPU EP's; and the CLI's `generate` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime_genai")

from onnxruntime_ep_mlx import generation  # noqa: E402
from onnxruntime_ep_mlx.explain import explain_to, read_explain_records  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import make_decoder  # noqa: E402

SHAPE = make_decoder.Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=320, context=64)
NEW_TOKENS = 32
PROMPT = [5, 17, 200, 33, 9, 41]


@pytest.fixture(scope="module")
def fp32_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("genai_fp32")
    make_decoder.write(folder, SHAPE, "fp32", "none", seed=7)
    return folder


def test_greedy_tokens_equal_the_cpu_eps_with_every_node_on_mlx(fp32_folder, tmp_path):
    with explain_to(tmp_path / "explain.jsonl") as report:
        on_mlx = generation.load_model(fp32_folder, on_mlx=True)
    records = read_explain_records(report)
    assert records, "the EP wrote no claim report: genai did not put the MLX EP on the decoder"
    declined = [f"{r.node} ({r.qualified_op}): {r.reason}" for r in records if not r.claimed]
    assert not declined, "declined:\n" + "\n".join(declined)

    got = generation.generate(on_mlx, PROMPT, NEW_TOKENS)
    want = generation.generate(generation.load_model(fp32_folder, on_mlx=False), PROMPT, NEW_TOKENS)
    assert len(want.tokens) == NEW_TOKENS
    assert got.tokens == want.tokens


def test_generate_command_streams_text_and_reports_speed_and_placement(fp32_folder):
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "onnxruntime_ep_mlx", "generate", str(fp32_folder), "--prompt", "Hello", "--max-new-tokens", "8", "--tokens"],
        capture_output=True, text=True, timeout=300, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo / "python")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hello")
    assert "prefill" in done.stdout and "tokens/s" in done.stdout
    placement = re.search(r"nodes: (\d+) of (\d+) on MLXExecutionProvider", done.stdout)
    assert placement and placement[1] == placement[2], done.stdout
    assert "tokens: [" in done.stdout
