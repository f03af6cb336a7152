"""Attention ops whose unmasked float32 step runs as one hand-written kernel on MLX's CUDA
backend (`custom::dense_attention`, chosen by `attention::in_one_kernel`): com.microsoft
MultiHeadAttention and Attention, ai.onnx Attention. On CUDA every lowering of each node runs
the kernel unless the session turns the kernels off; elsewhere none does. Either way the
outputs are ORT's CPU EP's, rows a NaN or an infinite score poisons included. (Attention formed
from MatMul, Softmax and MatMul: tests/ep/test_attention_formed.py.)"""

import numpy as np
import pytest
from conftest import attentions_in_one_kernel, cuda_kernels_run, make_model, summary_of_runs, tensor
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
BATCH, TOKENS, KEYS, HEADS, HEAD = 2, 24, 40, 4, 16
WIDTH = HEADS * HEAD


def poisoned(feeds):
    """`feeds` with a NaN in one query and an infinity in one key: ORT's softmax turns the rows
    that meet them into NaN (a +inf score) or leaves them finite (a -inf one)."""
    feeds = {name: value.copy() for name, value in feeds.items()}
    feeds["q"][0, 3, 5] = np.nan
    feeds["k"][1, 7, 2] = np.inf
    return feeds


def runs_in_one_kernel(model, feeds, lowerings, no_cuda_kernels, monkeypatch, capfd):
    """Three runs each of `feeds` and of them poisoned, eager first and then compiled, all on MLX
    and each as ORT's CPU EP answers; the kernel ran at all `lowerings` on CUDA, at none
    elsewhere or with the kernels off."""
    env = {"ONNXRUNTIME_EP_MLX_COMPILE_AFTER": "1", "ONNXRUNTIME_EP_MLX_NO_CUDA_KERNELS": str(int(no_cuda_kernels))}
    summary = summary_of_runs(model, [feeds, poisoned(feeds)], 1e-5, monkeypatch, capfd, env)
    expected = lowerings if cuda_kernels_run(summary, no_cuda_kernels) else 0
    assert attentions_in_one_kernel(summary) == expected, summary


def random_feeds(shapes, seed):
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


KERNELS = pytest.mark.parametrize("no_cuda_kernels", [False, True], ids=["kernels", "no-cuda-kernels"])


@KERNELS
def test_multi_head_attention_and_contrib_attention(no_cuda_kernels, monkeypatch, capfd):
    """MultiHeadAttention (a negative scale, more keys than queries) and com.microsoft Attention
    (Q, K and V projected with a bias from `q`): each lowered twice (the eager first run, the
    compiled plan's trace)."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=HEADS,
                         scale=-0.3),
        helper.make_node("Attention", ["q", "w", "b"], ["z"], domain="com.microsoft", num_heads=HEADS),
    ]
    weights = [numpy_helper.from_array((rng.standard_normal((WIDTH, 3 * WIDTH)) / 8).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(3 * WIDTH).astype(np.float32), "b")]
    shapes = {"q": [BATCH, TOKENS, WIDTH], "k": [BATCH, KEYS, WIDTH], "v": [BATCH, KEYS, WIDTH]}
    model = make_model(nodes, [tensor(name, F, shape) for name, shape in shapes.items()],
                       [tensor("y"), tensor("z")], weights, domains=[("com.microsoft", 1)])
    runs_in_one_kernel(model, random_feeds(shapes, 7), 2 * 2, no_cuda_kernels, monkeypatch, capfd)


@KERNELS
def test_onnx_attention_grouped_and_with_a_past(no_cuda_kernels, monkeypatch, capfd):
    """ai.onnx Attention: 3-D operands with 4 query heads over 2 key/value heads, and 4-D heads
    after a past (the present keys and values as outputs too, the keys' scale given)."""
    grouped = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=HEADS, kv_num_heads=2)
    with_past = helper.make_node("Attention", ["q4", "k4", "v4", "", "pk", "pv"], ["z", "zk", "zv"], scale=0.2)
    shapes = {"q": [BATCH, TOKENS, WIDTH], "k": [BATCH, KEYS, WIDTH // 2], "v": [BATCH, KEYS, WIDTH // 2],
              "q4": [BATCH, HEADS, TOKENS, HEAD], "k4": [BATCH, HEADS, TOKENS, HEAD],
              "v4": [BATCH, HEADS, TOKENS, HEAD], "pk": [BATCH, HEADS, 8, HEAD], "pv": [BATCH, HEADS, 8, HEAD]}
    outputs = [tensor(name) for name in ("y", "z", "zk", "zv")]
    model = make_model([grouped, with_past], [tensor(name, F, shape) for name, shape in shapes.items()], outputs,
                       opset=23)
    runs_in_one_kernel(model, random_feeds(shapes, 8), 2 * 2, no_cuda_kernels, monkeypatch, capfd)
