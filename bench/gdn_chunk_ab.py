"""Prefill GDN core on the device: time both chunked routes of the 27B shape -- ``chunked`` (``gdn_chunk``
alone) and ``wy`` (``gdn_chunk_wy`` then the ``gdn_chunk`` scan), each + ``gdn_gated_norm`` on its split route
-- for every column block ``dv_block`` that fits, at one sequence of T tokens, next to the plan's modelled cost
(``ninferc.targets.kernels.gdn.chunk_cost`` / ``scan_cost``), and check that every (route, block) gives the
same y as the first (the columns of the state are independent; only the norm's row sum is regrouped, and
route wy reassociates the reference's products as the reference itself does). Inputs: ``conv_out`` and ``proj`` ~ N(0, 1), weights as the GPU tests draw them, a fresh
sequence (state from zero).

Usage (GPU machine): python bench/gdn_chunk_ab.py [--tokens 8192] [--reps 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from ninferc.bench import git_commit
from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_sm_count
from ninferc.targets.arch import get_arch
from ninferc.targets.kernels import gdn
from ninferc.targets.plan import PlanContext, compile_variants


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cp = cupy()
    arch, sms = get_arch(device_arch()), device_sm_count()
    p, T = gdn.QWEN38_27B, a.tokens
    fams = {(r, d): gdn.GdnChunkFamily(route=r, dv_block=d) for r in ("chunked", "wy") for d in gdn.dv_blocks(p)}
    specs = ([s for f in fams.values() for s in f.variants(p)] + gdn.BY_NAME["gdn_gated_norm"].variants(p)
             + gdn.BY_NAME["gdn_chunk_wy"].variants(p))
    built = compile_variants(specs, arch)
    ctx = PlanContext(arch.name, sms, {u: r for u, (_, r) in built.items()})
    planned = {r: gdn.GdnChunkFamily(route=r).choose_dv_block(p, ctx, wy=r == "wy") for r in ("chunked", "wy")}
    rng = np.random.default_rng(0)
    w = {"A_log": np.log(rng.uniform(0.05, 2.0, p.hv)).astype(np.float32),
         "dt_bias": (rng.standard_normal(p.hv) * 0.5).astype(np.float32),
         "norm_w": (1.0 + rng.standard_normal(p.dv) * 0.1).astype(np.float32)}
    bufs = {k: cp.asarray(v) for k, v in w.items()}
    bufs.update(conv_out=cp.asarray(rng.standard_normal((T, p.conv_dim), dtype=np.float32)),
                proj=cp.asarray(rng.standard_normal((T, p.proj_dim), dtype=np.float32)),
                rec_state=cp.zeros((1, p.hv, p.dk, p.dv), cp.float32), o_ws=cp.empty((T, p.value_dim), cp.float32),
                wy_ws=cp.empty((T, p.hv, gdn.wy_record_floats(p)), cp.float32),
                tok_pos=cp.arange(T, dtype=cp.int32), seq_start=cp.asarray(np.array([0, T], np.int32)),
                seq_slot=cp.zeros(1, cp.int32), tok_seq=cp.zeros(T, cp.int32), num_seqs=1)
    kernels: dict[str, DeviceKernel] = {}
    rows, y_first = [], None
    for (route, d), fam in fams.items():
        try:
            core = fam.launch(p, T, ctx)
        except Exception as exc:  # does not fit this arch: reported, not timed
            rows.append({"route": route, "dv_block": d, "fits": False, "why": str(exc)})
            continue
        launches = [gdn.BY_NAME["gdn_chunk_wy"].launch(p, T, ctx)] if route == "wy" else []
        launches.append(core)
        if core.route in gdn.SPLIT_ROUTES:
            launches.append(gdn.BY_NAME["gdn_gated_norm"].launch(p, T, ctx))
        y = cp.full((T, p.value_dim), 0x7FC0, cp.uint16)
        calls = []
        for ln in launches:
            k = kernels.setdefault(ln.kernel.uri, DeviceKernel.from_spec(ln.kernel))
            b = dict(bufs, y=y)
            if ln.kernel.family == "gdn_chunk" and ln.route in gdn.SPLIT_ROUTES:
                b.pop("y")
            if ln.kernel.family == "gdn_chunk" and ln.route in ("chunked", "wy"):
                b.pop("o_ws")
            if ln.kernel.family == "gdn_chunk" and route == "chunked":
                b.pop("wy_ws")
            calls.append((k, ln, gdn.kernel_args(ln, p, b)))

        def run(only=None):
            for k, ln, args in calls:
                if only is None or ln.kernel.family == only:
                    k.launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes)

        def timed(only=None):
            out = []
            for _ in range(a.reps):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                run(only)
                e1.record()
                e1.synchronize()
                out.append(cp.cuda.get_elapsed_time(e0, e1))
            return out

        run()
        cp.cuda.Device().synchronize()
        times = timed()
        wy_ms = float(np.median(timed("gdn_chunk_wy"))) if route == "wy" else None
        yf = (cp.asnumpy(y).astype(np.uint32) << 16).view(np.float32)
        if y_first is None:
            y_first = yf
        diff = float(np.max(np.abs(yf - y_first)) / max(float(np.max(np.abs(y_first))), 1e-30))
        cost = (gdn.scan_cost if route == "wy" else gdn.chunk_cost)(p, d, sms)
        rows.append({"route": route, "dv_block": d, "fits": True, "core_route": core.route, "ctas": core.ctas,
                     "ctas_per_sm": core.ctas_per_sm, "median_ms": float(np.median(times)), "wy_kernel_ms": wy_ms,
                     "modelled_cost": cost, "finite": bool(np.isfinite(yf).all()),
                     "max_rel_diff_vs_first": diff, "planned": d == planned[route]})
        print(f"{route:8s} dv_block {d:4d}: {core.route:14s} {core.ctas:4d} CTAs  {np.median(times):9.3f} ms"
              f"{f' (wy {wy_ms:.3f})' if wy_ms is not None else ''}  model {cost:>11.0f}  finite {rows[-1]['finite']}  "
              f"max rel diff {diff:.2e}{'  <- plan' if d == planned[route] else ''}", flush=True)
    out = {"what": "GDN prefill core per route and dv_block, 27B shape, one fresh sequence", "gpu": cp.cuda.runtime
           .getDeviceProperties(0)["name"].decode(), "sms": sms, "arch": arch.name, "tokens": T,
           "commit": git_commit(), "command": "python " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "planned_dv_block": planned, "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
