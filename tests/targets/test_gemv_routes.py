"""gemv route selection: caps scale with the SM count, cooperative grids never exceed the cap, the
chosen launch is the cheapest candidate under the cost model (recomputed here from the candidates), the
model gives hand-computed answers, and the choice follows the device (same compiled kernels, other SM
count / bandwidth)."""

import math
import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from targets_testlib import family_resources
from ninferc.errors import PlanError
from ninferc.targets.plan import KernelSpec
from ninferc.ir.reference import ref_rmsnorm
from ninferc.targets.kernels.gemv import (DP_ITEM_US, DP_STAGE_NS, EPILOGUES, LATENCY_US, OVERHEAD_STEPS, REDUCE_STEPS,
                                          TAIL_STEP_US,
                                          GemvFamily, GemvProblem, GemvTuning,
                                          estimate_us, kernel_args, norm_input, reference)
from ninferc.targets.plan import PlanContext, check_launch
from ninferc.targets.arch import ARCHS
from ninferc.targets.skus import get_sku, skus_for_arch

O_PROJ = GemvProblem(6144, 5120, "residual_add")
DOWN = GemvProblem(17408, 5120, "add_norm_parts")
PROBLEMS = [O_PROJ, DOWN, GemvProblem(5120, 17408, "swiglu", in_norm="parts"), GemvProblem(5120, 1344, "store"),
            GemvProblem(256, 704, "store"), GemvProblem(512, 96, "store"), GemvProblem(4096, 64, "store", "w8"),
            GemvProblem(5120, 16480, "store", "w4", in_norm="parts")]


def ctx(arch, sku):
    s = get_sku(sku, arch)
    return PlanContext(arch, s.sms, family_resources(arch), bandwidth_gbs=s.bandwidth_gbs)


