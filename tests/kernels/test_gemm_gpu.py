"""GPU tier of the prefill GEMM (marked ``gpu``; skipped without CuPy or a device).

Each case: fresh random bf16 X and W generated on the device (never zeros; W scaled by 1/sqrt(K) so
outputs are O(1)), output poisoned (NaN fp32 / 0xFFFF bf16), the family's planned launch (or a forced
variant) compiled for the device's arch and loaded as that exact cubin, compared with the fp64 reference
on the same bf16 values (``GEMM`` for fp32 outputs, ``GEMM_BF16_OUT`` for the bf16 SwiGLU output) over
the whole output, every row, and every column when T >= 64. Failures print the max-error location.
Shapes: the 27B projections and the tiny fixture's, T in {1, 7, 64, 100, 1024}.

Quantised weights (``wfmt`` w8 / w4, the ``test_quant_*`` cases): random codes (every int8 in [-127, 127],
every nibble) and random scales (w4 signed) generated on the device, so every code path of the
dequantisation is hit; the reference multiplies by the weight :func:`dequantize_weight` gives
(``bf16_rn(fl32(q * scale))``), under the same tolerances. One case quantises a bf16 W with
``ninferc.ir.quant.quantize`` to pin the real byte layout.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from gpu_testlib_prefill import (BF16_NAN, bf16_bits_to_f32, check, device_ctx, kernel, launch,  # noqa: E402
                                 rand_bf16)
from ninferc.ir.tolerances import GEMM, GEMM_BF16_OUT  # noqa: E402
from ninferc.targets.arch import get_arch  # noqa: E402
from ninferc.runtime.kernels import device_arch  # noqa: E402
from ninferc.targets.kernels.gemm import (BENCH_TILES, STAGES, TILES, WFORMATS, WGMMA_ARCHS,  # noqa: E402
                                          WGMMA_STAGES, WGMMA_TILES, GemmFamily, GemmProblem, GemmTile,
                                          dequantize_weight, kernel_args, reference)
from ninferc.targets.occupancy import occupancy  # noqa: E402
from ninferc.targets.plan import PlanContext, compile_variants  # noqa: E402
from ninferc.targets.skus import get_sku  # noqa: E402
from ninferc.testing import ARCH_SKUS  # noqa: E402

FAM = GemmFamily()
FAM_ALL = GemmFamily(TILES + BENCH_TILES)  # default routes + benchmark candidates (forced launches only)
#: the template's bk = 64 path (not routed), forced for quantised W only
EXTRA_TILES = (GemmTile(64, 128, 64, 2, 2, 0.9),)
FAM_Q = GemmFamily(TILES + BENCH_TILES + EXTRA_TILES)
QFORMATS = ("w8", "w4")
SHAPES_27B = [(5120, 16480, "store_f32"), (5120, 14336, "store_f32"), (5120, 17408, "swiglu_bf16"),
              (17408, 5120, "store_f32"), (6144, 5120, "store_f32")]
SHAPES_TINY = [(256, 1036, "store_f32"), (256, 768, "store_f32"), (256, 704, "swiglu_bf16"),
               (704, 256, "store_f32"), (512, 256, "store_f32")]
TOKENS = (1, 7, 64, 100, 1024)
_W_CACHE: dict = {}


def _all_specs(wfmts=WFORMATS, arch=None):
    """Every variant the tests launch on ``arch`` (default this device's): all tiles x stages x epilogues for
    each weight format (bk 64 only for quantised W; the wgmma tiles where the arch has them)."""
    arch = arch or device_arch()
    return [s for wf in wfmts for ep in ("store_f32", "swiglu_bf16")
            for s in (FAM_Q if wf != "bf16" else FAM_ALL).variants(GemmProblem(256, 704, ep, wfmt=wf), arch)]


def _wgmma_here() -> bool:
    return device_arch() in WGMMA_ARCHS


@pytest.fixture(scope="module")
def ctx():
    return device_ctx(_all_specs())


def _weights(p: GemmProblem):
    key = (p.k, p.w_rows)
    if key not in _W_CACHE:
        _W_CACHE.clear()  # keep one big weight at a time
        _W_CACHE[key] = rand_bf16((p.w_rows, p.k), 1.0 / np.sqrt(p.k), seed=zlib.crc32(repr(key).encode()))
    return _W_CACHE[key]


def _quant_codes(p: GemmProblem):
    """Random codes and scales of a quantised W on the device: w8 every int8 in [-127, 127] with positive
    scales, w4 every byte (all 16 nibbles) with signed scales; |w| ~ 1/sqrt(K) so outputs are O(1)."""
    rs = cp.random.RandomState(zlib.crc32(repr(("q", p.wfmt, p.k, p.w_rows)).encode()))
    mag = (0.5 + rs.random_sample(p.scales_shape, dtype=cp.float32))
    if p.wfmt == "w8":
        codes = rs.randint(-127, 128, size=p.w_shape, dtype=cp.int32).astype(cp.int8)
        scales = mag / cp.float32(73.0 * np.sqrt(p.k))  # uniform codes: std ~ 73
    else:
        codes = rs.randint(0, 256, size=p.w_shape, dtype=cp.int32).astype(cp.uint8)
        sign = 1.0 - 2.0 * (rs.random_sample(p.scales_shape, dtype=cp.float32) < 0.5).astype(cp.float32)
        scales = sign * mag / cp.float32(4.6 * np.sqrt(p.k))  # uniform nibbles: std ~ 4.6
    return codes, cp.ascontiguousarray(scales, dtype=cp.float32)


def _quant_weights(p: GemmProblem):
    """(codes, scales, fp64 dequantised W [N_w, K]) of :func:`_quant_codes`, cached like :func:`_weights`."""
    key = ("q", p.wfmt, p.k, p.w_rows)
    if key not in _W_CACHE:
        _W_CACHE.clear()
        codes, scales = _quant_codes(p)
        _W_CACHE[key] = (codes, scales, dequantize_weight(p, codes, scales, xp=cp).astype(cp.float64))
    return _W_CACHE[key]


def _run(p: GemmProblem, ln, seed: int, what: str):
    t = ln.tokens
    if p.quantized:
        w_arg, scales, w64 = _quant_weights(p)
    else:
        (w_arg, w64), scales = _weights(p), None
    x_bits, x64 = rand_bf16((t, p.x_stride), 1.0, seed)
    if p.epilogue == "swiglu_bf16":
        y = cp.full((t, p.n), BF16_NAN, dtype=cp.uint16)
    else:
        y = cp.full((t, p.n), np.nan, dtype=cp.float32)
    launch(ln, kernel_args(p, ln, x_bits, w_arg, y, scales=scales))
    # quantised W: the same fp64 math on the dequantised weight (reference(p, x, codes, scales=...) does
    # exactly this; the dequantised weight is cached per shape instead of recomputed per call)
    ref = reference(dataclasses.replace(p, wfmt="bf16"), x64[:, : p.k], w64, xp=cp)
    out = bf16_bits_to_f32(y) if p.epilogue == "swiglu_bf16" else y
    tol = GEMM_BF16_OUT if p.epilogue == "swiglu_bf16" else GEMM
    check(out, ref, tol, f"{what} [{ln.kernel.uri} T={t} K={p.k} N={p.n} grid={ln.grid}]", cols=True)
    return y


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("shape", SHAPES_27B + SHAPES_TINY, ids=lambda s: f"k{s[0]}_n{s[1]}_{s[2]}")
def test_planned_launch_matches_reference(ctx, shape, t):
    k, n, ep = shape
    p = GemmProblem(k, n, ep)
    ln = FAM.launch(p, t, ctx)
    _run(p, ln, seed=zlib.crc32(f"{shape}/{t}".encode()), what="planned")


@pytest.mark.parametrize("t", (7, 100, 300))
@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("tile", TILES + BENCH_TILES, ids=lambda tl: tl.route)
@pytest.mark.parametrize("shape", SHAPES_TINY + [(5120, 16480, "store_f32"), (5120, 17408, "swiglu_bf16")],
                         ids=lambda s: f"k{s[0]}_n{s[1]}_{s[2]}")
def test_every_variant(ctx, shape, tile, stages, t):
    k, n, ep = shape
    if k >= 5120 and t != 100:
        pytest.skip("27B shapes: one T per variant is enough")
    p = GemmProblem(k, n, ep)
    if tile.smem_bytes(stages) > ctx.arch.max_smem_per_cta_optin:
        pytest.skip(f"{tile.route} with {stages} stages exceeds this device's shared memory per CTA")
    ln = FAM_ALL.launch_variant(p, t, ctx, tile, stages)
    _run(p, ln, seed=zlib.crc32(f"{shape}/{tile}/{stages}/{t}".encode()), what="forced")


@pytest.mark.parametrize("t", (1, 7, 100, 300, 1024))
@pytest.mark.parametrize("stages", WGMMA_STAGES)
@pytest.mark.parametrize("tile", WGMMA_TILES, ids=lambda tl: tl.route)
@pytest.mark.parametrize("shape", SHAPES_TINY + SHAPES_27B, ids=lambda s: f"k{s[0]}_n{s[1]}_{s[2]}")
@pytest.mark.parametrize("wfmt", WFORMATS)
def test_every_wgmma_variant(ctx, wfmt, shape, tile, stages, t):
    """The Hopper routes, forced, on every shape (odd T, N not a tile multiple, K = 704 with a partial
    last k-tile) and weight format (random codes / scales as the quantised tests draw them)."""
    if not _wgmma_here():
        pytest.skip(f"no wgmma on {device_arch()} (targets {WGMMA_ARCHS})")
    k, n, ep = shape
    if k >= 5120 and t not in (100, 1024):
        pytest.skip("27B shapes: two T per variant are enough")
    if wfmt != "bf16" and t not in (7, 300, 1024):
        pytest.skip("quantised W: three T per shape are enough")
    p = GemmProblem(k, n, ep, wfmt=wfmt)
    ln = FAM.launch_variant(p, t, ctx, tile, stages)
    _run(p, ln, seed=zlib.crc32(f"{shape}/{tile}/{stages}/{t}".encode()), what="forced wgmma")


@pytest.mark.parametrize("ep", ["store_f32", "swiglu_bf16"])
def test_strided_x_and_odd_n(ctx, ep):
    # X with a row stride > K (a column window of a wider activation), N not a multiple of anything
    for k, n, ldx, t in ((256, 1037, 264, 33), (512, 77, 1024, 129), (5120, 333, 5128, 1000)):
        p = GemmProblem(k, n, ep, ldx)
        ln = FAM.launch(p, t, ctx)
        _run(p, ln, seed=k + n + t, what="strided")


def test_deterministic(ctx):
    p = GemmProblem(5120, 17408, "swiglu_bf16")
    ln = FAM.launch(p, 100, ctx)
    w_bits, _ = _weights(p)
    x_bits, _ = rand_bf16((100, 5120), 1.0, 99)
    outs = []
    for _ in range(2):
        y = cp.full((100, p.n), BF16_NAN, dtype=cp.uint16)
        launch(ln, kernel_args(p, ln, x_bits, w_bits, y))
        outs.append(cp.asnumpy(y))
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("arch,sms", [(a, get_sku(s).sms) for a, s in ARCH_SKUS.items()])
def test_every_arch_plan_runs_here(arch, sms):
    """Per-arch regression: the launch each target's plan chooses (template parameters, grid, dynamic
    shared memory, decided with that target's cubin resources and SM count), compiled for this device,
    computes the right answer."""
    res = {u: r for u, (_, r) in compile_variants(_all_specs(("bf16",), arch), arch).items()}
    plan_ctx = PlanContext(arch, sms, res)
    for k, n, ep in [(5120, 16480, "store_f32"), (5120, 17408, "swiglu_bf16"), (256, 704, "swiglu_bf16")]:
        p = GemmProblem(k, n, ep)
        for t in (7, 100, 1024):
            ln = FAM.launch(p, t, plan_ctx)
            if ln.dynamic_smem_bytes > get_arch(device_arch()).max_smem_per_cta_optin:
                continue  # a plan for a larger-shared-memory part than this device
            if FAM.tile_of(ln.kernel).kind == "wgmma" and not _wgmma_here():
                continue  # a wgmma route: runs only on its own arch
            _run(p, ln, seed=zlib.crc32(f"{arch}/{k}/{n}/{t}".encode()), what=f"plan for {arch}")


def test_driver_agrees_with_cubin_and_calculator(ctx):
    arch = ctx.arch
    for spec in _all_specs():
        dk = kernel(spec)
        r = ctx.resources_of(spec)
        a = dk.attributes()
        assert (a.registers, a.static_smem_bytes, a.local_bytes) == (r.registers, r.static_smem_bytes,
                                                                     r.local_bytes), spec.uri
        dyn = FAM.tile_of(spec).smem_bytes(spec.param("stages"))
        want = dk.driver_occupancy(spec.threads, dyn)
        got = occupancy(arch, spec.threads, r.registers, r.static_smem_bytes, dyn, barriers=r.barriers)
        assert got.ctas_per_sm == want, (spec.uri, dyn, got)


# ------------------------------------------------------------------------------------------------
# quantised weights (w8 / w4): fused dequantisation in the tensor-core GEMM
# ------------------------------------------------------------------------------------------------
Q_TOKENS = (1, 17, 64, 200, 1024)
Q_SHAPES_27B = [(5120, 17408, "swiglu_bf16"), (17408, 5120, "store_f32")]
Q_SHAPES_TINY = [(256, 704, "swiglu_bf16"), (256, 1036, "store_f32"), (704, 256, "store_f32")]


@pytest.mark.parametrize("t", Q_TOKENS)
@pytest.mark.parametrize("shape", Q_SHAPES_27B + Q_SHAPES_TINY, ids=lambda s: f"k{s[0]}_n{s[1]}_{s[2]}")
@pytest.mark.parametrize("wfmt", QFORMATS)
def test_quant_planned_launch_matches_reference(ctx, wfmt, shape, t):
    k, n, ep = shape
    p = GemmProblem(k, n, ep, wfmt=wfmt)
    ln = FAM.launch(p, t, ctx)
    assert ln.kernel.param("wfmt") == wfmt
    _run(p, ln, seed=zlib.crc32(f"{wfmt}/{shape}/{t}".encode()), what=f"planned {wfmt}")


# every forced variant: the tiny shapes at two T, the 27B shapes at one
Q_VARIANT_CASES = [(s, t) for s in Q_SHAPES_TINY[:2] for t in (17, 200)] + [(s, 200) for s in Q_SHAPES_27B]


@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("tile", TILES + BENCH_TILES + EXTRA_TILES, ids=lambda tl: tl.route)
@pytest.mark.parametrize("case", Q_VARIANT_CASES, ids=lambda c: f"k{c[0][0]}_n{c[0][1]}_{c[0][2]}_t{c[1]}")
@pytest.mark.parametrize("wfmt", QFORMATS)
def test_quant_every_variant(ctx, wfmt, case, tile, stages):
    (k, n, ep), t = case
    p = GemmProblem(k, n, ep, wfmt=wfmt)
    if tile.smem_bytes(stages) > ctx.arch.max_smem_per_cta_optin:
        pytest.skip(f"{tile.route} with {stages} stages exceeds this device's shared memory per CTA")
    ln = FAM_Q.launch_variant(p, t, ctx, tile, stages)
    _run(p, ln, seed=zlib.crc32(f"{wfmt}/{case}/{tile}/{stages}".encode()), what=f"forced {wfmt}")


@pytest.mark.parametrize("ep", ["store_f32", "swiglu_bf16"])
@pytest.mark.parametrize("wfmt", QFORMATS)
def test_quant_strided_x_and_odd_n(ctx, wfmt, ep):
    for k, n, ldx, t in ((256, 1037, 264, 33), (512, 77, 1024, 129), (5120, 333, 5128, 1000)):
        p = GemmProblem(k, n, ep, ldx, wfmt)
        ln = FAM.launch(p, t, ctx)
        _run(p, ln, seed=k + n + t, what=f"strided {wfmt}")


@pytest.mark.parametrize("wfmt", QFORMATS)
def test_quant_project_quantiser_layout(ctx, wfmt):
    """Codes and scales from ninferc.ir.quant.quantize (the artifact's layout: int8 rows; nibble pairs with
    element 2j low; signed w4 scales) through the kernel, vs the numpy reference on the QuantTensor."""
    import ml_dtypes

    from ninferc.ir.quant import quantize

    rng = np.random.default_rng(zlib.crc32(wfmt.encode()))
    for k, n, ep, t in ((256, 704, "swiglu_bf16", 200), (512, 333, "store_f32", 64), (1024, 96, "store_f32", 17)):
        p = GemmProblem(k, n, ep, wfmt=wfmt)
        w = (rng.standard_normal(p.w_rows * k).reshape(p.w_rows, k) / np.sqrt(k)).astype(ml_dtypes.bfloat16)
        qt = quantize(w, wfmt)
        x = (rng.standard_normal((t, k))).astype(ml_dtypes.bfloat16)
        ln = FAM.launch(p, t, ctx)
        y = (cp.full((t, n), BF16_NAN, dtype=cp.uint16) if ep == "swiglu_bf16"
             else cp.full((t, n), np.nan, dtype=cp.float32))
        launch(ln, kernel_args(p, ln, cp.asarray(x.view(np.uint16)), cp.asarray(qt.codes), y,
                               scales=cp.asarray(qt.scales)))
        ref = cp.asarray(reference(p, x, qt))
        out = bf16_bits_to_f32(y) if ep == "swiglu_bf16" else y
        check(out, ref, GEMM_BF16_OUT if ep == "swiglu_bf16" else GEMM,
              f"quantiser {wfmt} [{ln.kernel.uri} T={t} K={k} N={n}]", cols=True)


@pytest.mark.parametrize("arch,sms", [(a, get_sku(s).sms) for a, s in ARCH_SKUS.items()])
def test_quant_every_arch_plan_runs_here(arch, sms):
    """The launch each target's plan chooses for quantised W, compiled for this device, is right."""
    probs = [GemmProblem(k, n, ep, wfmt=wf) for wf in QFORMATS
             for k, n, ep in [(5120, 17408, "swiglu_bf16"), (256, 704, "swiglu_bf16")]]
    specs = [s for p in probs for s in FAM.variants(p, arch)]
    plan_ctx = PlanContext(arch, sms, {u: r for u, (_, r) in compile_variants(specs, arch).items()})
    for p in probs:
        for t in (17, 1024):
            ln = FAM.launch(p, t, plan_ctx)
            if ln.dynamic_smem_bytes > get_arch(device_arch()).max_smem_per_cta_optin:
                continue
            if FAM.tile_of(ln.kernel).kind == "wgmma" and not _wgmma_here():
                continue  # a wgmma route: runs only on its own arch
            _run(p, ln, seed=zlib.crc32(f"{arch}/{p}/{t}".encode()), what=f"plan for {arch}")
