"""GEMV variant sweep on the device: for the 27B decode GEMV shapes (T = 1) and each weight format, time
the planned launch of gemv_coop families with different rows_per_warp / thread counts and report GB/s
(weight bytes incl. scales / median kernel time). Correctness is the GPU tier's job; this only times.

Usage (GPU machine): python bench/gemv_sweep.py [--json FILE]
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
from ninferc.targets.cubin import read_resources
from ninferc.targets.kernels.gemv_coop import GemvCoopFamily, GemvProblem, kernel_args
from ninferc.targets.plan import PlanContext

#: (name, K, N, epilogue) of the 27B decode GEMVs
SHAPES = [("gate_up", 5120, 17408, "swiglu"), ("down", 17408, 5120, "store"), ("gdn_in", 5120, 16480, "store"),
          ("gdn_out", 6144, 5120, "store")]
CONFIGS = [(rw, th) for rw in (2, 4, 8) for th in (256, 512)]


def weight_bytes(p: GemvProblem) -> int:
    n = p.w_rows * p.k
    return {"bf16": 2 * n, "w8": n + 4 * p.w_rows, "w4": n // 2 + 4 * p.w_rows * (p.k // 64)}[p.wfmt]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args(argv)
    cp = cupy()
    arch, sms = get_arch(device_arch()), device_sm_count()
    rows = []
    stream = cp.cuda.Stream(non_blocking=True)
    for fmt in ("w8", "w4", "bf16"):
        for name, K, N, ep in SHAPES:
            p = GemvProblem(K, N, ep, fmt)
            rng = cp.random.RandomState(1)
            if fmt == "bf16":
                w = rng.randint(0, 1 << 14, (p.w_rows, K), dtype=cp.int32).astype(cp.uint16)  # small positive bf16
                sc = None
            elif fmt == "w8":
                w = rng.randint(-127, 128, (p.w_rows, K), dtype=cp.int32).astype(cp.int8)
                sc = cp.full(p.w_rows, 1e-3, cp.float32)
            else:
                w = rng.randint(0, 256, (p.w_rows, K // 2), dtype=cp.int32).astype(cp.uint8)
                sc = cp.full((p.w_rows, K // 64), 1e-3, cp.float32)
            x = cp.full((1, K), 0x3F80, cp.uint16)
            y = cp.zeros((1, N), cp.uint16 if ep == "swiglu" else cp.float32)
            barrier = cp.zeros(64, cp.uint32)
            for rw, th in CONFIGS:
                fam = GemvCoopFamily(threads=(th,), rows_per_warp=rw, quant_rows_per_warp=rw)
                specs = fam.variants(p)
                kern, res = {}, {}
                try:
                    for s in specs:
                        k = DeviceKernel.from_spec(s)
                        kern[s.uri] = k
                        res[s.uri] = read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[s.entry]
                    ln = fam.launch(p, 1, PlanContext(arch, sms, res))
                except Exception as exc:  # noqa: BLE001 - a config that cannot run is reported, not fatal
                    rows.append({"fmt": fmt, "shape": name, "rw": rw, "threads": th, "error": str(exc)[:200]})
                    continue
                ws = cp.empty(max(ln.workspace_bytes, 16), cp.uint8)
                args = kernel_args(p, ln, w, x, y, ws, barrier, scales=sc)
                k = kern[ln.kernel.uri]
                times = []
                with stream:
                    for i in range(a.reps + 3):
                        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                        e0.record(stream)
                        k.launch(ln.grid, ln.block, args, cooperative=ln.cooperative, stream=stream)
                        e1.record(stream)
                        e1.synchronize()
                        if i >= 3:
                            times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
                t = float(np.median(times))
                r = {"fmt": fmt, "shape": name, "rw": rw, "threads": th, "uri": ln.kernel.uri, "route": ln.route,
                     "split_k": ln.split_k, "ctas": ln.ctas, "regs": res[ln.kernel.uri].registers,
                     "us": t * 1e6, "gbps": weight_bytes(p) / t / 1e9}
                rows.append(r)
                print(f"{fmt:4} {name:8} rw{rw} th{th:<3} {r['route']:11} k{r['split_k']:<2} regs {r['regs']:3} "
                      f"{r['us']:8.1f} us {r['gbps']:7.0f} GB/s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": "H200", "sms": sms, "commit": git_commit(), "command": "python bench/gemv_sweep.py",
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
