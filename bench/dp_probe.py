"""Device probe of the dp (integer dot product) GEMV's epilogue and input-mode costs (27B decode shapes, T = 1):
the same K x N streamed as the decode step runs it (``in_norm="parts"`` / ``add_norm_parts``) and with the plain
``store`` epilogue and no norm input, for the persistent dp variants at a few CTA shapes -- so the time of the
norm input, the residual read-modify-write and the norm parts is what differs. Timed as bench/gemv_ksplit_sweep.py
times (a CUDA graph of back-to-back PDL launches over distinct weight copies).

Usage (GPU machine): python bench/dp_probe.py [--formats w4,w8] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemv_ksplit_sweep import Bufs, device_setup, load_specs, time_graph, write_rows  # noqa: E402

from ninferc.targets.kernels.gemv import GemvFamily, GemvTuning, GemvProblem  # noqa: E402

#: (name, K, N, [(epilogue, in_norm), ...]): the decode step's form first
CASES = [("gate_up", 5120, 17408, [("swiglu", "parts"), ("swiglu", "none")]),
         ("gdn_in", 5120, 16480, [("store", "parts"), ("store", "none")]),
         ("down", 17408, 5120, [("add_norm_parts", "none"), ("residual_add", "none"), ("store", "none")]),
         ("gdn_out", 6144, 5120, [("add_norm_parts", "none"), ("store", "none")])]
SHAPES = [(128, 1), (256, 1), (512, 1), (256, 2)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="w4,w8")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cp, arch, sms, bw, stream = device_setup()
    rows = []
    for fmt in a.formats.split(","):
        fams = {(rw, pers): GemvFamily(GemvTuning(plain_shapes=tuple(SHAPES), quant_rows_per_warp=rw, norm_rows_per_warp=rw,
                                           dp_persistent=pers)) for rw in (2, 4) for pers in (True, False)}
        for name, k, n, forms in CASES:
            for ep, inn in forms:
                p = GemvProblem(k, n, ep, fmt, in_norm=inn)
                loaded, ctx = load_specs([s for f in fams.values() for s in f.variants(p)
                                          if s.param("max_tokens") == 1], arch, sms, bw)
                bufs = Bufs(cp, p, 1 << 30)
                for (rw, pers), fam in fams.items():
                    for th, kw in SHAPES:
                        ln = fam.launch_variant(p, 1, ctx, th, "plain", max_tokens=1, k_warps=kw)
                        kk = loaded[ln.kernel.uri]
                        calls = [lambda i=i: kk.launch(ln.grid, ln.block, bufs.args(p, ln, i), smem=ln.dynamic_smem_bytes,
                                                       stream=stream, pdl=True) for i in range(max(bufs.copies, 24))]
                        t = time_graph(cp, stream, calls)
                        rows.append({"fmt": fmt, "shape": name, "epilogue": ep, "in_norm": inn, "rw": rw,
                                     "persistent": pers, "threads": th, "k_warps": kw, "ctas": ln.ctas,
                                     "ctas_per_sm": ln.ctas_per_sm, "regs": ctx.resources[ln.kernel.uri].registers,
                                     "us": t * 1e6, "gbps": p.weight_bytes / t / 1e9})
                best = min((r for r in rows if r["fmt"] == fmt and r["shape"] == name and r["epilogue"] == ep
                            and r["in_norm"] == inn), key=lambda r: r["us"])
                print(f"{fmt} {name:8} {ep:15} {inn:5} best rw{best['rw']} th{best['threads']} kw{best['k_warps']} "
                      f"{'pers' if best['persistent'] else 'grid'} {best['us']:6.1f} us {best['gbps']:5.0f} GB/s",
                      flush=True)
                bufs = None  # frees the buffers (not `del`: the timing lambdas above close over the name)
                cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/dp_probe.py", argv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
