"""Helpers shared by tests/targets (a uniquely named module, imported directly, so it never collides
with another directory's conftest): compiled resources per arch, compiled once per session through the
disk cache."""

from __future__ import annotations

import functools

from ninferc.targets.arch import ARCHS
from ninferc.targets.kernels import FAMILIES
from ninferc.targets.plan import compile_variants, family_variants

ALL_ARCHS = tuple(ARCHS)


@functools.lru_cache(maxsize=None)
def family_resources(arch: str):
    """URI -> KernelResources for every variant of every registered family's sample problems on
    ``arch`` (gemv's K and N are runtime arguments, so these are also the 27B kernels)."""
    specs = [s for fam in FAMILIES.values() for p in fam.sample_problems() for s in family_variants(fam, p, arch)]
    return {uri: r for uri, (_, r) in compile_variants(specs, arch).items()}
