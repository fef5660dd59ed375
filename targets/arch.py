"""Per-architecture hardware limits: the data every occupancy and launch check is derived from.

One frozen :class:`Arch` per supported target (``sm_86``, ``sm_89``, ``sm_90``, ``sm_120a``). Nothing
else in ninferc may hard-code one of these numbers; kernels and plans read them from here.

Sources (every number below cites one of these):

* [PG] CUDA C++ Programming Guide, "Compute Capabilities" appendix, Table "Technical Specifications
  per Compute Capability" (columns 8.6, 8.9, 9.0, 12.0): max threads/CTA 1024, warp size 32,
  resident CTAs/SM (16 / 24 / 32 / 24), resident warps/SM (48 / 48 / 64 / 48), resident threads/SM
  (1536 / 1536 / 2048 / 1536), 64 K 32-bit registers per SM and per CTA, 255 registers/thread,
  shared memory per SM (100 / 100 / 228 / 100 KB), per CTA (99 / 99 / 227 / 99 KB), grid x 2^31-1,
  y/z 65535, block x/y 1024, z 64. Its per-arch sections state that 1 KB of shared memory per CTA is
  reserved for system use (cc >= 8.0), and that static ``__shared__`` arrays are limited to 48 KB
  (more needs dynamic shared memory and an explicit opt-in).
* [OCC] ``cuda_occupancy.h`` (CUDA 13.0 toolkit, /usr/local/cuda/include): shared-memory allocation
  granularity 128 B (cc 8-12), register allocation granularity 256 registers per warp, 4 register
  sub-partitions per SM, per-thread register cap 256 used by its checks, CTA-barrier limit for
  cc >= 9 (available barriers = CTA limit x 2 on cc 9.x, x 1 on cc 12.x), shared-memory carveout
  sizes (cc 8.6/8.9/12.x: 0, 8, 16, 32, 64, 100 KB; cc 9.0: ... up to 228 KB).
* [H200] read off the lent H200 (cc 9.0) with the driver: 2048 threads/SM, 65536 regs/SM,
  32 CTAs/SM, 233472 B shared/SM, 232448 B opt-in shared/CTA, cooperative launch 1.
* [NOTES] ../shared/notes/cubin-resources.md: sm_90 / sm_120a cubins fold the 1 KiB reserved bytes into
  the static-shared section (``.nv.shared.reserved.0`` present); measured on the H200.
* [TG] NVIDIA's tuning guides, section "Unified Shared Memory/L1/Texture Cache" of the Ampere (GA10x, cc 8.6),
  Ada (cc 8.9), Hopper (cc 9.0) and Blackwell (cc 12.0) guides: the L1 data cache and shared memory are one
  on-chip store per SM of 128 KB (cc 8.6 / 8.9 / 12.0) or 256 KB (cc 9.0); what the carveout does not give to
  shared memory is L1.
* [DIE] NVIDIA's architecture whitepapers, the largest die of each target in its full configuration: GA102 (cc 8.6,
  the Ampere GA102 whitepaper: 10,752 CUDA cores = 84 SMs of 128), AD102 (cc 8.9, the Ada Lovelace whitepaper:
  18,432 = 144 SMs), GH100 (cc 9.0, the Hopper whitepaper: 8 GPCs x 9 TPCs x 2 = 144 SMs; products enable 132),
  GB202 (cc 12.0, the RTX Blackwell whitepaper: 192 SMs; the RTX PRO 6000 enables 188). No product of a target has
  more SMs than its largest die, so an SM count above it is a typo (``--sms 1320``), not a GPU.
* Cooperative launch: supported on every device of cc >= 6.0 ([PG] "Grid Synchronization" /
  ``cudaDevAttrCooperativeLaunch``); all four targets qualify.
"""

from __future__ import annotations

from dataclasses import dataclass

from ninferc.errors import TargetError

KiB = 1024


