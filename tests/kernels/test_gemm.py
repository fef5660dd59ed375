"""CPU tests of the prefill GEMM family (targets/kernels/gemm.py, templates/gemm.cu.j2): every variant
compiles for the four targets without spills (resources printed), the route choice by T and N, the
kernel's index math replayed by a fragment-level emulator, the swizzle's bank-conflict freedom, and the
reference / problem contracts. GPU twin: test_gemm_gpu.py."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from gemm_emulator import emulate
from ninferc.errors import PlanError
from ninferc.targets.arch import ARCHS, get_arch
from ninferc.targets.kernels.gemm import (BENCH_TILES, EPILOGUES, GROUP_M, STAGES, TILES, GemmFamily, GemmProblem,
                                          GemmTile, arg_names, group_m_for, kernel_args, reference)
from ninferc.targets.occupancy import occupancy
from ninferc.targets.plan import PlanContext, check_launch, compile_variants

FAM = GemmFamily()
FAM_ALL = GemmFamily(TILES + BENCH_TILES)  # default routes + benchmark candidates
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
    specs = [s for p in FAM_ALL.sample_problems() for s in FAM_ALL.variants(p)]
    return {uri: r for uri, (_, r) in compile_variants(specs, arch).items()}


def ctx_for(arch: str) -> PlanContext:
    return PlanContext(arch, SMS[arch], resources(arch))


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_variants_compile_without_spills(arch):
    res = resources(arch)
    a = get_arch(arch)
    lines = [f"gemm on {arch}: uri  regs  static_smem  dyn_smem  local  CTAs/SM(limiter)"]
    for p in FAM_ALL.sample_problems():
        for spec in FAM_ALL.variants(p):
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
            # the default 128x128 tile keeps two CTAs per SM by registers (<= 128 registers x 256 threads)
            if (tile.bm, tile.bn, tile.warps_m * tile.warps_n) == (128, 128, 8):
                assert r.registers <= 128, f"{spec.uri}: {r.registers} registers on {arch}"
    print("\n".join(lines))


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_route_selection(arch):
    ctx = ctx_for(arch)
    for k, n, ep in SHAPES_27B + SHAPES_TINY:
        p = GemmProblem(k, n, ep)
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
            per = {s: ctx.occupancy(FAM.spec(p, tile, s), tile.smem_bytes(s)).ctas_per_sm for s in STAGES}
            best = max(per.values())
            assert per[ln.kernel.param("stages")] == best
            assert ln.kernel.param("stages") == max(s for s in STAGES if per[s] == best)
            if t == 1:
                assert tile.bm == min(tt.bm for tt in TILES), f"T=1 should take the smallest tile, got {ln.route}"
            # tile rows never shrink as T grows
            assert tile.bm >= prev_bm, f"{p} T={t}: tile shrank to {tile.bm} from {prev_bm}"
            prev_bm = tile.bm
        if k * n >= 5120 * 5120:
            big = FAM.launch(p, 8192, ctx)
            assert big.route == TILES[0].route, f"{p} at T=8192 on {arch}: {big.route}"


def test_stage_choice_per_arch():
    # 100 KiB-shared parts: 3 stages keep two 128x128 CTAs per SM; sm_90 (228 KiB) affords 4.
    p = GemmProblem(5120, 16480)
    for arch, stages in (("sm_86", 3), ("sm_89", 3), ("sm_120a", 3), ("sm_90", 4)):
        ln = FAM.launch(p, 8192, ctx_for(arch))
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


@pytest.mark.parametrize("tile", TILES + BENCH_TILES, ids=lambda t: t.route)
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
