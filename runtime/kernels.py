"""Load and launch ninferc kernels on the running GPU through CuPy.

The kernel source is compiled with :func:`ninferc.targets.nvrtc.compile_cubin` for the *device's* arch
(same options the plan used) and the exact cubin is loaded with ``cupy.cuda.function.Module.load``
(CuPy's RawModule would add its own NVRTC options and change register counts; see
../shared/notes/cubin-resources.md). After loading, the driver's view of the function (registers,
static shared memory, local bytes, max threads) is read back so the plan can be re-derived and checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import PlanError, TargetError


def cupy(purpose: str = "the CUDA backend", hint: str = "on a machine without a GPU use --backend reference"):
    """Import CuPy and check that it sees a CUDA device.

    Raises:
        TargetError: CuPy is not installed (saying what needs it -- ``purpose`` --, how to install it, and
            ``hint``), or it is installed but the CUDA runtime finds no usable device (no GPU, or no driver new
            enough for CuPy's CUDA runtime: the runtime's own error is quoted).
    """
    try:
        import cupy as cp
    except ImportError:
        raise TargetError(
            f"{purpose} needs CuPy and an NVIDIA GPU: install the runtime extra (pip install -e "
            "\".[cuda13]\" from a checkout, or [cuda12])" + (f"; {hint}" if hint else "")
        ) from None
    if not _device_seen(cp):
        try:
            n = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError: no driver / driver older than CuPy's CUDA runtime
            raise TargetError(f"{purpose} needs an NVIDIA GPU: CuPy {cp.__version__} is installed but the CUDA "
                              f"runtime found no usable device ({exc})" + (f"; {hint}" if hint else "")) from None
        if n < 1:
            raise TargetError(f"{purpose} needs an NVIDIA GPU: CuPy {cp.__version__} is installed but the CUDA "
                              "runtime reports 0 devices" + (f"; {hint}" if hint else ""))
        _DEVICE_SEEN.append(cp)
    return cp


_DEVICE_SEEN: list = []  # the CuPy module once a device was seen (the check runs once per process)


def _device_seen(cp) -> bool:
    return any(m is cp for m in _DEVICE_SEEN)


def device_arch() -> str:
    """NVRTC arch of the current device, e.g. 'sm_90' (cc 9.0) or 'sm_120a' (cc 12.0).

    Raises:
        TargetError: no CUDA device, or a compute capability ninferc has no target for.
    """
    cp = cupy()
    try:
        cc = cp.cuda.Device().compute_capability  # e.g. '90'
    except Exception as exc:
        raise TargetError(f"no usable CUDA device ({exc})") from None
    major, minor = int(cc[:-1]), int(cc[-1])
    if (major, minor) >= (12, 0):
        return f"sm_{major}{minor}a"
    return f"sm_{major}{minor}"


def device_sm_count() -> int:
    """Number of SMs of the current device (cudaDevAttrMultiProcessorCount)."""
    cp = cupy()
    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


def device_bandwidth_gbs() -> float | None:
    """Peak DRAM bandwidth of the current device, GB/s: 2 (double data rate) x memory clock x bus width / 8
    (cudaDevAttrMemoryClockRate in kHz, cudaDevAttrGlobalMemoryBusWidth in bits -- the CUDA samples'
    deviceQuery formula); None when the driver does not report them (the plan then assumes the arch's
    typical bandwidth per SM, :attr:`ninferc.targets.plan.PlanContext.bandwidth_per_sm_gbs`)."""
    cp = cupy()
    try:
        attrs = cp.cuda.Device().attributes
        clock_khz, width = int(attrs["MemoryClockRate"]), int(attrs["GlobalMemoryBusWidth"])
    except Exception:  # noqa: BLE001 - an attribute this CuPy / driver does not expose
        return None
    return 2.0 * clock_khz * 1e3 * width / 8 / 1e9 if clock_khz > 0 and width > 0 else None


#: CUfunction_attribute values (CUDA Driver API, cuda.h ``CUfunction_attribute``)
FUNC_ATTR = {"MAX_THREADS_PER_BLOCK": 0, "SHARED_SIZE_BYTES": 1, "CONST_SIZE_BYTES": 2, "LOCAL_SIZE_BYTES": 3,
             "NUM_REGS": 4, "PTX_VERSION": 5, "BINARY_VERSION": 6, "MAX_DYNAMIC_SHARED_SIZE_BYTES": 8}


@dataclass(frozen=True)
class DriverAttributes:
    """The driver's view of a loaded function (cuFuncGetAttribute): registers per thread, static shared
    bytes (the driver's SHARED_SIZE_BYTES), local bytes per thread, max threads per CTA."""

    registers: int
    static_smem_bytes: int
    local_bytes: int
    max_threads: int


class DeviceKernel:
    """One compiled and loaded kernel.

    Args:
        source: rendered CUDA C.
        entry: the ``extern "C"`` function name.
        name: a readable identity (the kernel URI) for messages and the compile cache.
        options: NVRTC options (the plan's; default :data:`ninferc.targets.nvrtc.DEFAULT_OPTIONS`).
        arch: compile target; default the device's own arch.

    Raises:
        CompileError: NVRTC failed (log included).
        TargetError: no CuPy / no device.
    """

    def __init__(self, source: str, entry: str, name: str, options: tuple[str, ...] | None = None,
                 arch: str | None = None):
        from ninferc.targets.nvrtc import DEFAULT_OPTIONS, compile_cubin

        cp = cupy()
        self.name, self.entry = name, entry
        self.arch = arch or device_arch()
        self.compiled = compile_cubin(source, self.arch, name=name,
                                      options=DEFAULT_OPTIONS if options is None else tuple(options))
        self.module = cp.cuda.function.Module()
        self.module.load(self.compiled.cubin)
        self.function = self.module.get_function(entry)
        self._dyn_smem_optin = 0
        #: the source opts in to programmatic dependent launch (templates/ninfer_common.cuh section 7)
        self.pdl_capable = "NINFER_PDL_ENTRY();" in source  # a call (the header's #define has no ';')

    @classmethod
    def from_spec(cls, spec, options: tuple[str, ...] | None = None) -> "DeviceKernel":
        """Compile and load a :class:`ninferc.targets.plan.KernelSpec` for the device."""
        return cls(spec.render(), spec.entry, spec.uri, options)

    def attribute(self, attr: int) -> int:
        """cuFuncGetAttribute(attr) for this function (CU_FUNC_ATTRIBUTE_* numbers, see :data:`FUNC_ATTR`)."""
        return int(cupy().cuda.driver.funcGetAttribute(attr, self.function.ptr))

    def attributes(self) -> DriverAttributes:
        """Registers / shared / local / max threads as the driver reports them (cuFuncGetAttribute)."""
        a = FUNC_ATTR
        return DriverAttributes(self.attribute(a["NUM_REGS"]), self.attribute(a["SHARED_SIZE_BYTES"]),
                                self.attribute(a["LOCAL_SIZE_BYTES"]), self.attribute(a["MAX_THREADS_PER_BLOCK"]))

    def driver_occupancy(self, threads: int, dynamic_smem: int = 0) -> int:
        """cuOccupancyMaxActiveBlocksPerMultiprocessor for this function (resident CTAs per SM)."""
        cp = cupy()
        self.set_dynamic_smem(dynamic_smem)
        return int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(self.function.ptr, threads,
                                                                             dynamic_smem))

    def set_dynamic_smem(self, nbytes: int) -> None:
        """Opt in to ``nbytes`` of dynamic shared memory when above the 48 KiB default
        (cudaFuncAttributeMaxDynamicSharedMemorySize)."""
        if nbytes > 48 * 1024 and nbytes > self._dyn_smem_optin:
            cupy().cuda.driver.funcSetAttribute(self.function.ptr, FUNC_ATTR["MAX_DYNAMIC_SHARED_SIZE_BYTES"],
                                                int(nbytes))
            self._dyn_smem_optin = nbytes

    def launch(self, grid, block, args, *, smem: int = 0, cooperative: bool = False, stream=None,
               pdl: bool = False) -> None:
        """Launch with ``args`` (CuPy arrays, numpy scalars such as ``np.int32(5)``, or raw ints as device
        pointers wrapped by :func:`ptr`).

        ``pdl``: launch with programmatic stream serialization (cuLaunchKernelEx with
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, plus CU_LAUNCH_ATTRIBUTE_COOPERATIVE for a
        cooperative launch; CUDA Driver API "Launch attributes"), so the kernel's CTAs may be scheduled
        before the previous kernel in the stream ends. Only for :attr:`pdl_capable` kernels (they wait in
        ``griddepcontrol.wait`` before reading anything the previous kernels write) on sm_90+.

        Raises:
            PlanError: a zero-sized grid or block (never launched silently); ``pdl`` for a kernel that is
                not PDL-aware.
            TargetError: the driver refused the extended launch (its error named).
        """
        grid = tuple(int(g) for g in (tuple(grid) + (1, 1))[:3])
        block = tuple(int(b) for b in (tuple(block) + (1, 1))[:3])
        if min(grid) < 1 or min(block) < 1:
            raise PlanError(f"kernel {self.name}: empty launch grid={grid} block={block}")
        self.set_dynamic_smem(smem)
        if not pdl:
            self.function(grid, block, tuple(args), shared_mem=int(smem), stream=stream,
                          enable_cooperative_groups=bool(cooperative))
            return
        if not self.pdl_capable:
            raise PlanError(f"kernel {self.name}: programmatic dependent launch asked for a kernel whose source "
                            "does not use NINFER_PDL_ENTRY() (it would read its inputs before they are written)")
        _launch_ex(self.function.ptr, grid, block, args, int(smem), bool(cooperative), stream, self.name)


