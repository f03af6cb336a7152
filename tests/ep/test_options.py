"""EP options the ORT way: provider options and session config entries, checked, over the environment."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from conftest import MLX, kernel_placements, make_model, mlx_devices, profile_prefix, tensor

PREFIX = "ep.mlxexecutionprovider."  # as ORT writes a provider option's key
# Every option with a value it takes (the table is ep/src/options.rs; README.md shows it).
VALID = {
    "device": "cpu", "disable": "0", "exclude_ops": "Softmax", "no_compile": "true", "compile_after": "0",
    "compile_cache": "4", "no_shapeless": "1", "no_fuse": "on", "no_split": "yes", "kv_mirror": "0",
    "no_cuda_kernels": "1", "metal_kernels": "1", "profile_ops": "0", "verbose": "0", "claim_debug": "off", "explain": None,
    "fault": "compile", "trace": None, "precision": "fp16",
}
BAD = {"device": "npu", "disable": "maybe", "compile_after": "-1", "compile_cache": "0", "fault": "crash",
       "precision": "fp64"}

MODEL = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
                   [tensor("x", shape=[2, 3])], [tensor("y")])
X = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)


def session(provider_options=None, config=None):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = profile_prefix("mlx_ep_options")
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    so.add_provider_for_devices(mlx_devices(), provider_options or {})
    return ort.InferenceSession(MODEL, so)


def creation_error(capfd, provider_options):
    """The EP's error for options it refuses. ORT fails the EP's creation with it; its Python
    binding prints the error and falls back to the CPU EP (`disable_fallback` only exists on a
    session already made)."""
    capfd.readouterr()
    sess = session(provider_options)
    assert sess.get_providers() == ["CPUExecutionProvider"]
    printed = capfd.readouterr()
    text = printed.out + printed.err
    assert "Error creating execution provider" in text, text
    return text


def providers_that_ran(sess):
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], -np.maximum(X, 0))
    return {provider for _, provider in kernel_placements(sess)}


def test_plain_options_run_on_mlx():
    sess = session({})
    assert sess.get_providers()[0] == MLX
    assert providers_that_ran(sess) == {MLX}


@pytest.mark.parametrize("key", sorted(VALID))
def test_every_option_is_accepted(key, tmp_path):
    value = VALID[key] if VALID[key] is not None else str(tmp_path / f"{key}.out")  # a path
    sess = session({key: value})
    ran = providers_that_ran(sess)
    assert ran <= {MLX, "CPUExecutionProvider"} and ran, ran
    if key == "explain":
        assert Path(value).read_text().strip(), "the claim report was not written"


@pytest.mark.parametrize("key", sorted(BAD))
def test_a_bad_value_fails_the_ep_naming_what_is_valid(key, capfd):
    message = creation_error(capfd, {key: BAD[key]})
    assert f"option '{key}': '{BAD[key]}' is not" in message, message


def test_an_unknown_option_fails_the_ep_listing_the_options(capfd):
    message = creation_error(capfd, {"devise": "cpu"})
    assert "unknown MLXExecutionProvider option 'devise'" in message and "device, disable" in message, message


def test_disable_by_option_runs_everything_on_the_cpu_ep():
    assert providers_that_ran(session({"disable": "1"})) == {"CPUExecutionProvider"}


@pytest.mark.parametrize("prefix", [PREFIX, "ep.MLXExecutionProvider."])
def test_a_session_config_entry_is_an_option_too(prefix):
    sess = session(config={prefix + "exclude_ops": "Neg"})
    assert providers_that_ran(sess) == {MLX, "CPUExecutionProvider"}


def test_an_option_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_DISABLE", "1")
    assert providers_that_ran(session({})) == {"CPUExecutionProvider"}
    assert providers_that_ran(session({"disable": "0"})) == {MLX}


def test_a_bad_environment_value_fails_the_ep_naming_the_variable(monkeypatch, capfd):
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_COMPILE_CACHE", "many")
    assert "ONNXRUNTIME_EP_MLX_COMPILE_CACHE: 'many' is not a whole number" in creation_error(capfd, {})


def test_verbose_by_option_prints_the_summary(capfd):
    sess = session({"verbose": "1"})
    providers_that_ran(sess)
    del sess
    import gc

    gc.collect()
    assert "session summary" in capfd.readouterr().err
