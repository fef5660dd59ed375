"""Device probe: the planned one-token decode GEMVs' steady-state streaming rate and their fixed cost per launch.

Each planned launch of the 27B decode step (w8 / w4 GEMVs) is timed as `gemv_ksplit_sweep.py` times it (a CUDA
graph of back-to-back PDL launches over distinct weight copies) at its real N and at N x 2, N x 4 (the same K, so
the same x staging per CTA; the persistent grid gives each CTA proportionally more items). A straight line through
(bytes, time) separates the two costs:

    marginal rate = (bytes(4N) - bytes(N)) / (t(4N) - t(N))     -- GB/s of the streaming body, no boundaries
    fixed cost    = t(N) - bytes(N) / marginal rate             -- us per launch: PDL wait, x staging, ramp, tail

The marginal rate bounds what any boundary-free design (one persistent decode kernel) could stream these bytes at;
the fixed cost is what a launch boundary costs today. (With PDL the next launch's weight prefetch overlaps the
previous one's tail, so `fixed` is the boundary's exposed part in a back-to-back sequence, as in the decode step.)

Usage (GPU machine): python bench/gemv_marginal_probe.py [--formats w8,w4] [--mult 1,2,4] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemv_ksplit_sweep import Bufs, device_setup, load_specs, time_graph, write_rows  # noqa: E402

from ninferc.bench import copy_bandwidth_gbps  # noqa: E402
from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem  # noqa: E402

#: (name, K, N, epilogue, in_norm, launches per 27B decode step) as the 27B decode step lowers them
#: (qwen3.8-27b: 65 layers, 49 GDN + 16 attention; GDN in = q|k|v|z|b|a = 2 x 2,048 + 2 x 6,144 + 2 x 48 rows,
#: attention q|k|v = 2 x 24 x 256 (q and its gate) + 2 x 4 x 256; the first GDN layer's in has no in_norm and the
#: last down no add_norm: folded into the neighbours here)
CASES = [("gate_up", 5120, 17408, "swiglu", "parts", 65),
         ("down", 17408, 5120, "add_norm_parts", "none", 65),
         ("gdn_in", 5120, 16480, "store", "parts", 49),
         ("gdn_out", 6144, 5120, "add_norm_parts", "none", 49),
         ("qkv", 5120, 14336, "store", "parts", 16),
         ("attn_o", 6144, 5120, "add_norm_parts", "none", 16)]


def same_kernel_launch(fam: GemvFamily, p: GemvProblem, spec, ctx):
    """The T = 1 plain launch of ``spec`` (the kernel planned at the real N) for problem ``p`` (a larger N): its
    persistent grid under the spec's own resident CTAs/SM, as :meth:`GemvFamily.launch` sizes it."""
    params = dict(spec.params)
    th, kw = params["threads"], params.get("k_warps", 1)
    dyn = fam.dynamic_smem_bytes(p, 1, spec)
    grid = fam._plain_grid(p, th, kw, 1, 1, max(1, ctx.occupancy(spec, dyn).ctas_per_sm) * ctx.sms)
    return ctx.make_launch(spec, grid, route="plain", tokens=1, dynamic_smem=dyn,
                           workspace_bytes=fam.parts_bytes(p, 1, fam.row_blocks(p, th, kw, 1)))


def time_launches(cp, stream, kk, ln, p, bufs) -> float:
    """Seconds per launch of ``ln`` (kernel ``kk``) in a graph of back-to-back PDL launches over ``bufs``' weight
    copies (at least 24 launches; best of 3 graphs, each the median of 5 replays)."""
    def call(i):
        return kk.launch(ln.grid, ln.block, bufs.args(p, ln, i), smem=ln.dynamic_smem_bytes, stream=stream, pdl=True)
    calls = [lambda i=i: call(i) for i in range(max(bufs.copies, 24))]
    return min(time_graph(cp, stream, calls) for _ in range(3))


def main(argv=None) -> int:
    """Print one line per (format, case, N multiple): grid, CTAs/SM, us per launch, GB/s; then per case the marginal
    rate and the fixed cost, and per format the step's GEMV time split into bytes at the marginal rates and fixed
    costs. Returns 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="w8,w4")
    ap.add_argument("--mult", default="1,2,4", help="N multiples (the first is the planned N)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    mults = [int(m) for m in a.mult.split(",")]
    cp, arch, sms, bw, stream = device_setup()
    copy = copy_bandwidth_gbps(cp)  # the bench's roofline bandwidth, measured in this process
    print(f"copy bandwidth {copy:.0f} GB/s (the plan's DRAM figure {bw or 0:.0f})", flush=True)
    fam = GemvFamily()
    rows, fits = [], []
    for fmt in a.formats.split(","):
        step_fixed = step_body = step_actual = 0.0
        for name, k, n0, ep, inn, per_step in CASES:
            got = []
            p0 = GemvProblem(k, n0, ep, fmt, in_norm=inn)
            loaded, ctx = load_specs([s for s in fam.variants(p0) if s.param("max_tokens") == 1], arch, sms, bw,
                                      jobs=4)
            spec = fam.launch(p0, 1, ctx).kernel  # the planned kernel at the real N, kept for every multiple
            kk = loaded[spec.uri]
            for m in mults:
                p = GemvProblem(k, n0 * m, ep, fmt, in_norm=inn)
                ln = same_kernel_launch(fam, p, spec, ctx)
                bufs = Bufs(cp, p, 1 << 30)
                t = time_launches(cp, stream, kk, ln, p, bufs)
                row = {"fmt": fmt, "shape": name, "k": k, "n": n0 * m, "mult": m, "uri": ln.kernel.uri,
                       "grid": ln.ctas, "ctas_per_sm": ln.ctas_per_sm, "regs": ctx.resources[ln.kernel.uri].registers,
                       "us": t * 1e6, "gbps": p.weight_bytes / t / 1e9, "bytes": p.weight_bytes}
                rows.append(row)
                got.append(row)
                print(f"{fmt} {name:8} N {n0 * m:6} grid {ln.ctas:4} ({ln.ctas_per_sm}/SM) {t * 1e6:8.2f} us "
                      f"{row['gbps']:6.0f} GB/s", flush=True)
                del bufs
                cp.get_default_memory_pool().free_all_blocks()
            r0, r1 = got[0], got[-1]
            rate = (r1["bytes"] - r0["bytes"]) / ((r1["us"] - r0["us"]) * 1e-6) / 1e9
            fixed = r0["us"] - r0["bytes"] / (rate * 1e9) * 1e6
            fits.append({"fmt": fmt, "shape": name, "marginal_gbps": rate, "fixed_us": fixed, "per_step": per_step,
                         "us_planned": r0["us"], "bytes_planned": r0["bytes"]})
            step_fixed += fixed * per_step
            step_body += (r0["us"] - fixed) * per_step
            step_actual += r0["us"] * per_step
            print(f"{fmt} {name:8} marginal {rate:6.0f} GB/s ({rate / copy * 100:5.1f} % of the copy bandwidth), "
                  f"fixed {fixed:5.2f} us per launch, x {per_step} per step", flush=True)
        print(f"{fmt} step's GEMVs (these shapes, alone back to back): {step_actual / 1e3:.3f} ms = body "
              f"{step_body / 1e3:.3f} ms at the marginal rates + fixed {step_fixed / 1e3:.3f} ms", flush=True)
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/gemv_marginal_probe.py", argv, rows, fits=fits, copy_bandwidth_gbps=copy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
