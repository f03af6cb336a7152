"""Compiled models: ORT's compile API with the MLX EP, and what a compiled model saves.

A compiled model holds one ``EPContext`` node (domain ``com.microsoft``, ``source`` the EP's
name) for each partition the EP claimed, in place of that partition's nodes; the nodes the EP
declined stay as they were. A session over it skips the EP's claims and partitioning for those
nodes. The weights stay ONNX initializers (read by the EPContext nodes), inline or in an
external-data file of your choice.

    from onnxruntime_ep_mlx.compiled import compile_model
    compile_model("model.onnx", "model_ctx.onnx")
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Mapping
from pathlib import Path

import onnx
import onnxruntime as ort

from .registration import EP_NAME, append_to_session_options
from .sessions import OPTIMIZATION_LEVELS, mlx_session

CONTEXT_OP = ("com.microsoft", "EPContext")


def compile_model(
    model: str | Path,
    output: str | Path,
    ep_options: Mapping[str, str] | None = None,
    optimization: str = "all",
    external_data: str | Path | None = None,
) -> Path:
    """Writes ``output``: ``model`` with each MLX partition as an EPContext node. With
    ``external_data``, initializers of 1 KiB and more go to that file (beside ``output``)."""
    so = ort.SessionOptions()
    append_to_session_options(so, ep_options)
    extra = {}
    if external_data is not None:
        extra["external_initializers_file_path"] = str(external_data)
    compiler = ort.ModelCompiler(
        so,
        str(model),
        embed_compiled_data_into_model=True,
        graph_optimization_level=OPTIMIZATION_LEVELS[optimization],
        **extra,
    )
    compiler.compile_to_file(str(output))
    return Path(output)


def context_nodes(model: str | Path) -> list[onnx.NodeProto]:
    """The model's EPContext nodes written by the MLX EP."""
    graph = onnx.load(str(model), load_external_data=False).graph
    return [
        node
        for node in graph.node
        if (node.domain, node.op_type) == CONTEXT_OP
        and any(a.name == "source" and a.s.decode() == EP_NAME for a in node.attribute)
    ]


def session_creation_ms(
    model: str | Path,
    ep_options: Mapping[str, str] | None = None,
    optimization: str = "all",
    repeats: int = 5,
) -> float:
    """Median wall time of creating an MLX-first session over ``model`` (each session released
    before the next is made; the caller has made one already, so MLX itself is loaded)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session = mlx_session(model, ep_options, optimization)
        times.append((time.perf_counter() - start) * 1e3)
        del session
        gc.collect()
    return statistics.median(times)
