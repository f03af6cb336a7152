"""The decoder tests register the EP once per module."""

import pytest

from onnxruntime_ep_mlx import register_execution_provider_library


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_execution_provider_library()
