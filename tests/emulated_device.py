"""An emulated CUDA device: the CUDA engine (``ninferc.runtime.engine.Engine``, the serving backend
``CudaBatchBackend``) run on the CPU, every kernel launch executed by the host emulator of
``tests/kernels/cuda_host.py``.

What it is for: the engine's own logic -- lowering to launches, argument binding, the metadata block, state slots,
paged KV, CUDA-graph capture and replay, the sampler's ids, speculative draft / verify / accept -- checked against the
fixture's goldens on a machine without a GPU. It is not a timing tool and says nothing of the real device's
numerics beyond fp32 rounding (the emulator's host math is correctly rounded where the GPU's is within 2 ulp).

How: :func:`install` puts a small numpy-backed stand-in for CuPy in ``sys.modules["cupy"]`` and replaces the
engine's ``DeviceKernel`` with :class:`EmulatedKernel`:

* device memory is host memory: ``cupy.empty`` & co. return :class:`ndarray` (a numpy subclass whose ``.data.ptr``
  is its host address, allocations 256-byte aligned as cudaMalloc's), so a kernel argument's "device pointer" is a
  host pointer the emulated kernel dereferences;
* every operation is synchronous: streams and events only order what already happened (an event's time is the
  host clock); a stream capture records the kernel launches (their arguments by value, as a CUDA graph does) and
  ``Graph.launch`` replays them;
* the device: compute capability 8.6 (``sm_86``: no wgmma, no programmatic dependent launch), ``SMS`` SMs, 24 GiB;
  kernels are compiled by NVRTC for sm_86 as on a real device (their resources and occupancy are the cubin's) and,
  on first launch, by the host compiler for the emulator.

Limits: kernels with inline PTX the emulator cannot run (the tensor-core GEMM of prefill chunks above
``GEMV_MAX_TOKENS`` tokens) fail at their first launch with ``HostKernelError``: keep prefill chunks at
<= 8 tokens. Each launch runs every CTA's threads as fibers on one core: a decode step of the tiny fixture takes
about a second.
"""

from __future__ import annotations

import ctypes
import sys
import time
import types
from pathlib import Path

import numpy as np

SMS = 8  # the emulated device's SM count (small: persistent grids stay small, the emulator runs CTAs one by one)
ARCH = "sm_86"
TOTAL_BYTES = 24 << 30

# ---------------------------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------------------------


class _Ptr:
    def __init__(self, ptr: int):
        self.ptr = int(ptr)


class ndarray(np.ndarray):  # noqa: N801 -- CuPy's name
    """A host array standing in for a device array: ``.data.ptr`` is its address, ``get`` / ``set`` copy."""

    def __new__(cls, shape, dtype=float, memptr=None, strides=None, order="C"):  # noqa: ARG003
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        if memptr is None:
            return _alloc(shape, dtype)
        n = int(np.prod(shape, dtype=np.int64))
        buf = (ctypes.c_uint8 * (n * np.dtype(dtype).itemsize)).from_address(int(memptr.ptr))
        a = np.frombuffer(buf, dtype=dtype, count=n).reshape(shape).view(cls)
        a._owner = memptr
        return a

    @property
    def data(self):  # CuPy: a MemoryPointer; numpy's memoryview is not needed by the engine
        return _Ptr(self.__array_interface__["data"][0])

    def get(self, stream=None, out=None):  # noqa: ARG002
        return np.array(self, copy=True, subok=False)

    def set(self, arr, stream=None):  # noqa: ARG002
        self[...] = np.asarray(arr).reshape(self.shape)


