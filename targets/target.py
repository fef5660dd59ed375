"""The target a model is compiled and planned for, parsed once.

A :class:`Target` is the arch (:class:`~ninferc.targets.arch.Arch`), the SKU (:class:`~ninferc.targets.skus.Sku`)
or None, the SM count and the DRAM bandwidth a plan uses, with where the SM count and the bandwidth came from.
:func:`make_target` builds it from the command line's ``--target`` / ``--sku`` / ``--sms`` (the only place those
strings are parsed); ``ninferc compile``, ``plan`` and ``bench --preset`` make one and pass it down
(:func:`ninferc.pipeline.compile_model`, :func:`ninferc.targets.model_plan.plan_model`,
:func:`ninferc.bench.synthetic_artifact`), which read its fields. Functions below the command line that still
accept an arch name (for tests and scripts) convert it here, with :func:`as_target`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ninferc.errors import PlanError
from ninferc.targets.arch import Arch, get_arch
from ninferc.targets.skus import Sku, get_sku, skus_for_arch, typical_bandwidth_per_sm, typical_sku

#: where a Target's SM count came from: the SKU table, ``--sms``, or the device a benchmark runs on
SMS_SOURCES = ("sku", "sms", "device")


@dataclass(frozen=True)
class Target:
    """One compile / plan target.

    Attributes:
        arch: the arch (its limits feed every occupancy and launch check).
        sku: the GPU product, or None when planned for a bare SM count.
        sms: streaming multiprocessors the plan is made for (cooperative caps, waves); positive.
        sms_source: ``"sku"`` (the SKU table's count), ``"sms"`` (given as ``--sms``) or ``"device"`` (the
            device a benchmark runs on).
        bandwidth_gbs: peak DRAM bandwidth, GB/s: the SKU's datasheet figure, or None without a SKU (the GEMV
            cost model then assumes :attr:`bandwidth_per_sm_gbs`, the arch's typical figure per SM).
    """

    arch: Arch
    sku: Sku | None
    sms: int
    sms_source: str
    bandwidth_gbs: float | None

    @property
    def name(self) -> str:
        """The arch's name (``"sm_89"``), as NVRTC's ``-arch`` and the artifact's header write it."""
        return self.arch.name

    @property
    def bandwidth_source(self) -> str:
        """``"SKU datasheet"`` when :attr:`bandwidth_gbs` is the SKU's, else ``"typical"`` (the median per SM of
        the arch's SKUs, :func:`ninferc.targets.skus.typical_sku`)."""
        return "SKU datasheet" if self.bandwidth_gbs is not None else "typical"

    @property
    def bandwidth_per_sm_gbs(self) -> float:
        """DRAM bandwidth per SM, GB/s: :attr:`bandwidth_gbs` / :attr:`sms`, else the arch's typical figure."""
        if self.bandwidth_gbs is not None:
            return self.bandwidth_gbs / self.sms
        return typical_bandwidth_per_sm(self.arch)

    def bandwidth_note(self) -> str:
        """The bandwidth and its source in words, as ``ninferc plan``'s first line prints it."""
        if self.bandwidth_gbs is not None:
            return f"DRAM {self.bandwidth_gbs:,.0f} GB/s (SKU datasheet)"
        return (f"DRAM bandwidth unknown (GEMV cost model assumes {self.bandwidth_per_sm_gbs:.1f} GB/s per SM, the "
                f"{typical_sku(self.arch).name}'s: the median of the {self.arch.name} SKUs)")

    def __str__(self) -> str:
        sku = f" ({self.sku.name})" if self.sku else ""
        return f"{self.arch.name}{sku}, {self.sms} SMs"


def make_target(target: str | Arch, sku: str | Sku | None = None, sms: int | None = None, *,
                sms_source: str | None = None, command: str | None = None) -> Target:
    """Parse a target once: the arch, the SKU (if any), the SM count and the bandwidth.

    Args:
        target: arch name as ``--target`` takes it (``"sm_89"``, ``"89"``, ``"sm_120"``...; see
            :func:`ninferc.targets.arch.get_arch`) or an :class:`Arch`.
        sku: SKU name as ``--sku`` takes it (``"L20"``, ``"rtx 5060 ti"``), a :class:`Sku`, or None.
        sms: SM count (``--sms``); required without a SKU, must equal the SKU's count with one.
        sms_source: where ``sms`` came from (:data:`SMS_SOURCES`); default ``"sku"`` with a SKU, else ``"sms"``.
        command: the command line's name (``"ninferc compile"``), to word the error for neither a SKU nor an SM
            count as that command's options.

    Returns:
        A :class:`Target` whose bandwidth is the SKU's datasheet figure, or None without a SKU.

    Raises:
        TargetError: unknown arch (names it and the supported list), unknown SKU (lists the arch's SKUs), or a SKU
            of another arch (names both).
        PlanError: neither a SKU nor an SM count, an SM count contradicting the SKU (names both), or an SM count
            below 1 or above the arch's largest die (:attr:`Arch.max_sms`).
    """
    a = get_arch(target)
    if sku is None and sms is None:
        if command is not None:
            raise PlanError(f"{command} --target {a.name}: give --sku NAME or --sms N (SKUs for {a.name}: "
                            + ", ".join(s.key for s in skus_for_arch(a)) + ")")
        raise PlanError(f"plan for {a.name}: give a SKU or an SM count (neither was given)")
    sku_obj = sku if isinstance(sku, Sku) else (get_sku(sku, a.name) if sku is not None else None)
    if sku_obj is not None and sku_obj.arch != a.name:
        sku_obj = get_sku(sku_obj.key, a.name)  # raises the cross-arch TargetError
    if sms is not None and int(sms) < 1:
        raise PlanError(f"plan for {a.name}: SM count must be positive, got {sms}")
    if sms is not None and int(sms) > a.max_sms:
        raise PlanError(f"plan for {a.name}: SM count {sms} is more than {a.name}'s largest die has ({a.largest_die}: "
                        f"{a.max_sms} SMs, NVIDIA's whitepaper; targets/arch.py [DIE])")
    if sku_obj is not None and sms is not None and int(sms) != sku_obj.sms:
        raise PlanError(f"plan for {a.name}: --sms {sms} contradicts SKU {sku_obj.name} ({sku_obj.sms} SMs)")
    source = sms_source or ("sku" if sku_obj is not None else "sms")
    if source not in SMS_SOURCES:
        raise PlanError(f"plan for {a.name}: SM count source {source!r} is not one of {', '.join(SMS_SOURCES)}")
    return Target(arch=a, sku=sku_obj, sms=int(sms) if sms is not None else sku_obj.sms, sms_source=source,
                  bandwidth_gbs=sku_obj.bandwidth_gbs if sku_obj is not None else None)


def as_target(target: Target | str | Arch, sku: str | Sku | None = None, sms: int | None = None) -> Target:
    """``target`` itself when it is a :class:`Target` (then ``sku`` and ``sms`` must be None: the Target has
    them), else :func:`make_target` ``(target, sku, sms)`` -- the one conversion for functions that also accept an
    arch name.

    Raises:
        PlanError: a Target given with a separate SKU or SM count; as :func:`make_target` otherwise.
    """
    if isinstance(target, Target):
        if sku is not None or sms is not None:
            raise PlanError(f"plan for {target.name}: a Target carries its SKU and SM count; got also sku={sku!r}, "
                            f"sms={sms!r}")
        return target
    return make_target(target, sku, sms)
