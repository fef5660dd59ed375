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


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_bf16_unpacked_gemv_variants_compile_without_local_memory(arch):
    """The bf16 GEMV variants with the weights converted once per vector (``GemvTuning.bf16_unpack_tiles``, (4,) in
    the registered family too, which takes them where K is not a multiple of 64; here tensor cores off): every plain shape at the 4-token tile of the sample problems and the 27B gate|up /
    down, no local memory, at least one CTA per SM; the 8-token tile is refused (its 512-thread cooperative variants
    spill)."""
    from ninferc.errors import PlanError
    from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem, GemvTuning
    from ninferc.targets.plan import compile_variants

    with pytest.raises(PlanError, match="bf16_unpack_tiles"):
        GemvTuning(bf16_unpack_tiles=(4, 8))
    fam = GemvFamily(GemvTuning(bf16_unpack_tiles=(4,), bf16_mma_tiles=()))
    probs = [p for p in fam.sample_problems() if p.wfmt == "bf16"] + [
        GemvProblem(5120, 17408, "swiglu", in_norm="parts"), GemvProblem(17408, 5120, "add_norm_parts")]
    specs = [s for p in probs for s in family_variants(fam, p, arch) if dict(s.params).get("unpack_w")]
    assert {s.param("max_tokens") for s in specs} == {4}
    a = get_arch(arch)
    by_uri = {s.uri: s for s in specs}
    for uri, (_, r) in compile_variants(specs, arch).items():
        spec = by_uri[uri]
        assert r.local_bytes == 0, f"{uri} spills on {arch}: {r.local_bytes} B"
        assert occupancy(a, spec.threads, r.registers, r.static_smem_bytes, barriers=r.barriers).ctas_per_sm >= 1, uri


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_trace_probe_kernels_compile_and_match_the_probe(arch):
    """The device probes' kernels (attn_decode, staged and not, and the gdn_recurrent decode kernel, each with the probe's
    trace hooks: bench/attn_trace_probe.py traced_attn_spec / traced_gdn_spec; and the 27B w8 gate|up dp GEMV with the
    probe's hooks: bench/dp_trace_probe.py traced_gemv_spec; never planned) compile for every target without local
    memory, keep
    the planned kernel's CTAs per SM, and declare the record array and counter bench/attn_trace_probe.py reads, with
    the size and record width it assumes."""
    import re
    import sys
    from pathlib import Path

    from ninferc.targets.kernels import attention as A
    from ninferc.targets.kernels import gdn
    from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem
    from ninferc.targets.plan import compile_variants

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from attn_trace_probe import FAMILY_TRACES, traced_attn_spec, traced_gdn_spec
    from dp_trace_probe import traced_gemv_spec

    a = get_arch(arch)
    big_attn = A.AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, page_size=64, max_pages=72)
    big_gdn = gdn.GdnProblem(hk=16, hv=48, dk=128, dv=128, width=4)
    pairs = [(traced_attn_spec(A.AttnDecodeFamily().spec(big_attn, st)), A.AttnDecodeFamily().spec(big_attn, st),
              A.AttnDecodeFamily().dynamic_smem_bytes(big_attn, st)) for st in (False, True)]
    pairs.append((traced_gdn_spec(gdn.GdnRecurrentFamily().spec(big_gdn)), gdn.GdnRecurrentFamily().spec(big_gdn), 0))
    gate_up = GemvProblem(5120, 17408, "swiglu", "w8", in_norm="parts")
    # the 256-thread carry variant, the one the sm_90 plan takes for this GEMV, on sm_90 (the H200 the probe runs on):
    # there its stamps keep 3 CTAs/SM; elsewhere, and without the carry, a traced kernel can lose one (NVRTC 13.5: sm_86
    # / 89 carry 4 -> 3, sm_90 no carry 3 -> 2), which the probe's output states
    gemv_pairs = [(traced_gemv_spec(p), p, 0) for p in GemvFamily().variants(gate_up)
                  if dict(p.params).get("dp") and dict(p.params).get("carry") and p.threads == 256
                  and p.param("max_tokens") == 1]
    assert len(gemv_pairs) == 1
    if arch == "sm_90":
        pairs += gemv_pairs
    res = compile_variants([s for p in pairs for s in p[:2]], arch)
    for traced, planned, dyn in pairs:
        rt, rp = res[traced.uri][1], res[planned.uri][1]
        assert rt.local_bytes == 0, (traced.uri, rt)
        occ = [occupancy(a, s.threads, r.registers, r.static_smem_bytes, dyn, barriers=r.barriers).ctas_per_sm
               for s, r in ((traced, rt), (planned, rp))]
        assert occ[0] == occ[1], (traced.uri, occ)
        array, counter, max_records, phases, _, words, t_col, sm_col = FAMILY_TRACES[traced.family]
        assert t_col + len(phases) <= words and sm_col < words and not t_col <= sm_col < t_col + len(phases)
        src = traced.render()
        m = re.search(rf"__device__ unsigned long long {array}\[(\w+) \* (\w+)\];", src)
        assert m and f"__device__ unsigned int {counter};" in src, traced.uri
        consts = {}  # constexpr int a = 1[, b = 2];
        for decl in re.findall(r"constexpr (?:unsigned )?int ([^;]+);", src):
            for item in decl.split(","):
                name, _, value = item.partition("=")
                if value.strip().isdigit():
                    consts[name.strip()] = int(value)
        size, width = (int(consts.get(g, g)) for g in m.groups())
        assert (size, width) == (max_records, words), (traced.uri, size, width)
