"""Write the demo model: a transformer-style feed-forward block built only from ops the MLX EP claims.

The block is elementwise on purpose (no MatMul, Gemm or reductions: the EP does not claim them
yet), so the whole graph should land in one MLX cluster. Weights come from a fixed seed and the
protobuf is built in a fixed order, so two runs write the same bytes.

Usage: make_demo_model.py [OUTPUT.onnx] [--width N]   (default models/demo.onnx, width 4096)
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "models" / "demo.onnx"
DEFAULT_WIDTH = 4096
OPSET = 17
# ORT 1.31.1 refuses models newer than IR 10; helper.make_model would stamp onnx's latest.
IR_VERSION = 10


class GraphBuilder:
    """Appends nodes and initializers with generated, readable names (`<op>_<n>`)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._counter = 0

    def op(self, op_type: str, *inputs: str, **attributes: object) -> str:
        """Add one single-output node and return its output name."""
        self._counter += 1
        name = f"{op_type.lower()}_{self._counter}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attributes))
        return name

    def weight(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def scalar(self, name: str, value: float) -> str:
        # 0-d initializers broadcast against anything and stay out of constant folding's way.
        return self.weight(name, np.array(value, dtype=np.float32))


def gelu_erf(g: GraphBuilder, h: str) -> str:
    """Exact GELU written out: 0.5 * h * (1 + erf(h / sqrt(2)))."""
    scaled = g.op("Div", h, "sqrt_2")
    erf = g.op("Erf", scaled)
    one_plus = g.op("Add", erf, "one")
    return g.op("Mul", g.op("Mul", h, one_plus), "half")


def gelu_tanh(g: GraphBuilder, h: str) -> str:
    """Tanh GELU: 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3)))."""
    cube = g.op("Pow", h, "three")
    inner = g.op("Add", h, g.op("Mul", cube, "gelu_coeff"))
    tanh = g.op("Tanh", g.op("Mul", inner, "sqrt_2_over_pi"))
    return g.op("Mul", g.op("Mul", h, g.op("Add", tanh, "one")), "half")


def elu_like(g: GraphBuilder, v: str) -> str:
    """where(v > 0, v, exp(v) - 1), i.e. ELU with alpha 1, spelled with Where/Greater."""
    positive = g.op("Greater", v, "zero")
    return g.op("Where", positive, v, g.op("Sub", g.op("Exp", v), "one"))


def rms_like_norm(g: GraphBuilder, v: str) -> str:
    """Elementwise stand-in for RMSNorm (no reductions yet): v / sqrt(s * v^2 + 1) * gamma.

    A soft sign: close to v near zero, bounded by gamma / sqrt(s), so Clip below still bites."""
    squared = g.op("Mul", g.op("Pow", v, "two"), "norm_scale")
    denominator = g.op("Sqrt", g.op("Add", squared, "one"))
    return g.op("Mul", g.op("Div", v, denominator), "gamma")


def build_demo_model(width: int = DEFAULT_WIDTH) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    g = GraphBuilder()
    for name in ("w_up", "w_gate", "w_out"):
        g.weight(name, rng.standard_normal(width) * 0.5 + 1.0)
    for name in ("b_up", "b_gate", "b_out"):
        g.weight(name, rng.standard_normal(width) * 0.1)
    g.weight("gamma", 1.0 + rng.standard_normal(width) * 0.05)
    for name, value in [
        ("zero", 0.0), ("half", 0.5), ("one", 1.0), ("two", 2.0), ("three", 3.0),
        ("sqrt_2", math.sqrt(2.0)), ("sqrt_2_over_pi", math.sqrt(2.0 / math.pi)),
        ("gelu_coeff", 0.044715), ("norm_scale", 0.05),
        ("softmax_rescale", float(width)), ("clip_min", -3.0), ("clip_max", 3.0),
    ]:
        g.scalar(name, value)

    # Up projection (elementwise here) and two GELU flavours averaged: they differ by ~1e-3.
    up = g.op("Add", g.op("Mul", "x", "w_up"), "b_up")
    activated = g.op("Mul", g.op("Add", gelu_erf(g, up), gelu_tanh(g, up)), "half")

    # Sigmoid gate from the input, as in GLU variants.
    gate = g.op("Sigmoid", g.op("Add", g.op("Mul", "x", "w_gate"), "b_gate"))
    gated = g.op("Mul", activated, gate)

    # Softmax over the feature axis, rescaled so its values are O(1) again.
    attention_like = g.op("Mul", g.op("Softmax", gated, axis=-1), "softmax_rescale")

    # Three branches merged with a variadic Max: ReLU, ELU-like, negated softmax branch.
    merged = g.op("Max", g.op("Relu", gated), elu_like(g, gated), g.op("Neg", attention_like))

    # Output projection, residual, normalisation, clip.
    projected = g.op("Add", g.op("Mul", merged, "w_out"), "b_out")
    residual = g.op("Add", "x", projected)
    clipped = g.op("Clip", rms_like_norm(g, residual), "clip_min", "clip_max")

    # Half-precision round trip, as a mixed-precision model would store activations.
    half_precision = g.op("Cast", clipped, to=TensorProto.FLOAT16)
    restored = g.op("Cast", half_precision, to=TensorProto.FLOAT)
    g.nodes.append(helper.make_node("Identity", [restored], ["y"], name="identity_y"))
    g.nodes.append(helper.make_node("Identity", [gate], ["gate"], name="identity_gate"))

    graph = helper.make_graph(
        g.nodes,
        "demo_feed_forward",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width]),
            helper.make_tensor_value_info("gate", TensorProto.FLOAT, ["batch", width]),
        ],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="onnxruntime-ep-mlx/scripts/make_demo_model.py",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def write_demo_model(path: Path = DEFAULT_OUTPUT, width: int = DEFAULT_WIDTH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(build_demo_model(width).SerializeToString())
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", nargs="?", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="feature width (default %(default)s)")
    args = parser.parse_args()
    path = write_demo_model(args.output, args.width)
    model = onnx.load(path)
    print(f"wrote {path} ({len(model.graph.node)} nodes, opset {OPSET}, IR {model.ir_version})")


if __name__ == "__main__":
    main()
