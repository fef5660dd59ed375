"""Shared pytest fixtures: the fixture checkpoint, its goldens, and the GPU marker's skip logic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def models_dir() -> Path:
    """Where the fixture checkpoints live: $NINFERC_MODELS, else ../shared/models beside the repo,
    else /work/shared/models. Tests that need them fail (not skip) when none exists: the goldens are
    the external truth and a silent skip would make those tests unable to fail."""
    cands = [os.environ.get("NINFERC_MODELS"), REPO.parent / "shared" / "models", REPO / "shared" / "models",
             Path("/work/shared/models"), REPO / ".fixtures" / "models"]
    for c in cands:
        if c and (Path(c) / "qwen35-tiny-code" / "config.json").is_file():
            return Path(c)
    raise FileNotFoundError(
        "fixture checkpoints not found; set NINFERC_MODELS to the folder holding qwen35-tiny-code "
        f"(looked in {[str(c) for c in cands if c]})"
    )


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
