"""THE occupancy calculator: resident CTAs per SM for a kernel on an arch, and what limits it.

This is the single source of truth for every cooperative cap and wave count in ninferc. It reproduces
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` / ``cuOccupancyMaxActiveBlocksPerMultiprocessor``
following the rules of NVIDIA's ``cuda_occupancy.h`` (CUDA 13.0) for cc 8.x / 9.x / 12.x:

* threads (warps): ``floor(max_warps_per_sm / ceil(threads / 32))``; 0 when ``threads`` exceeds the
  per-CTA maximum.
* CTAs: the per-SM resident-CTA limit.
* registers: registers per warp = ``regs * 32`` rounded up to the 256-register allocation unit;
  warps fit per register-file sub-partition (``regs_per_sm / 4 // regs_per_warp``) and CTAs =
  ``warps_per_sub_partition * 4 // warps_per_cta``. 0 when ``regs > max_regs_per_thread``, when the
  CTA's registers (per-warp allocation x warps rounded up to a multiple of 4, the hardware check)
  exceed ``regs_per_cta``.
* shared memory: per CTA = static + dynamic + 1 KiB driver reservation, rounded up to 128 B; SM
  capacity = the carveout preference (the default preference means the maximum carveout), or, if that
  cannot hold one CTA, the CTA's need rounded up to the next carveout size. 0 when the CTA exceeds the
  per-CTA limit (48 KiB + reserved without opt-in, the opt-in maximum + reserved with it) or dynamic
  exceeds the function's max-dynamic attribute.
* barriers (cc >= 9 only, when the kernel uses named barriers): ``max_ctas_per_sm * factor //
  barriers`` (factor 2 on cc 9.x, 1 on cc 12.x).

The result is the minimum; the limiter names every limit equal to it (``"registers"``, ``"threads"``,
``"shared_memory"``, ``"ctas"``, ``"barriers"``, joined by ``+`` on ties). Not modelled: the
"virtual resource" limit of cc 10-12 (128 per SM, used by kernels with cluster/TMEM-style resources;
0 for ordinary kernels, as the driver reports for ours) and partitioned global caching (cc 5.2 only).
"""

from __future__ import annotations

from dataclasses import dataclass

from ninferc.errors import PlanError
from ninferc.targets.arch import Arch, get_arch

LIMITERS = ("threads", "registers", "shared_memory", "ctas", "barriers")
"""Names of the occupancy limits, in the order used for ties."""

_UNLIMITED = 1 << 30


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """Resident CTAs per SM and the per-limit breakdown.

    Attributes:
        ctas_per_sm: resident CTAs per SM (the minimum of ``limits``).
        limiter: the limit(s) equal to the minimum, ``+``-joined in :data:`LIMITERS` order.
        limits: CTAs/SM allowed by each limit (``barriers`` only when it applies).
        warps_per_cta: ``ceil(threads / warp_size)``.
        regs_per_warp: registers allocated per warp (after rounding to the allocation unit).
        smem_per_cta: shared bytes allocated per CTA (static + dynamic + reserved, rounded).
        smem_per_sm: shared-memory capacity per SM the calculation used (bytes).
    """

    ctas_per_sm: int
    limiter: str
    limits: dict
    warps_per_cta: int
    regs_per_warp: int
    smem_per_cta: int
    smem_per_sm: int

    @property
    def active_warps(self) -> int:
        """Resident warps per SM at this occupancy."""
        return self.ctas_per_sm * self.warps_per_cta


def _carveout_capacity(arch: Arch, need: int, carveout_percent: int | None) -> int:
    """Shared-memory bytes per SM available for a CTA needing ``need`` bytes ([OCC] rules)."""
    if carveout_percent is None or carveout_percent < 0:
        preference = arch.smem_per_sm  # SHAREDMEM_CARVEOUT_DEFAULT: the maximum carveout
    else:
        preference = carveout_percent * arch.smem_per_sm // 100
    preference = _align_carveout(arch, preference)
    if preference >= need:
        return preference
    return _align_carveout(arch, need)


def _align_carveout(arch: Arch, size: int) -> int:
    for cap in arch.smem_carveouts:
        if size <= cap:
            return cap
    return arch.smem_carveouts[-1]


