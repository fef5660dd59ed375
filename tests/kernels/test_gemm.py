"""CPU tests of the prefill GEMM family (targets/kernels/gemm.py, templates/gemm.cu.j2): every variant
(bf16, w8 and w4 weights) compiles for the four targets without spills (resources printed), the route
choice by T and N, the kernel's index math replayed by a fragment-level emulator (including the fused
dequantisation's unit layout and register double-buffering), the swizzle's bank-conflict freedom for
cp.async and for the dequantised st.shared, and the reference / problem / ABI contracts. GPU twin:
test_gemm_gpu.py."""

from __future__ import annotations

import functools
import hashlib

import jinja2
import ml_dtypes
import numpy as np
import pytest

from gemm_emulator import emulate
from gemm_wgmma_emulator import emulate as emulate_wgmma
from ninferc.errors import PlanError
from ninferc.ir.quant import quantize
from ninferc.targets.arch import ARCHS, get_arch
from ninferc.targets.kernels.gemm import (BENCH_TILES, EPILOGUES, GROUP_M, STAGES, TILES, WFORMATS, WGMMA_ARCHS,
                                          WGMMA_STAGES, WGMMA_TILES, GemmFamily, GemmProblem, GemmTile, arg_names,
                                          dequantize_weight, group_m_for, kernel_args, reference)
from ninferc.targets.occupancy import occupancy
from ninferc.targets.plan import PlanContext, check_launch, compile_variants
from ninferc.targets.render import read_template_file

pytestmark = pytest.mark.slow  # seconds each on 2 cores: `pytest -m "not slow"` skips them


FAM = GemmFamily()
#: the template's bk = 64 path (8 chunks per shared row; w4 16-byte units of 32 K), not routed by default
EXTRA_TILES = (GemmTile(64, 128, 64, 2, 2, 0.9),)
FAM_ALL = GemmFamily(TILES + BENCH_TILES + EXTRA_TILES)  # default routes + benchmark candidates + bk 64
ALL_ARCHS = tuple(ARCHS)
#: one representative SKU SM count per target (targets/skus.py): RTX 3090, RTX 4090, H200, RTX 5090
SMS = {"sm_86": 82, "sm_89": 128, "sm_90": 132, "sm_120a": 170}

# 27B and tiny-fixture projection shapes (K, N, epilogue)
SHAPES_27B = [(5120, 16480, "store_f32"), (5120, 14336, "store_f32"), (5120, 17408, "swiglu_bf16"),
              (17408, 5120, "store_f32"), (6144, 5120, "store_f32")]
SHAPES_TINY = [(256, 1036, "store_f32"), (256, 768, "store_f32"), (256, 704, "swiglu_bf16"),
               (704, 256, "store_f32"), (512, 256, "store_f32")]


@functools.lru_cache(maxsize=None)
def resources(arch: str):
    """URI -> KernelResources of every gemm variant incl. the benchmark tiles (both epilogues) on ``arch``."""
    specs = [s for p in FAM_ALL.sample_problems() for s in FAM_ALL.variants(p, arch)]
    return {uri: r for uri, (_, r) in compile_variants(specs, arch).items()}


def ctx_for(arch: str) -> PlanContext:
    return PlanContext(arch, SMS[arch], resources(arch))


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_variants_compile_without_spills(arch):
    res = resources(arch)
    a = get_arch(arch)
    lines = [f"gemm on {arch}: uri  regs  static_smem  dyn_smem  local  CTAs/SM(limiter)"]
    n_wgmma = 0
    for p in FAM_ALL.sample_problems():
        for spec in FAM_ALL.variants(p, arch):
            r = res[spec.uri]
            tile = FAM.tile_of(spec)
            dyn = tile.smem_bytes(spec.param("stages"))
            occ = occupancy(a, spec.threads, r.registers, r.static_smem_bytes, dyn, barriers=r.barriers)
            lines.append(f"  {spec.uri}  {r.registers}  {r.static_smem_bytes}  {dyn}  {r.local_bytes}  "
                         f"{occ.ctas_per_sm}({occ.limiter})")
            assert r.local_bytes == 0, f"{spec.uri} spills on {arch}: {r.local_bytes} B local"
            assert 0 < r.registers <= a.max_regs_per_thread
            assert r.static_smem_bytes + dyn <= a.max_smem_per_cta_optin
            assert occ.ctas_per_sm >= 1, f"{spec.uri} cannot be resident on {arch}"
            # the default 128x128 tile keeps two CTAs per SM by registers (<= 128 registers x 256 threads),
            # with bf16 and with quantised weights
            if (tile.bm, tile.bn, tile.bk, tile.warps_m * tile.warps_n) == (128, 128, 32, 8):
                assert r.registers <= 128, f"{spec.uri}: {r.registers} registers on {arch}"
            n_wgmma += tile.kind == "wgmma"
    # the wgmma routes exist exactly on the wgmma targets, every tile x stage x epilogue x weight format
    assert n_wgmma == (len(WGMMA_TILES) * len(WGMMA_STAGES) * len(EPILOGUES) * len(WFORMATS)
                       if arch in WGMMA_ARCHS else 0)
    print("\n".join(lines))