def candidates(gemv, prob, tokens, c):
    """Every launch the route rule considers, with its modelled time: each plain shape; each cooperative thread
    count with the most splits that fit (when >= 2) -- stated independently of GemvFamily.launch."""
    tile = gemv.tile_for(tokens, prob.wfmt)
    out = []
    mma = gemv.mma_for(prob, tile)  # the tensor-core variants (w4: 4-token tile, w8: 4 and 8) use their own shapes
    dp = gemv.dp_for(prob, tile)  # integer dot products (w8 / w4, 1-token tile): the plain shapes, plain only
    # w8 mma: the tokens' fp16 x in dynamic smem, in the fewest equal K segments of whole 64-element blocks that fit
    # 40 KiB (K = 4,096 at 8 tokens: two of 2,048)
    segs = -(-tile * prob.k * 2 // (40 * 1024))
    dyn = tile * -(-(prob.k // 64) // segs) * 64 * 2 if mma and prob.wfmt == "w8" else 0
    if dp:  # int16 x, fp32 block scales, w4: fp32 sums per 32 elements
        dyn = tile * (2 * prob.k + 4 * prob.k // 64 + (4 * prob.k // 32 if prob.wfmt == "w4" else 0))

    def dyn_of(th):
        """w4 mma: each warp's ring of 2-3 stages (3 where the CTA's rings fit 48 KiB) of 4 scale groups of 16 rows'
        codes and scales and the tile's x; the others: ``dyn``."""
        if not (mma and prob.wfmt == "w4"):
            return dyn
        stage = 16 * 4 * (32 + 4) + tile * 4 * 64 * 2
        return th // 32 * max(2, min(3, 48 * 1024 // (th // 32 * stage))) * stage

    assert gemv.dynamic_smem_bytes(prob, tile) == dyn_of(128)  # no spec: the smallest mma CTA
    if dp:
        assert gemv.coop_threads_for(prob, tile) == ()
    persist = gemv.persistent(prob, tile)
    for th, kw in gemv.shapes_for(prob, tile) if (mma or dp) else gemv.plain_shapes:
        for carry in gemv.dp_carry if persist else (None,):  # persistent dp: each carry setting
            spec = gemv.spec(prob, th, "plain", tile, kw, carry)
            assert dict(spec.params).get("mma", False) == mma and dict(spec.params).get("dp", False) == dp
            assert dict(spec.params).get("carry", False) == bool(carry)
            ln = gemv.launch_variant(prob, tokens, c, th, "plain", max_tokens=tile, k_warps=kw, carry=carry)
            items = gemv.row_blocks(prob, th, kw, tile) * -(-tokens // tile)
            t = estimate_us(prob, tokens, threads=th, k_warps=kw, rows_per_warp=gemv.rows_for(prob, tile), tile=tile,
                            ctas_per_sm=c.occupancy(spec, dyn_of(th)).ctas_per_sm, sms=c.sms,
                            bandwidth_per_sm_gbs=c.bandwidth_per_sm_gbs, mma=mma, dp=dp,
                            items_per_cta=-(-items // ln.ctas), carry=bool(carry))
            out.append((t, ln))
    if not prob.norm_out:
        for th in gemv.coop_threads_for(prob, tile):
            spec = gemv.spec(prob, th, "coop", tile)
            base = gemv.row_blocks(prob, th, 1, tile) * -(-tokens // tile)
            splits = min(c.cap(spec, dyn_of(th)) // base, max(1, prob.k // prob.k_per_vec // 32))
            if splits >= 2:
                t = estimate_us(prob, tokens, threads=th, k_warps=1, rows_per_warp=gemv.rows_for(prob, tile), tile=tile,
                                ctas_per_sm=c.occupancy(spec, dyn_of(th)).ctas_per_sm, sms=c.sms,
                                bandwidth_per_sm_gbs=c.bandwidth_per_sm_gbs, splits=splits, mma=mma)
                out.append((t, gemv.launch_variant(prob, tokens, c, th, "coop", splits, max_tokens=tile)))
    return out


def test_l20_and_4090_caps_differ_by_the_sm_ratio(gemv):
    l20, r4090 = ctx("sm_89", "l20"), ctx("sm_89", "rtx4090")
    for spec in gemv.variants(O_PROJ):
        assert l20.occupancy(spec).ctas_per_sm == r4090.occupancy(spec).ctas_per_sm
        assert Fraction(l20.cap(spec), r4090.cap(spec)) == Fraction(92, 128)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_launch_fits_and_is_the_cheapest_candidate(gemv, arch):
    for sku in skus_for_arch(arch):
        c = ctx(arch, sku.key)
        for prob in PROBLEMS:
            for t in (1, 2, 4, 5, 8, 16):
                ln = gemv.launch(prob, t, c)
                check_launch(ln, arch, c.resources_of(ln.kernel), c.sms)
                cands = candidates(gemv, prob, t, c)
                best = min(x for x, _ in cands)
                assert any(x == best and cl == ln for x, cl in cands), (sku.key, prob, t, ln.kernel.uri)
                if ln.cooperative:
                    assert 2 <= ln.split_k and ln.ctas <= ln.coop_cap and ln.waves == 1
                    assert ln.workspace_bytes == 4 * ln.split_k * t * prob.w_rows
                else:
                    assert ln.split_k == 1
                    parts = gemv.norm_parts(ln) if prob.norm_out else 0
                    assert ln.workspace_bytes == 4 * t * parts
                assert (ln.kernel.param("max_tokens"), ln.ctas % -(-t // ln.kernel.param("max_tokens"))) == \
                    (gemv.tile_for(t, prob.wfmt), 0)


def test_cost_model_known_answers():
    """estimate_us on hand-computed cases: a grid with more bytes in flight than bandwidth x latency streams at
    the bandwidth; one with half as many streams at half of it; a multi-wave grid adds the tail of its last,
    partly empty wave; a cooperative launch adds its barrier and reduction pass."""
    p = GemvProblem(8192, 4096)  # bf16: 64 MiB of weights, 1024 16-byte vectors per row
    kw = dict(threads=128, rows_per_warp=4, tile=1, sms=100, bandwidth_per_sm_gbs=40.0)
    bw = 40.0 * 100 * 1e3  # bytes / us
    # k_warps 4: 1 row group of 4 rows -> 1024 CTAs; 8 steps per warp (1024 / (4 * 32)); cap 8 * 100 = 800
    steps, over = 8, OVERHEAD_STEPS + 2 * REDUCE_STEPS
    inflight = 800 * 4 * 4 * 512 * steps / (steps + over)
    assert inflight > bw * LATENCY_US  # saturated
    waves = 1024 / 800
    want = p.weight_bytes / bw + (steps + over) * TAIL_STEP_US * (math.ceil(waves) - waves + 1)
    assert estimate_us(p, 1, k_warps=4, ctas_per_sm=8, **kw) == pytest.approx(want)
    # k_warps 1 with 4 warps -> 4 row groups, 256 CTAs of 32 steps, one partial wave: in flight below the need
    steps, over = 32, OVERHEAD_STEPS
    inflight = 256 * 4 * 4 * 512 * steps / (steps + over)
    frac = inflight / (bw * LATENCY_US)
    assert frac < 1
    want = p.weight_bytes / (bw * frac) + (steps + over) * TAIL_STEP_US
    assert estimate_us(p, 1, k_warps=1, ctas_per_sm=8, **kw) == pytest.approx(want)
    # cooperative: 2 splits halve the steps and double the CTAs, plus (2 + splits) latencies
    steps = 16
    inflight = 512 * 4 * 4 * 512 * steps / (steps + over)
    want = p.weight_bytes / (bw * min(1, inflight / (bw * LATENCY_US))) + (steps + over) * TAIL_STEP_US \
        + 4 * LATENCY_US
    assert estimate_us(p, 1, k_warps=1, ctas_per_sm=8, splits=2, **kw) == pytest.approx(want)
    # more tokens than the tile: the weights are streamed once per token chunk
    assert estimate_us(p, 8, k_warps=4, ctas_per_sm=8, **{**kw, "tile": 4}) > 2 * p.weight_bytes / bw
    # a dp variant adds its x staging: each SM converts tile x K elements once per resident CTA -- 1024 CTAs over a
    # cap of 800 keep 8 per SM; 256 CTAs on 100 SMs 2.56
    for k_warps, ctas_per_sm, per_sm in ((4, 8, 8.0), (1, 8, 2.56)):
        base = estimate_us(p, 1, k_warps=k_warps, ctas_per_sm=ctas_per_sm, **kw)
        got = estimate_us(p, 1, k_warps=k_warps, ctas_per_sm=ctas_per_sm, dp=True, **kw)
        assert got - base == pytest.approx(per_sm * 8192 * DP_STAGE_NS * 1e-3)
    # a persistent CTA of 5 items pays 4 item boundaries, unless it carries the next item's first weights
    base = estimate_us(p, 1, k_warps=1, ctas_per_sm=8, **kw)
    assert estimate_us(p, 1, k_warps=1, ctas_per_sm=8, items_per_cta=5, **kw) - base == pytest.approx(4 * DP_ITEM_US)
    assert estimate_us(p, 1, k_warps=1, ctas_per_sm=8, items_per_cta=5, carry=True, **kw) == pytest.approx(base)


def test_choice_follows_the_device(gemv):
    """The same cubins pick different CTA shapes on different cards of one arch (SM count, bandwidth per SM),
    and on the same SMs by bandwidth alone: the plan is derived, not a table."""
    differ = []
    for arch in ARCHS:
        for prob in PROBLEMS:
            uris = {s.key: gemv.launch(prob, 1, ctx(arch, s.key)).kernel.uri for s in skus_for_arch(arch)}
            if len(set(uris.values())) > 1:
                differ.append((arch, prob))
    assert len(differ) >= 3, differ
    res = family_resources("sm_90")
    slow, fast = PlanContext("sm_90", 132, res, bandwidth_gbs=100.0), PlanContext("sm_90", 132, res, bandwidth_gbs=8000.0)
    shapes = {(gemv.launch(p, 1, slow).kernel.uri, gemv.launch(p, 1, fast).kernel.uri) for p in PROBLEMS}
    assert any(a != b for a, b in shapes)
    # a bare SM count uses the arch's typical bandwidth per SM (median of its SKUs)
    bare = PlanContext("sm_89", 92, family_resources("sm_89"))
    per = sorted(s.bandwidth_gbs / s.sms for s in skus_for_arch("sm_89"))
    assert bare.bandwidth_per_sm_gbs == per[len(per) // 2]
    with pytest.raises(PlanError, match="bandwidth must be positive"):
        PlanContext("sm_89", 92, {}, bandwidth_gbs=0)


def test_launch_variant_forced_and_errors(gemv):
    gemv = GemvFamily(GemvTuning(bf16_mma_tiles=()))  # the fp32-FMA routes (bf16's 4- and 8-token tiles are mma)
    from ninferc.targets.plan import compile_variants, family_variants

    sku = get_sku("l20", "sm_89")
    fma = [s for p in gemv.sample_problems() for s in family_variants(gemv, p, "sm_89")]
    c = PlanContext("sm_89", sku.sms, {**family_resources("sm_89"),
                                       **{u: r for u, (_, r) in compile_variants(fma, "sm_89").items()}},
                    bandwidth_gbs=sku.bandwidth_gbs)
    ln = gemv.launch_variant(O_PROJ, 1, c, 512, "coop", splits=1)
    assert ln.cooperative and ln.split_k == 1 and ln.ctas == 80
    with pytest.raises(PlanError, match="exceeds the cooperative cap"):
        gemv.launch_variant(O_PROJ, 64, c, 256, "coop", splits=2)
    assert gemv.launch_variant(O_PROJ, 64, c, 128, "plain").ctas == 320 * 8  # 64 tokens in chunks of the largest tile, 8
    assert gemv.launch_variant(O_PROJ, 64, c, 128, "plain", max_tokens=4).ctas == 320 * 16
    assert gemv.launch_variant(O_PROJ, 1, c, 128, "plain", max_tokens=1, k_warps=4).ctas == 5120 // 4
    with pytest.raises(PlanError, match="k_warps = 3 must divide the 4 warps"):
        gemv.launch_variant(O_PROJ, 1, c, 128, "plain", k_warps=3)
    with pytest.raises(PlanError, match="plain mode only"):
        gemv.launch_variant(DOWN, 1, c, 256, "coop")


def test_w4_dp_for_add_norm_parts_at_four_tokens_fits_where_the_target_holds_its_x():
    """The default ``w4_dp_tiles`` (1, 4) / ``w4_mma_epilogues`` (no add_norm_parts): on the H200 the 27B w4 down at 4
    tokens plans the dp kernel with 152,320 B of staged x (gate|up stays on tensor cores); an L20 (99 KiB per CTA)
    cannot hold that x and the launch takes the fallback's tensor-core kernel, which the family's variants list; bad
    values are refused."""
    from ninferc.targets.plan import compile_variants, family_variants

    fam = GemvFamily()
    assert (fam.w4_dp_tiles, fam.w4_mma_epilogues) == ((1, 4), ("store", "residual_add", "swiglu"))
    down, gate_up = GemvProblem(17408, 5120, "add_norm_parts", "w4"), GemvProblem(5120, 17408, "swiglu", "w4")
    for arch, sku in (("sm_90", "h200"), ("sm_89", "l20")):
        s = get_sku(sku, arch)
        specs = [v for p in (down, gate_up) for v in family_variants(fam, p, arch)]
        c = PlanContext(arch, s.sms, {u: r for u, (_, r) in compile_variants(specs, arch).items()},
                        bandwidth_gbs=s.bandwidth_gbs)
        assert dict(fam.launch(gate_up, 4, c).kernel.params).get("mma")
        ln = fam.launch(down, 4, c)
        if arch == "sm_90":
            assert dict(ln.kernel.params).get("dp") and ln.dynamic_smem_bytes == 152_320
        else:
            assert dict(ln.kernel.params).get("mma") and ln.kernel in specs
            every_mma = GemvFamily(GemvTuning(w4_dp_tiles=(1,), w4_mma_epilogues=EPILOGUES))
            assert ln.kernel == every_mma.launch(down, 4, c).kernel  # the kernel before the dp tile
    with pytest.raises(PlanError, match="dp_x_bytes = 0"):
        GemvTuning(dp_x_bytes=0)
    with pytest.raises(PlanError, match="w4_mma_epilogues"):
        GemvTuning(w4_mma_epilogues=("bogus",))


def test_w8_dp_tiles_where_the_target_holds_the_x_else_smaller_chunks_or_tensor_cores():
    """The default w8 token tiles are dp tiles (``w8_dp_tiles`` (1, 4, 8), no ``w8_mma_tiles``, ``dp_x_bytes`` 40 KiB
    per token). At 4 tokens: on an H200 every 27B w8 GEMV plans the persistent dp kernel, the down with its 143,616 B
    of staged x; on an L20 (99 KiB per CTA) the down cannot hold it and takes the tensor-core kernel
    (``GemvFamily.fallback``: the tile moved to ``w8_mma_tiles``); a dp x over ``dp_x_bytes`` takes the fallback
    everywhere. At 8 tokens (``dp_chunk_fallback`` ("w8",)): the down's 8-token x fits no target, so on the H200 it
    takes the 4-token dp kernel in two token chunks and on the L20 (where that x does not fit either) the 8-token
    tensor-core kernel; GDN out's 8-token x (102,016 B) fits the H200 and not the L20 (two 4-token dp chunks there);
    gate|up's (84,512 B) fits both. Without the chunk fallback the down takes tensor cores at 8 tokens. One token: dp."""
    from ninferc.targets.plan import compile_variants, family_variants

    fam = GemvFamily()
    assert (fam.w8_dp_tiles, fam.w8_mma_tiles, fam.dp_x_bytes, fam.dp_chunk_fallback) == \
        ((1, 4, 8), (), 40 * 1024, ("w8",))
    probs = {"down": GemvProblem(17408, 5120, "add_norm_parts", "w8"),
             "gate_up": GemvProblem(5120, 17408, "swiglu", "w8"),
             "gdn_out": GemvProblem(6144, 5120, "add_norm_parts", "w8")}
    small = GemvFamily(GemvTuning(dp_x_bytes=32 * 1024))  # 128 KiB at 4 tokens: the down's x over it, gate|up's not
    no_chunks = GemvFamily(GemvTuning(dp_chunk_fallback=()))
    at8 = {("sm_90", "down"): ("dp", 4), ("sm_90", "gate_up"): ("dp", 8), ("sm_90", "gdn_out"): ("dp", 8),
           ("sm_89", "down"): ("mma", 8), ("sm_89", "gate_up"): ("dp", 8), ("sm_89", "gdn_out"): ("dp", 4)}
    for arch, sku in (("sm_90", "h200"), ("sm_89", "l20")):
        s = get_sku(sku, arch)
        specs = [v for f in (fam, small, no_chunks) for p in probs.values() for v in family_variants(f, p, arch)]
        c = PlanContext(arch, s.sms, {u: r for u, (_, r) in compile_variants(specs, arch).items()},
                        bandwidth_gbs=s.bandwidth_gbs)
        for name, p in probs.items():
            ln = fam.launch(p, 4, c)
            engine = "mma" if name == "down" and arch == "sm_89" else "dp"
            assert dict(ln.kernel.params).get(engine), (arch, name, ln.kernel.uri)
            assert ln.kernel in family_variants(fam, p, arch)
            ln8 = fam.launch(p, 8, c)
            engine, tile = at8[arch, name]
            assert dict(ln8.kernel.params).get(engine) and ln8.kernel.param("max_tokens") == tile, \
                (arch, name, ln8.kernel.uri)
            assert ln8.tokens == 8 and ln8.kernel in family_variants(fam, p, arch)
            assert dict(fam.launch(p, 1, c).kernel.params).get("dp")
        if arch == "sm_90":
            assert fam.launch(probs["down"], 4, c).dynamic_smem_bytes == 143_616
            assert dict(no_chunks.launch(probs["down"], 8, c).kernel.params).get("mma")
        assert dict(small.launch(probs["down"], 4, c).kernel.params).get("mma")
        assert dict(small.launch(probs["gate_up"], 4, c).kernel.params).get("dp")
    assert fam.fallback(probs["down"], 1) is None
    wide = GemvFamily(GemvTuning(token_tiles=(1, 4, 16), w8_dp_tiles=(1, 4, 16)))  # past the tensor cores' 8 tokens
    assert wide.fallback(probs["gate_up"], 16) is None and wide.variants(probs["gate_up"])
    assert fam.fallback(GemvProblem(5120, 17408, "swiglu", "bf16"), 4) is None
    fb = fam.fallback(probs["down"], 4)
    assert (fb.w8_dp_tiles, fb.w8_mma_tiles) == ((1, 8), (4,)) and fb.engine(probs["down"], 4) == "mma"
    fb8 = fam.fallback(probs["down"], 8)
    assert (fb8.w8_dp_tiles, fb8.w8_mma_tiles) == ((1, 4), (8,)) and fb8.engine(probs["down"], 8) == "mma"
    assert fam.chunk_fallback(probs["down"], 8).tuning.tiles("w8") == (1, 4)
    assert fam.chunk_fallback(probs["down"], 4) is None  # no dp tile of 2..3 tokens: never the one-token kernel
    assert fam.chunk_fallback(GemvProblem(5120, 17408, "swiglu", "w4"), 8) is None  # w4 not listed (nor a dp tile)
    assert no_chunks.chunk_fallback(probs["down"], 8) is None
    # forcing the down's 8-token dp kernel, which no SM holds, is refused naming it (a launch would fail on the device)
    c = PlanContext("sm_90", 132, {u: r for u, (_, r) in compile_variants(
        [fam.spec(probs["down"], 640, "plain", 8, 1, True)], "sm_90").items()})
    with pytest.raises(PlanError, match=r"tok8.*on sm_90: no resident CTA per SM \(limited by shared_memory; "
                                        r"287,232 B of dynamic shared memory for 8 tokens at the 8-token tile, [\d,]+ B per CTA in all, "
                                        r"where a CTA may take at most 232,448 B\)"):
        fam.launch_variant(probs["down"], 8, c, 640, "plain", max_tokens=8, k_warps=1, carry=True)
    with pytest.raises(PlanError, match=r"dp_chunk_fallback = \('bf16',\)"):
        GemvTuning(dp_chunk_fallback=("bf16",))


def test_dp_option_errors_name_the_value():
    with pytest.raises(PlanError, match="dp_ring = 1 must be 0"):
        GemvFamily(GemvTuning(dp_ring=1))
    with pytest.raises(PlanError, match="dp_preload = 'early'"):
        GemvFamily(GemvTuning(dp_preload="early"))
    fam = GemvFamily(GemvTuning(w4_dp_tiles=(1,)))
    prob = GemvProblem(5120, 5120, "store", "w4")
    with pytest.raises(PlanError, match="ring = 1 must be 0"):
        fam.spec(prob, 256, "plain", 1, 1, False, 1)
    assert dict(fam.spec(prob, 256, "plain", 1, 1, False, 3).params)["ring"] == 3
    assert "ring" not in dict(fam.spec(prob, 256, "plain", 1, 1, True, 3).params)  # the carry variant has none


def test_token_tiles_per_format_and_their_errors():
    """w4 problems take ``w4_token_tiles``, bf16 and w8 ``token_tiles`` (both (1, 4, 8) by default since 2026-12-06;
    w4 without its 8-token tile here); an empty or non-positive tile list is refused naming the value."""
    assert GemvTuning().tiles("w4") == GemvTuning().tiles("w8") == GemvTuning().tiles("bf16") == (1, 4, 8)
    fam = GemvFamily(GemvTuning(w4_token_tiles=(1, 4), w4_mma_tiles=(4,)))
    assert fam.tuning.tiles("w4") == (1, 4) and fam.tuning.tiles("w8") == fam.tuning.tiles("bf16") == (1, 4, 8)
    assert [fam.tile_for(t, "w4") for t in (1, 2, 5, 8, 16)] == [1, 4, 4, 4, 4]
    assert [fam.tile_for(t, "bf16") for t in (1, 2, 5, 8, 16)] == [1, 4, 8, 8, 8]
    w4 = GemvProblem(5120, 5120, "store", "w4")
    assert {s.param("max_tokens") for s in fam.variants(w4)} == {1, 4}
    ln = fam.launch_variant(w4, 16, ctx("sm_90", "h200"), 128, "plain", k_warps=1)  # default tile: w4's largest
    assert ln.kernel.param("max_tokens") == 4 and ln.ctas == fam.row_blocks(w4, 128, 1, 4) * 4
    for bad in ((), (0, 4)):
        with pytest.raises(PlanError, match=rf"w4_token_tiles={bad!r}".replace("(", r"\(").replace(")", r"\)")):
            GemvTuning(w4_token_tiles=bad)
        with pytest.raises(PlanError, match=rf"token_tiles={bad!r}".replace("(", r"\(").replace(")", r"\)")):
            GemvTuning(token_tiles=bad)


def test_dp_min_ctas_caps_only_its_format_epilogue_tile_and_cta_size():
    """``dp_min_ctas`` (wfmt, epilogue, tile, threads, n): template ``min_ctas`` n on exactly those dp variants; the
    default caps the one-token w8 ``store`` GEMVs of 256 threads at 4 CTAs/SM, and an entry for the 4-token tile caps
    that tile alone."""
    fam = GemvFamily()
    w8 = GemvProblem(5120, 16480, "store", "w8", in_norm="parts")
    assert dict(fam.spec(w8, 256, "plain", 1, 1, False).params)["min_ctas"] == 4
    assert dict(fam.spec(w8, 256, "plain", 1, 1, True).params)["min_ctas"] == 4  # carry too
    assert "min_ctas" not in dict(fam.spec(w8, 640, "plain", 1, 1, False).params)
    assert "min_ctas" not in dict(fam.spec(w8, 256, "plain", 4, 1, False).params)  # another tile
    swiglu = GemvProblem(5120, 17408, "swiglu", "w8", in_norm="parts")
    assert "min_ctas" not in dict(fam.spec(swiglu, 256, "plain", 1, 1, False).params)
    four = GemvFamily(GemvTuning(dp_min_ctas=(("w8", "swiglu", 4, 256, 3),)))
    assert dict(four.spec(swiglu, 256, "plain", 4, 1, True).params)["min_ctas"] == 3
    assert "min_ctas" not in dict(four.spec(swiglu, 256, "plain", 1, 1, True).params)
    assert "min_ctas" not in dict(four.spec(w8, 256, "plain", 4, 1, True).params)
    w4 = GemvProblem(5120, 16480, "store", "w4", in_norm="parts")
    assert "min_ctas" not in dict(GemvFamily(GemvTuning(w4_dp_tiles=(1,))).spec(w4, 256, "plain", 1, 1, False).params)
    assert "min_ctas" not in dict(GemvFamily(GemvTuning(dp_min_ctas=())).spec(w8, 256, "plain", 1, 1, False).params)
    for bad in (("bf16", "store", 1, 256, 4), ("w8", "store", 256, 4), ("w8", "store", 0, 256, 4)):
        with pytest.raises(PlanError, match="dp_min_ctas entries"):
            GemvFamily(GemvTuning(dp_min_ctas=(bad,)))


def test_dp_depth_other_than_1_or_2_fails_to_compile_naming_it():
    from ninferc.errors import CompileError
    from ninferc.targets.nvrtc import compile_cubin
    spec = GemvFamily(GemvTuning(w4_dp_tiles=(1,))).spec(GemvProblem(1024, 640, "store", "w4"), 640, "plain", 1, 1, False)
    bad = KernelSpec.make(spec.family, spec.template, {**dict(spec.params), "depth": 3}, spec.threads, False)
    with pytest.raises(CompileError, match="depth must be 1 or 2"):
        compile_cubin(bad.render(), "sm_90", name=bad.uri)


def test_dp_deep_threads_give_depth_2_only_to_their_plain_loop_variants():
    """``dp_deep_threads`` (default 640): template ``depth`` 2 on the dp variants of those thread counts without
    carry, ring or late preload; every other variant renders as before (no ``depth`` parameter)."""
    fam = GemvFamily(GemvTuning(w4_dp_tiles=(1,), dp_deep_threads=(640,)))
    prob = GemvProblem(17408, 5120, "add_norm_parts", "w4")
    assert dict(fam.spec(prob, 640, "plain", 1, 1, False).params)["depth"] == 2
    assert "depth" not in dict(fam.spec(prob, 256, "plain", 1, 1, False).params)
    assert "depth" not in dict(fam.spec(prob, 640, "plain", 1, 1, True).params)  # carry
    assert "depth" not in dict(fam.spec(prob, 640, "plain", 1, 1, False, 3).params)  # ring
    late = GemvFamily(GemvTuning(w4_dp_tiles=(1,), dp_deep_threads=(640,), dp_preload="late"))
    assert "depth" not in dict(late.spec(prob, 640, "plain", 1, 1, False).params)
    assert dict(GemvFamily(GemvTuning(w4_dp_tiles=(1,))).spec(prob, 640, "plain", 1, 1, False).params)["depth"] == 2
    with pytest.raises(PlanError, match=r"dp_deep_threads = \(100,\) must be CTA sizes"):
        GemvFamily(GemvTuning(dp_deep_threads=(100,)))
    plain = GemvFamily(GemvTuning(w4_dp_tiles=(1,), dp_deep_threads=()))
    assert "depth" not in dict(plain.spec(prob, 640, "plain", 1, 1, False).params)


def test_problem_validation():
    with pytest.raises(PlanError, match="K = 5121 must be a positive multiple of 8"):
        GemvProblem(5121, 5120)
    with pytest.raises(PlanError, match="epilogue"):
        GemvProblem(64, 64, "gelu")
    with pytest.raises(PlanError, match="in_norm"):
        GemvProblem(64, 64, in_norm="unit")
    with pytest.raises(PlanError, match="both write norm parts"):
        GemvProblem(64, 64, "add_norm_parts", in_norm="parts")


def test_arg_names_match_the_template_signature(gemv):
    for prob in gemv.sample_problems():
        for spec in gemv.variants(prob):
            src = spec.render()
            sig = re.search(rf"{spec.entry}\(([^)]*)\)", src).group(1)
            names = [p.split()[-1].strip("*") for p in sig.replace("__restrict__", "").split(",")]
            assert tuple(names) == gemv.arg_names(prob)
        ln = gemv.launch(prob, 3, ctx("sm_90", "h200"))
        extra = {}
        if prob.norm_out:
            extra = dict(norm_w="NW", xs="XS", ss_out="SS")
        if prob.norm_in:
            extra = dict(ss_in="SS", ss_parts=7, in_eps=1e-6)
        args = kernel_args(prob, ln, "W", "X", "Y", scales="S" if prob.quantized else None, **extra)
        assert len(args) == len(gemv.arg_names(prob))
        i = gemv.arg_names(prob).index("t_total")
        assert args[i:i + 2] == (3, ln.split_k)


def test_add_norm_parts_is_plain_and_sizes_its_parts(gemv):
    c = ctx("sm_90", "h200")
    for t in (1, 3, 8):
        ln = gemv.launch(DOWN, t, c)
        assert ln.route == "plain" and not ln.cooperative and "add_norm_parts" in ln.kernel.uri
        parts = gemv.norm_parts(ln)
        kwarps = dict(ln.kernel.params).get("k_warps", 1)
        assert parts == -(-DOWN.n // gemv.outputs_per_cta(DOWN, ln.threads, kwarps, ln.kernel.param("max_tokens")))
        assert ln.workspace_bytes == 4 * t * parts
    with pytest.raises(PlanError, match="not an add_norm_parts"):
        gemv.norm_parts(gemv.launch(O_PROJ, 1, c))
    with pytest.raises(PlanError, match="norm_w, xs and ss_out"):
        kernel_args(DOWN, gemv.launch(DOWN, 1, c), "W", "X", "Y")
    cons = GemvProblem(5120, 17408, "swiglu", in_norm="parts")
    with pytest.raises(PlanError, match="ss_in, ss_parts and in_eps"):
        kernel_args(cons, gemv.launch(cons, 1, c), "W", "X", "Y")


def test_reference_epilogues():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 16)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    acc = x.astype(np.float32) @ w.astype(np.float32).T
    np.testing.assert_array_equal(reference(GemvProblem(16, 8), x, w), acc)
    y0 = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_array_equal(reference(GemvProblem(16, 8, "residual_add"), x, w, y0), y0 + acc)
    out = reference(GemvProblem(16, 4, "swiglu"), x, w)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (3, 4)
    g, u = acc[:, :4], acc[:, 4:]
    np.testing.assert_allclose(out.astype(np.float32), g / (1 + np.exp(-g)) * u, rtol=1e-2, atol=1e-2)
    with pytest.raises(PlanError, match="expected x"):
        reference(GemvProblem(16, 8), x[:, :8], w)
    nw = rng.standard_normal(8).astype(np.float32)
    for unit in (True, False):
        h, xs, ss = reference(GemvProblem(16, 8, "add_norm_parts", unit_offset=unit), x, w, y0, norm_w=nw)
        np.testing.assert_array_equal(h, y0 + acc)
        scale = (1 + nw) if unit else nw
        assert xs.dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(xs.astype(np.float32), h * scale, rtol=4e-3)
        np.testing.assert_allclose(ss[:, 0], (h.astype(np.float64) ** 2).sum(axis=1), rtol=1e-6)
        # the consumer with these parts is the GEMV of the RMSNorm of h (up to the bf16 rounding of xs)
        w2 = rng.standard_normal((5, 8)).astype(np.float32)
        got = reference(GemvProblem(8, 5, in_norm="parts"), xs, w2, ss_in=ss, in_eps=1e-6)
        want = ref_rmsnorm(h, nw, 1e-6, unit) @ w2.T
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
        np.testing.assert_array_equal(norm_input(h, nw, unit)[0], xs)
    with pytest.raises(PlanError, match="needs norm_w"):
        reference(GemvProblem(16, 8, "add_norm_parts"), x, w, y0)
    with pytest.raises(PlanError, match="ss_in and in_eps"):
        reference(GemvProblem(16, 8, in_norm="parts"), x, w)


@pytest.mark.slow  # compiles the forced variants for sm_90 (~1 min on 2 cores)
def test_every_forced_gpu_case_plans_on_the_h200():
    """The GPU tests' forced gemv cases (``gemv_cases.FORCED``) are sized for the H200: each must plan there
    (sm_90, 132 SMs, its cooperative grid under the cap), so a case that stops fitting fails here, on the CPU,
    instead of being skipped on the GPU. (Three cooperative cases did not fit and were skipped until 2026-12-05.)"""
    from gemv_cases import FORCED, FORCED_FAMILY

    from ninferc.targets.plan import PlanContext, compile_variants

    gemv = FORCED_FAMILY
    specs = {s.uri: s for s in (gemv.spec(p, th, mode, gemv.tile_for(t), kw) for p, t, th, mode, _, kw in FORCED)}
    built = compile_variants(list(specs.values()), "sm_90", jobs=2)
    ctx = PlanContext("sm_90", 132, {u: r for u, (_, r) in built.items()})
    for p, t, th, mode, splits, kw in FORCED:
        gemv.launch_variant(p, t, ctx, th, mode, splits, max_tokens=gemv.tile_for(t), k_warps=kw)