def ptr(address: int):
    """A raw device address as a kernel argument (for views into a larger allocation)."""
    return np.uint64(address)


def _kernel_param(a):
    """A ctypes object holding one kernel argument: CuPy arrays and np.uint64 as 64-bit pointers/values,
    np.int32 / np.float32 / np.int64 / np.uint32 as themselves."""
    import ctypes

    if hasattr(a, "data") and hasattr(a.data, "ptr"):
        return ctypes.c_uint64(a.data.ptr)
    if isinstance(a, np.uint64):
        return ctypes.c_uint64(int(a))
    if isinstance(a, np.int64):
        return ctypes.c_int64(int(a))
    if isinstance(a, np.int32):
        return ctypes.c_int32(int(a))
    if isinstance(a, np.uint32):
        return ctypes.c_uint32(int(a))
    if isinstance(a, np.float32):
        return ctypes.c_float(float(a))
    raise PlanError(f"kernel argument {a!r} of type {type(a).__name__} has no fixed C type; pass a CuPy array "
                    "or a numpy scalar (np.int32, np.float32, np.uint64)")


def _launch_ex(func_ptr: int, grid, block, args, smem: int, cooperative: bool, stream, name: str) -> None:
    """cuLaunchKernelEx with programmatic stream serialization (and cooperative when asked)."""
    import ctypes

    from cuda.bindings import driver as cu

    held = [_kernel_param(a) for a in args]
    ptrs = (ctypes.c_void_p * max(1, len(held)))(*[ctypes.addressof(h) for h in held])
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = smem
    handle = 0 if stream is None else stream.ptr
    cfg.hStream = cu.CUstream(handle)
    attrs = []
    a = cu.CUlaunchAttribute()
    a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    a.value.programmaticStreamSerializationAllowed = 1
    attrs.append(a)
    if cooperative:
        c = cu.CUlaunchAttribute()
        c.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        c.value.cooperative = 1
        attrs.append(c)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    (err,) = cu.cuLaunchKernelEx(cfg, cu.CUfunction(func_ptr), ctypes.addressof(ptrs), 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise TargetError(f"kernel {name}: cuLaunchKernelEx (PDL{', cooperative' if cooperative else ''}) failed: "
                          f"{err.name} grid={grid} block={block} smem={smem}")
