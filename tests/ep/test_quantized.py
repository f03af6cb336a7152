"""MatMulNBits where ORT's CPU EP is no exact oracle (accuracy_level 4 quantises A to int8 per
block: our answer is the exact dequantised float product, held to a float64 reference at least
as closely as ORT's own result), what is declined (ORT's CPU EP runs it, with its answer or its
failure), and g_idx values out of range failing the run as on ORT's CPU EP. The op-suite cases
(every bits/block/zero-point/bias/shape combination vs ORT's CPU EP) are in
tests/ops/families/quantized.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, cpu_outputs, make_model, tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
import op_specs  # noqa: E402,F401  (loads every spec in order: specs.moe imports specs.quantized)
from specs.quantized import matmul_nbits_ref, pack, pack_padded  # noqa: E402

CPU = "CPUExecutionProvider"
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def nbits_model(a_shape, k, n, bits=4, block=32, dtype=np.float32, zp=None, g_idx=None, bias=False,
                accuracy_level=4, seed=0, **extra):
    """A MatMulNBits model (weights as initializers), its feed and the float64 reference."""
    rng = np.random.default_rng(seed)
    kb = -(-k // block)
    q = rng.integers(0, 2**bits, (n, kb * block))
    inputs = {
        "B": pack(q, bits).reshape(n, kb, block * bits // 8),
        "scales": (rng.uniform(0.02, 0.2, (n, kb)) * 2.0 ** (4 - bits)).astype(dtype),
    }
    if zp == "uint8":
        inputs["zero_points"] = pack_padded(rng.integers(0, 2**bits, (n, kb)), bits)
    elif zp == "float":
        inputs["zero_points"] = rng.uniform(0, 2**bits - 1, (n, kb)).astype(dtype)
    if g_idx is not None:
        inputs["g_idx"] = np.asarray(g_idx, np.int32)
    if bias:
        inputs["bias"] = rng.uniform(-1, 1, (n,)).astype(dtype)
    order = ["B", "scales", "zero_points", "g_idx", "bias"]
    names = ["A"] + [name if name in inputs else "" for name in order]
    while names[-1] == "":
        names.pop()
    attrs = dict(K=k, N=n, bits=bits, block_size=block, accuracy_level=accuracy_level, **extra)
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", **attrs)
    elem = ELEM[dtype]
    model = make_model([node], [tensor("A", elem, list(a_shape))], [tensor("Y", elem)],
                       [numpy_helper.from_array(v, name) for name, v in inputs.items()],
                       domains=[("com.microsoft", 1)])
    a = rng.uniform(-1, 1, a_shape).astype(dtype)
    xs = [a.astype(np.float64)] + [inputs.get(name) for name in order]
    xs = [x.astype(np.float64) if x is not None and x.dtype.kind == "f" else x for x in xs]
    while xs[-1] is None:
        xs.pop()
    return model, {"A": a}, matmul_nbits_ref(xs, attrs)


def relative_error(y, ref):
    return float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max())


# The model builder's projections (bits 4, block 32, accuracy_level 4, no zero points), and
# the other layouts at level 4.
LEVEL4 = [
    dict(bits=4, block=32),
    dict(bits=4, block=32, bias=True),
    dict(bits=4, block=128, zp="uint8"),
    dict(bits=8, block=32),
    dict(bits=2, block=64, zp="uint8"),
    dict(bits=4, block=16),
    dict(bits=4, block=256, zp="uint8"),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "float16"])
@pytest.mark.parametrize("a_shape", [(1, 512), (2, 5, 512)], ids=["decode", "prefill"])
@pytest.mark.parametrize("layout", LEVEL4, ids=lambda d: "_".join(f"{k}{v}" for k, v in d.items()))
def test_accuracy_level_4_is_the_exact_product(layout, a_shape, dtype):
    """At level 4 ORT's CPU kernel quantises A to int8 per block (where MLAS has such a kernel);
    MLX gives the dequantised product in float32: at least as close to float64 as ORT is, and
    within float32 (float16: its own rounding) of it."""
    model, feeds, ref = nbits_model(a_shape, 512, 96, dtype=dtype, **layout)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    ours = relative_error(run.outputs[0], ref)
    theirs = relative_error(cpu_outputs(model, feeds)[0], ref)
    bound = 1e-5 if dtype == np.float32 else 1e-3  # float16: one rounding of the output
    assert ours <= max(bound, theirs), f"MLX {ours:.3g}, ORT's CPU EP {theirs:.3g} (relative to max |ref|)"
    assert ours <= bound, f"MLX {ours:.3g} > {bound:g}"


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "float16"])
@pytest.mark.parametrize("rows,k,n,block", [(1, 128, 1, 32), (3, 2048, 1000, 32), (8, 1024, 33, 64),
                                            (2, 256, 64, 128), (9, 512, 40, 32)],
                         ids=["1x128x1", "3x2048x1000", "8x1024x33_b64", "2x256x64_b128", "9rows"])
def test_decode_rows_are_the_exact_product(rows, k, n, block, dtype):
    """The few-row products of a decode step (on MLX's CUDA backend: the hand-written kernel over
    ORT's packing; up to 8 rows, then MLX's own product): the float32 product rounded once."""
    model, feeds, ref = nbits_model((rows, k), k, n, block=block, dtype=dtype, seed=rows)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    bound = 1e-5 if dtype == np.float32 else 1e-3
    assert relative_error(run.outputs[0], ref) <= bound


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "float16"])
@pytest.mark.parametrize("block", [512, 4096])
def test_block_sizes_past_orts_cpu_kernel_are_the_exact_product(block, dtype):
    """The op takes any power of two >= 16; ORT 1.31.1's CPU kernel refuses sizes past 256 when
    the session is built (s117-com.microsoft.MatMulNBits-1-5). The EP runs them, held to the
    float64 reference."""
    model, feeds, ref = nbits_model((3, 600), 600, 24, block=block, dtype=dtype, zp="uint8")
    with pytest.raises(Exception, match="Only block sizes 16, 32, 64, 128, and 256"):
        cpu_outputs(model, feeds)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    assert relative_error(run.outputs[0], ref) <= (1e-5 if dtype == np.float32 else 1e-3)


@pytest.mark.parametrize("layout", [dict(), dict(zp="uint8"), dict(block=64, bias=True), dict(k=200)],
                         ids=["midpoint", "zero_points", "block64_bias", "padded_k"])
def test_float16_prefill_weights_are_within_a_fraction_of_a_step(layout):
    """More rows than a decode step in float16 multiply in float16 (MLX dequantises the weights
    in A's type, `scale·q + bias`): each weight within 3/256 of its block's scale of the exact
    one, the products accumulated in float32, the output rounded once. The bound per element is
    that weight error over |A|, plus the output's rounding: a wrong weight dequantisation or a
    float16 accumulation breaks it."""
    layout = dict(layout)
    k = layout.pop("k", 256)
    rows, n, block = 24, 48, layout.get("block", 32)
    model, feeds, ref = nbits_model((rows, k), k, n, dtype=np.float16, seed=7, **layout)
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    graph = onnx.load_from_string(model).graph
    scales = numpy_helper.to_array(next(t for t in graph.initializer if t.name == "scales"))
    per_k = np.repeat(scales.astype(np.float64).reshape(n, -1), block, axis=1)[:, :k]  # [N, K]
    weight_slack = (3 / 256) * np.abs(feeds["A"].astype(np.float64)) @ per_k.T
    bound = weight_slack + 2.0**-11 * np.abs(ref) + 1e-6
    err = np.abs(run.outputs[0].astype(np.float64) - ref)
    assert (err <= bound).all(), f"worst excess {float((err - bound).max()):.3g}"


def test_llm_sized_projection_decode_and_prefill():
    """K = 2048, N = 1024, as in a small LLM: decode row and a prefill block, with a bias."""
    for a_shape in [(1, 1, 2048), (1, 17, 2048)]:
        model, feeds, ref = nbits_model(a_shape, 2048, 1024, bias=True, seed=5)
        run = Run(model, feeds)
        run.assert_all_on_mlx()
        assert relative_error(run.outputs[0], ref) <= 1e-5


def _ran_on_cpu(run: Run):
    node_kernels = [(name, p) for name, p in run.kernels if not name.startswith("MLX")]
    assert node_kernels and all(p == CPU for _, p in node_kernels), run.kernels


# ORT 1.31.1's CPU kernel with g_idx: uint8 zero points give another answer than the
# dequantised product (even for the trivial g_idx), 2 bits one that changes from session to
# session (half the columns differ), 8 bits fail.
DECLINED = [
    ("g_idx_uint8_zero_points", dict(bits=4, block=16, zp="uint8", g_idx=np.arange(64) // 16), True),
    ("g_idx_2_bits", dict(bits=2, block=16, g_idx=np.arange(64) // 16), False),
]


@pytest.mark.parametrize("name,layout,deterministic", DECLINED, ids=[d[0] for d in DECLINED])
def test_declined_runs_on_cpu(name, layout, deterministic):
    model, feeds, ref = nbits_model((3, 64), 64, 8, accuracy_level=0, **layout)
    run = Run(model, feeds)
    _ran_on_cpu(run)
    if deterministic:
        np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])
        assert relative_error(run.outputs[0], ref) > 1e-2  # ORT's answer, not the product


@pytest.mark.parametrize("extra", [dict(weight_prepacked=1)], ids=["weight_prepacked"])
def test_declined_attributes_run_on_cpu(extra):
    model, feeds, _ = nbits_model((3, 64), 64, 8, accuracy_level=0, **extra)
    try:
        run = Run(model, feeds)
    except Exception as err:  # ORT's own kernel may refuse it too: then so does the session
        with pytest.raises(type(err)):
            cpu_outputs(model, feeds)
        return
    _ran_on_cpu(run)


def test_8_bit_float_zero_points_fail_as_on_cpu():
    model, feeds, _ = nbits_model((3, 64), 64, 8, bits=8, zp="float", accuracy_level=0)
    with pytest.raises(Exception, match="Only 2b and 4b"):
        cpu_outputs(model, feeds)
    with pytest.raises(Exception, match="Only 2b and 4b"):
        Run(model, feeds)


def test_g_idx_out_of_range_fails_the_run_as_on_cpu():
    g_idx = np.arange(64) // 16
    g_idx[5] = 4  # 4 blocks: valid values are 0..3
    model, feeds, _ = nbits_model((3, 64), 64, 8, block=16, g_idx=g_idx, accuracy_level=0)
    with pytest.raises(Exception, match="out of"):
        cpu_outputs(model, feeds)
    options = ort.SessionOptions()
    session = ort.InferenceSession(model, options, providers=[MLX, CPU])
    session.disable_fallback()
    with pytest.raises(Exception, match="g_idx"):
        session.run(None, feeds)
