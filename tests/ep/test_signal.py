"""Signal processing through the EP: an audio front end (window, STFT, power, mel filter bank,
log) fully on MLX against ORT's CPU EP; a DFT long enough for MLX's FFT against numpy; and the
inputs ORT's CPU EP refuses (or crashes on) failing the MLX run with the node's name."""

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX, Run, assert_kernels_on_mlx, cpu_outputs, make_model, profiled_session, tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_models import audio_front_end  # noqa: E402


def i64(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def f32(name, value):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def front_end_model():
    """Whisper-style log-mel features, [batch, samples] -> [batch, frames, mels]: the model
    `make bench` times (scripts/bench_models.py)."""
    return audio_front_end(batch=1, seconds=0.1).model


def log_mel_in_float64(audio, n_fft=400, hop=160, bank=None):
    """The front end computed exactly (float64, numpy's FFT) with the float32 window and bank."""
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    frames = (audio.shape[1] - n_fft) // hop + 1
    framed = np.stack([audio[:, f * hop: f * hop + n_fft].astype(np.float64) * window for f in range(frames)], 1)
    power = np.abs(np.fft.rfft(framed, axis=-1)) ** 2
    return np.log(np.maximum(power @ bank.astype(np.float64), 1e-10))


@pytest.mark.parametrize("seconds", [0.5, 1.0])
def test_an_audio_front_end_runs_fully_on_mlx_closer_to_exact_than_the_cpu_ep(seconds):
    model = front_end_model()
    rng = np.random.default_rng(7)
    t = np.arange(int(16000 * seconds)) / 16000
    audio = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.1 * rng.standard_normal((3, t.size))).astype(np.float32)
    run = Run(model, {"audio": audio})
    run.assert_all_on_mlx()
    cpu = cpu_outputs(model, {"audio": audio})[0]
    assert run.outputs[0].shape == cpu.shape == (3, (t.size - 400) // 160 + 1, 80)
    bank_model = make_model([helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["bank"])], [], [tensor("bank")],
                            [i64("m", 80), i64("n", 400), i64("r", 16000), f32("lo", 0.0), f32("hi", 8000.0)])
    exact = log_mel_in_float64(audio, bank=cpu_outputs(bank_model, {})[0])
    # ORT's float32 Bluestein transform (400 is no power of 2) drifts ~1e-2 in the log of the
    # weakest bins; the EP's transform reduces its angles exactly and stays within 1e-3.
    mlx_error, cpu_error = np.abs(run.outputs[0] - exact).max(), np.abs(cpu - exact).max()
    assert mlx_error < 1e-3 and mlx_error <= cpu_error, (mlx_error, cpu_error)
    np.testing.assert_allclose(run.outputs[0], cpu, rtol=0, atol=max(2 * cpu_error, 1e-4))
    for _ in range(2):  # compiled, then replayed
        np.testing.assert_allclose(run.session.run(None, {"audio": audio})[0], run.outputs[0], rtol=1e-6, atol=1e-6)


def dft_model(opset=20, **attrs):
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], name="transform", **attrs)
    return make_model([node], [tensor("x", shape=None)], [tensor("y")], [i64("axis", 1)], opset=opset)


@pytest.mark.parametrize("length, attrs", [(4096, {}), (4096, {"onesided": 1}), (3001, {"inverse": 1})])
def test_a_dft_too_long_for_the_dense_matrix_goes_through_mlx_fft(length, attrs):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, length, 1 if not attrs.get("inverse") else 2)).astype(np.float32)
    run = Run(dft_model(**attrs), {"x": x})
    run.assert_all_on_mlx()
    z = x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
    y = np.fft.ifft(z, axis=1) if attrs.get("inverse") else np.fft.fft(z, axis=1)
    if attrs.get("onesided"):
        y = y[:, : length // 2 + 1]
    expected = np.stack([y.real, y.imag], -1)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(run.outputs[0], expected, atol=1e-5 * scale, rtol=0)


def test_an_irfft_with_its_default_length_inverts_an_rfft_on_mlx():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 32, 1)).astype(np.float32)
    nodes = [helper.make_node("DFT", ["x", "", "axis"], ["spectrum"], onesided=1),
             helper.make_node("DFT", ["spectrum", "", "axis"], ["back"], onesided=1, inverse=1)]
    model = make_model(nodes, [tensor("x", shape=[2, 32, 1])], [tensor("back")], [i64("axis", 1)], opset=20)
    run = Run(model, {"x": x})
    run.assert_all_on_mlx()
    np.testing.assert_allclose(run.outputs[0], x, atol=1e-5)
    np.testing.assert_allclose(run.outputs[0], cpu_outputs(model, {"x": x})[0], atol=1e-5)