@dataclass(frozen=True)
class Arch:
    """Hardware limits of one compile target (a CUDA compute capability).

    All sizes are in bytes, counts are per SM or per CTA as named. Field sources: see module
    docstring ([PG] table, [OCC] header, [H200] driver read-out).

    Attributes:
        name: target name as passed to NVRTC ``-arch`` (``"sm_86"``, ``"sm_120a"``...).
        cc: compute capability (major, minor).
        warp_size: threads per warp [PG].
        max_threads_per_sm: resident threads per SM [PG].
        max_ctas_per_sm: resident CTAs per SM [PG][OCC].
        regs_per_sm: 32-bit registers per SM [PG].
        regs_per_cta: 32-bit registers a CTA may allocate [PG].
        reg_alloc_unit: registers are allocated per warp in multiples of this many [OCC].
        max_regs_per_thread: architectural cap, 255 [PG] (``cuda_occupancy.h`` checks > 256).
        reg_sub_partitions: register-file sub-partitions per SM; each warp's registers live in one,
            so warps fit per sub-partition [OCC].
        smem_per_sm: shared memory per SM at the maximum carveout [PG][H200].
        smem_carveouts: shared-memory capacities (bytes) the SM can be configured to [OCC].
        l1_smem_per_sm: the SM's unified L1 data cache + shared memory (bytes): L1 is this less the carveout
            the resident kernels' shared memory needs [TG].
        max_smem_per_cta_optin: max shared memory (static + dynamic) one CTA may use after opting in
            with ``cudaFuncAttributeMaxDynamicSharedMemorySize`` [PG][H200].
        max_smem_per_cta_default: per-CTA limit without the opt-in, also the static-shared limit
            (48 KiB) [PG].
        reserved_smem_per_cta: shared memory the driver reserves per resident CTA (1 KiB, cc >= 8.0)
            [PG][OCC].
        smem_alloc_unit: shared memory is allocated per CTA in multiples of this many bytes [OCC].
        max_threads_per_cta: threads per CTA [PG].
        max_block_dims: (x, y, z) block dimension limits [PG].
        max_grid_dims: (x, y, z) grid dimension limits [PG].
        cooperative_launch: ``cuLaunchCooperativeKernel`` supported [PG].
        barrier_factor: for the cc >= 9 CTA-barrier occupancy limit, available named barriers per
            SM = ``max_ctas_per_sm * barrier_factor``; 0 where the rule does not apply [OCC].
        cubin_folds_reserved_smem: the cubin's ``.nv.shared.<k>`` section includes the 1 KiB reserved
            bytes (flagged by ``.nv.shared.reserved.0``) [NOTES].
        pdl: programmatic dependent launch (``cudaLaunchAttributeProgrammaticStreamSerialization``; the next
            kernel's CTAs start while the previous one drains) is available: compute capability 9.0 and newer [PG].
        max_sms: SMs of the target's largest die in its full configuration [DIE]: the most ``--sms`` may say.
        largest_die: that die's name [DIE].
        wgmma: warpgroup MMA (``wgmma.mma_async``) exists: PTX ISA, sm_90a only (arch-specific code, compiled for
            the ``a`` variant, :func:`ninferc.targets.nvrtc.nvrtc_arch`); the GEMM's Hopper routes need it.
    """

    name: str
    cc: tuple[int, int]
    max_threads_per_sm: int
    max_ctas_per_sm: int
    smem_per_sm: int
    max_smem_per_cta_optin: int
    smem_carveouts: tuple[int, ...]
    l1_smem_per_sm: int
    barrier_factor: int
    cubin_folds_reserved_smem: bool
    max_sms: int
    largest_die: str
    warp_size: int = 32
    regs_per_sm: int = 64 * KiB
    regs_per_cta: int = 64 * KiB
    reg_alloc_unit: int = 256
    max_regs_per_thread: int = 255
    reg_sub_partitions: int = 4
    max_smem_per_cta_default: int = 48 * KiB
    reserved_smem_per_cta: int = 1 * KiB
    smem_alloc_unit: int = 128
    max_threads_per_cta: int = 1024
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    cooperative_launch: bool = True
    pdl: bool = False
    wgmma: bool = False

    @property
    def max_warps_per_sm(self) -> int:
        """Resident warps per SM (= max_threads_per_sm / warp_size) [PG]."""
        return self.max_threads_per_sm // self.warp_size

    @property
    def reg_granularity_per_thread(self) -> int:
        """Per-thread register granularity: reg_alloc_unit / warp_size (8 registers) [OCC]."""
        return self.reg_alloc_unit // self.warp_size

    @property
    def max_static_smem_per_cta(self) -> int:
        """Static ``__shared__`` limit per CTA (48 KiB; more must be dynamic + opt-in) [PG]."""
        return self.max_smem_per_cta_default

    @property
    def sm_number(self) -> int:
        """The numeric SM version (86, 89, 90, 120) as stored in cubin ELF ``e_flags``."""
        return self.cc[0] * 10 + self.cc[1]

    def __str__(self) -> str:
        return self.name


_CARVEOUT_100K = tuple(k * KiB for k in (0, 8, 16, 32, 64, 100))
_CARVEOUT_228K = tuple(k * KiB for k in (0, 8, 16, 32, 64, 100, 132, 164, 196, 228))

SM_86 = Arch(
    name="sm_86", cc=(8, 6), max_threads_per_sm=1536, max_ctas_per_sm=16,
    smem_per_sm=100 * KiB, max_smem_per_cta_optin=99 * KiB, smem_carveouts=_CARVEOUT_100K, l1_smem_per_sm=128 * KiB,
    barrier_factor=0, cubin_folds_reserved_smem=False, max_sms=84, largest_die="GA102",
)
SM_89 = Arch(
    name="sm_89", cc=(8, 9), max_threads_per_sm=1536, max_ctas_per_sm=24,
    smem_per_sm=100 * KiB, max_smem_per_cta_optin=99 * KiB, smem_carveouts=_CARVEOUT_100K, l1_smem_per_sm=128 * KiB,
    barrier_factor=0, cubin_folds_reserved_smem=False, max_sms=144, largest_die="AD102",
)
SM_90 = Arch(
    name="sm_90", cc=(9, 0), max_threads_per_sm=2048, max_ctas_per_sm=32,
    smem_per_sm=228 * KiB, max_smem_per_cta_optin=227 * KiB, smem_carveouts=_CARVEOUT_228K, l1_smem_per_sm=256 * KiB,
    barrier_factor=2, cubin_folds_reserved_smem=True, max_sms=144, largest_die="GH100", pdl=True, wgmma=True,
)
SM_120A = Arch(
    name="sm_120a", cc=(12, 0), max_threads_per_sm=1536, max_ctas_per_sm=24,
    smem_per_sm=100 * KiB, max_smem_per_cta_optin=99 * KiB, smem_carveouts=_CARVEOUT_100K, l1_smem_per_sm=128 * KiB,
    barrier_factor=1, cubin_folds_reserved_smem=True, max_sms=192, largest_die="GB202", pdl=True,
)

