"""Device probe: are the planned persistent dp GEMVs bound by DRAM or by the SMs they occupy?

The 27B decode's 640-thread GEMVs (down, GDN out, attention o: 1 CTA/SM) have 128 row blocks of 40 outputs for
N = 5,120, so 4 of the H200's 132 SMs hold none; the gate|up (3 CTAs/SM) has 2,176 items on 363 CTAs. This times
each planned launch at its real N and at an N whose grid fills every SM (5,280 = 132 row blocks; the gate|up at
19,008 = 396 CTAs x 6 items) -- if the larger N takes proportionally longer (time ratio ~ byte ratio) the launch is
DRAM-bound and a grid over all SMs cannot help; if it takes about as long, the idle SMs are lost bandwidth.
Timed as bench/gemv_ksplit_sweep.py times (a CUDA graph of back-to-back PDL launches over distinct weight copies).

Usage (GPU machine): python bench/sm_fill_probe.py [--formats w8,w4] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemv_ksplit_sweep import Bufs, device_setup, load_specs, time_graph, write_rows  # noqa: E402

from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem  # noqa: E402

#: (name, K, (N as planned, N filling every SM), epilogue, in_norm) as the 27B decode step lowers them
CASES = [("down", 17408, (5120, 5280), "add_norm_parts", "none"),
         ("gdn_out", 6144, (5120, 5280), "add_norm_parts", "none"),
         ("gate_up", 5120, (17408, 19008), "swiglu", "parts")]


def main(argv=None) -> int:
    """Print one line per (format, case, N): grid, CTAs/SM, us per launch, GB/s; then each case's time ratio
    against its byte ratio. Returns 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="w8,w4")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cp, arch, sms, bw, stream = device_setup()
    fam = GemvFamily()
    rows = []
    for fmt in a.formats.split(","):
        for name, k, ns, ep, inn in CASES:
            got = []
            for n in ns:
                p = GemvProblem(k, n, ep, fmt, in_norm=inn)
                loaded, ctx = load_specs([s for s in fam.variants(p) if s.param("max_tokens") == 1], arch, sms, bw)
                ln = fam.launch(p, 1, ctx)
                kk = loaded[ln.kernel.uri]
                bufs = Bufs(cp, p, 1 << 30)
                calls = [lambda i=i: kk.launch(ln.grid, ln.block, bufs.args(p, ln, i), smem=ln.dynamic_smem_bytes,
                                               stream=stream, pdl=True) for i in range(max(bufs.copies, 24))]
                t = min(time_graph(cp, stream, calls) for _ in range(3))
                row = {"fmt": fmt, "shape": name, "k": k, "n": n, "uri": ln.kernel.uri, "grid": ln.ctas,
                       "ctas_per_sm": ln.ctas_per_sm, "regs": ctx.resources[ln.kernel.uri].registers, "us": t * 1e6,
                       "gbps": p.weight_bytes / t / 1e9, "bytes": p.weight_bytes}
                rows.append(row)
                got.append(row)
                print(f"{fmt} {name:8} N {n:6} grid {ln.ctas:4} ({ln.ctas_per_sm}/SM) {t * 1e6:7.2f} us "
                      f"{row['gbps']:6.0f} GB/s", flush=True)
                bufs = None  # frees the buffers (not `del`: the timing lambdas above close over the name)
                cp.get_default_memory_pool().free_all_blocks()
            r0, r1 = got
            print(f"{fmt} {name:8} time ratio {r1['us'] / r0['us']:.4f} vs byte ratio {r1['bytes'] / r0['bytes']:.4f}"
                  f" (SM-bound: ~1.0; DRAM-bound: ~the byte ratio)", flush=True)
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/sm_fill_probe.py", argv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
