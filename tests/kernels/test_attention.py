"""CPU tier of the gated-attention kernels (targets/kernels/attention.py, templates/attn_*.cu.j2): the paged
numpy references against the contiguous oracle (ninferc.ir.reference), the four templates compiled for every
target with their resources read, the decode split rule, and the plan-time shared-memory refusal."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from attn_cases import BIG, PROBLEMS, TINY, make_cache, make_step
from ninferc.errors import PlanError
from ninferc.ir.reference import _sigmoid, ref_attention, ref_partial_rope, ref_rmsnorm
from ninferc.ir.tolerances import FP32_REORDER
from ninferc.targets.arch import ARCHS, get_arch
from ninferc.targets.kernels import attention as A
from ninferc.targets.occupancy import occupancy
from ninferc.targets.plan import KernelResources, PlanContext, check_launch, compile_variants
from ninferc.targets.skus import SKUS

ALL_ARCHS = tuple(ARCHS)
PREP, DECODE, COMBINE, PREFILL = A.FAMILIES


@functools.lru_cache(maxsize=None)
def resources(arch: str):
    """URI -> KernelResources of the four families' kernels for both shapes (compiled once, disk-cached)."""
    specs = [s for fam in A.FAMILIES for p in (TINY, BIG) for s in fam.variants(p)]
    return {uri: r for uri, (_, r) in compile_variants(specs, arch).items()}


def ctx_for(arch: str, sms: int) -> PlanContext:
    return PlanContext(arch, sms, resources(arch))


def own_specs(fam, p):
    """The family's own kernels for ``p`` (attn_combine's variants also list the decode kernel)."""
    return [s for s in fam.variants(p) if s.family == fam.name]


def skus_of(arch: str):
    return [s for s in SKUS if s.arch == arch]


# ------------------------------------------------------------------------------------------------
# numpy references on the paged layout
# ------------------------------------------------------------------------------------------------


def test_gather_reads_back_contiguous_kv_through_shuffled_pages():
    rng = np.random.default_rng(0)
    lengths = [1, 64, 65, 300]
    cache = make_cache(TINY, lengths, [l + 5 for l in lengths], rng)
    for b, L in enumerate(lengths):
        K, V = A.gather_kv(TINY, cache.k_pages, cache.v_pages, cache.page_table, b, L)
        np.testing.assert_array_equal(K, cache.k_ctx[b])
        np.testing.assert_array_equal(V, cache.v_ctx[b])
    with pytest.raises(PlanError, match="exceeds max_context"):
        A.gather_kv(TINY, cache.k_pages, cache.v_pages, cache.page_table, 0, TINY.max_context + 1)


@pytest.mark.parametrize("name", ["tiny", "27b"])
def test_paged_attention_reference_equals_contiguous_oracle(name):
    """B = 3 sequences of different lengths, shuffled pages, garbage (incl. NaN) everywhere else: the
    paged reference equals ref_attention over each contiguous context, gated."""
    p = PROBLEMS[name]
    rng = np.random.default_rng(1)
    prev, new = [0, 63, 129], [5, 1, 70]
    ctxs = [a + b for a, b in zip(prev, new)]
    cache = make_cache(p, ctxs, ctxs, rng)  # the step's keys are already in the pages
    st = make_step(p, prev, new, rng)
    T = int(sum(new))
    q = rng.standard_normal((T, p.heads_q, p.head_dim)).astype(np.float32)
    out = A.reference_attention(p, q, st["proj"], cache.k_pages, cache.v_pages, cache.page_table, st["tok_pos"],
                                st["seq_start"])
    assert np.all(np.isfinite(out))
    _, gate, _, _ = p.split_proj(st["proj"])
    for b in range(3):
        a, e = st["seq_start"][b], st["seq_start"][b + 1]
        o = ref_attention(q[a:e], cache.k_ctx[b], cache.v_ctx[b], st["tok_pos"][a:e], p.head_dim ** -0.5, p.groups)
        want = o.reshape(e - a, -1) * _sigmoid(gate[a:e].reshape(e - a, -1))
        np.testing.assert_array_equal(out[a:e], want.astype(np.float32))


