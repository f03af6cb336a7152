"""com.microsoft MultiHeadAttention and Attention: the nodes the EP declines (ORT's CPU kernel
refuses them, crashes on them, or answers with memory it never wrote), read from the EP's claim
report. The claimed forms are compared with ORT's CPU EP in tests/ops (families/attention_mha.py)."""

import json

import onnxruntime as ort
import pytest
from conftest import MLX, make_model, tensor
from onnx import TensorProto, helper

F, I32 = TensorProto.FLOAT, TensorProto.INT32
MS = [("com.microsoft", 1)]


def _claim(tmp_path, monkeypatch, node, inputs, outputs):
    report = tmp_path / "explain.jsonl"
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_EXPLAIN", str(report))
    model = make_model([node], inputs, outputs, domains=MS)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort.InferenceSession(model, options, providers=[MLX, "CPUExecutionProvider"])
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    return {line["node"]: line for line in lines}["n"]


def _mha(inputs, outputs=("y",), **attrs):
    return helper.make_node("MultiHeadAttention", inputs, list(outputs), name="n", domain="com.microsoft",
                            num_heads=2, **attrs)


def _attention(inputs, outputs=("y",), **attrs):
    return helper.make_node("Attention", inputs, list(outputs), name="n", domain="com.microsoft", num_heads=2, **attrs)


Q = tensor("q", F, [2, 3, 8])
K = tensor("k", F, [2, 4, 8])
V = tensor("v", F, [2, 4, 8])
PK = tensor("pk", F, [2, 2, 2, 4])
PV = tensor("pv", F, [2, 2, 2, 4])
X = tensor("x", F, [2, 3, 6])
W = tensor("w", F, [6, 24])
B = tensor("b", F, [24])


def test_mha_separate_qkv_is_claimed(tmp_path, monkeypatch):
    line = _claim(tmp_path, monkeypatch, _mha(["q", "k", "v"]), [Q, K, V], [tensor("y")])
    assert line["claimed"], line


MHA_DECLINED = [
    ("packed_qkv", ["q5"], [tensor("q5", F, [2, 3, 2, 3, 4])], (), "packed"),
    ("packed_kv", ["q", "kv"], [Q, tensor("kv", F, [2, 4, 2, 2, 4])], (), "packed"),
    ("past_without_presents", ["q", "k", "v", "", "", "", "pk", "pv"], [Q, K, V, PK, PV], (), "present"),
    ("past_without_present_value", ["q", "k", "v", "", "", "", "pk", "pv"], [Q, K, V, PK, PV], ("y", "pkey"),
     "present"),
    ("past_sequence_length", ["q", "k", "v", "", "", "", "pk", "pv", "psl"],
     [Q, K, V, PK, PV, tensor("psl", I32, [1])], ("y", "pkey", "pval"), "shared-buffer"),
]


@pytest.mark.parametrize("name,inputs,graph_inputs,outputs,why", MHA_DECLINED, ids=[c[0] for c in MHA_DECLINED])
def test_mha_declines(tmp_path, monkeypatch, name, inputs, graph_inputs, outputs, why):
    outputs = outputs or ("y",)
    node = _mha(inputs, outputs)
    line = _claim(tmp_path, monkeypatch, node, graph_inputs, [tensor(o) for o in outputs])
    assert not line["claimed"] and why in line["reason"], line


ATTENTION_DECLINED = [
    ("no_bias", ["x", "w"], [X, W], {}, ("y",), "bias"),
    ("do_rotary", ["x", "w", "b"], [X, W, B], {"do_rotary": 1}, ("y",), "rotary"),
    ("share_buffer", ["x", "w", "b"], [X, W, B], {"past_present_share_buffer": 1}, ("y",), "shared-buffer"),
    ("megatron_mask", ["x", "w", "b", "m"], [X, W, B, tensor("m", I32, [2, 1, 4, 4])], {}, ("y",), "4-D"),
    ("past_and_attention_bias", ["x", "w", "b", "", "p", "ab"],
     [X, W, B, tensor("p", F, [2, 2, 2, 2, 4]), tensor("ab", F, [2, 2, 3, 5])], {}, ("y", "present"), "attention_bias"),
    ("past_without_present", ["x", "w", "b", "", "p"], [X, W, B, tensor("p", F, [2, 2, 2, 2, 4])], {}, ("y",),
     "present"),
    ("present_with_unequal_kv", ["x", "w", "b"], [X, tensor("w", F, [6, 28]), tensor("b", F, [28])],
     {"qkv_hidden_sizes": [8, 8, 12]}, ("y", "present"), "qkv_hidden_sizes"),
]


@pytest.mark.parametrize("name,inputs,graph_inputs,attrs,outputs,why", ATTENTION_DECLINED,
                         ids=[c[0] for c in ATTENTION_DECLINED])
def test_attention_declines(tmp_path, monkeypatch, name, inputs, graph_inputs, attrs, outputs, why):
    node = _attention(inputs, outputs, **attrs)
    line = _claim(tmp_path, monkeypatch, node, graph_inputs, [tensor(o) for o in outputs])
    assert not line["claimed"] and why in line["reason"], line
