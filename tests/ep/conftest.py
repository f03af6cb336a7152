"""Fixtures for end-to-end tests of the EP through ORT's Python API."""

import gc
import json
import os
import platform
import re
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep

MLX = "MLXExecutionProvider"


@pytest.fixture(scope="session", autouse=True)
def registered():
    mlx_ep.register_execution_provider_library()


# How a plan meets its runs: never compiled, compiled from a shape's second run, or traced at its
# first run (for tests that something happens once on every path).
COMPILE_MODES = {
    "eager_only": dict(ONNXRUNTIME_EP_MLX_NO_COMPILE="1"),
    "eager_then_compiled": dict(ONNXRUNTIME_EP_MLX_COMPILE_AFTER="1"),
    "traced_first": dict(ONNXRUNTIME_EP_MLX_COMPILE_AFTER="0"),
}


def set_env(monkeypatch, env):
    """Sets `env` (one of COMPILE_MODES, or more); a mode that compiles does so whatever the
    caller's ONNXRUNTIME_EP_MLX_NO_COMPILE says."""
    if "ONNXRUNTIME_EP_MLX_COMPILE_AFTER" in env:
        monkeypatch.delenv("ONNXRUNTIME_EP_MLX_NO_COMPILE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def mlx_devices():
    """The MLX EP's devices, for sessions that pass it provider options."""
    devices = [d for d in ort.get_ep_devices() if d.ep_name == MLX]
    assert devices, "the EP library registered no device"
    return devices


def attentions_in_one_kernel(summary):
    """How many attentions the session `summary` says ran as one hand-written kernel."""
    return sum(int(n) for n in re.findall(r"(\d+) attention\(s\) in one hand-written kernel", summary))


def cuda_kernels_run(summary, no_cuda_kernels):
    """Whether the session of `summary` runs the hand-written CUDA kernels: on MLX's CUDA
    backend, unless it turned them off."""
    return "device gpu" in summary and platform.system() == "Linux" and not no_cuda_kernels


def shared_buffer_counts(capfd):
    """(rows written back, rows of shared buffers, inputs fed from the device mirror, mirrors
    updated in place) from the EP's session summary (ONNXRUNTIME_EP_MLX_VERBOSE=1), printed
    when the session is released: call it after dropping the last reference to the session.
    Also returns the summary, for assertion messages."""
    gc.collect()
    summary = capfd.readouterr().err
    found = re.search(r"(\d+) of (\d+) row\(s\) written back, (\d+) input\(s\) fed from the device mirror, "
                      r"(\d+) mirror\(s\) updated in place", summary)
    assert found, summary
    return tuple(int(n) for n in found.groups()), summary


def make_model(nodes, inputs, outputs, initializers=(), opset=17, domains=()):
    """A model from helper.make_node/... pieces; IR 10 (ORT 1.31.1 rejects IR 14)."""
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=imports, ir_version=10)

    return model.SerializeToString()


def tensor(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def profile_prefix(name="mlx_ep_test"):
    """Where a test session writes its profile. ORT names the file by the session's start time
    alone, so two test processes at work at once could write one file and one of them then read
    the other's profile (or find it removed): the process id keeps them apart."""
    return str(Path(tempfile.gettempdir()) / f"{name}_{os.getpid()}")


def kernel_placements(session):
    """Ends a profiled session's profiling: every kernel event as (name, provider), in order.
    The profile file is removed once read (one a session: thousands over the suite)."""
    profile = Path(session.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    return [
        (e["name"], e["args"].get("provider"))
        for e in events
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
    ]


class Run:
    """One MLX-first session: outputs, and which provider ran each kernel."""

    def __init__(self, model, feeds, providers=(MLX, "CPUExecutionProvider"), optimize=True):
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix()
        if not optimize:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.session = ort.InferenceSession(model, options, providers=list(providers))
        self.outputs = self.session.run(None, feeds)
        self.kernels = kernel_placements(self.session)

    def providers_of_kernels(self):
        return {provider for _, provider in self.kernels}

    def assert_all_on_mlx(self):
        assert self.session.get_providers()[0] == MLX
        assert self.kernels, "no kernel ran"
        assert self.providers_of_kernels() == {MLX}, self.kernels


def profiled_session(model, ep_options=None):
    """An MLX-first session that profiles its runs (see `kernels_on_mlx`); `ep_options`, when
    given, go to the EP's devices as provider options."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = profile_prefix()
    if ep_options is None:
        session = ort.InferenceSession(model, options, providers=[MLX, "CPUExecutionProvider"])
    else:
        options.add_provider_for_devices(mlx_devices(), ep_options)
        session = ort.InferenceSession(model, options)
    assert session.get_providers()[0] == MLX
    return session


def assert_kernels_on_mlx(session):
    """Ends a profiled session's profiling; every kernel it ran ran on MLX."""
    placements = kernel_placements(session)
    assert placements and {provider for _, provider in placements} == {MLX}, placements


def cpu_outputs(model, feeds):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def summary_of_runs(model, feeds_list, tolerance, monkeypatch, capfd, env):
    """Runs each feeds of `feeds_list` 3 times in one session with `env` set (one of
    COMPILE_MODES, or more), all on MLX, each as ORT's CPU EP answers; returns the session
    summary the EP prints when the session is released."""
    set_env(monkeypatch, {**env, "ONNXRUNTIME_EP_MLX_VERBOSE": "1"})
    gc.collect()
    capfd.readouterr()
    session = profiled_session(model)
    for feeds in feeds_list:
        expected = cpu_outputs(model, feeds)
        for _ in range(3):
            for got, want in zip(session.run(None, feeds), expected):
                assert got.shape == want.shape
                np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tolerance,
                                           atol=tolerance)
    assert_kernels_on_mlx(session)
    del session
    gc.collect()
    return capfd.readouterr().err


def cpu_outputs_or_mlx_fails_too(model, feeds, match=None):
    """ORT's CPU outputs; or, where ORT's CPU EP fails, None once an MLX-first session (no
    fallback) has failed too, with an error matching `match` when given."""
    try:
        return cpu_outputs(model, feeds)
    except Exception:
        with pytest.raises(Exception, match=match):
            session = ort.InferenceSession(model, providers=[MLX, "CPUExecutionProvider"])
            session.disable_fallback()
            session.run(None, feeds)
        return None