def test_register_table_per_format():
    """Registers and resident CTAs/SM of every routed tile and stage count, bf16 vs w8 vs w4 (printed;
    fused dequantisation must not cost the default 128x128 tile its second CTA on any target)."""
    lines = []
    for arch in ALL_ARCHS:
        ctx = ctx_for(arch)
        lines.append(f"gemm regs / CTAs-per-SM on {arch} (bf16 | w8 | w4):")
        for tile in TILES + BENCH_TILES:
            for st in STAGES:
                for ep in EPILOGUES:
                    cells = []
                    for wf in WFORMATS:
                        spec = FAM_ALL.spec(GemmProblem(256, 704, ep, wfmt=wf), tile, st)
                        occ = ctx.occupancy(spec, tile.smem_bytes(st))
                        cells.append(f"{ctx.resources_of(spec).registers:3d}r {occ.ctas_per_sm}/SM")
                    lines.append(f"  {tile.route} s{st} {ep:11s}: " + " | ".join(cells))
                    if tile == TILES[0]:
                        per = [ctx.occupancy(FAM_ALL.spec(GemmProblem(256, 704, ep, wfmt=wf), tile, st),
                                             tile.smem_bytes(st)).ctas_per_sm for wf in WFORMATS]
                        assert per[1] == per[0] and per[2] == per[0], (arch, tile.route, st, ep, per)
    print("\n".join(lines))


