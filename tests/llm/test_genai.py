"""Generation through onnxruntime-genai 0.18.0 (the real LLM client) with the MLX EP: a tiny
genai-shaped fp32 decoder (scripts/make_decoder.py, shared KV buffer as genai's default) claimed
entirely by MLX, greedy tokens equal to ORT's CPU EP's; the same decoder with the builder's int4
weights (MatMulNBits everywhere, GatherBlockQuantized embedding), fp32 and fp16 activations,
whose logits are held to a float64 reference; and the CLI's `generate` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

og = pytest.importorskip("onnxruntime_genai")

from onnxruntime_ep_mlx import generation  # noqa: E402
from onnxruntime_ep_mlx.explain import explain_to, read_explain_records  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import make_decoder  # noqa: E402
from float64_decoder import Float64Decoder  # noqa: E402

SHAPE = make_decoder.Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=320, context=64)
NEW_TOKENS = 32
PROMPT = [5, 17, 200, 33, 9, 41]


@pytest.fixture(scope="module")
def fp32_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("genai_fp32")
    make_decoder.write(folder, SHAPE, "fp32", "none", seed=7)
    return folder


def claimed_everything(report: Path) -> None:
    records = read_explain_records(report)
    assert records, "the EP wrote no claim report: genai did not put the MLX EP on the decoder"
    declined = [f"{r.node} ({r.qualified_op}): {r.reason}" for r in records if not r.claimed]
    assert not declined, "declined:\n" + "\n".join(declined)


def test_greedy_tokens_equal_the_cpu_eps_with_every_node_on_mlx(fp32_folder, tmp_path):
    with explain_to(tmp_path / "explain.jsonl") as report:
        on_mlx = generation.load_model(fp32_folder, on_mlx=True)
    claimed_everything(report)

    got = generation.generate(on_mlx, PROMPT, NEW_TOKENS)
    want = generation.generate(generation.load_model(fp32_folder, on_mlx=False), PROMPT, NEW_TOKENS)
    assert len(want.tokens) == NEW_TOKENS
    assert got.tokens == want.tokens


def test_genai_runs_a_model_compiled_for_the_ep_with_the_same_tokens(fp32_folder, tmp_path):
    """A compiled model (one EPContext node) in place of the decoder in genai's folder: the
    second start skips the EP's claims, and genai's loop generates the same tokens."""
    import json
    import shutil

    from onnxruntime_ep_mlx.compiled import compile_model, context_nodes

    folder = tmp_path / "compiled"
    shutil.copytree(fp32_folder, folder)
    compile_model(folder / "model.onnx", folder / "model_ctx.onnx")
    assert len(context_nodes(folder / "model_ctx.onnx")) == 1
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = "model_ctx.onnx"
    (folder / "genai_config.json").write_text(json.dumps(config))
    (folder / "model.onnx").unlink()

    with explain_to(tmp_path / "explain.jsonl") as report:
        compiled = generation.load_model(folder, on_mlx=True)
    claimed_everything(report)
    assert [r.qualified_op for r in read_explain_records(report)] == ["com.microsoft.EPContext"]
    want = generation.generate(generation.load_model(fp32_folder, on_mlx=True), PROMPT, NEW_TOKENS)
    assert generation.generate(compiled, PROMPT, NEW_TOKENS).tokens == want.tokens


@pytest.fixture(scope="module", params=["fp32", "fp16"])
def int4_folder(request, tmp_path_factory) -> tuple[Path, type]:
    """The int4 decoder's folder and its activation (and KV cache) type."""
    folder = tmp_path_factory.mktemp(f"genai_int4_{request.param}")
    make_decoder.write(folder, SHAPE, request.param, "int4", seed=7)
    return folder, np.float16 if request.param == "fp16" else np.float32


def generate_with_logits(model, prompt: list[int], new_tokens: int) -> tuple[list[int], np.ndarray]:
    """Greedy tokens through genai's loop (up to `new_tokens`, fewer after an end-of-sequence
    token), and the logits of every position the model ran on ([len(prompt) + len(tokens) - 1,
    vocab]: the prefill's rows, then one row per decode step)."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    rows = [generator.get_output("logits")[0]]
    tokens: list[int] = []
    while not generator.is_done():
        # The first call picks from the prefill's logits; each later one runs a decode step.
        generator.generate_next_token()
        if tokens:
            rows.append(generator.get_output("logits")[0])
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens, np.concatenate(rows).astype(np.float64)


def ort_cpu_logits(model_path: Path, ids: list[int], dtype) -> np.ndarray:
    """ORT's CPU EP over the whole sequence in one pass, [len(ids), vocab]: what ORT's own
    numerics (int8 activations at accuracy_level 4) give for the same tokens."""
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64)}
    empty = np.zeros((1, SHAPE.kv_heads, 0, SHAPE.head_size), dtype)
    feeds.update({f"past_key_values.{i}.{k}": empty for i in range(SHAPE.layers) for k in ("key", "value")})
    return session.run(["logits"], feeds)[0][0].astype(np.float64)


def test_int4_decoder_generates_on_mlx_with_logits_as_close_to_float64_as_orts(int4_folder, tmp_path, record_property):
    """accuracy_level 4 makes ORT's CPU EP quantize activations to int8; the EP computes the
    dequantised product exactly, so greedy tokens may part from the CPU EP's. The logits of the
    prefill and each decode step are held to a float64 run of the same graph over the same
    tokens, at most as far from it as ORT's own CPU result."""
    folder, dtype = int4_folder
    with explain_to(tmp_path / "explain.jsonl") as report:
        on_mlx = generation.load_model(folder, on_mlx=True)
    claimed_everything(report)
    tokens, got = generate_with_logits(on_mlx, PROMPT, NEW_TOKENS)
    cpu_tokens, _ = generate_with_logits(generation.load_model(folder, on_mlx=False), PROMPT, NEW_TOKENS)

    fed = PROMPT + tokens[:-1]
    model_path = folder / "model.onnx"
    want = Float64Decoder(model_path, SHAPE).logits(np.array(fed))
    ort_error = float(np.abs(ort_cpu_logits(model_path, fed, dtype) - want).max())
    ep_error = float(np.abs(got - want).max())
    agree = next((i for i, (a, b) in enumerate(zip(tokens, cpu_tokens)) if a != b), min(len(tokens), len(cpu_tokens)))
    summary = (f"int4, {np.dtype(dtype).name} activations: max |logit - float64| over {len(fed)} positions: MLX EP {ep_error:.3g}, "
               f"ORT CPU EP {ort_error:.3g}; greedy tokens equal to the CPU EP's for the first {agree} "
               f"(MLX EP {len(tokens)} tokens, CPU EP {len(cpu_tokens)})")
    print(summary)
    record_property("int4_logits", summary)
    assert len(tokens) > 4, "too few decode steps to compare: " + summary
    assert got.shape == want.shape
    assert ep_error <= ort_error, summary


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
