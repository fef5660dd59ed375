"""CPU tier of the gated-attention kernels (targets/kernels/attention.py, templates/attn_*.cu.j2): the paged
numpy references against the contiguous oracle (ninferc.ir.reference), the four templates compiled for every
target with their resources read, the decode split rule, and the plan-time shared-memory refusal; for the
int8 KV cache, the quantiser, the pool layout, the ABI and the int8 references."""

from __future__ import annotations

import dataclasses
import functools
import re
from types import SimpleNamespace

import numpy as np
import pytest

from attn_cases import ALL_PROBLEMS, BIG, BIG8, PROBLEMS, TINY, TINY8, make_cache, make_step
from ninferc.errors import PlanError
from ninferc.ir.reference import _sigmoid, ref_attention, ref_partial_rope, ref_rmsnorm
from ninferc.ir.tolerances import FP32_REORDER
from ninferc.targets.arch import ARCHS, get_arch
from ninferc.targets.kernels import attention as A
from ninferc.targets.occupancy import l1_left, occupancy
from ninferc.targets.cubin import KernelResources
from ninferc.targets.plan import PlanContext, check_launch, compile_variants
from ninferc.targets.skus import SKUS

ALL_ARCHS = tuple(ARCHS)
PREP, DECODE, COMBINE, PREFILL = A.FAMILIES


@functools.lru_cache(maxsize=None)
def resources(arch: str):
    """URI -> KernelResources of the four families' kernels for both shapes (compiled once, disk-cached)."""
    specs = [s for fam in A.FAMILIES for p in ALL_PROBLEMS.values() for s in fam.variants(p)]
    specs += [s for p in ALL_PROBLEMS.values() for s in DECODE.variants(p, prep=False)]  # the verify step's
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


def _prep_two_sequences(p, seed):
    """Two packed sequences (3 new tokens after 10, 66 after 64) over a filled cache: (prev, new, cache, step
    inputs, reference_prep's (q_out, k pages, v pages))."""
    rng = np.random.default_rng(seed)
    prev, new = [10, 64], [3, 66]
    cache = make_cache(p, prev, [a + b for a, b in zip(prev, new)], rng, nan=False)
    st = make_step(p, prev, new, rng)
    return prev, new, cache, st, A.reference_prep(p, st["proj"], st["q_norm_w"], st["k_norm_w"], st["tok_pos"],
                                                  st["tok_seq"], cache.page_table, cache.k_pages, cache.v_pages)


