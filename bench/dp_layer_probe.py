"""Device probe of the w4 decode GEMVs as a layer sequence (27B shapes, T = 1): GDN in -> GDN out -> gate|up ->
down, 16 layers over distinct weight copies, captured in one CUDA graph of PDL launches (each kernel followed by a
different one, as in the decode step) -- for the persistent dp variants (one wave at the resident-CTA cap), the
one-CTA-per-row-block dp grid and the fp32 FMA kernels (and with --prefetch the persistent dp variants with more
weight steps prefetched into L2 before the PDL wait). Reports microseconds per layer, and per launch for each
shape alone (16 copies in one graph; the q|k|v shape too). (Run 71's grids at 3/4 and 1/2 of the cap came from a
family option since removed: commit 7b16357; run 76's two weight steps in flight per warp from one reverted after
it: commit 52b8b81.)

Usage (GPU machine): python bench/dp_layer_probe.py [--json FILE] [--layers 16] [--wfmt w4|w8] [--prefetch 0,4]
                    [--configs 'dp persistent;fma']
"""

from __future__ import annotations

import argparse
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemv_ksplit_sweep import Bufs, time_graph, write_rows  # noqa: E402

from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_bandwidth_gbs, device_sm_count  # noqa: E402
from ninferc.targets.arch import get_arch  # noqa: E402
from ninferc.targets.cubin import read_resources  # noqa: E402
from ninferc.targets.kernels.gemv import GemvFamily, GemvTuning, GemvProblem  # noqa: E402
from ninferc.targets.plan import PlanContext  # noqa: E402

NAMES = ["GDN in", "GDN out", "gate|up", "down", "q|k|v"]


def layer(fmt: str):
    """The GDN layer's four GEMVs and the attention q|k|v GEMV (27B shapes) in weight format ``fmt``."""
    return [GemvProblem(5120, 16480, "store", fmt, in_norm="parts"), GemvProblem(6144, 5120, "add_norm_parts", fmt),
            GemvProblem(5120, 17408, "swiglu", fmt, in_norm="parts"), GemvProblem(17408, 5120, "add_norm_parts", fmt),
            GemvProblem(5120, 14336, "store", fmt, in_norm="parts")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--wfmt", default="w4", choices=["w4", "w8"])
    ap.add_argument("--prefetch", default="", type=lambda v: [int(x) for x in v.split(",") if x],
                    help="also the persistent dp variants with these prefetch_steps (comma-separated)")
    ap.add_argument("--configs", default="", type=lambda v: [c for c in v.split(";") if c],
                    help="only these configurations (names separated by ';'; default all)")
    a = ap.parse_args(argv)
    *LAYER, QKV = layer(a.wfmt)  # noqa: N806
    cp = cupy()
    arch, sms, bw = get_arch(device_arch()), device_sm_count(), device_bandwidth_gbs()
    stream = cp.cuda.Stream(non_blocking=True)
    dp = {"w4_dp_tiles": (1,)} if a.wfmt == "w4" else {"w8_dp_tiles": (1,)}
    configs = {"dp persistent": GemvFamily(GemvTuning(**dp)), "dp grid (not persistent)": GemvFamily(GemvTuning(dp_persistent=False, **dp))}
    for n in a.prefetch:
        configs[f"dp persistent, L2 prefetch of {n} steps"] = GemvFamily(GemvTuning(prefetch_steps=n, **dp))
    configs["fma"] = GemvFamily(GemvTuning(w4_dp_tiles=(), w8_dp_tiles=()))
    # the persistent dp variants' item-boundary carry and CTA sizes (runs 83-86; run 83 also measured a cp.async
    # staging of x and a 4-CTA register cap, both slower and removed)
    configs["dp persistent, carry"] = GemvFamily(GemvTuning(dp_carry=(True,), **dp))
    configs["dp persistent, no carry"] = GemvFamily(GemvTuning(dp_carry=(False,), **dp))
    for th in (320, 512, 640):
        configs[f"dp persistent, {th} threads"] = GemvFamily(GemvTuning(dp_shapes=((th, 1),), **dp))
        configs[f"dp persistent, {th} threads, carry"] = GemvFamily(GemvTuning(dp_shapes=((th, 1),), dp_carry=(True,), **dp))
    if a.configs:
        unknown = sorted(set(a.configs) - set(configs))
        if unknown:
            ap.error(f"--configs: unknown {unknown}; known: {sorted(configs)}")
        configs = {n: configs[n] for n in a.configs}
    bufs = [Bufs(cp, p, p.weight_bytes * a.layers) for p in LAYER]  # a.layers distinct copies of each
    qkv_bufs = Bufs(cp, QKV, QKV.weight_bytes * a.layers)
    weight_bytes = sum(p.weight_bytes for p in LAYER)
    rows = []
    for name, fam in configs.items():
        specs = {s.uri: s for p in (*LAYER, QKV) for s in fam.variants(p) if s.param("max_tokens") == 1}
        loaded = {u: DeviceKernel.from_spec(s) for u, s in specs.items()}
        res = {u: read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[k.entry] for u, k in loaded.items()}
        ctx = PlanContext(arch, sms, res, bandwidth_gbs=bw)
        lns = [fam.launch(p, 1, ctx) for p in LAYER]
        calls = []
        for i in range(a.layers):
            for p, ln, b in zip(LAYER, lns, bufs):
                k = loaded[ln.kernel.uri]
                calls.append(lambda k=k, ln=ln, b=b, p=p, i=i: k.launch(ln.grid, ln.block, b.args(p, ln, i),
                                                                        smem=ln.dynamic_smem_bytes, stream=stream,
                                                                        pdl=True))
        t = time_graph(cp, stream, calls) * len(LAYER)  # seconds per layer
        lns.append(fam.launch(QKV, 1, ctx))
        alone = []
        for p, ln, b in zip((*LAYER, QKV), lns, (*bufs, qkv_bufs)):
            k = loaded[ln.kernel.uri]
            one = [lambda k=k, ln=ln, b=b, p=p, i=i: k.launch(ln.grid, ln.block, b.args(p, ln, i),
                                                              smem=ln.dynamic_smem_bytes, stream=stream, pdl=True)
                   for i in range(a.layers)]
            alone.append(time_graph(cp, stream, one) * 1e6)
        r = {"config": name, "us_per_layer": t * 1e6, "gbps": weight_bytes / t / 1e9,
             "launches": [{"shape": nm, "uri": ln.kernel.uri, "ctas": ln.ctas, "ctas_per_sm": ln.ctas_per_sm,
                           "registers": res[ln.kernel.uri].registers, "us_alone": us}
                          for nm, ln, us in zip(NAMES, lns, alone)]}
        rows.append(r)
        print(f"{name:28} {r['us_per_layer']:7.1f} us per layer  {r['gbps']:6.0f} GB/s  grids "
              f"{[ln.ctas for ln in lns]}  CTAs/SM {[ln.ctas_per_sm for ln in lns]}", flush=True)
        print("    alone, us per launch: " + ", ".join(f"{nm} {us:.1f}" for nm, us in zip(NAMES, alone)), flush=True)
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/dp_layer_probe.py", argv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
