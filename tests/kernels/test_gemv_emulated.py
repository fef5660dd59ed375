"""gemv on the CPU emulator (tests/kernels/cuda_host.py), cooperative launches included: every epilogue
(store, residual_add, swiglu, add_norm_parts), input mode (bf16 x, in_norm parts) and weight format (bf16, w8,
w4), the cooperative split-K route with its grid barrier and the plain route with 1, 2 and 4 warps per row group
-- against the numpy reference, on small shapes whose row blocks are partial. The folded norm is also run as
the pair it is in a decode step (add_norm_parts GEMV, then an in_norm parts GEMV) against the unfused chain
(GEMV, AddRMSNorm, GEMV). Outputs and the workspace are poisoned with NaN first; the barrier word must come back
reusable. The GPU tier runs the same kernels on the device (tests/targets/test_gemv_gpu.py); this one runs
in CI without a GPU.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ninferc.ir.quant import quantize  # noqa: E402
from ninferc.ir.reference import ref_rmsnorm  # noqa: E402
from ninferc.targets.kernels.gemv import EPILOGUES as ALL_EPILOGUES  # noqa: E402
from ninferc.targets.kernels.gemv import GemvFamily, GemvTuning, GemvProblem, kernel_args, norm_input, reference  # noqa: E402
from ninferc.targets.plan import KernelSpec, PlanContext, compile_variants  # noqa: E402

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU emulator needs g++"), pytest.mark.slow]  # slow: seconds each on 2 cores

ARCH, SMS = "sm_90", 132  # the plan the launches come from; the emulator runs any grid
FAM = GemvFamily(GemvTuning(plain_shapes=((128, 1), (128, 2), (128, 4)), coop_threads=(256,), token_tiles=(1, 4),
                     w4_token_tiles=(1, 4), w4_mma_tiles=(), w8_mma_tiles=(), bf16_mma_tiles=(), w8_dp_tiles=(),
                     w4_dp_tiles=()))
#: the same family with w4 on tensor cores at every token tile and w8 and bf16 at both tiles (FAM: on fp32 FMAs)
FAM_MMA = GemvFamily(GemvTuning(plain_shapes=((128, 1), (128, 2), (128, 4)), coop_threads=(256,), token_tiles=(1, 4),
                         w4_token_tiles=(1, 4), mma_shapes=((128, 1), (128, 2), (128, 4)), w4_mma_tiles=(1, 4),
                         w8_mma_tiles=(1, 4), bf16_mma_tiles=(1, 4), w4_mma_epilogues=ALL_EPILOGUES))
#: the same family with w8 / w4 on integer dot products (dp2a on int16 x) at both token tiles
FAM_DP = GemvFamily(GemvTuning(plain_shapes=((128, 1), (128, 2), (128, 4)), coop_threads=(256,), token_tiles=(1, 4),
                        w4_token_tiles=(1, 4), w4_mma_tiles=(), w8_mma_tiles=(), w8_dp_tiles=(1, 4), w4_dp_tiles=(1, 4),
                        dp_shapes=((128, 1), (128, 2), (128, 4))))
#: the 8-token tile alone (GemvTuning's default tiles since 2026-12-05 take it: w8 on tensor cores until 2026-12-06, on
#: dp since, tensor cores now only the fallback; bf16 on fp32 FMAs until 2026-12-06, on tensor cores since; bf16 and w4
#: are forced to FMAs here to cover that template at 8 tokens too; FAM8_MMA: bf16 on tensor cores, FAM8_DP: w8 on dp)
FAM8 = GemvFamily(GemvTuning(plain_shapes=((128, 1), (128, 2)), coop_threads=(256,), token_tiles=(8,),
                         w4_token_tiles=(8,), mma_shapes=((128, 2),), w4_mma_tiles=(), w8_mma_tiles=(8,),
                         bf16_mma_tiles=(), w8_dp_tiles=(), w4_dp_tiles=()))
FAM8_MMA = GemvFamily(GemvTuning(plain_shapes=((128, 2),), coop_threads=(256,), token_tiles=(8,),
                             bf16_mma_shapes=((128, 2),), bf16_mma_tiles=(8,)))
#: w4 on tensor cores at the 8-token tile (no dp tile there: every epilogue takes the mma kernels, whatever
#: w4_mma_epilogues says), its rings in dynamic shared memory past the 48 KiB budget (4 warps x 2 x 6,400 B)
FAM8_W4 = GemvFamily(GemvTuning(plain_shapes=((128, 2),), coop_threads=(256,), w4_token_tiles=(8,),
                                mma_shapes=((128, 1), (128, 2)), w4_mma_tiles=(8,), w4_dp_tiles=()))
FAMS = {"fma": FAM, "mma": FAM_MMA, "dp": FAM_DP}
BF16_NAN = 0x7FC0
#: fp32 accumulation in a different order than numpy's matmul (relative L2); bf16 outputs: a few one-ulp flips
F32_REL, BF16_REL = 1e-5, 2e-3

# (format, K): K gives the cooperative route at least two K splits (K / (elements per 16-byte vector) / 32)
SHAPES = {"bf16": 512, "w8": 1024, "w4": 2048}
N = 96  # partial row blocks for every shape (bf16: 16 outputs per 128-thread CTA with 1 warp per group)
EPILOGUES = ("store", "residual_add", "swiglu", "add_norm_parts")


def _problems():
    for f, k in SHAPES.items():
        for e in EPILOGUES:
            yield GemvProblem(k, N, e, f)
        for e in ("store", "swiglu"):
            yield GemvProblem(k, N, e, f, in_norm="parts")
        yield GemvProblem(k, N, "add_norm_parts", f, unit_offset=False)


@pytest.fixture(scope="module")
def ctx():
    specs = [s for p in _problems() for s in FAM.variants(p)]
    specs += [s for p in _problems() for s in FAM_MMA.variants(p)]
    specs += [s for p in _problems() if p.wfmt != "bf16" for s in FAM_DP.variants(p)]
    specs += [FAM.spec(GemvProblem(N, 40, "swiglu", f, in_norm="parts"), 128, "plain", t, kw)
              for f in SHAPES if f == "bf16" for t in (1, 4) for kw in (1, 2, 4)]
    built = compile_variants(specs, ARCH)
    return PlanContext(ARCH, SMS, {u: r for u, (_, r) in built.items()})


def _rel(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "non-finite output (an element never written, or NaN)"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _bf16_bits_to_f32(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) << 16).view(np.float32)


def _weights(rng, prob: GemvProblem):
    """(device codes / bf16 bits, scales or None, fp32 dequantised reference weights)."""
    w = (rng.standard_normal((prob.w_rows, prob.k), dtype=np.float32) / np.float32(np.sqrt(prob.k))
         ).astype(ml_dtypes.bfloat16)
    if prob.quantized:
        qt = quantize(w, prob.wfmt)
        return np.ascontiguousarray(qt.codes), np.ascontiguousarray(qt.scales), qt.dequantize()
    return np.ascontiguousarray(w.view(np.uint16)), None, w.astype(np.float32)


def _run(prob: GemvProblem, launch, seed: int, source: str | None = None, x_scale=None, x_edit=None,
         skew: bool = False):
    """Run one launch on the emulator and check it against :func:`reference` (``x_scale``: per-token factors of
    x, [T]; ``x_edit``: a function that changes the fp32 x [T, K] in place before its bf16 rounding; ``skew``: the
    emulator's skewed warp order, cuda_host's docstring)."""
    from cuda_host import HostKernel

    rng = np.random.default_rng(seed)
    t, k = launch.tokens, prob.k
    w_dev, scales, w_ref = _weights(rng, prob)
    x = rng.standard_normal((t, k), dtype=np.float32)
    if x_scale is not None:
        x *= np.asarray(x_scale, np.float32)[:, None]
    if x_edit is not None:
        x_edit(x)
    x = x.astype(ml_dtypes.bfloat16)
    x_dev = np.ascontiguousarray(x.view(np.uint16))
    ws = np.full(max(launch.workspace_bytes // 4, 1), np.nan, np.float32)
    barrier = np.zeros(1, np.uint32)
    y_in, extra, ref_extra = None, {}, {}
    if prob.epilogue == "swiglu":
        y = np.full((t, prob.n), BF16_NAN, np.uint16)
    elif prob.epilogue in ("residual_add", "add_norm_parts"):
        y_in = rng.standard_normal((t, prob.n), dtype=np.float32)
        y = y_in.copy()
    else:
        y = np.full((t, prob.n), np.nan, np.float32)
    parts = 0
    if prob.norm_out:
        parts = FAM.norm_parts(launch)
        nw = rng.standard_normal(prob.n, dtype=np.float32) * np.float32(0.2)
        extra = {"norm_w": nw, "xs": np.full((t, prob.n), BF16_NAN, np.uint16),
                 "ss_out": np.full((t, parts), np.nan, np.float32)}
        ref_extra = {"norm_w": nw}
        assert launch.workspace_bytes == 4 * t * parts  # the engine sizes norm_ss from it
    if prob.norm_in:
        n_parts = 5 if t == 1 else 300  # 300: the 8-wide part loop and its remainder
        ss = np.abs(rng.standard_normal((t, n_parts), dtype=np.float32)) * np.float32(k / n_parts)
        extra = {"ss_in": ss, "ss_parts": n_parts, "in_eps": 1e-6}
        ref_extra = {"ss_in": ss, "in_eps": 1e-6}
    spec = launch.kernel
    hk = HostKernel(source or spec.render(), spec.entry)
    hk.launch(launch.grid, launch.block, kernel_args(prob, launch, w_dev, x_dev, y, ws, barrier, scales=scales, **extra),
              smem=launch.dynamic_smem_bytes, cooperative=launch.cooperative, skew=skew)
    ref_prob = GemvProblem(k, prob.n, prob.epilogue, unit_offset=prob.unit_offset, in_norm=prob.in_norm)
    ref = reference(ref_prob, x, w_ref, y_in, **ref_extra, dp=bool(dict(spec.params).get("dp", False)))
    if prob.norm_out:
        h_ref, xs_ref, ss_ref = ref
        assert _rel(y, h_ref) < F32_REL
        assert _rel(_bf16_bits_to_f32(extra["xs"]), xs_ref.astype(np.float32)) < BF16_REL
        # the parts cover the outputs exactly once: their sum is the row's sum of squares
        np.testing.assert_allclose(extra["ss_out"].sum(axis=1, keepdims=True), ss_ref, rtol=1e-5)
    elif prob.epilogue == "swiglu":
        assert _rel(_bf16_bits_to_f32(y), ref.astype(np.float32)) < BF16_REL
    else:
        assert _rel(y, ref) < F32_REL
    if launch.cooperative:  # the emulator applied the protocol's arithmetic: low 31 bits back to zero
        assert int(barrier[0]) == 0x80000000  # exactly one grid barrier
    else:
        assert int(barrier[0]) == 0


def _cases():
    """Per problem: one token with 4 warps per row group, three (a partial 4-token tile) with 2, and the
    cooperative route with three tokens; bf16 also one warp per row group (the k_warps = 1 source). w4 runs on
    the fp32 FMA path and again on tensor cores (``mma``); w8 and bf16 too, their mma variants plain only (one token
    with 1 and 4 warps per row group, three with 2); w8 and w4 again on integer dot products (``dp``, plain only:
    the same three plain shapes)."""
    for p in _problems():
        for kind in ("fma", "mma") if p.wfmt == "w4" else ("fma",):
            yield p, 1, 128, "plain", 4, kind
            yield p, 3, 128, "plain", 2, kind
            if p.wfmt == "bf16":
                yield p, 1, 128, "plain", 1, kind
            if not p.norm_out:
                yield p, 3, 256, "coop", 1, kind
        if p.wfmt in ("w8", "bf16"):
            yield p, 1, 128, "plain", 4, "mma"
            yield p, 1, 128, "plain", 1, "mma"
            yield p, 3, 128, "plain", 2, "mma"
        if p.wfmt != "bf16":
            yield p, 1, 128, "plain", 4, "dp"
            yield p, 1, 128, "plain", 1, "dp"
            yield p, 3, 128, "plain", 2, "dp"


CASES = list(_cases())


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{p.wfmt}{'' if kind == 'fma' else '-' + kind}-{p.epilogue}-{p.in_norm}-u{int(p.unit_offset)}"
                              f"-t{t}-{m}{th}kw{kw}" for p, t, th, m, kw, kind in CASES])
def test_gemv_kernel_on_the_emulator(ctx, case):
    prob, t, th, mode, kw, kind = CASES[case]
    fam = FAMS[kind]
    splits = 2 if mode == "coop" else None
    if mode == "coop" and th not in fam.coop_threads_for(prob, fam.tile_for(t)):
        th = fam.coop_threads_for(prob, fam.tile_for(t))[-1]  # mma at the 4-token tile: 128-thread rings only
    launch = fam.launch_variant(prob, t, ctx, th, mode, splits, max_tokens=fam.tile_for(t), k_warps=kw)
    assert launch.cooperative == (mode == "coop") and launch.split_k == (2 if mode == "coop" else 1)
    assert dict(launch.kernel.params).get("mma", False) == (kind == "mma")
    assert dict(launch.kernel.params).get("dp", False) == (kind == "dp")
    _run(prob, launch, seed=case)


def _outlier_blocks(x):
    """Block 0 of every token all zero, block 1 with one element 1e4 times the rest (its small elements lose bits
    in int16), the last block 1e-30 of the rest (near the bottom of the exponent clamp)."""
    x[:, :64] = 0.0
    x[:, 64:128] *= np.float32(1e-2)
    x[:, 70] = np.float32(100.0)
    x[:, -64:] *= np.float32(1e-30)


@pytest.mark.parametrize("fmt", ["w8", "w4"])
@pytest.mark.parametrize("k,kw,x_scale", [(704, 2, [1.0]), (1024, 1, [3e5]), (1024, 4, [2e-6]), (1600, 2, [1.0, 7.0, 1e-3])])
def test_dp_x_range_and_partial_steps(fmt, k, kw, x_scale):
    """The dp variants stage x as int16 under a power of two per 64-element block: a zero block, a block with an
    outlier, tiny and huge activations must match the reference that rounds x the same way (:func:`dp_x`); K = 704
    / 1,600 leave partial last steps over k_warps warps, three tokens a partial 4-token tile."""
    prob = GemvProblem(k, 40, "residual_add", fmt)
    tile = 1 if len(x_scale) == 1 else 4
    spec = FAM_DP.spec(prob, 128, "plain", tile, kw)
    assert dict(spec.params)["dp"]
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = FAM_DP.launch_variant(prob, len(x_scale), c, 128, "plain", max_tokens=tile, k_warps=kw)
    assert launch.dynamic_smem_bytes == FAM_DP.dynamic_smem_bytes(prob, tile) > 2 * k * tile
    _run(prob, launch, seed=17, x_scale=x_scale, x_edit=_outlier_blocks)


def test_dp_add_norm_parts_at_four_tokens_past_48_kib_of_x():
    """``w4_mma_epilogues`` without add_norm_parts and the 4-token tile a w4 dp tile (the defaults since 2026-12-06:
    the 27B down / GDN out / attention o at 4 tokens): a w4 add_norm_parts GEMV at 4 tokens plans on the persistent dp
    kernel with its staged x in opted-in dynamic shared memory (K = 6,144: 53,760 B, the 27B GDN out's; ``dp_x_bytes``
    40 KiB per token), three tokens."""
    fam = GemvFamily(GemvTuning(dp_shapes=((256, 1),)))
    prob = GemvProblem(6144, 40, "add_norm_parts", "w4")
    assert fam.dp_for(prob, 4) and not fam.mma_for(prob, 4) and GemvFamily().dp_for(prob, 4)
    assert GemvFamily().mma_for(GemvProblem(6144, 40, "residual_add", "w4"), 4)  # the other epilogues: tensor cores
    specs = [s for s in fam.variants(prob) if s.param("max_tokens") == 4]
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants(specs, ARCH).items()})
    launch = fam.launch(prob, 3, c)
    assert dict(launch.kernel.params).get("dp") and launch.dynamic_smem_bytes >= 53_760 > 40 * 1024
    _run(prob, launch, seed=23)


@pytest.mark.parametrize("fmt", list(SHAPES))
@pytest.mark.parametrize("t", [1, 3, 6])
def test_folded_norm_pair_equals_the_unfused_chain(ctx, fmt, t):
    """add_norm_parts GEMV (K -> D) then an in_norm parts swiglu GEMV (D -> 40), with different CTA shapes on the
    two sides (so the parts the consumer sums are not its own row blocks), against GEMV + AddRMSNorm (fp32,
    ``ref_rmsnorm``) + GEMV. The only difference allowed is where x is rounded to bf16."""
    from cuda_host import HostKernel

    d = N
    prod = GemvProblem(SHAPES[fmt], d, "add_norm_parts", fmt)
    cons = GemvProblem(d, 40, "swiglu", "bf16", in_norm="parts")
    tile = FAM.tile_for(t)
    lp = FAM.launch_variant(prod, t, ctx, 128, "plain", max_tokens=tile, k_warps=4 if t == 1 else 1)
    lc = FAM.launch_variant(cons, t, ctx, 128, "plain", max_tokens=tile, k_warps=2)
    rng = np.random.default_rng(100 + t)
    wp, sp, wp_ref = _weights(rng, prod)
    wc, _, wc_ref = _weights(rng, cons)
    x = rng.standard_normal((t, prod.k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    h0 = rng.standard_normal((t, d), dtype=np.float32)
    nw = rng.standard_normal(d, dtype=np.float32) * np.float32(0.2)
    parts = FAM.norm_parts(lp)
    h, xs = h0.copy(), np.full((t, d), BF16_NAN, np.uint16)
    ss = np.full((t, parts), np.nan, np.float32)
    HostKernel(lp.kernel.render(), lp.kernel.entry).launch(lp.grid, lp.block, kernel_args(
        prod, lp, wp, np.ascontiguousarray(x.view(np.uint16)), h, scales=sp, norm_w=nw, xs=xs, ss_out=ss))
    y = np.full((t, 40), BF16_NAN, np.uint16)
    HostKernel(lc.kernel.render(), lc.kernel.entry).launch(lc.grid, lc.block, kernel_args(
        cons, lc, wc, xs, y, ss_in=ss, ss_parts=parts, in_eps=1e-6))
    h_ref = h0 + x.astype(np.float32) @ wp_ref.T
    assert _rel(h, h_ref) < F32_REL
    g = ref_rmsnorm(h_ref, nw, 1e-6, True) @ wc_ref.T
    want = g[:, :40] / (1 + np.exp(-g[:, :40])) * g[:, 40:]
    assert _rel(_bf16_bits_to_f32(y), want) < 1e-2  # x rounded to bf16 before vs after the norm's 1/rms
    # and exactly what the reference of the pair gives
    xs_ref, ss_ref = norm_input(h_ref, nw, True)
    pair = reference(GemvProblem(d, 40, "swiglu", in_norm="parts"), xs_ref, wc_ref, ss_in=ss_ref, in_eps=1e-6)
    assert _rel(_bf16_bits_to_f32(y), pair.astype(np.float32)) < BF16_REL


@pytest.mark.parametrize("fmt,epilogue,in_norm", [("bf16", "store", "none"), ("bf16", "add_norm_parts", "none"),
                                                 ("bf16", "swiglu", "parts"), ("w8", "store", "none"),
                                                 ("w8", "swiglu", "parts"), ("w8", "add_norm_parts", "none"),
                                                 ("w4", "residual_add", "none")])
@pytest.mark.parametrize("t", [6, 8, 13])
def test_eight_token_tile(fmt, epilogue, in_norm, t):
    """The 8-token tile: 6 tokens (a partial tile), 8 (a whole one) and 13 (two token chunks, the second partial),
    bf16 and w4 on fp32 FMAs, w8 on tensor cores (all eight B columns of the m16n8k16 tile are tokens), with two
    warps per row group."""
    prob = GemvProblem(SHAPES[fmt], N, epilogue, fmt, in_norm=in_norm)
    spec = FAM8.spec(prob, 128, "plain", 8, 2)
    assert spec.param("max_tokens") == 8 and dict(spec.params).get("mma", False) == (fmt == "w8")
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = FAM8.launch_variant(prob, t, c, 128, "plain", max_tokens=8, k_warps=2)
    assert launch.kernel.uri == spec.uri and FAM8.tile_for(t, fmt) == 8
    _run(prob, launch, seed=40 + t)


#: w8 on integer dot products at the 8-token tile alone (the registered family's since 2026-12-06), 128 threads
FAM8_DP = GemvFamily(GemvTuning(token_tiles=(8,), w8_mma_tiles=(), w8_dp_tiles=(8,), dp_shapes=((128, 1),)))


@pytest.mark.parametrize("epilogue,in_norm", [("store", "none"), ("swiglu", "parts"), ("add_norm_parts", "none"),
                                              ("residual_add", "none")])
@pytest.mark.parametrize("t", [6, 8, 13])
def test_eight_token_tile_w8_dp(epilogue, in_norm, t):
    """w8 on the persistent dp kernels at the 8-token tile: 6 tokens (token slots past the chunk stage zeros and are
    never stored), 8, and 13 (two token chunks, the second partial; on a one-SM plan each CTA's range of items crosses
    the chunk and stages x again)."""
    prob = GemvProblem(SHAPES["w8"], N, epilogue, "w8", in_norm=in_norm)
    specs = [s for s in FAM8_DP.variants(prob) if dict(s.params).get("dp")]  # with and without the carry
    assert len(specs) == 2 and {s.param("max_tokens") for s in specs} == {FAM8_DP.tile_for(t, "w8")} == {8}
    res = {u: r for u, (_, r) in compile_variants(specs, ARCH).items()}
    for sms in (SMS, 1):
        launch = FAM8_DP.launch(prob, t, PlanContext(ARCH, sms, res))
        assert launch.kernel in specs
        assert launch.dynamic_smem_bytes == FAM8_DP.dynamic_smem_bytes(prob, 8, launch.kernel)
        _run(prob, launch, seed=60 + t + sms)


@pytest.mark.parametrize("t", [6, 8])
def test_w8_chunk_fallback_runs_the_four_token_dp_kernel(t):
    """The default family's w8 8-token tile where its x fits no CTA (K = 17,408: 287 KB at 8 tokens against sm_90's
    227 KiB) plans the 4-token dp kernel in two token chunks (``GemvTuning.dp_chunk_fallback``), and that launch
    matches the reference (the second chunk partial at 6 tokens)."""
    fam = GemvFamily()
    prob = GemvProblem(17408, 40, "add_norm_parts", "w8")
    specs = [v for v in fam.variants(prob) if v.param("max_tokens") in (4, 8)]
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants(specs, ARCH).items()})
    launch = fam.launch(prob, t, c)
    assert dict(launch.kernel.params)["dp"] and launch.kernel.param("max_tokens") == 4 and launch.tokens == t
    assert launch.dynamic_smem_bytes == fam.dynamic_smem_bytes(prob, 4, launch.kernel)
    assert fam.dynamic_smem_bytes(prob, 8) > 227 * 1024 >= launch.dynamic_smem_bytes  # sm_90's most per CTA
    _run(prob, launch, seed=70 + t)


@pytest.mark.parametrize("epilogue,in_norm", [("store", "none"), ("add_norm_parts", "none"), ("swiglu", "parts")])
@pytest.mark.parametrize("t", [6, 8, 13])
def test_eight_token_tile_bf16_mma(epilogue, in_norm, t):
    """bf16 on tensor cores at the 8-token tile (the registered family's since 2026-12-06): every B column a token,
    6 tokens (columns past the chunk read its first token's x and are never stored), 8, and 13 (two chunks); each
    lane reads its x fragments from global memory, no dynamic shared memory."""
    prob = GemvProblem(SHAPES["bf16"], N, epilogue, in_norm=in_norm)
    spec = FAM8_MMA.spec(prob, 128, "plain", 8, 2)
    assert dict(spec.params)["mma"] and FAM8_MMA.dynamic_smem_bytes(prob, 8) == 0
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = FAM8_MMA.launch_variant(prob, t, c, 128, "plain", max_tokens=8, k_warps=2)
    assert launch.kernel.uri == spec.uri and launch.dynamic_smem_bytes == 0
    _run(prob, launch, seed=50 + t)


@pytest.mark.parametrize("epilogue,in_norm,mode", [("store", "none", "plain"), ("swiglu", "parts", "plain"),
                                                   ("add_norm_parts", "none", "plain"), ("store", "none", "coop")])
@pytest.mark.parametrize("t", [6, 8, 13])
def test_eight_token_tile_w4_mma(epilogue, in_norm, mode, t):
    """w4 on tensor cores at the 8-token tile: every B column of the m16n8k16 tile a token (6: a partial tile, 8,
    13: two chunks), the warps' rings in 51,200 B of dynamic shared memory at 128 threads (2 stages of 6,400 B: the
    tile's x is 4 KiB of each stage), plain with 2 warps per row group and the cooperative split-K route; the
    add_norm_parts GEMV on these kernels too (8 is no dp tile). A launch given one byte too few traps."""
    prob = GemvProblem(SHAPES["w4"], N, epilogue, "w4", in_norm=in_norm)
    kw = 2 if mode == "plain" else 1
    spec = FAM8_W4.spec(prob, 128, mode, 8, kw)
    assert dict(spec.params)["mma"] and spec.param("mma_stages") == 2
    assert FAM8_W4.dynamic_smem_bytes(prob, 8, spec) == 4 * 2 * 6_400 > 48 * 1024
    assert FAM8_W4.shapes_for(prob, 8) == ((128, 1), (128, 2)) and FAM8_W4.coop_threads_for(prob, 8) == (128,)
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = FAM8_W4.launch_variant(prob, t, c, 128, mode, 2 if mode == "coop" else None, max_tokens=8, k_warps=kw)
    assert launch.kernel.uri == spec.uri and launch.dynamic_smem_bytes == 51_200 and FAM8_W4.tile_for(t, "w4") == 8
    _run(prob, launch, seed=60 + t)
    if t == 8 and mode == "plain" and epilogue == "store":
        from cuda_host import HostKernelError
        with pytest.raises(HostKernelError, match="__trap"):
            _run(prob, dataclasses.replace(launch, dynamic_smem_bytes=51_199), seed=60)


@pytest.mark.parametrize("epilogue,in_norm", [("store", "none"), ("swiglu", "parts"), ("add_norm_parts", "none")])
@pytest.mark.parametrize("tile,t", [(4, 3), (4, 4), (4, 6), (2, 2), (2, 5)])
def test_bf16_unpacked_weights(epilogue, in_norm, tile, t):
    """bf16 on fp32 FMAs with each weight vector converted once for the tile's tokens (``bf16_unpack_tiles``):
    every token slot computes, so a partial chunk (3 of 4, the last chunk of 6 at tile 4 or of 5 at tile 2) must
    store its
    own tokens only and every stored row must equal the reference (a slot that read another token's x fails)."""
    fam = GemvFamily(GemvTuning(plain_shapes=((128, 2),), coop_threads=(256,), token_tiles=(1, tile),
                                bf16_unpack_tiles=(tile,), bf16_mma_tiles=()))
    prob = GemvProblem(SHAPES["bf16"], N, epilogue, in_norm=in_norm)
    spec = fam.spec(prob, 128, "plain", tile, 2)
    assert dict(spec.params).get("unpack_w") == 1 and fam.tile_for(t) == tile
    assert "unpack_w" not in dict(fam.spec(prob, 128, "plain", 1, 2).params)  # one token: nothing to share
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    _run(prob, fam.launch_variant(prob, t, c, 128, "plain", max_tokens=tile, k_warps=2), seed=70 + t)


@pytest.mark.parametrize("k,kw,x_scale", [(704, 2, 1.0), (1024, 1, 3e5), (1024, 4, 2e-6), (1600, 2, 1.0)])
def test_w8_mma_x_range_and_partial_steps(k, kw, x_scale):
    """The w8 mma variant converts x to fp16 under a per-token power of two: x far above the fp16 range (3e5) or
    far below its normal range (2e-6) must come out as exact as fp32 FMAs; K = 704 / 1,600 (11 / 25 blocks of
    64) leave a partial last step of kMmaUnroll blocks, interleaved over k_warps warps."""
    fam = FAM_MMA
    prob = GemvProblem(k, 40, "residual_add", "w8")
    spec = fam.spec(prob, 128, "plain", 1, kw)
    assert dict(spec.params)["mma"] and fam.dynamic_smem_bytes(prob, 1) == 2 * k
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = fam.launch_variant(prob, 1, c, 128, "plain", max_tokens=1, k_warps=kw)
    _run(prob, launch, seed=11, x_scale=[x_scale])


@pytest.mark.parametrize("k,kw,x_scale", [(704, 2, [1.0]), (1600, 4, [3e5]), (1600, 1, [1.0, 7.0, 1e-3])])
def test_bf16_mma_partial_steps(k, kw, x_scale):
    """The bf16 mma variant streams 4 blocks of 64 per warp step: K = 704 / 1,600 (11 / 25 blocks) leave a partial
    last step, interleaved over k_warps warps; each lane reads its x fragments from global memory as they are (no
    staging, no scale, no dynamic shared memory), large or small."""
    fam = FAM_MMA
    prob = GemvProblem(k, 40, "residual_add", "bf16")
    tile = 1 if len(x_scale) == 1 else 4
    spec = fam.spec(prob, 128, "plain", tile, kw)
    assert dict(spec.params)["mma"] and fam.dynamic_smem_bytes(prob, tile) == 0
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = fam.launch_variant(prob, len(x_scale), c, 128, "plain", max_tokens=tile, k_warps=kw)
    _run(prob, launch, seed=12, x_scale=x_scale)


@pytest.mark.parametrize("fmt", ["w8", "bf16"])
@pytest.mark.parametrize("k,kw", [(6144, 2), (5184, 4)])
def test_mma_k_segments(k, kw, fmt):
    """At the 4-token tile a long K's fp16 x (w8) does not fit W8_MMA_X_BYTES: it is staged and streamed in K segments
    (6,144: two of 3,072; 5,184 = 81 blocks: 2,624 + 2,560, the last one shorter), three tokens (a partial tile); bf16
    stages nothing and takes the same K in one pass, x from global memory."""
    fam = FAM_MMA
    prob = GemvProblem(k, 40, "store", fmt, in_norm="parts")
    if fmt == "w8":
        assert 0 < fam.dynamic_smem_bytes(prob, 4) < 4 * k * 2  # segmented
    else:
        assert fam.dynamic_smem_bytes(prob, 4) == 0
    spec = fam.spec(prob, 128, "plain", 4, kw)
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = fam.launch_variant(prob, 3, c, 128, "plain", max_tokens=4, k_warps=kw)
    assert dict(launch.kernel.params)["mma"]
    _run(prob, launch, seed=13, x_scale=[1.0, 50.0, 1e-3])


@pytest.mark.parametrize("mode", ["plain", "coop"])
def test_w4_mma_partial_chunk(mode):
    """The mma ring copies 4 scale groups per stage: K = 704 (11 groups) leaves a partial last chunk (zero-filled
    codes, uncopied scales), and 2 K splits of 6 / 5 groups start a split mid-chunk."""
    fam = FAM_MMA
    prob = GemvProblem(704, 40, "store", "w4")
    th, kw = (128, 2) if mode == "plain" else (256, 1)
    spec = fam.spec(prob, th, mode, 1, kw)
    c = PlanContext(ARCH, SMS, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = fam.launch_variant(prob, 1, c, th, mode, 2 if mode == "coop" else None, max_tokens=1, k_warps=kw)
    assert dict(launch.kernel.params)["mma"] and launch.split_k == (2 if mode == "coop" else 1)
    _run(prob, launch, seed=7)


def test_emulator_catches_a_missing_barrier_in_the_k_warps_sum(ctx):
    """A negative control: without the __syncthreads between the warps' shared-memory writes and the group's
    sum, the first warp of a row group adds partial sums its peers have not written yet -- the emulator's
    scheduler (each fiber runs to its next barrier, in thread order) must make that a wrong answer."""
    prob = GemvProblem(SHAPES["bf16"], N, "store")
    launch = FAM.launch_variant(prob, 1, ctx, 128, "plain", max_tokens=1, k_warps=4)
    src = launch.kernel.render()
    needle = "    __syncthreads();\n    const int first = warp - kw;"
    assert src.count(needle) == 1
    with pytest.raises(AssertionError):
        _run(prob, launch, seed=1, source=src.replace(needle, "    const int first = warp - kw;"))
    _run(prob, launch, seed=1)  # the real source passes with the same inputs


@pytest.mark.parametrize("fmt", ["w8", "w4"])
@pytest.mark.parametrize("epilogue,in_norm", [("add_norm_parts", "none"), ("swiglu", "parts"), ("store", "none")])
def test_dp_persistent_ranges_cross_token_chunks(fmt, epilogue, in_norm):
    """A persistent dp launch planned for one SM: fewer CTAs than work items, so each CTA loops over a contiguous
    range of (row block, token chunk) items, and with three tokens at the 1-token tile some ranges cross a token
    chunk -- x must be staged again there, and every row block's norm part written once."""
    for n in range(40, 400, 4):  # an N whose row blocks do not line up with the CTAs' ranges
        prob = GemvProblem(SHAPES[fmt], n, epilogue, fmt, in_norm=in_norm)
        spec = FAM_DP.spec(prob, 128, "plain", 1, 1)
        assert dict(spec.params)["persist"]
        c = PlanContext(ARCH, 1, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
        launch = FAM_DP.launch_variant(prob, 3, c, 128, "plain", max_tokens=1, k_warps=1)
        rb = FAM_DP.row_blocks(prob, 128, 1, 1)
        items = rb * 3
        assert launch.ctas < items and launch.ctas == FAM_DP.persistent_grid(items, launch.ctas_per_sm)
        if any(a // rb != (b - 1) // rb for a, b in persistent_ranges(items, launch.ctas)):
            break  # some CTA's range crosses a token chunk
    else:
        pytest.fail("no N gave a range across token chunks")
    if prob.norm_out:
        assert FAM_DP.norm_parts(launch) == rb
    _run(prob, launch, seed=23, x_scale=[1.0, 30.0, 1e-2])
    _run(prob, launch, seed=23, x_scale=[1.0, 30.0, 1e-2], skew=True)


@pytest.mark.parametrize("carry", [True, False])
def test_skewed_warps_catch_a_missing_barrier_before_restaging_x(carry):
    """A negative control for the emulator's skewed order: a persistent dp CTA whose range crosses a token chunk
    must not restage x while its other warps still read the old chunk's. Without that barrier the kernel still
    passes in thread (and reverse) order -- every warp has the same barriers, so they stay in step -- but under
    ``skew`` warp 0 runs ahead into the restaging and the others read the new token's x."""
    fam = GemvFamily(GemvTuning(plain_shapes=((128, 1),), coop_threads=(256,), w4_mma_tiles=(), w8_mma_tiles=(),
                         w8_dp_tiles=(1, 4), w4_dp_tiles=(1, 4), dp_shapes=((128, 1),), dp_carry=(carry,)))
    prob = GemvProblem(1024, 100, "swiglu", "w8", in_norm="parts")
    spec = fam.spec(prob, 128, "plain", 1, 1)
    c = PlanContext(ARCH, 1, {u: r for u, (_, r) in compile_variants([spec], ARCH).items()})
    launch = fam.launch_variant(prob, 3, c, 128, "plain", max_tokens=1, k_warps=1)
    launch = dataclasses.replace(launch, grid=(2, 1, 1))  # 75 items (25 per token) over 2 CTAs: both cross a chunk
    src = launch.kernel.render()
    if carry:
        needle = ("    if (kKWarps > 1 || kNormParts || (item + 1 < item_end && (item + 1) / (row_blocks * splits) != "
                  "chunk)) __syncthreads();\n")
    else:
        needle = "    __syncthreads();  // every warp is done with this item's shared buffers (red, ss_group, x) before the next\n"
    assert src.count(needle) == 1
    mutant = src.replace(needle, "")
    if os.environ.get("NINFERC_EMU_SKEW") != "1":  # (the skewed audit of the whole tier runs this one skewed too)
        _run(prob, launch, seed=5, source=mutant, x_scale=[1.0, 30.0, 1e-2])  # in step: unseen
    with pytest.raises(AssertionError):
        _run(prob, launch, seed=5, source=mutant, x_scale=[1.0, 30.0, 1e-2], skew=True)
    _run(prob, launch, seed=5, x_scale=[1.0, 30.0, 1e-2], skew=True)  # the real source passes skewed


def persistent_ranges(items: int, grid: int) -> list[tuple[int, int]]:
    """The template's split of ``items`` work items over ``grid`` persistent CTAs: [begin, end) per CTA, floor(items /
    grid) items each and one more for the first items % grid CTAs."""
    per, extra = divmod(items, grid)
    out, b = [], 0
    for i in range(grid):
        e = b + per + (1 if i < extra else 0)
        out.append((b, e))
        b = e
    return out


@pytest.mark.parametrize("option,fmt,epilogue,in_norm", [
    ({"ring": 3}, "w4", "swiglu", "parts"), ({"ring": 2, "preload": "late"}, "w8", "add_norm_parts", "none"),
    ({"ring": 5}, "w4", "store", "none"), ({"preload": "late"}, "w4", "store", "parts"),
    ({"stage_round": "fma"}, "w4", "add_norm_parts", "none"), ({"stage_round": "fma"}, "w8", "swiglu", "parts"),
    ({"depth": 2}, "w4", "add_norm_parts", "none"), ({"depth": 2}, "w8", "store", "parts"),
    ({"depth": 2}, "w4", "swiglu", "parts")],
    ids=["ring3", "ring2_late", "ring5", "late", "fma_w4", "fma_w8", "depth2_w4", "depth2_w8", "depth2_w4_swiglu"])
def test_dp_persistent_options_on_any_grid(option, fmt, epilogue, in_norm):
    """The persistent dp template options the planner does not pick by default -- weight rings in shared memory
    (``ring``: the flattened step sequence across items, its issue cursor and slots), the first weights only in L2
    before the wait (``preload`` "late"), the staging's rounding by one FMA (``stage_round`` "fma"), two weight steps in flight per warp (``depth`` 2) -- give the
    reference's result with three tokens at the 1-token tile (token chunks inside a CTA's range), on one CTA, on a
    few, and on more CTAs than the plan's (the floor / ceil split of the items, :func:`persistent_ranges`); K not a
    multiple of a warp's 32 vectors (lanes past the end in the last step) for the rings. The emulator's copies
    complete at once, so the rings' cp.async group counting is the GPU tier's (test_gemv_gpu.py)."""
    k = 64 * 37 if "ring" in option else SHAPES[fmt]
    prob = GemvProblem(k, 100, epilogue, fmt, in_norm=in_norm)
    spec = FAM_DP.spec(prob, 128, "plain", 1, 1)
    forced = KernelSpec.make(spec.family, spec.template, {**dict(spec.params), **option}, spec.threads, False)
    c = PlanContext(ARCH, 1, {u: r for u, (_, r) in compile_variants([spec, forced], ARCH).items()})
    launch = FAM_DP.launch_variant(prob, 3, c, 128, "plain", max_tokens=1, k_warps=1, ring=0)
    launch = dataclasses.replace(launch, kernel=forced, dynamic_smem_bytes=FAM_DP.dynamic_smem_bytes(prob, 1, forced))
    items = FAM_DP.row_blocks(prob, 128, 1, 1) * 3
    for grid in (1, 5, launch.ctas + 3):
        assert grid < items
        _run(prob, dataclasses.replace(launch, grid=(grid, 1, 1)), seed=7 + grid, x_scale=[1.0, 30.0, 1e-2])


def test_persistent_grid_is_one_balanced_wave():
    assert GemvFamily.persistent_grid(1088, 396) == 363  # 3 items per CTA (the last one 2)
    assert GemvFamily.persistent_grid(100, 396) == 100
    assert GemvFamily.persistent_grid(397, 396) == 199
    for items in range(1, 300):
        for cap in (1, 7, 64):
            g = GemvFamily.persistent_grid(items, cap)
            per = -(-items // g)
            assert g <= cap and (g - 1) * per < items <= g * per
