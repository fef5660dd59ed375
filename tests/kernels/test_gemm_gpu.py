"""GPU tier of the prefill GEMM (marked ``gpu``; skipped without CuPy or a device).

Each case: fresh random bf16 X and W generated on the device (never zeros; W scaled by 1/sqrt(K) so
outputs are O(1)), output poisoned (NaN fp32 / 0xFFFF bf16), the family's planned launch (or a forced
variant) compiled for the device's arch and loaded as that exact cubin, compared with the fp64 reference
on the same bf16 values (``GEMM`` for fp32 outputs, ``GEMM_BF16_OUT`` for the bf16 SwiGLU output) over
the whole output, every row, and every column when T >= 64. Failures print the max-error location.
Shapes: the 27B projections and the tiny fixture's, T in {1, 7, 64, 100, 1024}.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from gpu_testlib_prefill import (BF16_NAN, bf16_bits_to_f32, check, device_ctx, kernel, launch,  # noqa: E402
                                 rand_bf16)
from ninferc.ir.tolerances import GEMM, GEMM_BF16_OUT  # noqa: E402
from ninferc.targets.arch import get_arch  # noqa: E402
from ninferc.runtime.kernels import device_arch, device_sm_count  # noqa: E402
from ninferc.targets.kernels.gemm import (BENCH_TILES, STAGES, TILES, GemmFamily, GemmProblem,  # noqa: E402
                                          kernel_args, reference)
from ninferc.targets.occupancy import occupancy  # noqa: E402
from ninferc.targets.plan import PlanContext, compile_variants  # noqa: E402

FAM = GemmFamily()
FAM_ALL = GemmFamily(TILES + BENCH_TILES)  # default routes + benchmark candidates (forced launches only)
SHAPES_27B = [(5120, 16480, "store_f32"), (5120, 14336, "store_f32"), (5120, 17408, "swiglu_bf16"),
              (17408, 5120, "store_f32"), (6144, 5120, "store_f32")]
SHAPES_TINY = [(256, 1036, "store_f32"), (256, 768, "store_f32"), (256, 704, "swiglu_bf16"),
               (704, 256, "store_f32"), (512, 256, "store_f32")]
TOKENS = (1, 7, 64, 100, 1024)
_W_CACHE: dict = {}


def _all_specs():
    return [s for ep in ("store_f32", "swiglu_bf16") for s in FAM_ALL.variants(GemmProblem(256, 704, ep))]


@pytest.fixture(scope="module")
def ctx():
    return device_ctx(_all_specs())


def _weights(p: GemmProblem):
    key = (p.k, p.w_rows)
    if key not in _W_CACHE:
        _W_CACHE.clear()  # keep one big weight at a time
        _W_CACHE[key] = rand_bf16((p.w_rows, p.k), 1.0 / np.sqrt(p.k), seed=zlib.crc32(repr(key).encode()))
    return _W_CACHE[key]


def _run(p: GemmProblem, ln, seed: int, what: str):
    t = ln.tokens
    w_bits, w64 = _weights(p)
    x_bits, x64 = rand_bf16((t, p.x_stride), 1.0, seed)
    if p.epilogue == "swiglu_bf16":
        y = cp.full((t, p.n), BF16_NAN, dtype=cp.uint16)
    else:
        y = cp.full((t, p.n), np.nan, dtype=cp.float32)
    launch(ln, kernel_args(p, ln, x_bits, w_bits, y))
    ref = reference(p, x64[:, : p.k], w64, xp=cp)
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


@pytest.mark.parametrize("arch,sms", [("sm_86", 82), ("sm_89", 92), ("sm_90", 132), ("sm_120a", 170)])
def test_every_arch_plan_runs_here(arch, sms):
    """Per-arch regression: the launch each target's plan chooses (template parameters, grid, dynamic
    shared memory, decided with that target's cubin resources and SM count), compiled for this device,
    computes the right answer."""
    res = {u: r for u, (_, r) in compile_variants(_all_specs(), arch).items()}
    plan_ctx = PlanContext(arch, sms, res)
    for k, n, ep in [(5120, 16480, "store_f32"), (5120, 17408, "swiglu_bf16"), (256, 704, "swiglu_bf16")]:
        p = GemmProblem(k, n, ep)
        for t in (7, 100, 1024):
            ln = FAM.launch(p, t, plan_ctx)
            if ln.dynamic_smem_bytes > get_arch(device_arch()).max_smem_per_cta_optin:
                continue  # a plan for a larger-shared-memory part than this device
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


def _time_ms(ln, args, reps=20):
    dk = kernel(ln.kernel)
    for _ in range(3):
        dk.launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        dk.launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes)
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / reps


def test_throughput_report(ctx):
    """Not a bound: prints achieved TFLOP/s at T = 8192 (and 1024) for the 27B shapes -- the planned
    launch (checked for correctness first) and every tile/stage variant including BENCH_TILES -- so
    the route table and tile efficiencies can be set from measurements (the project's goal is >= 40%
    of the device's dense bf16 tensor peak)."""
    lines = [f"gemm throughput on {device_arch()} ({device_sm_count()} SMs):"]
    for k, n, ep in [(5120, 16480, "store_f32"), (5120, 17408, "swiglu_bf16"), (17408, 5120, "store_f32"),
                     (5120, 14336, "store_f32"), (6144, 5120, "store_f32")]:
        p = GemmProblem(k, n, ep)
        w_bits, _ = _weights(p)
        for t in (8192, 1024):
            planned = FAM.launch(p, t, ctx)
            if t == 8192 and k == 5120 and n == 17408:
                _run(p, planned, seed=k + n, what="throughput")
            x_bits, _ = rand_bf16((t, k), 1.0, 5)
            y = cp.empty((t, p.n), dtype=cp.uint16 if ep == "swiglu_bf16" else cp.float32)
            flops = 2.0 * t * k * p.w_rows
            for tile in TILES + BENCH_TILES:
                for st in STAGES:
                    if tile.smem_bytes(st) > ctx.arch.max_smem_per_cta_optin:
                        continue
                    ln = FAM_ALL.launch_variant(p, t, ctx, tile, st)
                    ms = _time_ms(ln, kernel_args(p, ln, x_bits, w_bits, y))
                    mark = "  <- planned" if ln.kernel.uri == planned.kernel.uri else ""
                    lines.append(f"  T={t} K={k} N_w={p.w_rows} {ep}: {tile.route} s{st} grid {ln.ctas} "
                                 f"({ln.waves} waves, {ln.ctas_per_sm} CTAs/SM) {ms:.3f} ms = "
                                 f"{flops / ms / 1e9:.1f} TFLOP/s{mark}")
    print("\n".join(lines))