def _alloc(shape, dtype, fill=None) -> ndarray:
    """A 256-byte aligned array (cudaMalloc's alignment; the kernels' vector loads assume >= 16)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + 256, np.uint8)
    off = (-raw.ctypes.data) % 256
    a = raw[off:off + n].view(dtype).reshape(shape).view(ndarray)
    if fill is not None:
        a.fill(fill)
    return a


def empty(shape, dtype=np.float64, order="C"):  # noqa: ARG001
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    return _alloc(shape, dtype)


def zeros(shape, dtype=np.float64, order="C"):  # noqa: ARG001
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    return _alloc(shape, dtype, 0)


def ones(shape, dtype=np.float64, order="C"):  # noqa: ARG001
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    return _alloc(shape, dtype, 1)


def empty_like(a, dtype=None):
    return _alloc(np.shape(a), dtype or a.dtype)


def asarray(a, dtype=None):
    src = np.asarray(a, dtype=dtype)
    out = _alloc(src.shape, src.dtype)
    out[...] = src
    return out


def copyto(dst, src, **kw):
    np.copyto(dst, src, **kw)


def arange(*args, dtype=None):
    return asarray(np.arange(*args, dtype=dtype))


def concatenate(arrays, axis=0):
    return asarray(np.concatenate([np.asarray(a) for a in arrays], axis=axis))


class UnownedMemory:
    def __init__(self, ptr: int, size: int, owner, device_id: int = 0):  # noqa: ARG002
        self.ptr, self.size, self.owner = int(ptr), int(size), owner


class MemoryPointer:
    def __init__(self, mem, offset: int):
        self.mem, self.ptr = mem, int(mem.ptr) + int(offset)


def alloc_pinned_memory(nbytes: int):
    return _alloc((nbytes,), np.uint8)


# ---------------------------------------------------------------------------------------------------------------
# streams, events, graphs (everything is synchronous)
# ---------------------------------------------------------------------------------------------------------------

_CAPTURE: list[list] = []  # the launch list of the capture in progress (at most one)


class Graph:
    """A captured launch sequence: ``launch`` replays it (arguments as captured)."""

    def __init__(self, launches: list):
        self.launches = launches

    def launch(self, stream=None):  # noqa: ARG002
        for k, a, kw in self.launches:
            k._run(*a, **kw)


class Stream:
    def __init__(self, non_blocking: bool = False, null: bool = False, ptr: int = 1):  # noqa: ARG002
        self.ptr = ptr

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass

    def use(self):
        return self

    def begin_capture(self, mode=None):  # noqa: ARG002
        if _CAPTURE:
            raise RuntimeError("emulated device: a stream capture is already in progress")
        _CAPTURE.append([])

    def end_capture(self, graph=None):  # noqa: ARG002
        return Graph(_CAPTURE.pop())

    def is_capturing(self) -> bool:
        return bool(_CAPTURE)


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):  # noqa: ARG002
        self.t = None

    def record(self, stream=None):  # noqa: ARG002
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def query(self) -> bool:
        return True

    @property
    def done(self) -> bool:
        return True


def get_elapsed_time(a: Event, b: Event) -> float:
    return (b.t - a.t) * 1e3


class Device:
    def __init__(self, device: int = 0):
        self.id = device
        self.compute_capability = ARCH[3:].rstrip("a")
        self.pci_bus_id = "emulated:00:00.0"
        self.attributes = {"MultiProcessorCount": SMS, "MemoryClockRate": 0, "GlobalMemoryBusWidth": 0}

    def synchronize(self):
        pass

    def use(self):
        return self


def _memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream: int):  # noqa: ARG001
    ctypes.memmove(int(dst), int(src), int(nbytes))


def _device_properties(device: int = 0) -> dict:  # noqa: ARG001
    return {"name": f"emulated {ARCH}".encode(), "totalGlobalMem": TOTAL_BYTES, "multiProcessorCount": SMS,
            "pciDomainID": 0, "pciBusID": 0, "pciDeviceID": 0, "uuid": b"\0" * 16, "clockRate": 0,
            "memoryClockRate": 0, "memoryBusWidth": 0}


def make_cupy() -> types.ModuleType:
    """The stand-in ``cupy`` module (only what ninferc's runtime and its tests use)."""
    cp = types.ModuleType("cupy")
    cp.__version__ = "emulated"
    cp.__file__ = __file__
    cp.ndarray = ndarray
    for name in ("empty", "zeros", "ones", "empty_like", "asarray", "copyto", "arange", "concatenate"):
        setattr(cp, name, globals()[name])
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "isfinite", "where", "log", "exp", "argmax", "argmin", "minimum", "maximum", "array_equal",
                 "argpartition", "take_along_axis", "flatnonzero"):
        setattr(cp, name, getattr(np, name))
    cp.asnumpy = lambda a, stream=None: np.array(a, copy=True, subok=False)  # noqa: ARG005
    cp.random = types.SimpleNamespace(RandomState=np.random.RandomState)
    cuda = types.ModuleType("cupy.cuda")
    cuda.Stream, cuda.Event, cuda.Device, cuda.Graph = Stream, Event, Device, Graph
    cuda.UnownedMemory, cuda.MemoryPointer = UnownedMemory, MemoryPointer
    cuda.alloc_pinned_memory, cuda.get_elapsed_time = alloc_pinned_memory, get_elapsed_time
    cuda.get_current_stream = lambda: Stream()
    cuda.runtime = types.SimpleNamespace(
        memGetInfo=lambda: (TOTAL_BYTES - (1 << 30), TOTAL_BYTES), getDeviceCount=lambda: 1,
        deviceSynchronize=lambda: None, memcpyAsync=_memcpy_async, memcpyDeviceToHost=2, memcpyHostToDevice=1,
        runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000, getDeviceProperties=_device_properties)
    cuda.function = types.SimpleNamespace(Module=None)  # kernels load through EmulatedKernel
    cuda.driver = types.SimpleNamespace()
    cp.cuda = cuda
    return cp


