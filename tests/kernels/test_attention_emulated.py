"""The attention kernels run by the CPU emulator of tests/kernels/cuda_host.py (no GPU): attn_prep, attn_decode +
attn_combine and attn_prefill (simt and mma routes) with the int8 KV cache -- and, as the harness's own control,
the bf16 one -- against the numpy references of targets/kernels/attention.py, with the tolerances the GPU tier
uses. Small shapes: the tiny fixture's attention and one KV head of the 27B shape (hd 256, G = 6), contexts
around the page boundaries (63 / 64 / 65 / 129 / 130), garbage (NaN / Inf scales, any codes) in every free
row, NaN-poisoned outputs, both thread schedules.

The emulator replaces ``ninfer_common.cuh`` by host versions; this file adds the few helpers the attention
kernels use on top (read-only vector loads, the ``__f*_rn`` intrinsics; ``__ldg`` is the shim's); the shim's host
``mma.sync.m16n8k16`` (bf16 inputs, fp32 accumulate) gathers the warp's fragments through warp barriers, with the
fragment layout written out from the PTX ISA independently of the kernel (``templates/ninfer_common.cuh`` section 8
documents the same layout). Host math is correctly rounded where the GPU's is
within 2 ulp, so k (RMSNorm + RoPE) can still differ from numpy by an ulp: the int8 rows are checked with
:func:`attn_cases.check_int8_rows`, as on the GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import zlib

import numpy as np
import pytest

from attn_cases import (BALANCED, SPLIT_MODES, TINY, check_far_prep, check_int8_rows, far_prep_case, make_cache,
                        make_step, pool_bits, split_geometry)
from ninferc.ir.tolerances import ATTENTION, BF16_ELEMENTWISE, FP32_REORDER
from ninferc.targets.kernels import attention as A
from ninferc.targets.plan import PlanContext, compile_variants

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU emulator needs g++"), pytest.mark.slow]  # slow: seconds each on 2 cores

PREP, DECODE, COMBINE, PREFILL = A.FAMILIES
ARCH, SMS = "sm_90", 132  # the plan the launches come from (grids, dynamic smem); any target would do

#: the tiny fixture's attention with 6 pages per sequence, and one KV head of the 27B attention
SMALL = dataclasses.replace(TINY, max_pages=6)
HD256 = A.AttentionProblem(6, 1, 256, 64, 1e7, 1e-6, page_size=64, max_pages=4)
SHAPES = {f"{n}-{dt}": dataclasses.replace(p, kv_dtype=dt) for n, p in (("tiny", SMALL), ("hd256", HD256))
          for dt in ("int8", "bf16")}

_END_COMMON = "// ---- end ninfer_common.cuh ----\n"


def host_source(spec) -> str:
    """The rendered kernel with the host helpers added (for cuda_host.HostKernel)."""
    from cuda_host import with_host_helpers

    src = spec.render()
    assert src.count(_END_COMMON) == 1
    src = with_host_helpers(src)
    rest = src.split(_END_COMMON)[1]
    assert "asm(" not in rest and "asm volatile(" not in rest, "inline PTX the emulator cannot run"
    return src


@functools.lru_cache(maxsize=None)
def host_kernel(spec):
    from cuda_host import HostKernel

    return HostKernel(host_source(spec), spec.entry)


@functools.lru_cache(maxsize=None)
def plan_ctx() -> PlanContext:
    specs = [s for fam in A.FAMILIES for p in SHAPES.values() for s in fam.variants(p)]
    return PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants(specs, ARCH).items()})


def run(launch, args, reverse: bool) -> None:
    host_kernel(launch.kernel).launch(launch.grid, launch.block, args, smem=launch.dynamic_smem_bytes,
                                      reverse=reverse)


def pages_of(p, dev):
    if p.kv_dtype == "int8":
        return A.Int8Pages(dev["k_pages"], dev["k_scales"]), A.Int8Pages(dev["v_pages"], dev["v_scales"])
    return A.from_bf16_bits(dev["k_pages"]), A.from_bf16_bits(dev["v_pages"])


def prep_step(p, prev, new, seed, reverse):
    """A cache with garbage in every free row, a step appending new[b] tokens after prev[b], attn_prep run by
    the emulator and checked; returns (cache, st, dev, refs) with refs = (q_ref, kp_ref, vp_ref)."""
    rng = np.random.default_rng(zlib.crc32(repr(seed).encode()))
    cache = make_cache(p, prev, [a + b for a, b in zip(prev, new)], rng)
    st = make_step(p, prev, new, rng)
    T = st["proj"].shape[0]
    dev = {"proj": st["proj"], "q_norm_w": st["q_norm_w"], "k_norm_w": st["k_norm_w"], "inv_freq": p.inv_freq(),
           "tok_pos": st["tok_pos"], "tok_seq": st["tok_seq"], "seq_start": st["seq_start"],
           "seq_ctx": st["seq_ctx"], "page_table": cache.page_table, **pool_bits(p, cache.k_pages, cache.v_pages),
           "q_out": np.full((T, p.heads_q, p.head_dim), np.nan, np.float32)}
    ln = PREP.launch(p, T, plan_ctx())
    run(ln, PREP.kernel_args(p, ln, dev), reverse)
    q_ref, kp_ref, vp_ref = A.reference_prep(p, st["proj"], st["q_norm_w"], st["k_norm_w"], st["tok_pos"],
                                             st["tok_seq"], cache.page_table, cache.k_pages, cache.v_pages)
    FP32_REORDER.check(dev["q_out"], q_ref, "attn_prep q_out (emulated)")
    kp_dev, vp_dev = pages_of(p, dev)
    if p.kv_dtype == "int8":
        check_int8_rows(p, cache, st, kp_dev, vp_dev, kp_ref, vp_ref)
    else:
        pg = cache.page_table[st["tok_seq"], st["tok_pos"] // p.page_size]
        rw = st["tok_pos"] % p.page_size
        BF16_ELEMENTWISE.check(kp_dev[pg, :, rw], kp_ref[pg, :, rw], "attn_prep k rows (emulated)")
        np.testing.assert_array_equal(vp_dev[pg, :, rw], vp_ref[pg, :, rw])
    return cache, st, dev, (q_ref, kp_ref, vp_ref)




@pytest.mark.parametrize("name", ["tiny-bf16", "hd256-int8"])
def test_emulated_prep_rope_at_far_positions(name):
    """attn_prep's q rows at positions past sinf / cosf's fast-path range up to 2^18 - 1 match numpy's RoPE of the
    same fp32 angles; rows past the page table are not written (attn_cases.far_prep_case / check_far_prep)."""
    p = SHAPES[name]
    cache, dev = far_prep_case(p, np.random.default_rng(7))
    ln = PREP.launch(p, len(dev["tok_pos"]), plan_ctx())
    run(ln, PREP.kernel_args(p, ln, dev), False)
    check_far_prep(p, cache, dev, FP32_REORDER)


#: the decode kernel's K / V path per test id: AttnDecodeFamily settings
STAGES = {"global": {}, "staged": {"stage_kv": True}, "staged32": {"stage_kv": True, "stage_keys": 32},
          "staged16": {"stage_kv": True, "stage_keys": 16}, "staged-mma": {"stage_kv": True, "stage_mma": True},
          "staged32-mma": {"stage_kv": True, "stage_keys": 32, "stage_mma": True}}


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.parametrize("split_mode", SPLIT_MODES)
@pytest.mark.parametrize("name,ctxs", [("tiny-int8", (63, 64, 65)), ("tiny-int8", (1, 129)),
                                       ("hd256-int8", (65, 130)), ("tiny-bf16", (63, 64, 65)),
                                       ("hd256-bf16", (65, 130))])
def test_emulated_decode(name, ctxs, split_mode, stage):
    """prep + decode + combine, one token per sequence at ctx - 1 (reverse thread order for per_page and the
    balanced modes, which spread each context over every split, key ranges starting inside pages); ``staged``:
    the decode kernel's K/V tiles through shared memory (``stage_kv``, tiles of a page or ``stage_keys`` = 32 / 16
    keys, and with the tensor-core loops, ``stage_mma``; the emulator's dynamic shared memory is NaN before every
    CTA and its cp.async copies land only at the wait that covers their group, so a row read but never staged, or
    read before its copy's wait, poisons the output)."""
    p = SHAPES[name]
    reverse = split_mode == "per_page" or split_mode in BALANCED
    B = len(ctxs)
    cache, st, dev, (q_ref, kp_ref, vp_ref) = prep_step(p, [c - 1 for c in ctxs], [1] * B,
                                                        (1, name, ctxs, split_mode), reverse)
    ctx = plan_ctx()
    splits, pps, granule = split_geometry(p, B, ctx, split_mode, DECODE)
    fam = A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, granule, granule, fuse_prep=False,
                             staging=A.DecodeStaging(**STAGES[stage]))
    ln_d = dataclasses.replace(DECODE.launch(p, B, ctx), kernel=fam.spec(p), grid=(splits, p.heads_kv, B),
                               split_k=splits, workspace_bytes=DECODE.workspace_bytes(p, B, splits),
                               dynamic_smem_bytes=fam.dynamic_smem_bytes(p))
    if split_mode in BALANCED:  # the mode is only a test when some range starts inside a page
        starts = [s * A.split_keys(c, splits, pps * p.page_size, granule, p.page_size) for c in ctxs
                  for s in range(splits)]
        assert any(0 < s < c and s % p.page_size for s, c in zip(starts, [c for c in ctxs for _ in range(splits)]))
    ln_c = dataclasses.replace(COMBINE.launch(p, B, ctx), split_k=splits,
                               dynamic_smem_bytes=COMBINE.dynamic_smem_bytes(splits))
    dev["q"] = dev["q_out"]
    dev["ws"] = np.full(ln_d.workspace_bytes // 4, np.nan, np.float32)
    dev["out"] = np.full((B, p.heads_q * p.head_dim), 0xFFFF, np.uint16)
    run(ln_d, DECODE.kernel_args(p, ln_d, dev, pps), reverse)
    kp_dev, vp_dev = pages_of(p, dev)
    n_o = B * p.heads_q * splits * p.head_dim
    o_dev = dev["ws"][:n_o].reshape(B, p.heads_q, splits, p.head_dim)
    ml_dev = dev["ws"][n_o:].reshape(B, p.heads_q, splits, 2)
    o_ref, ml_ref = A.reference_decode_partials(p, dev["q_out"], kp_dev, vp_dev, cache.page_table, st["seq_ctx"],
                                                splits, pps, granule)
    assert not np.isnan(dev["ws"]).any()
    empty = np.isneginf(ml_ref[..., 0])
    assert np.array_equal(np.isneginf(ml_dev[..., 0]), empty)
    FP32_REORDER.check(np.where(empty, 0, ml_dev[..., 0]), np.where(empty, 0, ml_ref[..., 0]), "decode max")
    ATTENTION.check(ml_dev[..., 1], ml_ref[..., 1], "decode sum")
    ATTENTION.check(o_dev, o_ref, "decode partial outputs")
    run(ln_c, COMBINE.kernel_args(p, ln_c, dev), reverse)
    _check_attention_out(p, dev, st, cache, (kp_dev, vp_dev), (q_ref, kp_ref, vp_ref),
                         f"decode + combine ({splits} splits x {pps} pages)", "prep + decode + combine end to end")
    for dc in (2, 4):  # the combine spread over dim_ctas CTAs per head (columns of several thread lanes)
        comb = A.AttnCombineFamily(COMBINE.threads, fam, dim_ctas=dc)
        ln_x = dataclasses.replace(ln_c, kernel=comb.spec(p), grid=(p.heads_q * dc, B, 1))
        dev["out"] = np.full((B, p.heads_q * p.head_dim), 0xFFFF, np.uint16)
        run(ln_x, comb.kernel_args(p, ln_x, dev), not reverse)
        _check_attention_out(p, dev, st, cache, (kp_dev, vp_dev), (q_ref, kp_ref, vp_ref),
                             f"decode + combine over {dc} CTAs per head", "prep + decode + combine end to end")


def _check_attention_out(p, dev, st, cache, dev_pages, refs, what, what_e2e):
    """The kernels' bf16 output against the reference attention twice: on the q and pages the emulated prep
    wrote (the attention kernels alone) and on the reference prep's (prep + attention end to end)."""
    out = A.from_bf16_bits(dev["out"])
    (kp_dev, vp_dev), (q_ref, kp_ref, vp_ref) = dev_pages, refs
    ref = A.reference_attention(p, dev["q_out"], st["proj"], kp_dev, vp_dev, cache.page_table, st["tok_pos"],
                                st["seq_start"])
    ATTENTION.check(out, ref, what)
    ref_e2e = A.reference_attention(p, q_ref, st["proj"], kp_ref, vp_ref, cache.page_table, st["tok_pos"],
                                    st["seq_start"])
    ATTENTION.check(out, ref_e2e, what_e2e)


@pytest.mark.parametrize("route", A.PREFILL_ROUTES)
@pytest.mark.parametrize("name,prev,new", [("tiny-int8", (130,), (65,)), ("tiny-int8", (0, 63), (70, 2)),
                                           ("hd256-int8", (63, 0), (3, 66)), ("tiny-bf16", (0, 63), (70, 2)),
                                           ("hd256-bf16", (63, 0), (3, 66))])
def test_emulated_prefill(name, prev, new, route):
    """prep + prefill (``route``) of new[b] tokens after prev[b] positions, B = len(prev) packed sequences
    (reverse thread order for the mma route)."""
    p = SHAPES[name]
    reverse = route == "mma"
    cache, st, dev, (q_ref, kp_ref, vp_ref) = prep_step(p, list(prev), list(new), (2, name, prev, new, route),
                                                        reverse)
    ln = PREFILL.launch(p, max(new), plan_ctx(), batch=len(prev), route=route)
    dev["q"] = dev["q_out"]
    dev["out"] = np.full((int(sum(new)), p.heads_q * p.head_dim), 0xFFFF, np.uint16)
    run(ln, PREFILL.kernel_args(p, ln, dev), reverse)
    _check_attention_out(p, dev, st, cache, pages_of(p, dev), (q_ref, kp_ref, vp_ref),
                         f"attn_prefill {route} (emulated, {ln.grid} CTAs)", "prep + prefill end to end")


@pytest.mark.parametrize("split_mode", SPLIT_MODES)
@pytest.mark.parametrize("name,ctxs", [("tiny-bf16", (63, 64, 65)), ("tiny-bf16", (1, 129)), ("hd256-bf16", (65, 130)),
                                       ("hd256-bf16", (64, 2))])
@pytest.mark.parametrize("keys", [0, 32], ids=["page", "tile32"])
def test_emulated_decode_with_prep_folded(name, ctxs, split_mode, keys):
    """``fuse_prep``: the staged decode kernel computes the step's q and new K / V row itself (no attn_prep launch)
    from the pool as it was before the step (garbage in the new rows): the pages it writes equal the emulated
    attn_prep's bit for bit (same arithmetic), its partials equal the unfused staged kernel's on attn_prep's output
    bit for bit, and the end-to-end output matches the reference attention -- with tiles of a page and of half a page
    (``keys`` 32: the decode step's kernel from ``stage_l1_batch`` sequences on, the L1 rule)."""
    p = SHAPES[name]
    assert p.page_size == 64
    reverse = split_mode == "per_page" or split_mode in BALANCED
    B = len(ctxs)
    rng = np.random.default_rng(zlib.crc32(repr((3, name, ctxs, split_mode)).encode()))
    prev = [c - 1 for c in ctxs]
    cache = make_cache(p, prev, list(ctxs), rng)
    st = make_step(p, prev, [1] * B, rng)
    base = {"proj": st["proj"], "q_norm_w": st["q_norm_w"], "k_norm_w": st["k_norm_w"], "inv_freq": p.inv_freq(),
            "tok_pos": st["tok_pos"], "tok_seq": st["tok_seq"], "seq_ctx": st["seq_ctx"],
            "page_table": cache.page_table}
    ctx = plan_ctx()
    splits, pps, granule = split_geometry(p, B, ctx, split_mode, DECODE)
    outs = {}
    for fused in (False, True):
        dev = {**base, **pool_bits(p, cache.k_pages, cache.v_pages)}
        if not fused:  # attn_prep first, as the unfused decode step runs
            dev["q_out"] = np.full((B, p.heads_q, p.head_dim), np.nan, np.float32)
            ln = PREP.launch(p, B, ctx)
            run(ln, PREP.kernel_args(p, ln, dev), reverse)
            dev["q"] = dev["q_out"]
        fam = A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, granule, granule,
                                 staging=A.DecodeStaging(stage_kv=True, stage_keys=keys),
                                 fuse_prep=fused)
        if keys:
            assert dict(fam.spec(p, True).params)["tile"] == keys
        ln_d = dataclasses.replace(DECODE.launch(p, B, ctx), kernel=fam.spec(p, True), grid=(splits, p.heads_kv, B),
                                   split_k=splits, workspace_bytes=DECODE.workspace_bytes(p, B, splits),
                                   dynamic_smem_bytes=fam.dynamic_smem_bytes(p, True))
        dev["ws"] = np.full(ln_d.workspace_bytes // 4, np.nan, np.float32)
        run(ln_d, fam.kernel_args(p, ln_d, dev, pps), reverse)
        outs[fused] = dev
    plain, fused = outs[False], outs[True]
    np.testing.assert_array_equal(fused["k_pages"], plain["k_pages"], "the new K rows (fused vs attn_prep)")
    np.testing.assert_array_equal(fused["v_pages"], plain["v_pages"], "the new V rows (fused vs attn_prep)")
    assert not np.isnan(fused["ws"]).any()
    np.testing.assert_array_equal(fused["ws"], plain["ws"], "partials (fused vs attn_prep + decode)")
    kp_dev, vp_dev = pages_of(p, fused)
    n_o = B * p.heads_q * splits * p.head_dim
    o_ref, ml_ref = A.reference_decode_partials(p, plain["q_out"], kp_dev, vp_dev, cache.page_table, st["seq_ctx"],
                                                splits, pps, granule)
    ATTENTION.check(fused["ws"][:n_o].reshape(o_ref.shape), o_ref, "fused decode partial outputs")
    ln_c = dataclasses.replace(COMBINE.launch(p, B, ctx), split_k=splits,
                               dynamic_smem_bytes=COMBINE.dynamic_smem_bytes(splits))
    fused["out"] = np.full((B, p.heads_q * p.head_dim), 0xFFFF, np.uint16)
    run(ln_c, COMBINE.kernel_args(p, ln_c, fused), reverse)
    q_ref, kp_ref, vp_ref = A.reference_prep(p, st["proj"], st["q_norm_w"], st["k_norm_w"], st["tok_pos"],
                                             st["tok_seq"], cache.page_table, cache.k_pages, cache.v_pages)
    fused["q_out"] = plain["q_out"]
    _check_attention_out(p, fused, st, cache, (kp_dev, vp_dev), (q_ref, kp_ref, vp_ref),
                         f"fused decode + combine ({splits} splits x {pps} pages)", "fused prep + decode end to end")


#: textual mutations of the staged decode kernel (one K and one V tile buffer) and what each breaks; every one must
#: fail the check below -- the wait counts only since the emulator defers cp.async copies to the wait covering them
STAGED_MUTANTS = {
    "scores wait one group short": ("ninfer::cp_async_wait<1>();\n    __syncthreads();\n    const KvElem* kb",
                                    "ninfer::cp_async_wait<2>();\n    __syncthreads();\n    const KvElem* kb"),
    "P.V wait one group short": ("ninfer::cp_async_wait<1>();  // this tile's V",
                                 "ninfer::cp_async_wait<2>();  // this tile's V"),
    "next K into the V buffer in use": ("if (more) stage_rows(prow_next, false, 0, n_next, true);",
                                        "if (more) stage_rows(prow_next, true, 0, n_next, true);"),
    "next V into the K buffer": ("if (more) stage_rows(prow_next, true, 0, n_next, true);",
                                 "if (more) stage_rows(prow_next, false, 0, n_next, true);"),
    "next K never staged": ("if (more) stage_rows(prow_next, false, 0, n_next, true);",
                            "if (false) stage_rows(prow_next, false, 0, n_next, true);"),
}


@pytest.mark.parametrize("keys", [64, 16])
def test_emulated_staged_decode_mutants(keys):
    """The staged decode kernel over one split of 130 keys (3 page tiles, or 9 tiles of 16 keys): its partials match
    the reference, and each mutant of :data:`STAGED_MUTANTS` -- a wait count one group short, a tile staged into the
    buffer still in use, the next tile's K left out -- does not."""
    from cuda_host import HostKernel

    p, ctxs = SHAPES["hd256-bf16"], (130,)
    cache, st, dev, _ = prep_step(p, [c - 1 for c in ctxs], [1], (4, keys), False)
    fam = A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, 16, 16,
                             staging=A.DecodeStaging(stage_kv=True, stage_keys=keys % 64),
                             fuse_prep=False)
    splits, pps = 1, p.max_pages
    spec = fam.spec(p)
    ln = dataclasses.replace(DECODE.launch(p, 1, plan_ctx()), kernel=spec, grid=(splits, p.heads_kv, 1),
                             split_k=splits, workspace_bytes=DECODE.workspace_bytes(p, 1, splits),
                             dynamic_smem_bytes=fam.dynamic_smem_bytes(p))
    dev["q"] = dev["q_out"]
    kp_dev, vp_dev = pages_of(p, dev)
    o_ref, _ = A.reference_decode_partials(p, dev["q_out"], kp_dev, vp_dev, cache.page_table, st["seq_ctx"], splits,
                                           pps, 16)

    def partials(src):
        dev["ws"] = np.full(ln.workspace_bytes // 4, np.nan, np.float32)
        HostKernel(src, spec.entry).launch(ln.grid, ln.block, fam.kernel_args(p, ln, dev, pps),
                                           smem=ln.dynamic_smem_bytes)
        return dev["ws"][:o_ref.size].reshape(o_ref.shape)

    src = host_source(spec)
    ATTENTION.check(partials(src), o_ref, "staged decode partials (control)")
    for what, (old, new) in STAGED_MUTANTS.items():
        assert src.count(old) == 1, f"mutant {what!r}: its text is not in the rendered kernel once"
        with pytest.raises(AssertionError):
            ATTENTION.check(partials(src.replace(old, new)), o_ref, f"staged decode partials, mutant {what!r}")
