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


@pytest.fixture
def emulated_device(monkeypatch):
    """The CUDA engine on the CPU for this test: ``tests/emulated_device.py`` installed (a stand-in CuPy whose kernel
    launches run on the host emulator; undone after the test). Yields the module (its ``ARCH`` and ``SMS`` are the
    device's). Skipped without g++ (the emulator compiles kernels with it)."""
    import importlib.util
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("the CPU emulator needs g++")
    spec = importlib.util.spec_from_file_location("emulated_device", REPO / "tests" / "emulated_device.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.install(monkeypatch)
    return mod


@pytest.fixture(autouse=True)
def _gpu_pool_returned(request):
    """After each ``gpu`` test, CuPy's memory pools hand their cached blocks back to the driver. CuPy keeps freed
    blocks for reuse by default, so a worker's pool grows to the largest shapes it has run; under pytest-xdist 14
    workers sharing an 80 GB H100 ran out of memory that way (``bench/NOTES.md`` run 195: 111 kernel tests failed
    with CUDA_ERROR_OUT_OF_MEMORY, where run 190 on the 141 GB H200 passed). Nothing to do without CuPy."""
    yield
    if "gpu" not in request.keywords:
        return
    import gc
    import sys

    cp = sys.modules.get("cupy")
    if cp is None or not hasattr(cp, "get_default_memory_pool"):
        return
    gc.collect()
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def _gpu_probe() -> str | None:
    """None when CuPy sees a GPU, else why not (the exception's type and message)."""
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        return None if n > 0 else "CuPy sees no GPU"
    except Exception as exc:  # noqa: BLE001 -- any failure to reach a GPU means "no GPU" ... unless one is required
        return f"{type(exc).__name__}: {exc}"


def pytest_collection_modifyitems(config, items):
    """Skip the ``gpu`` tests where no GPU is reachable -- unless ``NINFERC_REQUIRE_GPU=1`` (set by the device
    scripts): then a missing or broken GPU / CuPy fails the run instead of turning the GPU tier into skips."""
    import os

    why = _gpu_probe()
    if why is None:
        return
    if os.environ.get("NINFERC_REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"NINFERC_REQUIRE_GPU=1 but no usable GPU: {why}")
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and CuPy (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
