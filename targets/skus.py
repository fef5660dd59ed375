"""GPU SKUs (products) per target: SM count, memory, bandwidth, L2 — the per-card data a plan uses.

The SM count is the only SKU number a plan depends on (cooperative caps = CTAs/SM x SMs, waves);
memory, bandwidth and L2 feed the memory plan and the roofline in benchmarks.

Units: ``memory_gib`` is the vendor's capacity figure (GDDR boards: binary GiB; the H200's
"141 GB" HBM3e is quoted as given), ``bandwidth_gbs`` is the vendor's peak DRAM bandwidth in GB/s
(10^9 B/s), ``l2_mib`` the L2 size in MiB. Each entry's ``source`` names where its SM count and
bandwidth were checked (searched 2026-11-29; spec databases quoted are TechPowerUp-derived unless
stated). Entries marked "unverified" in ``source`` had one figure that could not be confirmed from
two independent sources; see that note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ninferc.errors import TargetError
from ninferc.targets.arch import ARCHS, Arch, get_arch


@dataclass(frozen=True)
class Sku:
    """One GPU product.

    Attributes:
        key: canonical short name (``"rtx4090"``, ``"l20"``, ``"h200"``).
        name: marketing name.
        arch: target name (``"sm_89"``...).
        sms: streaming multiprocessors enabled on this product.
        memory_gib: device memory (see module docstring for units).
        bandwidth_gbs: peak DRAM bandwidth, GB/s.
        l2_mib: L2 cache, MiB.
        source: where the numbers were checked.
        aliases: other accepted short names (already normalised).
    """

    key: str
    name: str
    arch: str
    sms: int
    memory_gib: float
    bandwidth_gbs: float
    l2_mib: float
    source: str
    aliases: tuple[str, ...] = field(default=())


SKUS: tuple[Sku, ...] = (
    # ---- sm_86 (Ampere GA10x) ----
    Sku("rtx3090", "GeForce RTX 3090", "sm_86", 82, 24, 936, 6,
        "Tom's Hardware RTX 3090 spec table (82 SMs, 10496 cores, 936 GB/s, 6 MB L2); "
        "NVIDIA RTX 30 launch: GA102, 82 SMs", ("3090",)),
    Sku("rtx3090ti", "GeForce RTX 3090 Ti", "sm_86", 84, 24, 1008, 6,
        "Tom's Hardware RTX 4080 review table (3090 Ti: 84 SMs, 21 Gbps x 384-bit, 6 MB L2); "
        "TweakTown: 84 SMs, 1008 GB/s", ("3090ti",)),
    Sku("a10", "NVIDIA A10", "sm_86", 72, 24, 600, 6,
        "TechPowerUp-derived spec DB (GA102-890: 72 SMs, 9216 cores, 600.2 GB/s, 6 MB L2); "
        "Baseten A10 vs A10G: 24 GB GDDR6, 600 GB/s"),
    # ---- sm_89 (Ada) ----
    Sku("rtx4090", "GeForce RTX 4090", "sm_89", 128, 24, 1008, 72,
        "Tom's Hardware RTX 4080 review table (4090: 128 SMs, 16384 shaders, 72 MB L2, "
        "1008 GB/s)", ("4090",)),
    Sku("l20", "NVIDIA L20", "sm_89", 92, 48, 864, 96,
        "TopCPU/TechPowerUp-derived DB (AD102: 92 SMs, 11776 cores, 864 GB/s, 96 MB L2); "
        "technical.city: 48 GB GDDR6 384-bit 864 GB/s"),
    Sku("l40s", "NVIDIA L40S", "sm_89", 142, 48, 864, 96,
        "NVIDIA L40S datasheet (18176 CUDA cores = 142 SMs x 128, 142 RT cores, 864 GB/s); "
        "TopCPU L40 entry: 96 MB L2 (one DB lists 48 MB: L2 unverified)"),
    Sku("rtx4080super", "GeForce RTX 4080 SUPER", "sm_89", 80, 16, 736, 64,
        "TweakTown: RTX 4080 SUPER 736 GB/s; AD103 80 SMs / 10240 cores (wccftech); "
        "AD103 64 MB L2", ("4080super", "rtx4080s")),
    Sku("l4", "NVIDIA L4", "sm_89", 58, 24, 300, 48,
        "TechPowerUp-derived DB: 7424 shading units (= 58 SMs x 128), FP32 30.29 TFLOPS at "
        "2040 MHz (= 58 x 128 x 2 x 2.04 GHz), 300.1 GB/s, 48 MB L2. Unverified: the same DBs "
        "list 'SM count 60' and NVIDIA marketing 7680 cores; 58 follows the brief and the FP32 rate"),
    # ---- sm_90 (Hopper) ----
    Sku("h100sxm", "NVIDIA H100 SXM5", "sm_90", 132, 80, 3350, 50,
        "NVIDIA H100 datasheet via HPCtech: SXM 132 SMs, 3350 GB/s, 50 MB L2; "
        "TechPowerUp GTC 2022 news: SXM5 132 SMs", ("h100", "h100sxm5")),
    Sku("h100pcie", "NVIDIA H100 PCIe", "sm_90", 114, 80, 2000, 50,
        "NVIDIA H100 datasheet via HPCtech (the h100sxm entry's source): PCIe 114 SMs (57 TPCs), 80 GB HBM2e, 2000 "
        "GB/s, 50 MB L2; NVIDIA H100 PCIe product brief PB-11133-001: more than 2,000 GB/s. (`--sku h100` is the SXM5)",
        ("h100pcie5",)),
    Sku("h200", "NVIDIA H200 SXM", "sm_90", 132, 141, 4800, 60,
        "lent H200 driver read-out: 132 SMs, 60 MiB L2; NVIDIA: 141 GB HBM3e, 4.8 TB/s",
        ("h200sxm",)),
    Sku("h20", "NVIDIA H20", "sm_90", 78, 96, 4000, 60,
        "Geekbench 6 listing via press (78 SMs); 96 GB HBM3 at 4.0 TB/s (willitrunai, "
        "unanswered.io); 60 MB L2 (single source: L2 unverified)"),
    # ---- sm_120a (Blackwell GB20x) ----
    Sku("rtx5090", "GeForce RTX 5090", "sm_120a", 170, 32, 1792, 96,
        "Linux Format / Tom's Hardware review specs (GB202: 170 SMs, 21760 shaders, 96 MB L2, "
        "1792 GB/s); Spheron datasheet", ("5090",)),
    Sku("rtx5080", "GeForce RTX 5080", "sm_120a", 84, 16, 960, 64,
        "TechPowerUp RTX 5080 FE review (GB203 full: 84 SMs, 10752 cores, 64 MB L2); "
        "30 Gbps x 256-bit = 960 GB/s (TweakTown/BenchLife)", ("5080",)),
    Sku("rtx5070ti", "GeForce RTX 5070 Ti", "sm_120a", 70, 16, 896, 48,
        "Review spec table (70 SMs, 8960 cores); 28 Gbps x 256-bit = 896 GB/s (club386); "
        "48 MB L2 (GB203 cut: L2 unverified)", ("5070ti",)),
    Sku("rtx5060ti", "GeForce RTX 5060 Ti", "sm_120a", 36, 16, 448, 32,
        "Review spec table (GB206: 36 SMs, 4608 cores); 28 Gbps x 128-bit = 448 GB/s "
        "(Tom's Hardware, Ars); 32 MB L2 (GB206, TechPowerUp-derived DB); 8 GB variant exists",
        ("5060ti",)),
    Sku("rtx5090laptop", "GeForce RTX 5090 Laptop GPU", "sm_120a", 82, 24, 896, 64,
        "hmc-tech spec DB: 10496 shaders (= 82 SMs x 128), 24 GB GDDR7, 256-bit; "
        "28 Gbps x 256-bit = 896 GB/s; 64 MB L2 (GB203: L2 unverified)",
        ("5090laptop", "rtx5090mobile", "rtx5090m")),
    Sku("rtxpro6000", "NVIDIA RTX PRO 6000 Blackwell", "sm_120a", 188, 96, 1792, 128,
        "GTC 2025 coverage: 188 of 192 GB202 SMs, 24064 cores, 96 GB GDDR7 512-bit, 1792 GB/s, "
        "128 MB L2", ("rtxpro6000blackwell", "pro6000")),
)
"""Every SKU ninferc knows, grouped by arch (oldest first)."""


def _norm(name: str) -> str:
    s = re.sub(r"[\s_\-]+", "", str(name).lower())
    for prefix in ("nvidia", "geforce"):
        if s.startswith(prefix):
            s = s[len(prefix):]
    return s


_BY_NAME: dict[str, Sku] = {}
for _s in SKUS:
    for _k in (_s.key, _norm(_s.name), *_s.aliases):
        _BY_NAME.setdefault(_norm(_k), _s)


def skus_for_arch(arch: str | Arch) -> list[Sku]:
    """All SKUs of one target, in table order. Raises TargetError for an unknown arch."""
    a = get_arch(arch)
    return [s for s in SKUS if s.arch == a.name]


def typical_sku(arch: str | Arch) -> Sku:
    """The SKU of ``arch`` whose DRAM bandwidth per SM (``bandwidth_gbs / sms``) is the median of the arch's SKUs
    (the upper median for an even count): the card a plan made for a bare SM count (``--sms``, no SKU) takes its
    bandwidth per SM from.

    Raises:
        TargetError: unknown arch, or an arch with no SKU in the table.
    """
    per = sorted(skus_for_arch(arch), key=lambda s: s.bandwidth_gbs / s.sms)
    if not per:
        raise TargetError(f"no SKU of {arch} in the table: no typical bandwidth per SM")
    return per[len(per) // 2]


def typical_bandwidth_per_sm(arch: str | Arch) -> float:
    """What a plan made for a bare SM count (``--sms``, no SKU) assumes about the DRAM bandwidth each SM can draw
    on, GB/s per SM: :func:`typical_sku`'s ``bandwidth_gbs / sms`` (the median over the SKUs of ``arch``).

    Raises:
        TargetError: unknown arch, or an arch with no SKU in the table.
    """
    s = typical_sku(arch)
    return s.bandwidth_gbs / s.sms


def get_sku(name: str, arch: str | Arch | None = None) -> Sku:
    """Look a SKU up by short name, case/space/dash-insensitive (``"L20"``, ``"rtx-4090"``,
    ``"RTX 5090 Laptop"``).

    Args:
        name: SKU name or alias.
        arch: the requested target (name or :class:`~ninferc.targets.arch.Arch`); when given, the SKU must
            belong to it.

    Raises:
        TargetError: unknown SKU (lists the known SKUs of ``arch``, or all), or a SKU of another
            arch than ``arch`` (names both).
    """
    sku = _BY_NAME.get(_norm(name))
    a = get_arch(arch) if arch is not None else None
    if sku is None:
        pool = skus_for_arch(a.name) if a else list(SKUS)
        where = f" for {a.name}" if a else ""
        raise TargetError(
            f"unknown SKU {name!r}{where}; known SKUs{where}: "
            + ", ".join(f"{s.key} ({s.name})" for s in pool)
        )
    if a is not None and sku.arch != a.name:
        raise TargetError(
            f"SKU {name!r} ({sku.name}) is {sku.arch}, not the requested target {a.name}; "
            f"SKUs for {a.name}: " + ", ".join(s.key for s in skus_for_arch(a.name))
        )
    return sku


assert all(s.arch in ARCHS for s in SKUS)
