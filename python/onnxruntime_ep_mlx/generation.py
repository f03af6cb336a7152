"""Token generation through onnxruntime-genai (an optional dependency) with the MLX EP.

genai loads ORT's shared library on its own (a separate ORT instance from ``import onnxruntime``),
so the EP library is registered with genai separately, once per process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .library import library_path, preload_mlx
from .registration import EP_NAME

_genai_registered = False


def _genai():
    try:
        import onnxruntime_genai as og
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "generation needs onnxruntime-genai: pip install onnxruntime-genai==0.18.0"
        ) from error
    return og


def register_with_genai() -> None:
    """Register the EP library with genai's ORT (once per process)."""
    global _genai_registered
    if not _genai_registered:
        preload_mlx()
        _genai().register_execution_provider_library(EP_NAME, str(library_path()))
        _genai_registered = True


def load_model(model_dir: str | Path, on_mlx: bool = True):
    """A genai model from a folder with genai_config.json; MLX EP first (ORT's CPU EP runs what
    it declines) or ORT's CPU EP alone."""
    og = _genai()
    config = og.Config(str(model_dir))
    config.clear_providers()
    if on_mlx:
        register_with_genai()
        config.append_provider(EP_NAME)
    return og.Model(config)


@dataclass
class Generation:
    """The new tokens, and how long the prompt (prefill) and each later token took."""

    tokens: list[int] = field(default_factory=list)
    prefill_ms: float = 0.0
    decode_ms: list[float] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        total = sum(self.decode_ms)
        return 1e3 * len(self.decode_ms) / total if total else 0.0


def generate(
    model,
    prompt: Sequence[int],
    max_new_tokens: int,
    on_token: Callable[[int], None] | None = None,
) -> Generation:
    """Greedy generation of up to ``max_new_tokens`` after ``prompt`` (token ids)."""
    return Generation(*_collect(_steps(model, prompt, max_new_tokens), on_token))


def _steps(model, prompt: Sequence[int], max_new_tokens: int) -> Iterator[tuple[int, float]]:
    og = _genai()
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + max_new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    start = time.perf_counter()
    # genai runs the prompt (prefill) here, and produces the first new token from its logits.
    generator.append_tokens(list(prompt))
    while not generator.is_done():
        generator.generate_next_token()
        token = int(generator.get_next_tokens()[0])
        now = time.perf_counter()
        yield token, (now - start) * 1e3
        start = now


def _collect(steps: Iterator[tuple[int, float]], on_token) -> tuple[list[int], float, list[float]]:
    tokens, times = [], []
    for token, ms in steps:
        tokens.append(token)
        times.append(ms)
        if on_token is not None:
            on_token(token)
    # The first step covers the prompt; the rest are one-token decode steps.
    return tokens, (times[0] if times else 0.0), times[1:]


def tokenizer(model):
    return _genai().Tokenizer(model)
