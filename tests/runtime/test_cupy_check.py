"""The CUDA backend's CuPy check: with CuPy installed but no usable device, a clear TargetError, not a traceback
from deep in the runtime (a fresh user with the cuda13 extra on a GPU-less machine hit
``cudaErrorInsufficientDriver`` from ``ninferc run`` and ``ninferc bench``)."""

from __future__ import annotations

import sys
import types

import pytest

from ninferc.errors import TargetError
from ninferc.runtime import kernels


def _fake_cupy(count=None, exc=None):
    def get_device_count():
        if exc is not None:
            raise exc
        return count

    m = types.ModuleType("cupy")
    m.__version__ = "99.0-fake"
    m.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=get_device_count))
    return m


@pytest.mark.parametrize("count,exc,needle", [
    (None, RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient"), "InsufficientDriver"),
    (0, None, "reports 0 devices")])
def test_cupy_without_a_device_is_a_clear_error(monkeypatch, count, exc, needle):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(count, exc))
    with pytest.raises(TargetError) as ei:
        kernels.cupy("ninferc bench (it measures a GPU)", hint="")
    msg = str(ei.value)
    assert msg.startswith("ninferc bench (it measures a GPU) needs an NVIDIA GPU: CuPy 99.0-fake is installed")
    assert needle in msg and not msg.endswith("; ")
    with pytest.raises(TargetError, match="--backend reference"):
        kernels.cupy()


def test_cupy_with_a_device_is_checked_once(monkeypatch):
    calls = []
    fake = _fake_cupy(1)
    fake.cuda.runtime.getDeviceCount = lambda: calls.append(1) or 1
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert kernels.cupy() is fake and kernels.cupy() is fake
    assert calls == [1]
