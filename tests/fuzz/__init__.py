"""The project's own fuzzer: seeded edge-case models over every op-table entry, run through the
MLX EP in isolated worker processes and judged against ORT's CPU EP.

Imported as ``fuzz`` (pytest collecting ``tests/``) or ``tests.fuzz`` (``python -m tests.fuzz``):
everything inside uses relative imports, and the op suite's modules (``op_harness``,
``op_specs``, ``op_table``) and the ``onnxruntime_ep_mlx`` package are put on ``sys.path`` here,
the way the op suite's own tests find them.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

for _path in (REPO / "tests" / "ops", REPO / "python"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