# ---------------------------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------------------------

class EmulatedKernel:
    """``ninferc.runtime.kernels.DeviceKernel`` on the emulated device: compiled by NVRTC for its resources (the
    plan's checks read them as on a GPU) and by the host compiler for the emulator when first launched."""

    def __init__(self, source: str, entry: str, name: str, options=None, arch: str | None = None):
        from ninferc.targets.cubin import read_resources
        from ninferc.targets.nvrtc import DEFAULT_OPTIONS, compile_cubin

        self.name, self.entry, self.arch = name, entry, arch or ARCH
        self.source = source
        self.compiled = compile_cubin(source, self.arch, name=name,
                                      options=DEFAULT_OPTIONS if options is None else tuple(options))
        self.res = read_resources(self.compiled.cubin, self.arch, self.compiled.ptx)[entry]
        self.pdl_capable = "NINFER_PDL_ENTRY();" in source
        self._host = None
        self.launches = 0

    @classmethod
    def from_spec(cls, spec, options=None) -> "EmulatedKernel":
        return cls(spec.render(), spec.entry, spec.uri, options)

    def attributes(self):
        from ninferc.runtime.kernels import DriverAttributes

        r = self.res
        return DriverAttributes(r.registers, r.static_smem_bytes, r.local_bytes, 1024)

    def attribute(self, attr: int) -> int:
        from ninferc.runtime.kernels import FUNC_ATTR

        a = self.attributes()
        return {FUNC_ATTR["NUM_REGS"]: a.registers, FUNC_ATTR["SHARED_SIZE_BYTES"]: a.static_smem_bytes,
                FUNC_ATTR["LOCAL_SIZE_BYTES"]: a.local_bytes, FUNC_ATTR["MAX_THREADS_PER_BLOCK"]: a.max_threads}[attr]

    def driver_occupancy(self, threads: int, dynamic_smem: int = 0) -> int:
        from ninferc.targets.arch import get_arch
        from ninferc.targets.plan import occupancy

        r = self.res
        return occupancy(get_arch(self.arch), threads, r.registers, r.static_smem_bytes, dynamic_smem,
                         barriers=r.barriers).ctas_per_sm

    def set_dynamic_smem(self, nbytes: int) -> None:
        pass

    def launch(self, grid, block, args, *, smem: int = 0, cooperative: bool = False, stream=None,  # noqa: ARG002
               pdl: bool = False) -> None:
        from ninferc.errors import PlanError

        grid = tuple(int(g) for g in (tuple(grid) + (1, 1))[:3])
        block = tuple(int(b) for b in (tuple(block) + (1, 1))[:3])
        if min(grid) < 1 or min(block) < 1:
            raise PlanError(f"kernel {self.name}: empty launch grid={grid} block={block}")
        if pdl and not self.pdl_capable:
            raise PlanError(f"kernel {self.name}: programmatic dependent launch asked for a kernel that is not "
                            "PDL-aware")
        call = ((grid, block, tuple(args)), {"smem": int(smem), "cooperative": bool(cooperative)})
        if _CAPTURE:
            _CAPTURE[-1].append((self, *call))
        else:
            self._run(*call[0], **call[1])

    def _run(self, grid, block, args, *, smem: int, cooperative: bool) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
        try:
            from cuda_host import HostKernel, with_host_helpers
        finally:
            sys.path.pop(0)
        if self._host is None:
            self._host = HostKernel(with_host_helpers(self.source), self.entry)
        conv = []
        for (typ, _), a in zip(self._host.params, args):
            if "*" in typ and not isinstance(a, np.ndarray):
                a = np.uint64(int(a))  # a raw device address (ninferc.runtime.kernels.ptr)
            conv.append(a)
        self._host.launch(grid, block[0] * block[1] * block[2], conv, smem=smem, cooperative=cooperative)
        self.launches += 1


def install(monkeypatch) -> types.ModuleType:
    """Make this process's CUDA engine run on the emulated device (undone with ``monkeypatch``): the stand-in
    ``cupy`` module in ``sys.modules``, :class:`EmulatedKernel` as the engine's ``DeviceKernel``. Returns the
    stand-in module."""
    import ninferc.runtime.engine as engine_mod
    import ninferc.runtime.kernels as kernels_mod

    cp = make_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cp.cuda)
    monkeypatch.setattr(kernels_mod, "_DEVICE_SEEN", [cp])
    monkeypatch.setattr(kernels_mod, "DeviceKernel", EmulatedKernel)
    monkeypatch.setattr(engine_mod, "DeviceKernel", EmulatedKernel)
    return cp