ARCHS: dict[str, Arch] = {a.name: a for a in (SM_86, SM_89, SM_90, SM_120A)}
"""Supported targets by name, oldest first."""

SUPPORTED = ", ".join(ARCHS)
"""The supported targets as one string for messages and help texts (``"sm_86, sm_89, sm_90, sm_120a"``)."""


def _normalise(name: str) -> str:
    s = str(name).strip().lower().replace("-", "_")
    if s.startswith("sm") and not s.startswith("sm_"):
        s = "sm_" + s[2:]
    if not s.startswith("sm_"):
        s = "sm_" + s.replace(".", "")
    return s


def get_arch(name: str | Arch) -> Arch:
    """Return the :class:`Arch` for a target name.

    Args:
        name: ``"sm_89"`` (also accepted: ``"sm89"``, ``"89"``, ``"8.9"``; ``"sm_120"`` means
            ``sm_120a``, and ``"sm_90a"`` means ``sm_90``, whose arch-specific kernels are compiled for sm_90a
            under that target), or an :class:`Arch` (returned as is).

    Raises:
        TargetError: unknown target; the message names the value and the supported list.
    """
    if isinstance(name, Arch):
        return name
    key = _normalise(name)
    key = {"sm_120": "sm_120a", "sm_90a": "sm_90"}.get(key, key)
    try:
        return ARCHS[key]
    except KeyError:
        raise TargetError(
            f"unknown target {name!r}; supported targets: {SUPPORTED}"
        ) from None


def arch_for_compute_capability(cc: tuple[int, int]) -> Arch:
    """The target whose cubins a device of compute capability ``cc`` runs natively.

    (9, 0) -> sm_90, (8, 9) -> sm_89, (8, 6) -> sm_86, (12, 0) -> sm_120a.

    Raises:
        TargetError: no supported target has exactly this compute capability (names the value and
            the supported capabilities).
    """
    cc = (int(cc[0]), int(cc[1]))
    for arch in ARCHS.values():
        if arch.cc == cc:
            return arch
    supported = ", ".join(f"{a.cc[0]}.{a.cc[1]} ({a.name})" for a in ARCHS.values())
    raise TargetError(
        f"no ninferc target for compute capability {cc[0]}.{cc[1]}; supported: {supported}"
    )


#: the oldest compute capability whose instructions every ninferc template may use: bf16
#: ``mma.sync.m16n8k16``, ``cp.async`` and ``cvt.rn.bf16.f32`` (PTX ISA: sm_80 and newer)
MIN_KERNEL_CC = (8, 0)


def plan_runs_on(plan_arch: str | Arch, device_cc: tuple[int, int]) -> bool:
    """Whether a plan made for ``plan_arch`` can run on a device of compute capability ``device_cc``.

    The artifact holds kernel *sources*, not machine code for one arch: the runtime recompiles them for
    the device's own arch with the plan's options, so any device ninferc has a target description for
    (its limits feed the occupancy calculator) and that executes the templates' instructions
    (:data:`MIN_KERNEL_CC`) can run any plan -- a plan for an older arch on a newer card, and, when
    replayed, a newer card's plan on an older one (every launch is re-checked against the device's own
    limits and the driver before it runs). Devices without a target description are refused.
    """
    arch = get_arch(plan_arch)  # validates the name
    del arch
    if tuple(device_cc) < MIN_KERNEL_CC:
        return False
    return any(a.cc == tuple(device_cc) for a in ARCHS.values())


def require_plan_runs_on(plan_arch: str | Arch, device_cc: tuple[int, int]) -> None:
    """Raise :class:`TargetError` unless :func:`plan_runs_on` (names both capabilities)."""
    arch = get_arch(plan_arch)
    if not plan_runs_on(arch, device_cc):
        supported = ", ".join(f"{a.cc[0]}.{a.cc[1]} ({a.name})" for a in ARCHS.values())
        raise TargetError(
            f"plan for {arch.name} cannot run on a device of cc {device_cc[0]}.{device_cc[1]}: ninferc kernels "
            f"run on devices of cc {supported} (they need cc >= {MIN_KERNEL_CC[0]}.{MIN_KERNEL_CC[1]} and a "
            f"target description)"
        )
