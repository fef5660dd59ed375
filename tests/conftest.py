"""Shared pytest fixtures: the fixture checkpoint, its goldens, and the GPU marker's skip logic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ninferc.testing import models_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    return models_dir() / "qwen35-tiny-code"


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_dir):
    from ninferc.checkpoint import Checkpoint

    return Checkpoint(tiny_dir, notice=None)


@pytest.fixture(scope="session")
def goldens(tiny_dir):
    return json.loads((tiny_dir / "goldens.json").read_text())


@pytest.fixture(scope="session")
def goldens_long(tiny_dir):
    return json.loads((tiny_dir / "goldens-long.json").read_text())


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and CuPy (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
