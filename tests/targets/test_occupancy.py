"""The occupancy calculator: known answers, and a cross-product against an independent brute-force
simulation of the CUDA rules written here from the CUDA C Programming Guide's technical-specification
table and cuda_occupancy.h's allocation rules (not from ninferc.targets.arch)."""

import itertools

import pytest

from ninferc.errors import PlanError
from ninferc.targets.occupancy import cooperative_cap, l1_left, occupancy, waves

KIB = 1024


# ---- known answers (issue 3) --------------------------------------------------------------------

def test_sm89_512_threads_74_regs_is_one_cta_by_registers():
    occ = occupancy("sm_89", 512, 74)
    assert occ.ctas_per_sm == 1 and occ.limiter == "registers"
    assert occ.regs_per_warp == 2560  # 74 -> 80 per thread


def test_sm89_256_threads_65_regs_is_three_by_registers():
    occ = occupancy("sm_89", 256, 65)
    assert occ.ctas_per_sm == 3 and occ.limiter == "registers"
    assert occ.regs_per_warp == 2304  # 65 -> 72 per thread; 7 warps per sub-partition, 28 per SM
    assert occ.limits["registers"] * occ.warps_per_cta <= 28


def test_sm86_256_threads_65_regs_40k_shared_is_two_by_shared_memory():
    occ = occupancy("sm_86", 256, 65, 40 * KIB)
    assert occ.ctas_per_sm == 2 and occ.limiter == "shared_memory"
    assert occ.smem_per_cta == 40 * KIB + KIB


def test_sm90_128_threads_45056_shared_is_five():
    occ = occupancy("sm_90", 128, 32, 45056)
    assert occ.ctas_per_sm == 5 and occ.limiter == "shared_memory"


def test_limits_and_zero_cases():
    assert occupancy("sm_89", 1024, 32).limiter == "threads"  # 32 warps, 48 per SM -> 1
    assert occupancy("sm_90", 32, 16).limiter == "ctas"
    assert occupancy("sm_89", 1056, 16).ctas_per_sm == 0  # > 1024 threads per CTA
    assert occupancy("sm_89", 1024, 255).ctas_per_sm == 0  # 8192 regs/warp x 32 warps > 64K per CTA
    assert occupancy("sm_89", 256, 32, 0, 100 * KIB).ctas_per_sm == 0  # over the 99 KiB opt-in
    # dynamic above 48 KiB counts as opted in (the runtime sets the attribute); explicit smaller attribute -> 0
    assert occupancy("sm_89", 256, 32, 0, 60 * KIB).ctas_per_sm == 1
    assert occupancy("sm_89", 256, 32, 0, 60 * KIB, max_dynamic_smem=48 * KIB).ctas_per_sm == 0
    # sm_120 barrier rule: 24 CTAs x 1 / 2 barriers = 12
    occ = occupancy("sm_120a", 32, 16, barriers=2)
    assert occ.ctas_per_sm == 12 and occ.limiter == "barriers"
    assert occupancy("sm_90", 32, 16, barriers=2).ctas_per_sm == 32  # 32 x 2 / 2


def test_carveout_preference():
    # preference 0 % -> carveout rounds up to the CTA's need (41 KiB -> 64 KiB): 1 CTA
    assert occupancy("sm_86", 256, 32, 40 * KIB, carveout_percent=0).ctas_per_sm == 1
    assert occupancy("sm_86", 256, 32, 40 * KIB, carveout_percent=100).ctas_per_sm == 2


def test_l1_left_is_the_unified_store_less_the_carveout_the_resident_ctas_need():
    # sm_90 (256 KiB of L1 + shared memory per SM), the 27B verify step's staged attn_decode (127 registers, 1,568 B
    # static): the page tile's 64 KiB of K / V, 3 CTAs x 68,128 B -> the 228 KiB carveout, 28 KiB of L1; the
    # half-page tile's 32 KiB, 4 CTAs (registers) x 35,360 B -> 164 KiB, 92 KiB of L1
    page = occupancy("sm_90", 128, 127, 1_568, 65_536)
    assert page.ctas_per_sm == 3 and l1_left("sm_90", page) == 28 * KIB
    half = occupancy("sm_90", 128, 127, 1_568, 32_768)
    assert half.ctas_per_sm == 4 and l1_left("sm_90", half) == 92 * KIB
    # no shared memory of its own: 16 CTAs x the 1 KiB reserved -> the 16 KiB carveout; on the 128 KiB archs 3 x 31
    # KiB -> 100 KiB, 28 KiB of L1; 3 CTAs (512 threads) x 21 KiB -> 64 KiB, 64 KiB of L1
    assert l1_left("sm_90", occupancy("sm_90", 128, 32)) == 240 * KIB
    assert l1_left("sm_89", occupancy("sm_89", 128, 32, 30 * KIB)) == 28 * KIB
    assert l1_left("sm_86", occupancy("sm_86", 512, 32, 20 * KIB)) == 64 * KIB


