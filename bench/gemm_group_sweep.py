"""Prefill GEMM rasterisation sweep on the device: the planned launch of each 27B projection at T tokens,
timed with the runtime argument ``group_m`` (M-tiles per rasterisation group, an L2-reuse heuristic) set to
each value given, plus the planned value (``ninferc.targets.kernels.gemm.group_m_for``). Nothing but
``group_m`` changes between rows, so differences are the L2 / DRAM locality of the CTA order.

Usage (GPU machine): python bench/gemm_group_sweep.py [--tokens 8192] [--groups 1,2,4,8,16,32,64] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ninferc.bench import git_commit
from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_sm_count
from ninferc.targets.kernels.gemm import FAMILY, GemmProblem, group_m_for, kernel_args
from ninferc.targets.plan import PlanContext, compile_variants

SHAPES = [(5120, 17408, "swiglu_bf16"), (5120, 16480, "store_f32"), (17408, 5120, "store_f32"),
          (5120, 14336, "store_f32"), (6144, 5120, "store_f32")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--groups", default="1,2,4,8,16,32,64")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cp = cupy()
    arch, sms, T = device_arch(), device_sm_count(), a.tokens
    groups = [int(g) for g in a.groups.split(",")]
    probs = [GemmProblem(k, n, ep) for k, n, ep in SHAPES]
    built = compile_variants([s for p in probs for s in FAMILY.variants(p, arch)], arch)
    ctx = PlanContext(arch, sms, {u: r for u, (_, r) in built.items()})
    rows = []
    for p in probs:
        ln = FAMILY.launch(p, T, ctx)
        dk = DeviceKernel(ln.kernel.render(), ln.kernel.entry, ln.kernel.uri)
        rs = cp.random.RandomState(1)
        x = (rs.standard_normal((T, p.k), dtype=cp.float32)).astype(cp.float32).view(cp.uint32) >> 16
        x = x.astype(cp.uint16)
        w = ((rs.standard_normal(p.w_shape, dtype=cp.float32) / np.float32(np.sqrt(p.k))).view(cp.uint32) >> 16)
        w = w.astype(cp.uint16)
        y = cp.empty((T, p.n), dtype=cp.uint16 if p.epilogue == "swiglu_bf16" else cp.float32)
        base = kernel_args(p, ln, x, w, y)
        flops = 2.0 * T * p.k * p.w_rows
        for g in sorted(set(groups + [group_m_for(ln)])):
            args = base[:-1] + (np.int32(g),)
            for _ in range(2):
                dk.launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes)
            ts = []
            for _ in range(a.reps):
                s, e = cp.cuda.Event(), cp.cuda.Event()
                s.record()
                dk.launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes)
                e.record()
                e.synchronize()
                ts.append(cp.cuda.get_elapsed_time(s, e))
            ms = float(np.median(ts))
            rows.append({"k": p.k, "n": p.n, "epilogue": p.epilogue, "route": ln.route, "ctas": ln.ctas,
                         "group_m": g, "planned": g == group_m_for(ln), "ms": ms, "tflops": flops / ms / 1e9})
            print(f"K={p.k} N={p.n} {p.epilogue} {ln.route} grid {ln.ctas}: group_m {g:3d} {ms:.3f} ms "
                  f"{flops / ms / 1e9:.0f} TFLOP/s{'  <- planned' if g == group_m_for(ln) else ''}")
        del x, w, y
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": sms,
                       "commit": git_commit(), "command": " ".join(sys.argv), "tokens": T, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
