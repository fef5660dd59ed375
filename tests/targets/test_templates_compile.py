"""Every template in templates/ compiles with NVRTC for sm_86, sm_89, sm_90 and sm_120a and its resource
usage is read from the cubin. Written over the family registry (targets/kernels FAMILIES), so a new
family is covered as soon as it is registered, and a template no family renders fails here."""

import pytest

from targets_testlib import ALL_ARCHS, family_resources
from ninferc.targets.arch import get_arch
from ninferc.targets.kernels import FAMILIES
from ninferc.targets.occupancy import occupancy
from ninferc.targets.plan import KernelFamily, family_variants
from ninferc.targets.render import template_names


def test_every_template_belongs_to_a_registered_family():
    assert all(isinstance(f, KernelFamily) for f in FAMILIES.values())
    used = {t for f in FAMILIES.values() for t in getattr(f, "templates", (f.template,))}
    orphans = sorted(set(template_names()) - used)
    assert not orphans, (f"templates rendered by no registered family: {orphans}; add targets/kernels/<family>.py "
                         "exporting FAMILY (or FAMILIES) so CI compiles them for every target")
    assert used <= set(template_names())


@pytest.mark.parametrize("arch", ALL_ARCHS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_variants_compile_and_resources_read(family, arch):
    fam = FAMILIES[family]
    res = family_resources(arch)
    specs = {s.uri: s for p in fam.sample_problems() for s in family_variants(fam, p, arch)}
    assert specs and set(specs) <= set(res)
    a = get_arch(arch)
    for uri, spec in specs.items():
        r = res[uri]
        assert 0 < r.registers <= a.max_regs_per_thread, uri
        assert r.static_smem_bytes <= a.max_static_smem_per_cta, uri
        assert r.max_threads in (None, spec.threads) or r.max_threads >= spec.threads, uri
        assert r.local_bytes == 0, f"{uri} spills on {arch}: {r.local_bytes} B"
        assert occupancy(a, spec.threads, r.registers, r.static_smem_bytes, barriers=r.barriers).ctas_per_sm >= 1, uri