def test_prep_reference_is_the_unfused_composition_and_writes_only_its_rows():
    p = TINY
    rng = np.random.default_rng(2)
    prev, new = [10, 64], [3, 66]
    cache = make_cache(p, prev, [a + b for a, b in zip(prev, new)], rng, nan=False)
    st = make_step(p, prev, new, rng)
    q_out, kp, vp = A.reference_prep(p, st["proj"], st["q_norm_w"], st["k_norm_w"], st["tok_pos"], st["tok_seq"],
                                     cache.page_table, cache.k_pages, cache.v_pages)
    q, _, k, v = p.split_proj(st["proj"])
    pos = st["tok_pos"]
    q_want = ref_partial_rope(ref_rmsnorm(q, st["q_norm_w"], p.eps, True), pos, p.rotary_dim, p.theta)
    k_want = A.round_bf16(ref_partial_rope(ref_rmsnorm(k, st["k_norm_w"], p.eps, True), pos, p.rotary_dim, p.theta))
    np.testing.assert_array_equal(q_out, q_want)
    written = np.zeros(kp.shape[:1] + kp.shape[2:3], bool)  # [page, row]
    for t, (b, ps) in enumerate(zip(st["tok_seq"], pos)):
        page, row = cache.page_table[b, ps // p.page_size], ps % p.page_size
        np.testing.assert_array_equal(kp[page, :, row], k_want[t])
        np.testing.assert_array_equal(vp[page, :, row], A.round_bf16(v[t]))
        written[page, row] = True
    keep = ~written[:, None, :, None].repeat(p.heads_kv, 1).repeat(p.head_dim, 3)
    np.testing.assert_array_equal(kp[keep], cache.k_pages[keep])
    np.testing.assert_array_equal(vp[keep], cache.v_pages[keep])
    # and the gathered context is the reference executor's K/V (previous context + this step's rows)
    K, _ = A.gather_kv(p, kp, vp, cache.page_table, 1, prev[1] + new[1])
    np.testing.assert_array_equal(K[:prev[1]], cache.k_ctx[1])
    np.testing.assert_array_equal(K[prev[1]:], k_want[new[0]:])


def test_chunked_prefill_then_decode_equals_one_pass():
    """prep + attention in two chunks and a decode step reproduce one pass over the whole sequence."""
    p = TINY
    rng = np.random.default_rng(3)
    total = [130]
    cache = make_cache(p, [0], [total[0] + 1], rng)
    st = make_step(p, [0], [total[0] + 1], rng)
    args = (st["q_norm_w"], st["k_norm_w"])
    q1, kp, vp = A.reference_prep(p, st["proj"], *args, st["tok_pos"], st["tok_seq"], cache.page_table,
                                  cache.k_pages, cache.v_pages)
    full = A.reference_attention(p, q1, st["proj"], kp, vp, cache.page_table, st["tok_pos"], st["seq_start"])
    kp, vp = cache.k_pages, cache.v_pages
    outs = []
    for lo, hi in ((0, 64), (64, 130), (130, 131)):
        sl = slice(lo, hi)
        qc, kp, vp = A.reference_prep(p, st["proj"][sl], *args, st["tok_pos"][sl], st["tok_seq"][sl],
                                      cache.page_table, kp, vp)
        outs.append(A.reference_attention(p, qc, st["proj"][sl], kp, vp, cache.page_table, st["tok_pos"][sl],
                                          [0, hi - lo]))
    FP32_REORDER.check(np.concatenate(outs), full, "chunked vs one pass")


@pytest.mark.parametrize("splits,pps", [(1, 72), (3, 24), (72, 1), (5, 15)])
def test_decode_partials_combine_to_the_reference(splits, pps):
    p = BIG
    rng = np.random.default_rng(4)
    ctx = [1, 64, 65, 4096][: 3] + [700]
    cache = make_cache(p, ctx, ctx, rng)
    st = make_step(p, [c - 1 for c in ctx], [1] * len(ctx), rng)
    q = rng.standard_normal((len(ctx), p.heads_q, p.head_dim)).astype(np.float32)
    o, ml = A.reference_decode_partials(p, q, cache.k_pages, cache.v_pages, cache.page_table, st["seq_ctx"],
                                        splits, pps)
    assert np.all(np.isneginf(ml[..., 0]) == (ml[..., 1] == 0))
    got = A.reference_combine(p, o, ml, st["proj"])
    want = A.reference_attention(p, q, st["proj"], cache.k_pages, cache.v_pages, cache.page_table, st["tok_pos"],
                                 st["seq_start"])
    FP32_REORDER.check(got, want, f"combine of {splits} splits")


# ------------------------------------------------------------------------------------------------
# templates: compile for every target, resources, ABI
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_templates_compile_with_resources(arch):
    a = get_arch(arch)
    res = resources(arch)
    rows = []
    for fam in A.FAMILIES:
        for spec, p in [(s, p) for p in (TINY, BIG) for s in own_specs(fam, p)]:
            r = res[spec.uri]
            dyn = PREFILL.dynamic_smem_bytes(p, spec.param("route")) if fam is PREFILL else 0
            occ = occupancy(a, spec.threads, r.registers, r.static_smem_bytes, dyn, barriers=r.barriers)
            rows.append(f"{spec.uri}: {r.registers} regs, {r.static_smem_bytes} B static + {dyn} B dynamic smem, "
                        f"{r.local_bytes} B local, {occ.ctas_per_sm} CTAs/SM ({occ.limiter})")
            assert 0 < r.registers <= a.max_regs_per_thread, rows[-1]
            assert r.local_bytes == 0, f"spills on {arch}: {rows[-1]}"
            assert r.static_smem_bytes <= a.max_static_smem_per_cta, rows[-1]
            assert occ.ctas_per_sm >= 1, rows[-1]
    print(f"\n{arch}\n  " + "\n  ".join(rows))


@pytest.mark.parametrize("fam", A.FAMILIES, ids=lambda f: f.name)
def test_arg_names_are_the_kernel_signature(fam):
    """arg_names() (the runtime ABI) lists the entry's parameters in the template's order."""
    for spec, p in [(s, p) for p in (TINY, BIG) for s in own_specs(fam, p)]:
        src = spec.render()
        m = re.search(re.escape(spec.entry) + r"\((.*?)\)\s*\{", src, re.S)
        assert m, f"no signature for {spec.entry}"
        names = tuple(re.findall(r"(\w+)\s*(?:,|$)", m.group(1).strip()))
        assert names == fam.arg_names(p)


def test_problem_validation_names_value_and_limit():
    with pytest.raises(PlanError, match="head_dim = 96"):
        A.AttentionProblem(4, 2, 96, 16, 1e7, 1e-6)
    with pytest.raises(PlanError, match="heads_q = 5 must be a positive multiple of heads_kv = 2"):
        A.AttentionProblem(5, 2, 64, 16, 1e7, 1e-6)
    with pytest.raises(PlanError, match="rotary_dim = 70"):
        A.AttentionProblem(4, 2, 64, 70, 1e7, 1e-6)
    with pytest.raises(PlanError, match="page_size = 48"):
        A.AttentionProblem(4, 2, 64, 16, 1e7, 1e-6, page_size=48)
    with pytest.raises(PlanError, match="ktile = 64 must divide page_size = 32"):
        A.AttnPrefillFamily(ktile=64).spec(A.AttentionProblem(4, 2, 64, 16, 1e7, 1e-6, page_size=32))
    with pytest.raises(PlanError, match="unknown route 'wgmma'"):
        PREFILL.spec(TINY, "wgmma")


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_prefill_falls_back_when_a_route_does_not_fit(arch):
    """hd = 512: the mma route's q hi/lo tile (2 x 64 x 520 x 2 B) exceeds the 99 KiB opt-in of the
    consumer archs, so the plan falls back to simt there, with the reason kept in the error when nothing fits."""
    a = get_arch(arch)
    p = A.AttentionProblem(8, 1, 512, 64, 1e7, 1e-6, 64, 64)
    specs = PREFILL.variants(p)
    res = {u: r for u, (_, r) in compile_variants(specs, arch).items()}
    ctx = PlanContext(arch, 100, res)
    mma_smem = PREFILL.dynamic_smem_bytes(p, "mma")
    ln = PREFILL.launch(p, 100, ctx)
    assert ln.route == ("mma" if mma_smem <= a.max_smem_per_cta_optin else "simt")
    # hd = 1024 fits neither route anywhere (plan logic only: stand-in resources, no compile)
    fam, big = A.AttnPrefillFamily(qtile=64), A.AttentionProblem(8, 1, 1024, 64, 1e7, 1e-6, 64, 64)
    fake = {s.uri: KernelResources(64, 0, 0, s.threads, False, 1) for s in fam.variants(big)}
    with pytest.raises(PlanError) as exc:
        fam.launch(big, 1, PlanContext(arch, 100, fake))
    msg = str(exc.value)
    assert msg.count("opt-in limit") == 2 and "route-mma" in msg and "route-simt" in msg and arch in msg


# ------------------------------------------------------------------------------------------------
# launches: the split rule, plan-time checks
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_split_rule_is_fixed_and_covers_every_growing_context(arch):
    P = BIG.page_size
    for sku in (min(skus_of(arch), key=lambda s: s.sms), max(skus_of(arch), key=lambda s: s.sms)):
        ctx = ctx_for(arch, sku.sms)
        for max_ctx in (64, 4096, 32768, 262144):
            p = A.AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, P, -(-max_ctx // P))
            for B in (1, 3, 64):
                splits, pps = DECODE.splits(p, B, ctx)
                ln = DECODE.launch(p, B, ctx)
                assert ln.grid == (splits, p.heads_kv, B) and ln.split_k == splits
                assert 1 <= splits <= p.max_pages and pps <= DECODE.max_pages_per_split
                assert (splits - 1) * pps < p.max_pages <= splits * pps  # no empty split at max_context
                assert COMBINE.launch(p, B, ctx).split_k == splits
                assert ln.workspace_bytes == 4 * B * p.heads_q * splits * (p.head_dim + 2)
                # the kernel's ranges [s*pps*P, min((s+1)*pps*P, c)) partition [0, c) for every context c
                for c in sorted(c for c in {1, P - 1, P, P + 1, max_ctx // 2 + 1, max_ctx} if c <= max_ctx):
                    ranges = [(s * pps * P, min((s + 1) * pps * P, c)) for s in range(splits)]
                    covered = sum(max(0, e - b) for b, e in ranges)
                    assert covered == c and all(b <= e or b >= c for b, e in ranges)
        # splits never shrink as max_context grows (for a fixed B)
        seq = [DECODE.splits(A.AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, P, n), 1, ctx)[0] for n in (1, 8, 64, 512)]
        assert seq == sorted(seq)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_launches_pass_the_plan_checks(arch):
    for sku in skus_of(arch):
        ctx = ctx_for(arch, sku.sms)
        for p in (TINY, BIG):
            for T in (1, 3, 16, 128, 1024):
                launches = [PREP.launch(p, T, ctx), DECODE.launch(p, T, ctx), COMBINE.launch(p, T, ctx),
                            PREFILL.launch(p, T, ctx), PREFILL.launch(p, T, ctx, batch=3)]
                launches += [PREFILL.launch(p, T, ctx, route=r) for r in A.PREFILL_ROUTES]
                for ln in launches:
                    check_launch(ln, arch, ctx.resources_of(ln.kernel), ctx.sms)
                assert launches[0].grid[0] == T
                assert launches[3].route == PREFILL.routes[0]  # the preferred route fits both shapes
                for ln in launches[5:]:
                    qtile, ktile = PREFILL.tiles(ln.route)
                    assert ln.grid == (-(-T // qtile), p.heads_q, 1)
                    assert ln.dynamic_smem_bytes == A.prefill_smem_bytes(p, qtile, ktile, ln.route)
                assert launches[4].grid[2] == 3


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_combine_smem_over_the_optin_limit_is_refused(arch):
    """A max_context whose split count needs more combine shared memory than the arch's opt-in maximum
    raises PlanError naming the kernel, the target, the value and the limit."""
    a = get_arch(arch)
    ctx = ctx_for(arch, max(s.sms for s in skus_of(arch)))
    splits_needed = a.max_smem_per_cta_optin // 4 + 1
    pages = splits_needed * DECODE.max_pages_per_split
    p = A.AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, 64, pages)
    splits, _ = DECODE.splits(p, 1, ctx)
    assert splits >= splits_needed
    spec = COMBINE.spec(p)
    with pytest.raises(PlanError) as exc:
        COMBINE.launch(p, 1, ctx)
    msg = str(exc.value)
    assert spec.uri in msg and arch in msg and str(4 * splits) in msg and str(a.max_smem_per_cta_optin) in msg
    assert f"max_context {p.max_context}" in msg
    # one page fewer per split bound fits comfortably at an everyday context
    COMBINE.launch(A.AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, 64, 4096), 1, ctx)


def test_paged_references_reproduce_the_ir_executors_fused_attention_block():
    """reference_prep + reference_attention through shuffled pages == ReferenceExecutor's GatedAttentionBlock
    (emulate_storage: K/V stored as bf16) over two chunks: the kernels' oracle is the IR's oracle."""
    from ninferc.ir.graph import Op
    from ninferc.ir.reference import ReferenceExecutor, SequenceState

    p = TINY
    rng = np.random.default_rng(5)
    hd, Hq, Hkv = p.head_dim, p.heads_q, p.heads_kv
    attrs = {"Hq": Hq, "Hkv": Hkv, "hd": hd, "eps": p.eps, "rotary_dim": p.rotary_dim, "theta": p.theta,
             "scale": hd ** -0.5, "groups": p.groups,
             "cols": {"qg": (0, p.k_offset), "k": (p.k_offset, p.v_offset), "v": (p.v_offset, p.proj_dim)}}
    op = Op("L3.attn", "GatedAttentionBlock", ("proj", "positions"), ("y",), {"q_norm": "qn", "k_norm": "kn"},
            attrs, {"kv": "L3.kv"}, 3)
    ex = ReferenceExecutor.__new__(ReferenceExecutor)
    st0 = make_step(p, [0], [100], rng)
    ex.weights, ex._w, ex.emulate_storage = {"qn": st0["q_norm_w"], "kn": st0["k_norm_w"]}, {}, True
    state = SequenceState(kv={"L3.kv": (np.zeros((0, Hkv, hd), np.float32), np.zeros((0, Hkv, hd), np.float32))})
    cache = make_cache(p, [0], [100], rng)
    kp, vp = cache.k_pages, cache.v_pages
    for lo, hi in ((0, 70), (70, 100)):
        sl = slice(lo, hi)
        proj, pos = st0["proj"][sl], st0["tok_pos"][sl]
        want = ex._attn_block(op, proj, pos, state, hi - lo)
        q, kp, vp = A.reference_prep(p, proj, st0["q_norm_w"], st0["k_norm_w"], pos, st0["tok_seq"][sl],
                                     cache.page_table, kp, vp)
        got = A.reference_attention(p, q, proj, kp, vp, cache.page_table, pos, [0, hi - lo])
        np.testing.assert_array_equal(got, want)
        K, V = A.gather_kv(p, kp, vp, cache.page_table, 0, hi)
        np.testing.assert_array_equal(K, state.kv["L3.kv"][0])
        np.testing.assert_array_equal(V, state.kv["L3.kv"][1])


def test_problem_from_the_fixture_config(tiny_dir):
    from ninferc.ir.config import ModelConfig

    p = A.AttentionProblem.from_config(ModelConfig.from_dir(tiny_dir), page_size=64, max_context=4100)
    assert (p.heads_q, p.heads_kv, p.head_dim, p.rotary_dim) == (TINY.heads_q, TINY.heads_kv, TINY.head_dim,
                                                                 TINY.rotary_dim)
    assert p.max_pages == 65 and p.max_context == 4160 and p.scale == np.float32(64 ** -0.5)