def occupancy(
    arch: str | Arch,
    threads: int,
    registers: int,
    static_smem: int = 0,
    dynamic_smem: int = 0,
    *,
    barriers: int = 0,
    max_dynamic_smem: int | None = None,
    carveout_percent: int | None = None,
) -> Occupancy:
    """Resident CTAs per SM for a kernel launch, exactly as the CUDA occupancy API computes it.

    Args:
        arch: target (name or :class:`Arch`).
        threads: threads per CTA (block x*y*z).
        registers: registers per thread (from the cubin, EIATTR_REGCOUNT).
        static_smem: static shared bytes per CTA (cubin, reserved 1 KiB already removed).
        dynamic_smem: dynamic shared bytes per CTA at launch.
        barriers: named barriers the kernel uses (cubin EIATTR_NUM_BARRIERS); matters on cc >= 9.
        max_dynamic_smem: the function's ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` attribute. Default: what
            ninferc's runtime sets, i.e. exactly ``dynamic_smem`` when static + dynamic exceeds the
            48 KiB default (the opt-in), otherwise the driver default ``48 KiB - static``.
        carveout_percent: ``PREFERRED_SHARED_MEMORY_CARVEOUT`` (0-100); None = driver default.

    Returns:
        :class:`Occupancy`; ``ctas_per_sm`` may be 0 (the launch cannot run at all).

    Raises:
        PlanError: non-positive thread count or negative sizes.
    """
    a = get_arch(arch)
    if threads <= 0 or registers < 0 or static_smem < 0 or dynamic_smem < 0:
        raise PlanError(
            f"occupancy on {a.name}: invalid launch (threads={threads}, registers={registers}, "
            f"static_smem={static_smem}, dynamic_smem={dynamic_smem})"
        )
    warps = -(-threads // a.warp_size)

    # threads / warps
    lim_threads = 0 if threads > a.max_threads_per_cta else a.max_warps_per_sm // warps

    # CTA slots
    lim_ctas = a.max_ctas_per_sm

    # registers
    regs_per_warp = _round_up(registers * a.warp_size, a.reg_alloc_unit)
    regs_cta_hw = regs_per_warp * _round_up(warps, a.reg_sub_partitions)
    if registers > a.max_regs_per_thread or regs_cta_hw > a.regs_per_cta or regs_per_warp * warps > a.regs_per_cta:
        lim_regs = 0
    elif regs_per_warp == 0:
        lim_regs = _UNLIMITED
    else:
        warps_per_sub = (a.regs_per_sm // a.reg_sub_partitions) // regs_per_warp
        lim_regs = warps_per_sub * a.reg_sub_partitions // warps

    # shared memory
    default_limit = a.max_smem_per_cta_default
    if max_dynamic_smem is None:
        max_dynamic_smem = dynamic_smem if static_smem + dynamic_smem > default_limit else default_limit - static_smem
    smem_cta = _round_up(static_smem + a.reserved_smem_per_cta + dynamic_smem, a.smem_alloc_unit)
    max_usage = static_smem + a.reserved_smem_per_cta + max_dynamic_smem
    per_cta_limit = (a.max_smem_per_cta_optin if max_usage > default_limit else default_limit) + a.reserved_smem_per_cta
    if dynamic_smem > max_dynamic_smem or smem_cta > per_cta_limit:
        lim_smem, sm_capacity = 0, 0
    else:
        sm_capacity = _carveout_capacity(a, smem_cta, carveout_percent)
        lim_smem = sm_capacity // smem_cta if smem_cta else _UNLIMITED

    limits = {"threads": lim_threads, "registers": lim_regs, "shared_memory": lim_smem, "ctas": lim_ctas}
    if a.barrier_factor and barriers > 0:
        limits["barriers"] = a.max_ctas_per_sm * a.barrier_factor // barriers
    ctas = min(limits.values())
    limiter = "+".join(name for name in LIMITERS if limits.get(name) == ctas)
    return Occupancy(
        ctas_per_sm=ctas,
        limiter=limiter,
        limits=limits,
        warps_per_cta=warps,
        regs_per_warp=regs_per_warp,
        smem_per_cta=smem_cta,
        smem_per_sm=sm_capacity,
    )


def l1_left(arch: str | Arch, occ: Occupancy) -> int:
    """Bytes of the SM's unified L1 / shared memory left to the L1 data cache while ``occ.ctas_per_sm`` CTAs of
    ``occ.smem_per_cta`` shared bytes each are resident: ``Arch.l1_smem_per_sm`` ([TG] in ninferc.targets.arch) less
    the smallest carveout ([OCC]) that holds them. Under programmatic dependent launch the SM does not drain between
    kernels, so the kernels after these run with this L1 too (bench/NOTES.md run 237: the GEMVs after the staged
    ``attn_decode``, which left 28 KiB, read their x from L2 and lost 1.4 ms per 4-token bf16 step on an H100).

    Returns:
        Bytes (>= 0); the whole ``l1_smem_per_sm`` with 0 resident CTAs (every CTA holds at least the 1 KiB the
        driver reserves).
    """
    a = get_arch(arch)
    need = occ.ctas_per_sm * occ.smem_per_cta
    return max(0, a.l1_smem_per_sm - (_align_carveout(a, need) if need else 0))


def cooperative_cap(occ: Occupancy | int, sms: int) -> int:
    """Largest cooperative grid (CTAs) that can be co-resident: CTAs/SM x SMs (CUDA Programming
    Guide, "Grid Synchronization": a cooperative grid may not exceed the resident capacity)."""
    per_sm = occ.ctas_per_sm if isinstance(occ, Occupancy) else int(occ)
    return per_sm * int(sms)


def waves(grid_ctas: int, ctas_per_sm: int, sms: int) -> int:
    """Waves = ceil(grid CTAs / (CTAs/SM x SMs)); 0 for an empty grid.

    Raises:
        PlanError: zero resident CTAs per SM with a non-empty grid (the launch cannot run).
    """
    if grid_ctas <= 0:
        return 0
    cap = ctas_per_sm * sms
    if cap <= 0:
        raise PlanError(f"waves: 0 resident CTAs/SM (x {sms} SMs) cannot run a grid of {grid_ctas}")
    return -(-grid_ctas // cap)