def test_an_irfft_with_an_explicit_length_stays_on_the_cpu_ep():
    node = helper.make_node("DFT", ["x", "length", "axis"], ["y"], onesided=1, inverse=1)
    model = make_model([node], [tensor("x", shape=[2, 5, 2])], [tensor("y")], [i64("length", 8), i64("axis", 1)], opset=20)
    x = np.random.default_rng(0).standard_normal((2, 5, 2)).astype(np.float32)
    run = Run(model, {"x": x})
    assert run.providers_of_kernels() == {"CPUExecutionProvider"}


def mlx_session(model):
    session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
    session.disable_fallback()
    assert session.get_providers()[0] == MLX
    return session


def stft_model(step, length, window=None):
    """An STFT with constant step and frame length; a window (when given) is fed, so a
    mismatch with the frame length only shows at run time."""
    inputs = ["signal", "step", "window" if window else "", "length" if length is not None else ""]
    while not inputs[-1]:
        inputs.pop()
    constants = [i64("step", step)] + ([i64("length", length)] if length is not None else [])
    fed = [tensor("signal", shape=[1, 64, 1])] + ([tensor("window", shape=["w"])] if window else [])
    node = helper.make_node("STFT", inputs, ["y"], name="frames")
    return make_model([node], fed, [tensor("y")], constants)


@pytest.mark.parametrize("step, length, window, words", [
    (0, 16, None, "frame_step must be at least 1"),
    (4, 80, None, "frame length 80"),
    (4, 12, 16, "window holds 16 samples but frame_length is 12"),
])
def test_bad_stft_inputs_fail_the_run_as_on_the_cpu_ep(step, length, window, words):
    model = stft_model(step, length, window)
    feeds = {"signal": np.ones((1, 64, 1), np.float32)} | ({"window": np.ones(window, np.float32)} if window else {})
    with pytest.raises(Exception):
        cpu_outputs(model, feeds)
    with pytest.raises(Exception, match=f"node 'frames'.*{words}"):
        mlx_session(model).run(None, feeds)


def test_a_zero_frame_length_is_an_error_where_the_cpu_ep_crashes():
    # ORT's CPU kernel divides by the frame length (SIGFPE): only the MLX side is run here.
    with pytest.raises(Exception, match="node 'frames'.*frame length 0"):
        mlx_session(stft_model(4, 0)).run(None, {"signal": np.ones((1, 64, 1), np.float32)})


def test_a_mel_bank_out_of_range_fails_like_the_cpu_ep():
    node = helper.make_node("MelWeightMatrix", ["bins", "n_fft", "rate", "low", "high"], ["bank"], name="mel")
    model = make_model([node], [tensor("high", shape=[])], [tensor("bank")],
                       [i64("bins", 8), i64("n_fft", 64), i64("rate", 8000), f32("low", 0.0)])
    with pytest.raises(Exception):
        cpu_outputs(model, {"high": np.array(9000, np.float32)})
    with pytest.raises(Exception, match="node 'mel'.*upper_edge_hertz"):
        mlx_session(model).run(None, {"high": np.array(9000, np.float32)})
    good = {"high": np.array(3000, np.float32)}
    run = Run(model, good)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, good)[0])


