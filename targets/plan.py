"""Launch plans: pure functions (arch, SM count, kernel resources, problem shape) -> launch geometry.

Types the lowering and the runtime code against:

* :class:`KernelSpec` -- one compilable kernel: template + parameters (its identity, named in ``uri``).
* :class:`~ninferc.targets.cubin.KernelResources` (defined beside its reader, the cubin parser) -- what the
  compiled cubin (or the driver) says the kernel uses.
* :class:`Launch` -- grid, block, dynamic shared memory, cooperative flag, route, split-K, and the
  occupancy numbers it was derived from (CTAs/SM, limiter, cooperative cap, waves).
* :class:`KernelFamily` -- protocol of a kernel family (``targets/kernels/*.py``): the variants a problem
  may launch, and the launch for a token count T. Route selection lives in the family.
* :class:`PlanContext` -- what a family sees: arch, SM count, resources per variant, and the occupancy
  calculator (:mod:`ninferc.targets.occupancy`, the only one).
* :func:`check_launch` -- plan-time launch limits; each violation is a :class:`PlanError` naming kernel,
  target, value and limit.
* :func:`compile_variants` -- render, compile and analyse a family's variants for one target.

A whole model's plan (the one plan type) is :class:`ninferc.targets.model_plan.ModelPlan`, made by
:func:`ninferc.targets.model_plan.plan_model` from these pieces.

Formulas (DESIGN.md section 4): cooperative cap = resident CTAs/SM x SMs; waves = ceil(grid CTAs /
(CTAs/SM x SMs)).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

from ninferc.errors import PlanError
from ninferc.targets.arch import Arch, get_arch
from ninferc.targets.cubin import KernelResources, read_resources
from ninferc.targets.nvrtc import DEFAULT_OPTIONS, CompileResult, compile_cubin
from ninferc.targets.occupancy import Occupancy, occupancy
from ninferc.targets.render import render_template

if TYPE_CHECKING:
    from ninferc.targets.target import Target

# Short names used in URIs; a parameter without one is written as its own name.
_URI_ABBREV = {"threads": "th", "max_tokens": "tok", "rows_per_warp": "rw", "epilogue": "", "mode": ""}


# ------------------------------------------------------------------------------------------------
# kernel identity and resources
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelSpec:
    """One compilable kernel: a template rendered with fixed parameters.

    Attributes:
        family: kernel family name (``"gemv"``).
        template: template file in ``ninferc.templates`` (``"gemv_fma.cu.j2"``).
        entry: ``extern "C"`` symbol of the kernel (derived from the URI by :meth:`make`).
        params: sorted tuple of (name, value) -- the kernel's identity; passed to the template.
        threads: threads per CTA the kernel is built for (its ``__launch_bounds__``).
        cooperative: the kernel contains a grid barrier and must be launched cooperatively.
    """

    family: str
    template: str
    entry: str
    params: tuple[tuple[str, Any], ...]
    threads: int
    cooperative: bool

    @classmethod
    def make(cls, family: str, template: str, params: Mapping[str, Any], threads: int,
             cooperative: bool) -> "KernelSpec":
        """Build a spec; sorts ``params`` and derives ``entry`` from the URI."""
        items = tuple(sorted(params.items()))
        uri = _make_uri(family, items)
        return cls(family, template, re.sub(r"\W", "_", uri), items, int(threads), bool(cooperative))

    @property
    def uri(self) -> str:
        """Readable unique identity naming every specialisation parameter, e.g.
        ``gemv__store_tok4_coop_rw4_th256`` (FlashInfer-style)."""
        return _make_uri(self.family, self.params)

    def param(self, name: str) -> Any:
        """Value of one template parameter (KeyError if absent)."""
        return dict(self.params)[name]

    def render(self) -> str:
        """The kernel's self-contained CUDA C source (template + inlined headers)."""
        return render_template(self.template, {**dict(self.params), "entry": self.entry})


