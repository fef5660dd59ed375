"""Kernel timing reports on the GPU (not bounds: printed for setting route tables and tile efficiencies from
measurements). They reuse the GPU test modules' helpers and cases (``tests/kernels``).

Usage (on a GPU)::

    python bench/kernel_reports.py gemm          # TFLOP/s of every GEMM tile/stage route at the 27B shapes
    python bench/kernel_reports.py gemm-quant    # bf16 vs w8 vs w4 planned GEMM launches
    python bench/kernel_reports.py sample        # argmax / top-k-top-p sampler latency at V = 248,320
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kernels"))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
import test_gemm_gpu as tg  # noqa: E402
import test_sample_gpu as ts  # noqa: E402
from gpu_testlib_prefill import kernel, rand_bf16  # noqa: E402

from ninferc.runtime.kernels import device_arch, device_sm_count  # noqa: E402
from ninferc.targets.kernels.gemm import BENCH_TILES, STAGES, TILES, WFORMATS, GemmProblem  # noqa: E402
from ninferc.targets.kernels.sample import SampleProblem  # noqa: E402

def _time_ms(ln, args, reps=20):
    """Mean time of one launch of ``ln`` over ``reps`` (after 3 warm-ups), ms (CUDA events)."""
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


def gemm_throughput(ctx):
    """Prints achieved TFLOP/s at T = 8192 (and 1024) for the 27B shapes -- the planned
    launch (checked for correctness first) and every tile/stage variant including BENCH_TILES -- so
    the route table and tile efficiencies can be set from measurements (the project's goal is >= 40%
    of the device's dense bf16 tensor peak)."""
    lines = [f"gemm throughput on {device_arch()} ({device_sm_count()} SMs):"]
    for k, n, ep in [(5120, 16480, "store_f32"), (5120, 17408, "swiglu_bf16"), (17408, 5120, "store_f32"),
                     (5120, 14336, "store_f32"), (6144, 5120, "store_f32")]:
        p = GemmProblem(k, n, ep)
        w_bits, _ = tg._weights(p)
        for t in (8192, 1024):
            planned = tg.FAM.launch(p, t, ctx)
            if t == 8192 and k == 5120 and n == 17408:
                tg._run(p, planned, seed=k + n, what="throughput")
            x_bits, _ = rand_bf16((t, k), 1.0, 5)
            y = cp.empty((t, p.n), dtype=cp.uint16 if ep == "swiglu_bf16" else cp.float32)
            flops = 2.0 * t * k * p.w_rows
            routes = [(tl, st) for tl in TILES + BENCH_TILES for st in STAGES]
            if tg._wgmma_here():
                routes += [(tl, st) for tl in tg.WGMMA_TILES for st in tg.WGMMA_STAGES]
            for tile, st in routes:
                if tile.smem_bytes(st) > ctx.arch.max_smem_per_cta_optin:
                    continue
                ln = tg.FAM_ALL.launch_variant(p, t, ctx, tile, st)
                ms = _time_ms(ln, tg.kernel_args(p, ln, x_bits, w_bits, y))
                mark = "  <- planned" if ln.kernel.uri == planned.kernel.uri else ""
                lines.append(f"  T={t} K={k} N_w={p.w_rows} {ep}: {tile.route} s{st} grid {ln.ctas} "
                             f"({ln.waves} waves, {ln.ctas_per_sm} CTAs/SM) {ms:.3f} ms = "
                             f"{flops / ms / 1e9:.1f} TFLOP/s{mark}")
    print("\n".join(lines))


def gemm_quant_throughput(ctx):
    """Planned-launch time of the 27B projections at T = 1024 and 8192 with bf16, w8 and w4
    weights (same X), so the cost of the fused dequantisation is visible next to the bf16 kernel."""
    lines = [f"gemm bf16 vs w8 vs w4 (planned launches) on {device_arch()} ({device_sm_count()} SMs):"]
    for k, n, ep in [(5120, 17408, "swiglu_bf16"), (17408, 5120, "store_f32"), (5120, 16480, "store_f32")]:
        for t in (1024, 8192):
            x_bits, _ = rand_bf16((t, k), 1.0, 5)
            cells = []
            for wf in WFORMATS:
                p = GemmProblem(k, n, ep, wfmt=wf)
                if p.quantized:
                    w_arg, scales = tg._quant_codes(p)
                else:
                    w_arg, scales = rand_bf16((p.w_rows, k), 1.0 / np.sqrt(k), 1)[0], None
                y = cp.empty((t, p.n), dtype=cp.uint16 if ep == "swiglu_bf16" else cp.float32)
                ln = tg.FAM.launch(p, t, ctx)
                ms = _time_ms(ln, tg.kernel_args(p, ln, x_bits, w_arg, y, scales=scales))
                cells.append(f"{wf} {ln.route} s{ln.kernel.param('stages')} {ln.ctas_per_sm}/SM {ms:.3f} ms "
                             f"{2.0 * t * k * p.w_rows / ms / 1e9:.0f} TFLOP/s")
                del w_arg, scales, y
            lines.append(f"  T={t} K={k} N={n} {ep}: " + " | ".join(cells))
    print("\n".join(lines))


def sample_latency():
    """Prints the per-launch time of argmax and full top-k/top-p sampling at V = 248320."""
    v = 248320
    rng = np.random.default_rng(9)
    lines = []
    for mode in ("argmax", "sample"):
        for b in (1, 8):
            p = SampleProblem(v, mode)
            ln = ts.FAM.launch(p, b, ts._ctx())
            x = cp.asarray(ts._logits(rng, b, v, v))
            out = cp.empty(b, cp.int32)
            kw = {}
            if mode == "sample":
                kw = dict(temperature=cp.full(b, 0.8, cp.float32), top_k=cp.full(b, 50, cp.int32),
                          top_p=cp.full(b, 0.9, cp.float32), seed=cp.arange(b, dtype=cp.uint64),
                          step=cp.zeros(b, cp.int32))
            args = ts.kernel_args(p, ln, x, out, ws=cp.zeros(2 * b, cp.uint64), **kw)
            lines.append(f"  {mode} B={b} V={v}: {_time_ms(ln, args) * 1000:.1f} us ({ln.kernel.uri})")
    print("sampler latency:\n" + "\n".join(lines))


def main(argv=None) -> int:
    which = (argv if argv is not None else sys.argv[1:]) or ["gemm", "gemm-quant", "sample"]
    for w in which:
        if w == "gemm":
            gemm_throughput(tg.device_ctx(tg._all_specs()))
        elif w == "gemm-quant":
            gemm_quant_throughput(tg.device_ctx(tg._all_specs()))
        elif w == "sample":
            sample_latency()
        else:
            raise SystemExit(f"unknown report {w!r}: gemm, gemm-quant or sample")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