@pytest.mark.parametrize("low,high", [(300.0, -0.0), (3000.0, 100.0), (2000.0, 1990.0), (0.0, 0.0)])
def test_a_mel_bank_whose_edges_run_backwards_is_orts(low, high):
    # s136-MelWeightMatrix-17-3: with upper_edge_hertz below lower_edge_hertz the mel points
    # run backwards. ORT's loops over unsigned bins then write only where two points coincide;
    # the EP refused the run.
    node = helper.make_node("MelWeightMatrix", ["bins", "n_fft", "rate", "low", "high"], ["bank"], name="mel")
    model = make_model([node], [tensor("low", shape=[]), tensor("high", shape=[])], [tensor("bank")],
                       [i64("bins", 10), i64("n_fft", 512), i64("rate", 16000)])
    feeds = {"low": np.array(low, np.float32), "high": np.array(high, np.float32)}
    run = Run(model, feeds)
    run.assert_all_on_mlx()
    np.testing.assert_array_equal(run.outputs[0], cpu_outputs(model, feeds)[0])


@pytest.mark.parametrize("components", [1, 2], ids=["real", "complex"])
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("frames", [3, 40])
def test_windowed_stfts_match_numpys_fft(frames, onesided, components):
    """Windowed STFTs of real and complex signals against numpy's float64 FFT, not ORT's CPU
    EP (ORT 1.30.0's complex STFT is wrong: 4e34 off numpy). 3 frames: the window scales the
    samples; 40 (more rows than the DFT matrix's columns): it scales the matrix's rows."""
    if components == 2 and onesided:
        pytest.skip("ONNX's onesided output is for real signals")
    length, step = 16, 4
    samples = (frames - 1) * step + length
    node = helper.make_node("STFT", ["signal", "step", "window", "length"], ["y"], onesided=onesided)
    model = make_model([node], [tensor("signal", shape=[2, samples, components]), tensor("window", shape=[length])],
                       [tensor("y")], [i64("step", step), i64("length", length)])
    rng = np.random.default_rng(11)
    signal = rng.standard_normal((2, samples, components)).astype(np.float32)
    window = rng.uniform(size=length).astype(np.float32)
    session = profiled_session(model)
    values = signal[..., 0] + (1j * signal[..., 1] if components == 2 else 0)
    framed = np.stack([values[:, f * step:f * step + length] * window.astype(np.float64) for f in range(frames)], 1)
    spectrum = np.fft.fft(framed, axis=-1)[..., :length // 2 + 1 if onesided else length]
    exact = np.stack([spectrum.real, spectrum.imag], -1)
    for _ in range(3):  # eager, compiled, replayed
        (y,) = session.run(None, {"signal": signal, "window": window})
        np.testing.assert_allclose(y, exact, rtol=0, atol=2e-5 * np.abs(exact).max())
    assert_kernels_on_mlx(session)


@pytest.mark.parametrize("step", [4, 5 * 10**18], ids=["step_4", "one_frame_huge_step"])
def test_frames_of_a_transposed_signal_and_of_a_huge_step(step):
    """Frames are a strided view of the signal: a transposed (non-contiguous) complex signal
    reads right, and a step past the signal's end (one frame; times 2 components it would
    overflow 64 bits) leaves the view's strides alone."""
    nodes = [helper.make_node("Transpose", ["x"], ["signal"], perm=[1, 2, 0]),
             helper.make_node("STFT", ["signal", "step", "", "length"], ["y"], onesided=0)]
    model = make_model(nodes, [tensor("x", shape=[2, 3, 40])], [tensor("y")], [i64("step", step), i64("length", 16)])
    x = np.random.default_rng(12).standard_normal((2, 3, 40)).astype(np.float32)
    run = Run(model, {"x": x})
    run.assert_all_on_mlx()
    (want,) = cpu_outputs(model, {"x": x})
    assert run.outputs[0].shape == want.shape == (3, 7 if step == 4 else 1, 16, 2)
    np.testing.assert_allclose(run.outputs[0], want, rtol=0, atol=2e-5)