def _make_uri(family: str, params: tuple[tuple[str, Any], ...]) -> str:
    parts = []
    for name, value in params:
        abbr = _URI_ABBREV.get(name, name)
        if isinstance(value, str):
            parts.append(f"{abbr}-{value}" if abbr else value)
        elif isinstance(value, bool):
            parts.append(f"{abbr}{int(value)}")
        else:
            parts.append(f"{abbr}{value}")
    return f"{family}__" + "_".join(parts)


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan, for one token count T.

    Attributes:
        kernel: the kernel launched.
        grid: (x, y, z) CTAs. block: (x, y, z) threads.
        dynamic_smem_bytes: dynamic shared memory per CTA, bytes (opt-in needed above 48 KiB total).
        cooperative: launch with ``cuLaunchCooperativeKernel`` (grid must be <= ``coop_cap``).
        route: the family's route name (e.g. ``"coop_splitk"``, ``"plain"``).
        split_k: K splits (1 = none). tokens: T this launch serves.
        ctas_per_sm: resident CTAs/SM from the occupancy calculator; limiter: what limits it.
        coop_cap: CTAs/SM x SMs (the largest co-resident grid; binding only for cooperative launches).
        waves: ceil(grid CTAs / coop_cap).
        workspace_bytes: global scratch the launch needs (fp32 partials etc.), bytes.
    """

    kernel: KernelSpec
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    cooperative: bool
    route: str
    split_k: int
    tokens: int
    ctas_per_sm: int
    limiter: str
    coop_cap: int
    waves: int
    workspace_bytes: int = 0

    @property
    def ctas(self) -> int:
        """Total CTAs in the grid."""
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        """Threads per CTA."""
        return self.block[0] * self.block[1] * self.block[2]


class PlanContext:
    """What a :class:`KernelFamily` sees while planning: the target, the SM count, the DRAM bandwidth, the
    resources of each variant (by URI) and the occupancy calculator.

    Args:
        arch: target.
        sms: SM count of the SKU or device.
        resources: URI -> :class:`KernelResources` for every variant the family declared.
        bandwidth_gbs: peak DRAM bandwidth of the SKU or device, GB/s (the SKU table's datasheet figure, or
            the device's memory clock x bus width); None when the plan has only an SM count, in which case
            :attr:`bandwidth_per_sm_gbs` is the arch's typical figure
            (:func:`ninferc.targets.skus.typical_bandwidth_per_sm`). Used by cost models that choose between
            variants (the GEMV's, :mod:`ninferc.targets.kernels.gemv`), never by a limit check.

    Raises:
        PlanError: a non-positive SM count or bandwidth.
    """

    def __init__(self, arch: str | Arch, sms: int, resources: Mapping[str, KernelResources],
                 bandwidth_gbs: float | None = None):
        self.arch = get_arch(arch)
        if int(sms) <= 0:
            raise PlanError(f"plan for {self.arch.name}: SM count must be positive, got {sms}")
        if bandwidth_gbs is not None and not bandwidth_gbs > 0:
            raise PlanError(f"plan for {self.arch.name}: DRAM bandwidth must be positive, got {bandwidth_gbs} GB/s")
        self.sms = int(sms)
        self.resources = dict(resources)
        self.bandwidth_gbs = None if bandwidth_gbs is None else float(bandwidth_gbs)

    @classmethod
    def for_target(cls, target: "Target", resources: Mapping[str, KernelResources]) -> "PlanContext":
        """The context of a :class:`~ninferc.targets.target.Target`: its arch, SM count and bandwidth."""
        return cls(target.arch, target.sms, resources, bandwidth_gbs=target.bandwidth_gbs)

    @property
    def bandwidth_per_sm_gbs(self) -> float:
        """DRAM bandwidth per SM, GB/s: the given bandwidth / SMs, else the arch's typical figure."""
        if self.bandwidth_gbs is not None:
            return self.bandwidth_gbs / self.sms
        from ninferc.targets.skus import typical_bandwidth_per_sm

        return typical_bandwidth_per_sm(self.arch.name)

    def resources_of(self, spec: KernelSpec) -> KernelResources:
        """Resources of ``spec``. Raises PlanError if the family did not declare it as a variant."""
        try:
            return self.resources[spec.uri]
        except KeyError:
            raise PlanError(
                f"{spec.uri} on {self.arch.name}: no resources (not among the family's variants)"
            ) from None

    def occupancy(self, spec: KernelSpec, dynamic_smem: int = 0, threads: int | None = None) -> Occupancy:
        """Occupancy of ``spec`` launched with ``threads`` (default its own) and ``dynamic_smem``."""
        r = self.resources_of(spec)
        return occupancy(
            self.arch, threads or spec.threads, r.registers, r.static_smem_bytes, dynamic_smem, barriers=r.barriers
        )

    def cap(self, spec: KernelSpec, dynamic_smem: int = 0) -> int:
        """Cooperative cap of ``spec``: resident CTAs/SM x SMs."""
        return self.occupancy(spec, dynamic_smem).ctas_per_sm * self.sms

    def make_launch(
        self,
        spec: KernelSpec,
        grid: tuple[int, int, int] | int,
        *,
        route: str,
        tokens: int,
        split_k: int = 1,
        dynamic_smem: int = 0,
        workspace_bytes: int = 0,
    ) -> Launch:
        """Assemble a :class:`Launch`, filling CTAs/SM, limiter, cap and waves from the calculator."""
        g = (int(grid), 1, 1) if isinstance(grid, int) else tuple(int(v) for v in grid)
        occ = self.occupancy(spec, dynamic_smem)
        cap = occ.ctas_per_sm * self.sms
        ctas = g[0] * g[1] * g[2]
        return Launch(
            kernel=spec,
            grid=g,
            block=(spec.threads, 1, 1),
            dynamic_smem_bytes=int(dynamic_smem),
            cooperative=spec.cooperative,
            route=route,
            split_k=int(split_k),
            tokens=int(tokens),
            ctas_per_sm=occ.ctas_per_sm,
            limiter=occ.limiter,
            coop_cap=cap,
            waves=-(-ctas // cap) if cap > 0 else 0,
            workspace_bytes=int(workspace_bytes),
        )


@runtime_checkable
class KernelFamily(Protocol):
    """A kernel family (one template, many specialisations) -- implemented in ``targets/kernels/``.

    Attributes:
        name: family name (URI prefix). template: template file name. A family that renders more than one
            template also lists them all in ``templates`` (the GEMM: mma.sync and wgmma); a family whose
            variants depend on the target sets ``arch_variants = True`` and takes ``variants(problem, arch)``
            (:func:`family_variants`).
    """

    name: str
    template: str

    def variants(self, problem: Any) -> list[KernelSpec]:
        """Every kernel that may be launched for ``problem`` (compiled and analysed up front)."""

    def launch(self, problem: Any, tokens: int, ctx: PlanContext) -> Launch:
        """The launch for ``tokens`` (T) on ``ctx``'s target; picks the route (at exactly the
        boundary where the current route stops fitting) and raises PlanError when nothing fits."""

    def sample_problems(self) -> list[Any]:
        """Small problems whose variants cover every template parameter value (for CI compiles)."""


# ------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------


def check_launch(launch: Launch, arch: str | Arch, resources: KernelResources, sms: int | None = None) -> None:
    """Verify a launch against the target's limits and the kernel's resources.

    Checks (CUDA C Programming Guide technical-specification table; cooperative rule from its "Grid
    Synchronization" section): block within max threads/CTA, per-dimension block limits and the
    kernel's launch bounds; grid x <= 2^31-1, y/z <= 65535; static shared <= 48 KiB; static + dynamic
    shared <= the arch's opt-in maximum; at least 1 resident CTA/SM; the launch's CTAs/SM equal the
    calculator's for these resources; a cooperative grid <= CTAs/SM x SMs; a grid-barrier kernel is
    launched cooperatively.

    Args:
        launch: the launch to check.
        arch: the target.
        resources: the kernel's resources (cubin or driver).
        sms: SM count; default derived from ``launch.coop_cap / launch.ctas_per_sm``.

    Raises:
        PlanError: the first violation found; the message names kernel (URI), target, value and limit.
    """
    a = get_arch(arch)
    who = f"{launch.kernel.uri} on {a.name}"

    threads = launch.threads
    if threads > a.max_threads_per_cta:
        raise PlanError(
            f"{who}: block of {threads} threads exceeds the limit of {a.max_threads_per_cta} threads per CTA"
        )
    for axis, (v, lim) in enumerate(zip(launch.block, a.max_block_dims)):
        if v > lim:
            raise PlanError(f"{who}: block dimension {'xyz'[axis]} = {v} exceeds the limit of {lim}")
    if resources.max_threads is not None and threads > resources.max_threads:
        raise PlanError(
            f"{who}: block of {threads} threads exceeds the kernel's launch bounds of {resources.max_threads} threads"
        )
    for axis, (v, lim) in enumerate(zip(launch.grid, a.max_grid_dims)):
        if v < 1:
            raise PlanError(f"{who}: grid dimension {'xyz'[axis]} = {v} must be at least 1")
        if v > lim:
            hint = "; fold it onto x" if axis else ""
            raise PlanError(f"{who}: grid dimension {'xyz'[axis]} = {v} exceeds the limit of {lim}{hint}")
    if resources.static_smem_bytes > a.max_static_smem_per_cta:
        raise PlanError(
            f"{who}: static shared memory {resources.static_smem_bytes} B exceeds the limit of "
            f"{a.max_static_smem_per_cta} B (48 KiB; use dynamic shared memory with the opt-in)"
        )
    total_smem = resources.static_smem_bytes + launch.dynamic_smem_bytes
    if total_smem > a.max_smem_per_cta_optin:
        raise PlanError(
            f"{who}: shared memory per CTA {total_smem} B (dynamic {launch.dynamic_smem_bytes} B + static "
            f"{resources.static_smem_bytes} B) exceeds the opt-in maximum of {a.max_smem_per_cta_optin} B"
        )
    occ = occupancy(a, threads, resources.registers, resources.static_smem_bytes, launch.dynamic_smem_bytes,
                    barriers=resources.barriers)
    if occ.ctas_per_sm == 0:
        lim = {k: v for k, v in occ.limits.items() if v == 0}
        raise PlanError(
            f"{who}: 0 resident CTAs per SM (limited by {', '.join(lim)}: {threads} threads, "
            f"{resources.registers} registers, {occ.smem_per_cta} B shared per CTA); the limit is at least 1"
        )
    if occ.ctas_per_sm != launch.ctas_per_sm:
        raise PlanError(
            f"{who}: launch assumes {launch.ctas_per_sm} resident CTAs/SM but the kernel's resources give "
            f"{occ.ctas_per_sm} (limit: {occ.limiter}); re-plan"
        )
    if sms is None:
        sms = launch.coop_cap // launch.ctas_per_sm if launch.ctas_per_sm else 0
    cap = occ.ctas_per_sm * sms
    if launch.kernel.cooperative and not launch.cooperative:
        raise PlanError(f"{who}: kernel has a grid barrier but the launch is not cooperative (limit: cooperative only)")
    if resources.uses_grid_sync and not launch.cooperative:
        raise PlanError(f"{who}: kernel calls grid.sync() but the launch is not cooperative (limit: cooperative only)")
    if launch.cooperative:
        if not a.cooperative_launch:
            raise PlanError(f"{who}: cooperative launch not supported on {a.name}")
        if launch.ctas > cap:
            raise PlanError(
                f"{who}: cooperative grid of {launch.ctas} CTAs exceeds the cooperative cap of {cap} CTAs "
                f"({occ.ctas_per_sm} CTAs/SM x {sms} SMs, limited by {occ.limiter})"
            )


def family_variants(fam, problem, arch) -> list[KernelSpec]:
    """``fam.variants(problem)``, or ``fam.variants(problem, arch)`` for a family whose kernels depend on the
    target (class attribute ``arch_variants = True``: the GEMM, whose wgmma routes exist on sm_90 only).

    Args:
        fam: a kernel family. problem: its problem. arch: target name or :class:`Arch` (None: portable set).

    Returns:
        The :class:`KernelSpec` list the family may launch for ``problem`` on ``arch``.
    """
    if getattr(fam, "arch_variants", False):
        return fam.variants(problem, arch)
    return fam.variants(problem)


def compile_variants(specs: Sequence[KernelSpec], arch: str | Arch, *, options: tuple[str, ...] = DEFAULT_OPTIONS,
                     jobs: int | None = None, progress=None) -> dict[str, tuple[CompileResult, KernelResources]]:
    """Render, compile (disk-cached) and analyse kernels for one target.

    Args:
        specs: kernels (duplicates by URI are compiled once).
        arch: target.
        options: NVRTC options besides ``-arch``.
        jobs: parallel NVRTC calls (threads; NVRTC releases the GIL); default min(8, len(specs)).
        progress: None, or ``progress(total)`` returning a tqdm-like bar (``update(n)``, ``set_postfix_str(s)``,
            ``close()``) advanced once per kernel, its postfix counting disk-cache hits.

    Returns:
        URI -> (CompileResult, KernelResources of the spec's entry).

    Raises:
        CompileError: NVRTC failure; PlanError: the cubin lacks the expected entry point.
    """

    import threading

    a = get_arch(arch)
    unique = {s.uri: s for s in specs}
    bar = progress(len(unique)) if progress is not None else None
    lock, hits = threading.Lock(), [0]

    def one(spec: KernelSpec):
        res = compile_cubin(spec.render(), a.name, name=spec.uri, options=options)
        kernels = read_resources(res.cubin, a, res.ptx)
        if spec.entry not in kernels:
            raise PlanError(f"{spec.uri} on {a.name}: cubin has no entry {spec.entry!r} (has {sorted(kernels)})")
        if bar is not None:
            with lock:
                hits[0] += bool(res.from_cache)
                bar.set_postfix_str(f"{hits[0]} cached", refresh=False)
                bar.update(1)
        return spec.uri, (res, kernels[spec.entry])

    n = jobs or min(8, max(1, len(unique)))
    try:
        if n == 1 or len(unique) <= 1:
            return dict(one(s) for s in unique.values())
        with ThreadPoolExecutor(max_workers=n) as pool:
            return dict(pool.map(one, unique.values()))
    finally:
        if bar is not None:
            bar.close()


__all__ = [
    "KernelSpec", "KernelResources", "Launch", "PlanContext", "KernelFamily",
    "check_launch", "compile_variants", "family_variants",
]