def test_cap_and_waves():
    assert cooperative_cap(occupancy("sm_89", 256, 64), 92) == 4 * 92
    assert waves(369, 4, 92) == 2 and waves(368, 4, 92) == 1 and waves(0, 4, 92) == 0
    with pytest.raises(PlanError, match="0 resident"):
        waves(10, 0, 92)


# ---- cross-product vs brute force ------------------------------------------------------------------

# CUDA C Programming Guide, "Technical Specifications per Compute Capability": resident warps and
# CTAs per SM, shared memory per SM / per CTA (KB); cuda_occupancy.h: barrier factor (cc >= 9).
SPEC = {
    "sm_86": dict(warps=48, ctas=16, smem=100 * KIB, optin=99 * KIB, bar=0),
    "sm_89": dict(warps=48, ctas=24, smem=100 * KIB, optin=99 * KIB, bar=0),
    "sm_90": dict(warps=64, ctas=32, smem=228 * KIB, optin=227 * KIB, bar=2),
    "sm_120a": dict(warps=48, ctas=24, smem=100 * KIB, optin=99 * KIB, bar=1),
}


def brute_force(arch, threads, regs, smem_static, smem_dyn, barriers):
    """Place CTAs on one SM until a resource runs out: warp slots, CTA slots, four 16K-register
    sub-partitions (each warp takes regs*32 rounded to 256 from one of them), shared memory
    (static + dynamic + 1 KiB reserved, rounded to 128 B) and named barriers."""
    s = SPEC[arch]
    if threads > 1024:
        return 0
    w = -(-threads // 32)
    regs_warp = -(-regs * 32 // 256) * 256
    if regs > 255 or regs_warp * (-(-w // 4) * 4) > 65536:
        return 0
    smem_cta = -(-(smem_static + smem_dyn + 1024) // 128) * 128
    per_cta_limit = (s["optin"] if smem_static + smem_dyn > 48 * KIB else 48 * KIB) + 1024
    if smem_cta > per_cta_limit:
        return 0
    pools, used_warps, used_smem, n = [16384] * 4, 0, 0, 0
    while True:
        if n + 1 > s["ctas"] or used_warps + w > s["warps"] or used_smem + smem_cta > s["smem"]:
            return n
        if s["bar"] and barriers and (n + 1) * barriers > s["ctas"] * s["bar"]:
            return n
        trial = list(pools)
        for _ in range(w):
            i = max(range(4), key=trial.__getitem__)
            if trial[i] < regs_warp:
                return n
            trial[i] -= regs_warp
        pools, used_warps, used_smem, n = trial, used_warps + w, used_smem + smem_cta, n + 1


THREADS = (32, 64, 96, 128, 160, 192, 256, 384, 512, 640, 768, 1024, 1056)
REGS = (0, 16, 24, 32, 33, 40, 48, 56, 64, 65, 72, 80, 96, 128, 168, 200, 255)
STATIC = (0, 1000, 8 * KIB, 40 * KIB, 48 * KIB)
DYNAMIC = (0, 4 * KIB, 30000, 64 * KIB, 150 * KIB)


@pytest.mark.parametrize("arch", list(SPEC))
def test_cross_product_matches_brute_force(arch):
    mismatches = []
    for threads, regs, st, dy, bars in itertools.product(THREADS, REGS, STATIC, DYNAMIC, (0, 1, 3)):
        got = occupancy(arch, threads, regs, st, dy, barriers=bars)
        want = brute_force(arch, threads, regs, st, dy, bars)
        if got.ctas_per_sm != want:
            mismatches.append((threads, regs, st, dy, bars, got.ctas_per_sm, want))
        elif want:
            assert all(got.limits[name] == want for name in got.limiter.split("+"))
    assert not mismatches, mismatches[:10]
