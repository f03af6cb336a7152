"""genai's generation loop over one session, as the decoder tests run it: the KV buffers bound
as both past and present, the attention mask one longer a step."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import onnxruntime as ort

from onnxruntime_ep_mlx import ortvalue_in_mlx_memory, providers


class SharedBufferLoop:
    """genai's loop over one session of a make_decoder model of `shape`: prompt, then one token
    a step, each KV buffer bound as both past and present."""

    def __init__(self, model: Path, shape, on_mlx: bool, in_mlx_memory: bool = False) -> None:
        self.session = ort.InferenceSession(str(model), providers=providers() if on_mlx else ["CPUExecutionProvider"])
        buffer = (1, shape.kv_heads, shape.context, shape.head_size)
        names = [f"{i}.{k}" for i in range(shape.layers) for k in ("key", "value")]
        if in_mlx_memory:
            # The buffers in the EP's own memory; `arrays` are numpy views of them.
            self.values = {name: ortvalue_in_mlx_memory(np.zeros(buffer, np.float32)) for name in names}
            self.arrays = {name: value.numpy() for name, value in self.values.items()}
        else:
            # The numpy arrays own the memory the OrtValues use: keep them.
            self.arrays = {name: np.zeros(buffer, np.float32) for name in names}
            self.values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in self.arrays.items()}
        self.length = 0

    def step(self, ids: np.ndarray, mask_length: int | None = None) -> np.ndarray:
        """Feeds `ids` after what came before; `mask_length` overrides the mask's length."""
        binding = self.session.io_binding()
        self.length += ids.shape[1]
        binding.bind_cpu_input("input_ids", ids.astype(np.int64))
        binding.bind_cpu_input("attention_mask", np.ones((1, mask_length or self.length), np.int64))
        for name, value in self.values.items():
            binding.bind_ortvalue_input(f"past_key_values.{name}", value)
            binding.bind_ortvalue_output(f"present.{name}", value)
        binding.bind_output("logits")
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]


def closing_summary(loops: list, capfd) -> str:
    """The MLX EP's session summary, printed when the loops' sessions are released."""
    capfd.readouterr()
    loops.clear()
    gc.collect()
    return capfd.readouterr().err