@pytest.mark.parametrize("wfmt", WFORMATS)
@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_route_selection(arch, wfmt):
    ctx = ctx_for(arch)
    for k, n, ep in SHAPES_27B + SHAPES_TINY:
        p = GemmProblem(k, n, ep, wfmt=wfmt)
        prev_bm = 0
        for t in (1, 7, 64, 100, 1024, 8192):
            ln = FAM.launch(p, t, ctx)
            check_launch(ln, arch, ctx.resources_of(ln.kernel), ctx.sms)
            tile = FAM.tile_of(ln.kernel)
            assert ln.grid == (FAM.grid(p, t, tile), 1, 1)
            assert ln.block == (tile.threads, 1, 1)
            assert ln.dynamic_smem_bytes == tile.smem_bytes(ln.kernel.param("stages"))
            assert ln.waves == -(-ln.ctas // (ln.ctas_per_sm * ctx.sms))
            assert ln.split_k == 1 and not ln.cooperative
            # the stage count is the one with the most resident CTAs (ties: deeper pipeline)
            stages = WGMMA_STAGES if tile.kind == "wgmma" else STAGES
            per = {s: ctx.occupancy(FAM.spec(p, tile, s), tile.smem_bytes(s)).ctas_per_sm for s in stages}
            best = max(per.values())
            assert per[ln.kernel.param("stages")] == best
            assert ln.kernel.param("stages") == max(s for s in stages if per[s] == best)
            assert tile.kind == "mma" or arch in WGMMA_ARCHS, (arch, wfmt, ln.route)
            if t == 1:
                assert tile.bm == min(tt.bm for tt in TILES), f"T=1 should take the smallest tile, got {ln.route}"
            # tile rows never shrink as T grows
            assert tile.bm >= prev_bm, f"{p} T={t}: tile shrank to {tile.bm} from {prev_bm}"
            prev_bm = tile.bm
        if k * n >= 5120 * 5120:
            big = FAM.launch(p, 8192, ctx)
            want = WGMMA_TILES[0] if arch in WGMMA_ARCHS else TILES[0]
            assert big.route == want.route, f"{p} at T=8192 on {arch}: {big.route}"


@pytest.mark.parametrize("wfmt", WFORMATS)
def test_stage_choice_per_arch(wfmt):
    # 100 KiB-shared parts: 3 stages keep two 128x128 CTAs per SM; sm_90 (228 KiB) affords 4.
    p = GemmProblem(5120, 16480, wfmt=wfmt)
    for arch, stages in (("sm_86", 3), ("sm_89", 3), ("sm_120a", 3), ("sm_90", 4)):
        ln = FAM.launch(p, 8192, ctx_for(arch))
        if arch in WGMMA_ARCHS:
            # the 128x256 wgmma tile: 4 stages of 48 KiB + 1 KiB alignment slack, one CTA per SM
            assert ln.route == WGMMA_TILES[0].route and ln.kernel.param("stages") == 4, ln.kernel.uri
            assert ln.dynamic_smem_bytes == 4 * (128 + 256) * 64 * 2 + 1024 and ln.ctas_per_sm == 1
            continue
        assert ln.route == TILES[0].route and ln.kernel.param("stages") == stages, (arch, ln.kernel.uri)
        assert ln.ctas_per_sm == 2, (arch, ln.ctas_per_sm, ln.limiter)


# odd shapes: T, N not tile multiples; K with a partial last k-tile; ldx > K; several M groups
EMU_CASES = [
    # (T, N, K, ldx)
    (37, 70, 72, 80),
    (150, 203, 40, 40),
    (5, 9, 8, 8),
    (300, 130, 24, 32),
]


@pytest.mark.parametrize("tile", TILES + BENCH_TILES + EXTRA_TILES, ids=lambda t: t.route)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_emulated_kernel_matches_reference(tile, epilogue):
    rng = np.random.default_rng(7)
    for T, N, K, ldx in EMU_CASES:
        if T >= 300 and tile.bm < 64:
            continue  # keep the emulator fast; the 128-row tiles cover multi-group rasterisation
        p = GemmProblem(K, N, epilogue, ldx)
        x = rng.standard_normal((T, ldx))
        x[:, K:] = np.nan  # columns past K must never be read
        w = rng.standard_normal((p.w_rows, K))
        stages = STAGES[-1] if T % 2 else STAGES[0]
        spec = FAM.spec(p, tile, stages)
        gm = max(1, min(GROUP_M, -(-T // tile.bm)))
        y, writes = emulate(dict(spec.params), x, w, T, N, K, ldx, gm, FAM.grid(p, T, tile))
        assert (writes == 1).all(), f"{spec.uri} T={T} N={N}: elements written {np.unique(writes)} times"
        ref = reference(p, x[:, :K], w)
        err = np.abs(y - ref)
        assert np.isfinite(y).all(), f"{spec.uri} T={T} N={N} K={K}: non-finite output (read of unwritten smem?)"
        i = np.unravel_index(np.argmax(err), err.shape)
        assert err[i] <= 1e-9 * max(1.0, np.abs(ref).max()), f"{spec.uri}: max err {err[i]} at {i}"


# quantised W: K a multiple of 16 (w8) / 64 (w4); partial last k-tile (w8 K = 80 with bk 32/64, w4 K = 192
# with bk 64), T and N not tile multiples, ldx > K, several M groups
QEMU_CASES = {
    "w8": [(37, 70, 80, 88), (150, 203, 48, 48), (5, 9, 16, 16), (300, 130, 64, 64)],
    "w4": [(37, 70, 128, 136), (150, 203, 64, 64), (5, 9, 192, 192), (300, 130, 64, 64)],
}


def _quant_weights(rng, rows: int, k: int, wfmt: str):
    """Codes and scales of a random W by the project's quantiser (signed w4 scales included), with one
    all-zero row (scale 1, codes 0)."""
    w = rng.standard_normal((rows, k)).astype(np.float32)
    w[rows // 2] = 0.0
    qt = quantize(w.astype(ml_dtypes.bfloat16), wfmt)
    if wfmt == "w4":
        assert (qt.scales < 0).any() and (qt.scales > 0).any()
    return qt


@pytest.mark.parametrize("tile", TILES + BENCH_TILES + EXTRA_TILES, ids=lambda t: t.route)
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("wfmt", ["w8", "w4"])
def test_emulated_quantized_kernel_matches_reference(tile, epilogue, wfmt):
    rng = np.random.default_rng(11)
    for T, N, K, ldx in QEMU_CASES[wfmt]:
        if T >= 300 and tile.bm < 64:
            continue
        p = GemmProblem(K, N, epilogue, ldx, wfmt)
        x = rng.standard_normal((T, ldx))
        x[:, K:] = np.nan
        qt = _quant_weights(rng, p.w_rows, K, wfmt)
        stages = STAGES[-1] if T % 2 else STAGES[0]
        spec = FAM_ALL.spec(p, tile, stages)
        assert spec.param("wfmt") == wfmt
        gm = max(1, min(GROUP_M, -(-T // tile.bm)))
        y, writes = emulate(dict(spec.params), x, qt.codes, T, N, K, ldx, gm, FAM_ALL.grid(p, T, tile),
                            scales=qt.scales)
        assert (writes == 1).all(), f"{spec.uri} T={T} N={N}: elements written {np.unique(writes)} times"
        assert np.isfinite(y).all(), f"{spec.uri} T={T} N={N} K={K}: non-finite output"
        ref = reference(p, x[:, :K], qt.codes, scales=qt.scales)
        err = np.abs(y - ref)
        i = np.unravel_index(np.argmax(err), err.shape)
        assert err[i] <= 1e-9 * max(1.0, np.abs(ref).max()), f"{spec.uri}: max err {err[i]} at {i}"


WGMMA_EMU_CASES = [
    # (T, N, K, ldx): T and N not tile multiples, partial last k-tile (K = 72, 200), ldx > K, several M groups
    (37, 70, 72, 80),
    (150, 203, 200, 200),
    (5, 9, 8, 8),
    (300, 130, 320, 328),
]


#: quantised W: K a multiple of 16 (w8) / 64 (w4), partial last k-tile where the format allows
WGMMA_QEMU_CASES = {
    "w8": [(37, 70, 80, 88), (150, 203, 208, 208), (5, 9, 16, 16), (300, 130, 320, 328)],
    "w4": [(37, 70, 128, 136), (150, 203, 192, 192), (5, 9, 64, 64), (300, 130, 320, 328)],
}


@pytest.mark.parametrize("wfmt", WFORMATS)
@pytest.mark.parametrize("tile", WGMMA_TILES, ids=lambda t: t.route)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_emulated_wgmma_kernel_matches_reference(tile, epilogue, wfmt):
    """The wgmma kernel's index math (loads, swizzle, descriptors, pipeline stage reuse -- for quantised W
    the register schedule of the dequantised W stores --, accumulator layout, epilogue) replayed by
    gemm_wgmma_emulator against the reference, at both legal stage counts."""
    rng = np.random.default_rng(13)
    for i, (T, N, K, ldx) in enumerate(WGMMA_EMU_CASES if wfmt == "bf16" else WGMMA_QEMU_CASES[wfmt]):
        p = GemmProblem(K, N, epilogue, ldx, wfmt)
        x = rng.standard_normal((T, ldx))
        x[:, K:] = np.nan  # columns past K must never be read
        if p.quantized:
            qt = _quant_weights(rng, p.w_rows, K, wfmt)
            w, codes, scales = dequantize_weight(p, qt).astype(np.float64), qt.codes, qt.scales
        else:
            w = codes = rng.standard_normal((p.w_rows, K))
            scales = None
        spec = FAM.spec(p, tile, (3, 4)[i % 2])  # the template at both legal depths (4 is routed)
        assert ("wfmt" in dict(spec.params)) == p.quantized
        gm = max(1, min(GROUP_M, -(-T // tile.bm)))
        y, writes = emulate_wgmma(dict(spec.params), x, w, T, N, K, ldx, gm, FAM.grid(p, T, tile),
                                  smem_offset=16 * (i + 1))
        assert (writes == 1).all(), f"{spec.uri} T={T} N={N}: elements written {np.unique(writes)} times"
        assert np.isfinite(y).all(), f"{spec.uri} T={T} N={N} K={K}: non-finite output (read of unwritten smem?)"
        ref = reference(p, x[:, :K], codes, scales=scales)
        err = np.abs(y - ref)
        j = np.unravel_index(np.argmax(err), err.shape)
        assert err[j] <= 1e-9 * max(1.0, np.abs(ref).max()), f"{spec.uri}: max err {err[j]} at {j}"


def test_wgmma_tiles_compile_for_the_arch_specific_target():
    """wgmma kernels carry the arch-specific marker and compile for sm_90a (no spills, one CTA per SM at 4
    stages by shared memory); the tile rules reject what the template's static_asserts would."""
    from ninferc.targets.nvrtc import ARCH_SPECIFIC_MARKER, compile_cubin, nvrtc_arch

    spec = FAM.spec(GemmProblem(5120, 17408, "swiglu_bf16"), WGMMA_TILES[0], 4)
    src = spec.render()
    assert ARCH_SPECIFIC_MARKER in src and "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in src
    assert nvrtc_arch(src, "sm_90") == "sm_90a" and nvrtc_arch(src, "sm_120a") == "sm_120a"
    assert nvrtc_arch(FAM.spec(GemmProblem(5120, 17408), TILES[0], 3).render(), "sm_90") == "sm_90"
    res = compile_cubin(src, "sm_90", name=spec.uri)
    assert res.arch == "sm_90a" and res.options[0] == "-arch=sm_90a"
    r = resources("sm_90")[spec.uri]
    assert r.local_bytes == 0 and r.registers <= 255
    assert spec.uri == "gemm__bk64_bm128_bn256_swiglu_bf16_kind-wgmma_stages4_th256"
    for wf, regs_src in (("w8", "const unsigned char* __restrict__ w, const float* __restrict__ scales"),
                         ("w4", "uint8 codes [n_w, k/2]")):
        q = FAM.spec(GemmProblem(5120, 17408, "swiglu_bf16", wfmt=wf), WGMMA_TILES[0], 4)
        assert q.uri == spec.uri + f"_wfmt-{wf}" and regs_src in q.render() and "wq_store(smem, pf % kStages" in q.render()
        rq = resources("sm_90")[q.uri]
        assert rq.local_bytes == 0 and rq.registers <= 255, (q.uri, rq)
    # (a tile that passes the cp.async pass rule always has a code load layout: bn >= threads / 4 rows of 8
    # four-byte units each divide among the threads)
    assert GemmTile(64, 32, 64, 4, 1, 1.0, "wgmma").wq_layout("w4") == (8, 16, 1)
    with pytest.raises(PlanError, match="bn/2 = 16 must be multiples of the 32 rows"):
        GemmTile(128, 32, 64, 8, 1, 1.0, "wgmma").check("store_f32")
    with pytest.raises(PlanError, match="bn = 272 must be a multiple of 16 in"):
        GemmFamily(wgmma_tiles=(GemmTile(128, 272, 64, 8, 1, 1.0, "wgmma"),))
    with pytest.raises(PlanError, match="wgmma stage counts must be >= 3"):
        GemmFamily(wgmma_stages=(2,))
    with pytest.raises(PlanError, match="not an mma.sync tile"):
        GemmFamily(tiles=WGMMA_TILES)
    # every format gets the wgmma variants on the wgmma target (sm_90); the other targets never see one
    for wf in WFORMATS:
        assert any(FAM.tile_of(s).kind == "wgmma" for s in FAM.variants(GemmProblem(5120, 17408, wfmt=wf), "sm_90"))
    for arch in [a for a, x in ARCHS.items() if not x.wgmma] + [None]:
        assert all(FAM.tile_of(s).kind == "mma" for s in FAM.variants(GemmProblem(5120, 17408), arch))


def _bank_groups(chunks: int, rows, cs):
    """16-byte bank group (0..7 within a 128-byte line) of each (row, chunk) under the kernel's swizzle."""
    out = []
    for r, c in zip(rows, cs):
        sw = r * 8 + (c ^ (r & 7)) if chunks == 8 else r * 4 + (c ^ ((r >> 1) & 3))
        out.append(sw % 8)
    return out


@pytest.mark.parametrize("chunks", [4, 8])
def test_swizzle_is_conflict_free(chunks):
    # ldmatrix: each 8-lane phase reads 8 consecutive rows (starting at a multiple of 8) at one chunk column
    for r0 in range(0, 64, 8):
        for c in range(chunks):
            groups = _bank_groups(chunks, range(r0, r0 + 8), [c] * 8)
            assert len(set(groups)) == 8, (chunks, r0, c, groups)
    # cp.async: 8 consecutive threads write chunk ids i .. i+7 (row-major over chunks)
    for i0 in range(0, 64 * chunks, 8):
        ids = range(i0, i0 + 8)
        groups = _bank_groups(chunks, [i // chunks for i in ids], [i % chunks for i in ids])
        assert len(set(groups)) == 8, (chunks, i0, groups)


@pytest.mark.parametrize("tile", TILES + BENCH_TILES + EXTRA_TILES, ids=lambda t: t.route)
@pytest.mark.parametrize("wfmt", ["w8", "w4"])
def test_dequantised_stores_are_conflict_free(tile, wfmt):
    # wq_store: thread i's unit u covers tile row (i + u*threads) // per_row, chunks c*cpu .. c*cpu+cpu-1;
    # each st.shared.v4 is served per quarter warp (8 lanes x 16 B): those 8 lanes must hit 8 bank groups.
    nbytes, elems, loads = tile.wq_layout(wfmt)
    per_row, cpu, chunks = tile.bk // elems, elems // 8, tile.bk // 8
    assert loads * tile.threads * elems == tile.bn * tile.bk  # every element of the W tile exactly once
    for u in range(loads):
        for q in range(cpu):
            for lane0 in range(0, tile.threads, 8):
                ids = [lane + u * tile.threads for lane in range(lane0, lane0 + 8)]
                rows = [i // per_row for i in ids]
                cs = [(i % per_row) * cpu + q for i in ids]
                groups = _bank_groups(chunks, rows, cs)
                assert len(set(groups)) == 8, (tile.route, wfmt, u, q, lane0, groups)


def test_quant_load_layout():
    # 16-byte loads wherever the W tile divides among the threads; w4 falls back to 8 bytes on 256 threads
    assert TILES[0].wq_layout("w8") == (16, 16, 1) and TILES[0].wq_layout("w4") == (8, 16, 1)
    assert TILES[1].wq_layout("w8") == (16, 16, 2) and TILES[1].wq_layout("w4") == (16, 32, 1)
    assert EXTRA_TILES[0].wq_layout("w4") == (16, 32, 2) and TILES[0].wq_layout("bf16") is None
    # one-chunk units (8 K) always fit a tile the bf16 checks accept: bn * bk / 8 chunks divide among the
    # threads, so every valid tile has a quantised layout
    assert GemmTile(16, 32, 32, 1, 2, 1.0).wq_layout("w4") == (8, 16, 1)
    assert GemmTile(16, 32, 32, 1, 2, 1.0).wq_layout("w8") == (16, 16, 1)


def _byte_perm(x: int, y: int, sel: int) -> int:
    """PTX prmt (default mode) / __byte_perm: result byte n = byte (sel >> 4n) & 7 of the pair {y:x}."""
    pool = x | (y << 32)
    return sum(((pool >> (8 * ((sel >> (4 * n)) & 7))) & 0xFF) << (8 * n) for n in range(4))


def test_code_to_float_trick_is_exact():
    """The template's int -> fp32 conversion: prmt puts code byte i under the exponent of 2^23 (bits
    0x4B0000bb = 2^23 + b), then one exact fp32 subtraction of 2^23 + bias gives q, for every code."""
    src = FAM.spec(GemmProblem(256, 704, wfmt="w8"), TILES[0], 3).render()
    assert "__byte_perm(bytes, 0x4B000000u, 0x7540 + i)" in src
    assert "b = word ^ 0x80808080u" in src and "magic = 8388736.0f" in src
    src4 = FAM.spec(GemmProblem(256, 704, wfmt="w4"), TILES[0], 3).render()
    assert "magic = 8388616.0f" in src4 and "(word >> 4) & 0x0F0F0F0Fu" in src4
    f32 = lambda bits: np.array([bits], dtype=np.uint32).view(np.float32)[0]  # noqa: E731
    # w8: four int8 codes per word, sign bits flipped -> offset binary q + 128
    for q in range(-128, 128):
        word = ((q & 0xFF) << 8) | 0x11  # code in byte 1, something else in byte 0
        b = word ^ 0x80808080
        v = f32(_byte_perm(b, 0x4B000000, 0x7540 + 1)) - np.float32(8388736.0)
        assert v == q, (q, v)
    # w4: 8 nibbles per word, element e at bits 4e; even elements = low nibbles, odd = high nibbles
    rng = np.random.default_rng(0)
    for _ in range(64):
        q = rng.integers(-8, 8, 8)
        word = sum(int(v + 8) << (4 * e) for e, v in enumerate(q))
        lo, hi = word & 0x0F0F0F0F, (word >> 4) & 0x0F0F0F0F
        got = []
        for j in range(4):
            got += [f32(_byte_perm(lo, 0x4B000000, 0x7540 + j)) - np.float32(8388616.0),
                    f32(_byte_perm(hi, 0x4B000000, 0x7540 + j)) - np.float32(8388616.0)]
        assert got == list(q), (q, got)


# The bf16 kernels must be exactly those from before quantised weights existed: their URIs and their
# rendered template text (the plan goldens record both). Hash of gemm.cu.j2 rendered for the URI below
# (jinja only, before header inlining), taken before wfmt was added and updated once for the deliberate
# NINFER_PDL_ENTRY() line (programmatic dependent launch), and again when the cp.async copies moved to
# ninfer_common's cp_async16 (2026-12-01; the SASS of every sample problem's first variant on sm_86 / sm_89 /
# sm_90 / sm_120a compared equal before and after); update only with a deliberate change of the bf16 kernel.
BF16_URI = "gemm__bk32_bm128_bn128_store_f32_stages3_th256_warps_m2_warps_n4"
BF16_TEMPLATE_SHA256 = "589c7122ea5c132d1b8e1f50ef9fdc33712441cf0395c655bc1ca7184bb9a4b3"


def test_bf16_identity_unchanged_and_formats_differ():
    specs = {wf: FAM.spec(GemmProblem(5120, 16480, wfmt=wf), TILES[0], 3) for wf in WFORMATS}
    assert specs["bf16"].uri == BF16_URI and "wfmt" not in dict(specs["bf16"].params)
    assert specs["w8"].uri == BF16_URI + "_wfmt-w8" and specs["w4"].uri == BF16_URI + "_wfmt-w4"
    assert len({s.entry for s in specs.values()}) == 3
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                             loader=jinja2.FunctionLoader(read_template_file))  # the quantised kernels' include
    tmpl = env.from_string(read_template_file("gemm.cu.j2"))
    text = {wf: tmpl.render(**dict(s.params), entry=s.entry) for wf, s in specs.items()}
    assert hashlib.sha256(text["bf16"].encode()).hexdigest() == BF16_TEMPLATE_SHA256
    assert "scales" not in text["bf16"] and "wq_load" not in text["bf16"]
    for wf in ("w8", "w4"):
        assert "const float* __restrict__ scales" in text[wf] and "wq_store" in text[wf]
    assert "kCodeElemsPerByte = 2;" in text["w4"] and "kCodeElemsPerByte = 1;" in text["w8"]
    # every sample problem of the family covers each (epilogue, format) pair
    assert {(p.epilogue, p.wfmt) for p in FAM.sample_problems()} == {(e, f) for e in EPILOGUES for f in WFORMATS}


def test_quant_problem_validation_and_args():
    with pytest.raises(PlanError, match=r"K = 40 must be a positive multiple of 16 for wfmt = w8"):
        GemmProblem(40, 64, wfmt="w8")
    with pytest.raises(PlanError, match=r"K = 96 must be a positive multiple of 64 for wfmt = w4"):
        GemmProblem(96, 64, wfmt="w4")
    with pytest.raises(PlanError, match=r"wfmt = 'int4'.*bf16, w8, w4"):
        GemmProblem(64, 64, wfmt="int4")
    GemmProblem(48, 64, wfmt="w8")
    GemmProblem(192, 64, wfmt="w4")
    assert arg_names(GemmProblem(64, 64)) == ("x", "w", "y", "t", "n_out", "k", "ldx", "group_m")
    for wf in ("w8", "w4"):
        p = GemmProblem(256, 704, "swiglu_bf16", ldx=264, wfmt=wf)
        assert arg_names(p) == ("x", "w", "scales", "y", "t", "n_out", "k", "ldx", "group_m")
        assert p.w_shape == ((1408, 256) if wf == "w8" else (1408, 128))
        assert p.scales_shape == ((1408,) if wf == "w8" else (1408, 4))
        ln = FAM.launch(p, 100, ctx_for("sm_90"))
        assert ln.kernel.param("wfmt") == wf
        args = kernel_args(p, ln, "X", "W", "Y", scales="S")
        assert len(args) == len(arg_names(p)) == 9 and args[:4] == ("X", "W", "S", "Y")
        assert [int(a) for a in args[4:]] == [100, 704, 256, 264, group_m_for(ln)]
        assert all(a.dtype == np.int32 for a in args[4:])
        with pytest.raises(PlanError, match="needs the fp32 scales"):
            kernel_args(p, ln, "X", "W", "Y")
    pb = GemmProblem(256, 704)
    with pytest.raises(PlanError, match="scales given for bf16"):
        kernel_args(pb, FAM.launch(pb, 100, ctx_for("sm_90")), "X", "W", "Y", scales="S")


@pytest.mark.parametrize("wfmt", ["w8", "w4"])
def test_quant_reference_is_dequantise_then_matmul(wfmt):
    rng = np.random.default_rng(5)
    K, N, T = 128, 24, 7
    w = rng.standard_normal((2 * N, K)).astype(ml_dtypes.bfloat16)
    qt = quantize(w, wfmt)
    x = rng.standard_normal((T, K)).astype(ml_dtypes.bfloat16)
    # the weight the tensor cores see: ir.quant's fl32(q * scale), rounded to nearest-even bf16
    wq = qt.dequantize().astype(ml_dtypes.bfloat16).astype(np.float64)
    p = GemmProblem(K, 2 * N, wfmt=wfmt)
    np.testing.assert_array_equal(dequantize_weight(p, qt.codes, qt.scales), wq.astype(np.float32))
    y = reference(p, x, qt.codes, scales=qt.scales)
    np.testing.assert_allclose(y, x.astype(np.float64) @ wq.T, rtol=0, atol=0)
    np.testing.assert_array_equal(reference(p, x, qt), y)  # a QuantTensor carries its scales
    s = reference(GemmProblem(K, N, "swiglu_bf16", wfmt=wfmt), x, qt)
    g, u = y[:, :N], y[:, N:]
    np.testing.assert_allclose(s, g / (1 + np.exp(-g)) * u, rtol=1e-15)
    # the bf16 rounding of the dequantised weight is part of the contract (differs from fl32(q * scale))
    assert not np.array_equal(dequantize_weight(p, qt), qt.dequantize())
    with pytest.raises(PlanError, match="needs scales"):
        reference(p, x, qt.codes)
    with pytest.raises(PlanError, match="expected codes"):
        reference(p, x, qt.codes[:-1], scales=qt.scales[:-1])


def test_problem_validation_and_args():
    with pytest.raises(PlanError, match="K = 12"):
        GemmProblem(12, 64)
    with pytest.raises(PlanError, match="N = 0"):
        GemmProblem(64, 0)
    with pytest.raises(PlanError, match="epilogue"):
        GemmProblem(64, 64, "residual_add")
    with pytest.raises(PlanError, match="ldx = 60"):
        GemmProblem(64, 64, ldx=60)
    with pytest.raises(PlanError, match="multiple of 32"):
        GemmFamily(tiles=(GemmTile(64, 64, 32, 1, 4, 1.0),))  # swiglu warp tile 16 wide: 8 gate + 8 up
    with pytest.raises(PlanError, match="T = 0"):
        FAM.launch(GemmProblem(64, 64), 0, ctx_for("sm_90"))
    p = GemmProblem(256, 704, "swiglu_bf16", ldx=264)
    assert p.w_rows == 1408 and p.x_stride == 264 and p.out_dtype == "bfloat16"
    ln = FAM.launch(p, 100, ctx_for("sm_90"))
    args = kernel_args(p, ln, "X", "W", "Y")
    assert len(args) == len(arg_names(p)) == 8
    assert args[:3] == ("X", "W", "Y")
    assert [int(a) for a in args[3:]] == [100, 704, 256, 264, group_m_for(ln)]
    assert all(a.dtype == np.int32 for a in args[3:])


def test_reference_fp64_on_bf16_values():
    import ml_dtypes

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 16)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((12, 16)).astype(ml_dtypes.bfloat16)
    y = reference(GemmProblem(16, 12), x, w)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.astype(np.float64).T, rtol=0, atol=0)
    s = reference(GemmProblem(16, 6, "swiglu_bf16"), x, w)
    g, u = y[:, :6], y[:, 6:]
    np.testing.assert_allclose(s, g / (1 + np.exp(-g)) * u, rtol=1e-15)
    with pytest.raises(PlanError, match="expected x"):
        reference(GemmProblem(16, 6, "swiglu_bf16"), x, w[:6])