def test_prep_reference_is_the_unfused_composition_and_writes_only_its_rows():
    p = TINY
    prev, new, cache, st, (q_out, kp, vp) = _prep_two_sequences(p, seed=2)
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
        verify = [(s, p) for p in ALL_PROBLEMS.values() for s in fam.variants(p, prep=False)] if fam is DECODE else []
        for spec, p in [(s, p) for p in ALL_PROBLEMS.values() for s in own_specs(fam, p)] + verify:
            r = res[spec.uri]
            sp = dict(spec.params)
            dyn = PREFILL.dynamic_smem_bytes(p, spec.param("route")) if fam is PREFILL else \
                DECODE.dynamic_smem_bytes(p, True, sp.get("tile")) if sp.get("stage") else 0
            occ = occupancy(a, spec.threads, r.registers, r.static_smem_bytes, dyn, barriers=r.barriers)
            rows.append(f"{spec.uri}: {r.registers} regs, {r.static_smem_bytes} B static + {dyn} B dynamic smem, "
                        f"{r.local_bytes} B local, {occ.ctas_per_sm} CTAs/SM ({occ.limiter})")
            assert 0 < r.registers <= a.max_regs_per_thread, rows[-1]
            assert r.local_bytes == 0, f"spills on {arch}: {rows[-1]}"
            assert r.static_smem_bytes <= a.max_static_smem_per_cta, rows[-1]
            assert occ.ctas_per_sm >= 1, rows[-1]
    print(f"\n{arch}\n  " + "\n  ".join(rows))


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_staged_decode_compiles_fits_and_changes_only_its_smem(arch):
    """``attn_decode`` with ``stage_kv`` (K/V tiles through dynamic shared memory): compiles for every target, is
    resident at >= 1 CTA/SM with its dynamic shared memory (one page of K and one of V, int8 also their scales),
    the bf16 kernels without spills; the split rule counts that memory (fewer resident CTAs, never more splits),
    and the ABI is the unstaged kernel's; tiles of a page and of 32 keys (``stage_keys``)."""
    for tile in (0, 32):
        _check_staged(arch, A.AttnDecodeFamily(staging=A.DecodeStaging(stage_kv=True, stage_keys=tile),
                                               fuse_prep=False))
    _check_staged(arch, A.AttnDecodeFamily(staging=A.DecodeStaging(stage_kv=True, stage_mma=True),  # tensor-core loops
                                           fuse_prep=False))  # (bf16 KV)
    with pytest.raises(PlanError, match="stage_mma cannot take a tile of 16 keys over 4 warps"):
        A.AttnDecodeFamily(staging=A.DecodeStaging(stage_kv=True, stage_keys=16, stage_mma=True)).spec(TINY)
    with pytest.raises(PlanError, match="stage_mma cannot take 12 q heads per KV head"):
        A.AttnDecodeFamily(staging=A.DecodeStaging(stage_kv=True, stage_mma=True)).spec(
            A.AttentionProblem(24, 2, 64, 16, 1e7, 1e-6, 64, 8))
    with pytest.raises(PlanError, match="stage_keys = 48 must divide the page size 64"):
        A.AttnDecodeFamily(staging=A.DecodeStaging(stage_kv=True, stage_keys=48)).spec(TINY)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_auto_stages_bf16_pages_where_three_ctas_stay_resident_and_l1_is_left(arch):
    """``stage_kv = "auto"`` (the default) launches the staged kernel for bf16 KV where its occupancy with the tile's
    dynamic shared memory is >= ``stage_min_resident`` (3) CTAs/SM -- the decode step's with page tiles; the verify
    step's (``prep=False``) with the first of a page and half a page whose resident CTAs also leave >=
    ``stage_l1_keep`` (64 KiB) of the SM's L1 -- for the 27B shape: on sm_90 the page tile for decode, the half-page
    tile for verify (the page tile's 3 CTAs leave 28 KiB of L1 there), no staging on the 100 KB-per-SM sm_86 / sm_89 /
    sm_120a -- and the global-memory kernel for int8 KV; True / False force it (tiles of a page); the split count
    follows the chosen kernel's occupancy; ``stage_l1_keep = 0`` gives the verify step the page tile where 3 CTAs
    stay resident. The decode step's kernel takes the L1 rule from ``stage_l1_batch`` (5) sequences on (the half-page
    tile at 8 sequences on sm_90) and, where no staged tile leaves the L1, keeps the first staged tile that stays
    resident (``stage_l1_batch = 0``: the page tile at every batch, as before the rule)."""
    a = get_arch(arch)
    no_l1 = A.AttnDecodeFamily(staging=A.DecodeStaging(stage_l1_keep=0))
    verify_only = A.AttnDecodeFamily(staging=A.DecodeStaging(stage_l1_batch=0))
    for sku in skus_of(arch):
        ctx = ctx_for(arch, sku.sms)
        for p in (BIG, BIG8, TINY, TINY8):
            for prep, batch in ((True, 1), (True, 4), (True, 5), (True, 8), (False, 1), (False, 4)):
                spec, dyn = DECODE.choose(p, ctx, prep, batch)
                staged = "stage" in dict(spec.params)
                if p.kv_dtype == "int8":
                    assert not staged and dyn == 0
                    continue
                want = None  # the rule, from the occupancy calculator and l1_left
                rule = not prep or batch >= 5  # the decode step's kernel from stage_l1_batch (5) sequences on
                tiles = (p.page_size, p.page_size // 2) if rule else (p.page_size,)
                assert DECODE.tile_candidates(p, prep, batch) == tiles
                # the plan compiles every tile a step of any batch may take
                assert DECODE.tile_candidates(p, prep) == (p.page_size, p.page_size // 2)
                resident = []
                for t in tiles:
                    occ = ctx.occupancy(DECODE.spec(p, True, prep=prep, tile=t), DECODE.dynamic_smem_bytes(p, True, t))
                    if occ.ctas_per_sm >= 3:
                        resident.append(t)
                        if not rule or l1_left(a, occ) >= 64 * 1024:
                            want = t
                            break
                if want is None and prep and resident:  # the decode step's kernel stays staged (its folded prep)
                    want = resident[0]
                assert staged == (want is not None), (sku.name, p, prep)
                if staged:
                    assert dict(spec.params).get("tile", p.page_size) == want
                if p is BIG:  # the rule's outcome for the 27B shape on today's targets
                    assert want == ((32 if rule else 64) if a.name == "sm_90" else None), (sku.name, prep, batch, want)
                    page = ctx.occupancy(DECODE.spec(p, True, prep=prep), DECODE.dynamic_smem_bytes(p, True))
                    if a.name == "sm_90":
                        assert (page.ctas_per_sm, l1_left(a, page)) == (3, 28 * 1024)
                    # without the L1 rule: the page tile where 3 CTAs stay resident (sm_90), as before the rule
                    s0 = no_l1.choose(p, ctx, prep, batch)[0]
                    assert ("stage" in dict(s0.params), dict(s0.params).get("tile")) == (a.name == "sm_90", None)
                    # with stage_l1_batch 0 the decode step's kernel never takes the rule
                    sv = verify_only.choose(p, ctx, prep, batch)[0]
                    assert dict(sv.params).get("tile") == (None if prep or a.name != "sm_90" else 32)
                assert dyn == (DECODE.dynamic_smem_bytes(p, True, want) if staged else 0)
                ln = DECODE.launch(p, batch, ctx, prep)
                assert (ln.kernel, ln.dynamic_smem_bytes) == (spec, dyn)
                fill = ctx.occupancy(spec, dyn).ctas_per_sm * sku.sms
                assert DECODE.splits(p, batch, ctx, prep)[0] <= max(fill // (batch * p.heads_kv), 1) or \
                    DECODE.splits(p, batch, ctx, prep)[0] <= -(-p.max_pages // DECODE.max_pages_per_split)
                for forced in (True, False):
                    f = A.AttnDecodeFamily(staging=A.DecodeStaging(stage_kv=forced))
                    got = f.choose(p, ctx, prep)[0]
                    assert ("stage" in dict(got.params)) == forced and "tile" not in dict(got.params)
    with pytest.raises(PlanError, match="stage_kv = 'yes' must be True, False or 'auto'"):
        A.DecodeStaging(stage_kv="yes")
    with pytest.raises(PlanError, match="stage_l1_keep = -1 must be >= 0"):
        A.DecodeStaging(stage_l1_keep=-1)
    with pytest.raises(PlanError, match="stage_l1_batch = -2 must be >= 0"):
        A.DecodeStaging(stage_l1_batch=-2)


def test_verify_tile_candidates_and_a_set_tile():
    """``stage_keys`` set: that tile only, with no L1 rule (the 27B page tile on sm_90 stays staged for the verify
    step); ``stage_mma``: a half page its loops cannot take is no candidate (page 32 over 4 warps: 16 keys), so the
    verify step still plans."""
    ctx = ctx_for("sm_90", skus_of("sm_90")[0].sms)
    page = A.AttnDecodeFamily(staging=A.DecodeStaging(stage_keys=64))
    assert page.tile_candidates(BIG, prep=False) == (64,)
    res = {u: r for u, (_, r) in compile_variants(page.variants(BIG, prep=False), "sm_90").items()}
    spec, dyn = page.choose(BIG, PlanContext("sm_90", ctx.sms, {**ctx.resources, **res}), prep=False)
    assert "stage" in dict(spec.params) and "tile" not in dict(spec.params) and dyn == 2 * 64 * 256 * 2
    mma = A.AttnDecodeFamily(staging=A.DecodeStaging(stage_mma=True))
    p32 = dataclasses.replace(BIG, page_size=32, max_pages=2 * BIG.max_pages)
    assert mma.tile_candidates(p32, prep=False) == (32,) and mma.variants(p32, prep=False)
    assert DECODE.tile_candidates(p32, prep=False) == (32, 16)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_combine_over_several_ctas_per_head_compiles_and_launches(arch):
    """``attn_combine`` with ``dim_ctas`` 2 / 4 / 8: compiles for every target without spills, launches Hq x dim_ctas
    CTAs per sequence with the same dynamic shared memory and ABI; a split of head_dim that does not fit the
    threads is refused, naming the value."""
    ctx = ctx_for(arch, skus_of(arch)[0].sms)
    for dc in (2, 4, 8):
        comb = A.AttnCombineFamily(COMBINE.threads, DECODE, dim_ctas=dc)
        specs = [comb.spec(p) for p in ALL_PROBLEMS.values()]
        res = {u: r for u, (_, r) in compile_variants(specs, arch).items()}
        for p, spec in zip(ALL_PROBLEMS.values(), specs):
            assert res[spec.uri].local_bytes == 0, f"{spec.uri} spills on {arch}"
            ln = comb.launch(p, 2, PlanContext(arch, ctx.sms, {**res, **resources(arch)}))
            assert ln.grid == (p.heads_q * dc, 2, 1)
            assert ln.dynamic_smem_bytes == COMBINE.launch(p, 2, ctx).dynamic_smem_bytes
            assert comb.arg_names(p) == COMBINE.arg_names(p)
    with pytest.raises(PlanError, match="dim_ctas = 3 must split head_dim 64"):
        A.AttnCombineFamily(dim_ctas=3).spec(TINY)


def _check_staged(arch, staged):
    a = get_arch(arch)
    specs = {name: staged.spec(p) for name, p in ALL_PROBLEMS.items()}
    res = {u: r for u, (_, r) in compile_variants(list(specs.values()), arch).items()}
    ctx = PlanContext(arch, skus_of(arch)[0].sms, {**res, **resources(arch)})
    for name, p in ALL_PROBLEMS.items():
        spec, r = specs[name], res[specs[name].uri]
        dyn = staged.dynamic_smem_bytes(p)
        elt = 2 if p.kv_dtype == "bf16" else 1
        t = staged.stage_keys or p.page_size
        assert dyn == 2 * t * p.head_dim * elt + 2 * t * p.kv_groups * 4
        assert ("_tile" in spec.uri) == (t != p.page_size), spec.uri
        assert A.AttnDecodeFamily().dynamic_smem_bytes(p) == 0
        occ = occupancy(a, spec.threads, r.registers, r.static_smem_bytes, dyn, barriers=r.barriers)
        assert occ.ctas_per_sm >= 1, (arch, name, occ)
        if p.kv_dtype == "bf16":
            assert r.local_bytes == 0, f"{spec.uri} spills {r.local_bytes} B on {arch}"
        ln = staged.launch(p, 1, ctx)
        assert ln.dynamic_smem_bytes == dyn
        assert staged.splits(p, 1, ctx)[0] <= DECODE.splits(p, 1, ctx)[0]
        assert staged.arg_names(p) == DECODE.arg_names(p)


@pytest.mark.parametrize("fam", A.FAMILIES, ids=lambda f: f.name)
def test_arg_names_are_the_kernel_signature(fam):
    """arg_names() (the runtime ABI) lists the entry's parameters in the template's order (attn_decode: per kernel,
    a fused-prep kernel takes proj / q_norm_w / k_norm_w / inv_freq for q)."""
    for spec, p in [(s, p) for p in ALL_PROBLEMS.values() for s in own_specs(fam, p)]:
        src = spec.render()
        m = re.search(re.escape(spec.entry) + r"\((.*?)\)\s*\{", src, re.S)
        assert m, f"no signature for {spec.entry}"
        names = tuple(re.findall(r"(\w+)\s*(?:,|$)", m.group(1).strip()))
        assert names == (fam.arg_names(p, spec) if fam is DECODE else fam.arg_names(p)), spec.uri


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
        for p in ALL_PROBLEMS.values():
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
    ex.graph = SimpleNamespace(params={}, states={})  # plain params (ReferenceExecutor.w reads them as stored), bf16 KV
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


# ------------------------------------------------------------------------------------------------
# int8 KV cache: problem, ABI, pool layout, quantiser, references
# ------------------------------------------------------------------------------------------------

#: bf16 URIs of the sample shapes computed before the int8 KV cache existed: bf16 kernels keep their identity
#: (2026-12-02: the bf16 decode kernel gained its balanced split, template parameter ``balance``, on by default; the
#: page-aligned kernel's URI is unchanged: AttnDecodeFamily(balance_keys=0))
#: (2026-12-02: the staged decode kernels, stage_kv "auto", are bf16-only variants; the combine runs 4 CTAs per head)
#: (2026-12-03: the staged kernel computes its own q and new K / V row, fuse_prep "auto": template parameter prep)
#: (2026-12-06: the decode step's half-page tile, ``tile32``, from ``stage_l1_batch`` sequences on: one variant more)
BF16_URIS = {
    "tiny": ["attn_prep__hd64_hkv2_hq4_page64_rot16_th128", "attn_decode__balance16_hd64_hkv2_hq4_page64_th128",
             "attn_decode__balance16_hd64_hkv2_hq4_min_ctas4_page64_prep1_rot16_stage1_th128",
             "attn_decode__balance16_hd64_hkv2_hq4_min_ctas4_page64_prep1_rot16_stage1_th128_tile32",
             "attn_combine__dctas4_hd64_hkv2_hq4_th128", "attn_decode__balance16_hd64_hkv2_hq4_page64_th128",
             "attn_decode__balance16_hd64_hkv2_hq4_min_ctas4_page64_prep1_rot16_stage1_th128",
             "attn_decode__balance16_hd64_hkv2_hq4_min_ctas4_page64_prep1_rot16_stage1_th128_tile32",
             "attn_prefill__hd64_hkv2_hq4_ktile32_page64_qtile64_route-mma_th128",
             "attn_prefill__hd64_hkv2_hq4_ktile32_page64_qtile16_route-simt_th128"],
    "27b": ["attn_prep__hd256_hkv4_hq24_page64_rot64_th128", "attn_decode__balance16_hd256_hkv4_hq24_page64_th128",
            "attn_decode__balance16_hd256_hkv4_hq24_min_ctas4_page64_prep1_rot64_stage1_th128",
            "attn_decode__balance16_hd256_hkv4_hq24_min_ctas4_page64_prep1_rot64_stage1_th128_tile32",
            "attn_combine__dctas4_hd256_hkv4_hq24_th128", "attn_decode__balance16_hd256_hkv4_hq24_page64_th128",
            "attn_decode__balance16_hd256_hkv4_hq24_min_ctas4_page64_prep1_rot64_stage1_th128",
            "attn_decode__balance16_hd256_hkv4_hq24_min_ctas4_page64_prep1_rot64_stage1_th128_tile32",
            "attn_prefill__hd256_hkv4_hq24_ktile32_page64_qtile64_route-mma_th128",
            "attn_prefill__hd256_hkv4_hq24_ktile32_page64_qtile16_route-simt_th128"],
}
#: the runtime ABI per dtype (module docstring)
ARGS_BF16 = {
    "attn_prep": ("proj", "q_norm_w", "k_norm_w", "inv_freq", "tok_pos", "tok_seq", "page_table", "q_out",
                  "k_pages", "v_pages", "n_tokens", "max_pages", "eps"),
    "attn_decode": ("q", "k_pages", "v_pages", "page_table", "seq_ctx", "ws", "n_seqs", "max_pages", "splits",
                    "pages_per_split", "scale"),
    "attn_combine": ("ws", "proj", "out", "n_seqs", "splits"),
    "attn_prefill": ("q", "proj", "k_pages", "v_pages", "tok_pos", "seq_start", "page_table", "out", "max_pages",
                     "scale"),
}
ARGS_INT8 = {
    "attn_prep": ("proj", "q_norm_w", "k_norm_w", "inv_freq", "tok_pos", "tok_seq", "page_table", "q_out",
                  "k_pages", "v_pages", "k_scales", "v_scales", "n_tokens", "max_pages", "eps"),
    "attn_decode": ("q", "k_pages", "v_pages", "k_scales", "v_scales", "page_table", "seq_ctx", "ws", "n_seqs",
                    "max_pages", "splits", "pages_per_split", "scale"),
    "attn_combine": ("ws", "proj", "out", "n_seqs", "splits"),
    "attn_prefill": ("q", "proj", "k_pages", "v_pages", "k_scales", "v_scales", "tok_pos", "seq_start", "page_table",
                     "out", "max_pages", "scale"),
}


def test_kv_dtype_validation_names_value_and_choices():
    with pytest.raises(PlanError, match=r"kv_dtype = 'fp8' is not supported; choose from bf16, int8"):
        A.AttentionProblem(4, 2, 64, 16, 1e7, 1e-6, kv_dtype="fp8")
    assert A.AttentionProblem(4, 2, 128, 16, 1e7, 1e-6, kv_dtype="int8").kv_groups == 2
    with pytest.raises(PlanError, match="pages must be Int8Pages"):
        A.gather_kv(TINY8, np.zeros((1, 2, 64, 64), np.float32), np.zeros((1, 2, 64, 64), np.float32),
                    np.zeros((1, 72), np.int32), 0, 1)
    with pytest.raises(PlanError, match="pages must be ndarray"):
        z = A.Int8Pages(np.zeros((1, 2, 64, 64), np.int8), np.ones((1, 2, 64, 1), np.float32))
        A.gather_kv(TINY, z, z, np.zeros((1, 72), np.int32), 0, 1)
    with pytest.raises(PlanError, match=r"last axis \(96\) must be a multiple of 64"):
        A.quantize_kv(np.ones((2, 96), np.float32))
    with pytest.raises(PlanError, match="threads = 96 and head_dim / 4 = 64 must divide one another"):
        A.AttnDecodeFamily(threads=96).spec(BIG8)


@pytest.mark.parametrize("name", ["tiny", "27b"])
def test_bf16_uris_and_abi_unchanged_int8_variants_added(name):
    """bf16 kernels keep their URIs (hard-coded from before int8 existed), argument lists and sources (no
    int8 header); int8 kernels of the pool-touching families are distinct (``kv_dtype-int8``) and take
    ``k_scales, v_scales`` after ``v_pages``; attn_combine is the same kernel for both."""
    p = PROBLEMS[name]
    p8 = dataclasses.replace(p, kv_dtype="int8")
    assert [s.uri for fam in A.FAMILIES for s in fam.variants(p)] == BF16_URIS[name]
    assert A.AttnDecodeFamily(balance_keys=0).spec(p).uri == BF16_URIS[name][1].replace("balance16_", "")
    for fam in A.FAMILIES:
        assert fam.arg_names(p) == ARGS_BF16[fam.name]
        assert fam.arg_names(p8) == ARGS_INT8[fam.name]
        for s, s8 in zip(own_specs(fam, p), own_specs(fam, p8)):
            if fam is COMBINE:
                assert s8 == s
                continue
            if fam is DECODE and DECODE.granule(p8) != DECODE.granule(p):  # balanced for bf16 KV only (its docstring)
                s = A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, DECODE.granule(p8)).spec(p)
            assert s8.uri == s.uri.replace("_page", "_kv_dtype-int8_page") and dict(s8.params)["kv_dtype"] == "int8"
            assert "kv_dtype" not in dict(s.params)
            assert "attn_int8.cuh" not in s.render() and "begin attn_int8.cuh" in s8.render()


def test_kv_pool_layout_and_page_bytes_per_dtype():
    """27B shape, 64-token pages: bf16 K page = 4 * 64 * 256 * 2 B; int8 = codes 4 * 64 * 256 B + scales
    4 * 64 * 4 * 4 B (53 % of bf16)."""
    assert BIG.page_bytes() == 131072 and BIG.kv_page_bytes() == {"k_pages": 131072, "v_pages": 131072}
    assert BIG8.kv_page_bytes() == {"k_pages": 65536, "v_pages": 65536, "k_scales": 4096, "v_scales": 4096}
    assert BIG8.page_bytes() == 65536 + 4096
    assert BIG.kv_pool_arrays(10) == {"k_pages": ((10, 4, 64, 256), "uint16"), "v_pages": ((10, 4, 64, 256), "uint16")}
    arrays = BIG8.kv_pool_arrays(10)
    assert arrays == {"k_pages": ((10, 4, 64, 256), "int8"), "v_pages": ((10, 4, 64, 256), "int8"),
                      "k_scales": ((10, 4, 64, 4), "float32"), "v_scales": ((10, 4, 64, 4), "float32")}
    for p in ALL_PROBLEMS.values():  # the byte counts are the arrays' sizes per page
        per_page = {n: int(np.prod(shape[1:])) * np.dtype(dt).itemsize for n, (shape, dt) in p.kv_pool_arrays(1).items()}
        assert per_page == p.kv_page_bytes()
    # prefill shared memory follows the dtype (int8: smaller simt tiles, + scales)
    assert A.prefill_smem_bytes(BIG8, 64, 32, "mma") == A.prefill_smem_bytes(BIG, 64, 32, "mma") + 2 * 32 * 4 * 4
    assert A.prefill_smem_bytes(BIG8, 16, 32, "simt") == 16 * 256 * 4 + 32 * 264 + 32 * 256 + 2 * 32 * 4 * 4 + \
        16 * 32 * 4 + 16 * 4


def test_quantize_kv_round_trip_bound_and_rule():
    """Per element |x - fl32(code * scale)| <= scale / 2 (plus the fp32 slack of the scale, the quotient and
    the product: scale * 4 * 127 * 2^-24); codes in [-127, 127] with each group's max magnitude on +-127;
    all-zero and subnormal-scale groups get scale 1 and codes 0; negation flips the codes only; and the rule
    is ir.quant's w8 rule applied per group of 64 (same codes and scales, bit for bit)."""
    rng = np.random.default_rng(11)
    mags = np.float32([1.0, 1e-3, 1e3, 1e-30, 1e30, 1e-38])[rng.integers(0, 6, size=(40, 3, 1, 1))]
    x = (rng.standard_normal((40, 3, 4, 64)).astype(np.float32) * mags).reshape(40, 3, 256)
    x[0, 0, :64] = 0.0                    # an all-zero group
    x[1, 1, 64:128] = np.float32(1e-40)   # subnormal values: subnormal scale -> 1, codes 0
    x[2, 2, 128:192] = np.float32(0.5)    # a constant group: every code 127
    codes, scales = A.quantize_kv(x)
    assert codes.dtype == np.int8 and scales.dtype == np.float32 and scales.shape == (40, 3, 4)
    assert codes.min() >= -127 and np.all(scales > 0)
    deq = A.dequantize_kv(codes, scales)
    per = np.repeat(scales.astype(np.float64), 64, axis=-1)
    err = np.abs(x.astype(np.float64) - deq)
    assert np.all(err <= per * (0.5 + 4 * 127 * 2.0 ** -24)), float(np.max(err / per))
    assert np.all(np.abs(codes.reshape(40, 3, 4, 64)).max(-1)[scales != 1] == 127)
    assert np.all(codes[0, 0, :64] == 0) and scales[0, 0, 0] == 1 and scales[1, 1, 1] == 1
    assert np.all(codes[1, 1, 64:128] == 0) and np.all(codes[2, 2, 128:192] == 127)
    c_neg, s_neg = A.quantize_kv(-x)
    assert np.array_equal(c_neg, -codes) and np.array_equal(s_neg, scales)
    from ninferc.ir.quant import quantize

    qt = quantize(x.reshape(-1, 64), "w8")
    assert np.array_equal(qt.codes.reshape(codes.shape), codes) and np.array_equal(qt.scales.reshape(scales.shape), scales)


def test_int8_reference_prep_quantises_the_fp32_rows_and_gathers_them_dequantised():
    """reference_prep (int8) writes quantize_kv of the fp32 k (after RMSNorm + RoPE, no bf16 rounding) and of
    the fp32 v into this step's rows only (codes and scales), and gather_kv reads them back dequantised."""
    p = TINY8
    prev, new, cache, st, (_, kp, vp) = _prep_two_sequences(p, seed=12)
    _, _, k, v = p.split_proj(st["proj"])
    k32 = ref_partial_rope(ref_rmsnorm(k, st["k_norm_w"], p.eps, True), st["tok_pos"], p.rotary_dim, p.theta)
    (kc, ks), (vc, vs) = A.quantize_kv(k32), A.quantize_kv(v)
    written = np.zeros(kp.codes.shape[:1] + kp.codes.shape[2:3], bool)
    for t, (b, ps) in enumerate(zip(st["tok_seq"], st["tok_pos"])):
        page, row = cache.page_table[b, ps // p.page_size], ps % p.page_size
        np.testing.assert_array_equal(kp.codes[page, :, row], kc[t])
        np.testing.assert_array_equal(kp.scales[page, :, row], ks[t])
        np.testing.assert_array_equal(vp.codes[page, :, row], vc[t])
        np.testing.assert_array_equal(vp.scales[page, :, row], vs[t])
        written[page, row] = True
    for got, was in ((kp, cache.k_pages), (vp, cache.v_pages)):
        np.testing.assert_array_equal(got.codes.transpose(0, 2, 1, 3)[~written], was.codes.transpose(0, 2, 1, 3)[~written])
        np.testing.assert_array_equal(got.scales.transpose(0, 2, 1, 3)[~written],
                                      was.scales.transpose(0, 2, 1, 3)[~written])
    K, V = A.gather_kv(p, kp, vp, cache.page_table, 1, prev[1] + new[1])
    np.testing.assert_array_equal(K[:prev[1]], cache.k_ctx[1])
    np.testing.assert_array_equal(K[prev[1]:], A.dequantize_kv(kc, ks)[new[0]:])
    np.testing.assert_array_equal(V[prev[1]:], A.dequantize_kv(vc, vs)[new[0]:])
    assert not np.array_equal(K[prev[1]:], A.round_bf16(k32[new[0]:]))  # int8 is not bf16


@pytest.mark.parametrize("name", ["tiny", "27b"])
def test_int8_reference_attention_is_close_to_bf16(name):
    """The same step (three sequences from position 0, lengths 5 / 1 / 70, fresh pages) through the bf16 and
    the int8 references: the gated outputs differ by at most twice the sum of the relative quantisation errors
    of K and V (attention is a convex combination of V rows, and its softmax moves by about |q| |dK| scale,
    O(|dK| / |K|) for these unit-variance rows); measured about 0.8 x that."""
    p = PROBLEMS[name]
    p8 = dataclasses.replace(p, kv_dtype="int8")
    rng = np.random.default_rng(13)
    new = [5, 1, 70]
    cb = make_cache(p, [0, 0, 0], new, rng, nan=False)
    c8 = make_cache(p8, [0, 0, 0], new, rng, nan=False)
    c8.page_table[:] = cb.page_table  # same page placement (both pools have the same size)
    st = make_step(p, [0, 0, 0], new, rng)
    args = (st["proj"], st["q_norm_w"], st["k_norm_w"], st["tok_pos"], st["tok_seq"])
    qb, kpb, vpb = A.reference_prep(p, *args, cb.page_table, cb.k_pages, cb.v_pages)
    q8, kp8, vp8 = A.reference_prep(p8, *args, c8.page_table, c8.k_pages, c8.v_pages)
    np.testing.assert_array_equal(q8, qb)
    ob = A.reference_attention(p, qb, st["proj"], kpb, vpb, cb.page_table, st["tok_pos"], st["seq_start"])
    o8 = A.reference_attention(p8, q8, st["proj"], kp8, vp8, c8.page_table, st["tok_pos"], st["seq_start"])
    assert np.all(np.isfinite(o8))
    _, _, k, v = p.split_proj(st["proj"])
    k32 = ref_partial_rope(ref_rmsnorm(k, st["k_norm_w"], p.eps, True), st["tok_pos"], p.rotary_dim, p.theta)
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    e_k, e_v = rel(A.dequantize_kv(*A.quantize_kv(k32)), k32), rel(A.dequantize_kv(*A.quantize_kv(v)), v)
    e_out = rel(o8, ob)
    assert 0 < e_out <= 2 * (e_k + e_v), (e_out, e_k, e_v)
    assert e_k < 0.01 and e_v < 0.01  # N(0, 1)-like rows: step max / 127 ~ 2.5 % of max|x|, RMS error ~ 0.4 %


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_decode_with_prep_folded_compiles_and_fits(arch):
    """``fuse_prep`` (attn_prep folded into the staged bf16 decode kernel): compiles for every target, resident with
    its dynamic shared memory, on sm_90 at the staged kernel's 3 CTAs/SM for the 27B shape (its 6 KB of queries and
    RoPE table fit beside the 64 KB tile), and without local memory (RoPE's cos / sin by rope_cos_sin, not sincosf,
    whose slow path takes a 32-byte stack frame here)."""
    a = get_arch(arch)
    fam = A.AttnDecodeFamily(fuse_prep=True)
    probs = [p for p in ALL_PROBLEMS.values() if p.kv_dtype == "bf16"]
    specs = [fam.spec(p, True) for p in probs]
    res = {u: r for u, (_, r) in compile_variants(specs, arch).items()}
    for p, spec in zip(probs, specs):
        r = res[spec.uri]
        occ = occupancy(a, spec.threads, r.registers, r.static_smem_bytes, fam.dynamic_smem_bytes(p, True),
                        barriers=r.barriers)
        assert occ.ctas_per_sm >= 1 and r.local_bytes == 0, (spec.uri, r, occ)
        if p is BIG and arch == "sm_90":
            staged = A.AttnDecodeFamily(staging=A.DecodeStaging(stage_kv=True), fuse_prep=False).spec(p, True)
            r0 = compile_variants([staged], arch)[staged.uri][1]
            assert occ.ctas_per_sm == occupancy(a, staged.threads, r0.registers, r0.static_smem_bytes,
                                                fam.dynamic_smem_bytes(p, True), barriers=r0.barriers).ctas_per_sm == 3
    with pytest.raises(PlanError, match="fuse_prep cannot take stage_mma"):
        A.AttnDecodeFamily(fuse_prep=True, staging=A.DecodeStaging(stage_mma=True)).spec(BIG, True)
    with pytest.raises(PlanError, match="fuse_prep = 'yes' must be True, False or 'auto'"):
        A.AttnDecodeFamily(fuse_prep="yes")
