"""A residual sum read by a layer norm (`LayerNormalization(a + b)`, a transformer block's add
and norm) runs as one kernel on MLX's CUDA backend, which also keeps the sum for the nodes that
read it after the norm (a pre-norm block's residual stream): the session summary counts it, and
it answers as ORT's CPU EP does, eager, traced and replayed. The kernel rounds the sum as MLX's
add does and normalises it with the layer-norm kernel's body (bit for bit, in the kernels' own
emulated tests). Elsewhere (the CPU backend, a broadcast add, a norm over other axes) the nodes
run as they are, and right."""

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import COMPILE_MODES, make_model, summary_of_runs, tensor

RNG = np.random.default_rng(29)
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
WIDTH = 48


def block(dtype=np.float32, pre_norm=True, sum_out=False, blocks=1, broadcast=False, axis=-1):
    """`blocks` residual blocks over x [2, 5, WIDTH]: r = x + a (a an input of x's shape, or
    with `broadcast` a [WIDTH] row), n = LayerNorm(r) over `axis`; a pre-norm block then adds
    Relu(n) to r (r read twice), a post-norm block hands n on (r read once). With `sum_out` the
    first block's r is a graph output too."""
    n = helper.make_node
    elem = ELEM[dtype]
    inits = [numpy_helper.from_array((RNG.standard_normal(WIDTH) + 1).astype(dtype), "scale"),
             numpy_helper.from_array(RNG.standard_normal(WIDTH).astype(dtype), "bias")]
    nodes, x = [], "x"
    for i in range(blocks):
        nodes += [n("Add", [x, "a"], [f"r{i}"]),
                  n("LayerNormalization", [f"r{i}", "scale", "bias"], [f"n{i}"], axis=axis)]
        if pre_norm:
            nodes += [n("Relu", [f"n{i}"], [f"h{i}"]), n("Add", [f"h{i}", f"r{i}"], [f"y{i}"])]
            x = f"y{i}"
        else:
            x = f"n{i}"
    nodes.append(n("Identity", [x], ["y"]))
    outputs = [tensor("y", elem)] + ([tensor("r0", elem)] if sum_out else [])
    a_shape = [WIDTH] if broadcast else [2, 5, WIDTH]
    model = make_model(nodes, [tensor("x", elem, [2, 5, WIDTH]), tensor("a", elem, a_shape)], outputs,
                       initializers=inits)
    feeds = {"x": (RNG.standard_normal([2, 5, WIDTH]) * 4).astype(dtype),
             "a": RNG.standard_normal(a_shape).astype(dtype)}
    return model, feeds


def joined(model, feeds, tolerance, monkeypatch, capfd, mode="eager_then_compiled", env=None):
    """Runs `feeds` 3 times all on MLX, each as ORT's CPU EP answers; returns how many layer
    norms the session summary says took their residual sum in, and whether it ran on a GPU."""
    summary = summary_of_runs(model, [feeds], tolerance, monkeypatch, capfd, {**COMPILE_MODES[mode], **(env or {})})
    device = re.search(r"device (\w+);", summary)
    assert device, summary
    count = sum(int(c) for c in re.findall(r"(\d+) residual add\(s\) joined to their layer norm", summary))
    return count, device.group(1) == "gpu"


@pytest.mark.parametrize("mode", sorted(COMPILE_MODES))
@pytest.mark.parametrize("pre_norm", [True, False], ids=["pre_norm", "post_norm"])
def test_a_residual_sum_joins_its_layer_norm(mode, pre_norm, monkeypatch, capfd):
    model, feeds = block(pre_norm=pre_norm)
    count, on_gpu = joined(model, feeds, 1e-4, monkeypatch, capfd, mode)
    # Eager runs lower every time; a compiled plan lowers once to trace, then replays.
    lowerings = {"eager_only": 3, "eager_then_compiled": 2, "traced_first": 1}[mode]
    assert count == (lowerings if on_gpu else 0)


@pytest.mark.parametrize(
    "case, tolerance, env",
    [
        (dict(blocks=3), 1e-4, None),  # the kept sum feeds the next block's add
        (dict(sum_out=True), 1e-4, None),  # the sum is handed out too: the kernel's copy
        (dict(dtype=np.float16), 2e-2, None),
        (dict(blocks=2), 3e-2, {"ONNXRUNTIME_EP_MLX_PRECISION": "fp16"}),  # x in the half type
    ],
    ids=["three-blocks", "sum-is-an-output", "float16", "precision-fp16"],
)
def test_residual_variants_join(case, tolerance, env, monkeypatch, capfd):
    model, feeds = block(**case)
    count, on_gpu = joined(model, feeds, tolerance, monkeypatch, capfd, env=env)
    assert count == (2 * case.get("blocks", 1) if on_gpu else 0)


@pytest.mark.parametrize("case", [dict(broadcast=True), dict(axis=1)], ids=["broadcast-add", "norm-over-two-axes"])
def test_what_is_not_joined_runs_as_it_is(case, monkeypatch, capfd):
    model, feeds = block(**case)
    count, _ = joined(model, feeds, 1e-4, monkeypatch, capfd)
    assert count == 0
