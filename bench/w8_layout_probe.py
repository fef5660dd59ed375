"""Device probe (diagnostic, runs 45-55): is the tensor-core w8 GEMV at T = 1 limited by its access pattern? The
fp16-mma w8 kernel reads, per warp load, 16 bytes of 8 different rows (rows g and g + 8 of a 16-row tile, 64 bytes
of each per block); the FMA kernel reads 512 contiguous bytes of one row. This times the mma kernel of two 27B
shapes as rendered (``full``), with its dequantisation and mma cut (``nomath``: one FMA per block keeps every load
live), and both again reading a **tiled** layout instead -- each 16-row tile's 64-element blocks stored as 1 KiB
contiguous (16 rows x 64 bytes), so a warp step of 4 blocks is 4 KiB of consecutive addresses (``tiled``,
``tiled-nomath``), and full / tiled with ``__launch_bounds__`` asking for 1,024 threads per SM (64 registers, no
spills: ``full-lb``, ``tiled-lb``; the math variants otherwise take 80 registers, 6 CTAs of 128 threads per SM
against 8 without the math) -- next to the planner's FMA kernel, each in a CUDA graph of back-to-back PDL launches over
distinct weight copies (bench/gemv_ksplit_sweep.py's method). The tiled kernels read the same bytes in another
order: their outputs are meaningless; only times.

Usage (GPU machine): python bench/w8_layout_probe.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemv_ksplit_sweep import Bufs, time_graph  # noqa: E402

from ninferc.bench import git_commit  # noqa: E402
from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_sm_count  # noqa: E402
from ninferc.targets.arch import get_arch  # noqa: E402
from ninferc.targets.cubin import read_resources  # noqa: E402
from ninferc.targets.kernels.gemv import GemvFamily, GemvTuning, GemvProblem  # noqa: E402
from ninferc.targets.plan import PlanContext  # noqa: E402

#: store-epilogue shapes: a warp's 16 rows are 16 consecutive W rows, so the tiled address is one expression
SHAPES = {"gdn_in": GemvProblem(5120, 16480, "store", "w8", in_norm="parts"),
          "down_store": GemvProblem(17408, 5120, "store", "w8")}
MATH = re.compile(r"        mma_w8_ktile<0>\(c, .*?mma_w8_ktile<3>\(c, wa\[u\], wb\[u\], x1\.z, x1\.w, mask\);\n", re.S)
NOMATH = "        c[0] = fmaf(__uint_as_float((wa[u].x ^ wb[u].y ^ x0.x ^ x1.w) & 0x3f7fffffu), 1.5f, c[0]);\n"
ROW_LOADS = [("wa[u] = ninfer::ld_stream_v4(ra + (size_t)(b + u) * 64 + 16 * fq);",
              "wa[u] = ninfer::ld_stream_v4(w + ((size_t)(out0 / 16) * kvec + (b + u)) * 1024 + fr * 64 + 16 * fq);"),
             ("wb[u] = ninfer::ld_stream_v4(rb + (size_t)(b + u) * 64 + 16 * fq);",
              "wb[u] = ninfer::ld_stream_v4(w + ((size_t)(out0 / 16) * kvec + (b + u)) * 1024 + (fr + 8) * 64 + 16 * fq);")]


def variants(src: str) -> dict[str, str]:
    """full / nomath / tiled / tiled-nomath / full-lb / tiled-lb sources of the rendered w8 mma kernel ``src`` (AssertionError if the
    template no longer has the lines this rewrites: the probe is then stale)."""
    nomath, n = MATH.subn(NOMATH, src)
    assert n == 1, "mma block not found"
    tiled, tiled_nomath = src, nomath
    for a, b in ROW_LOADS:
        assert src.count(a) == 1, a
        tiled, tiled_nomath = tiled.replace(a, b), tiled_nomath.replace(a, b)
    lb = ("__launch_bounds__(kThreads, kOneCtaFloor)", "__launch_bounds__(kThreads, 1024 / kThreads)")
    assert src.count(lb[0]) == 1, lb[0]
    return {"full": src, "nomath": nomath, "tiled": tiled, "tiled-nomath": tiled_nomath,
            "full-lb": src.replace(*lb), "tiled-lb": tiled.replace(*lb)}


def main(argv=None) -> int:
    """Time every variant of both shapes; print one line each, write ``--json`` rows (us, GB/s of weight bytes)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cp = cupy()
    arch, sms = get_arch(device_arch()), device_sm_count()
    stream = cp.cuda.Stream(non_blocking=True)
    mma = GemvFamily(GemvTuning(w8_mma_tiles=(1,)))
    fma = GemvFamily(GemvTuning(w8_mma_tiles=()))
    rows = []
    for name, p in SHAPES.items():
        bufs = Bufs(cp, p, 1 << 30)
        cases = [("fma", fma, 128, 1 if name == "gdn_in" else 2, False), ("mma", mma, 128, 2, True),
                 ("mma", mma, 256, 4, True), ("mma", mma, 256, 8, True)]
        for kind, fam, th, kw, cut in cases:
            spec = fam.spec(p, th, "plain", 1, kw)
            for tag, src in (variants(spec.render()) if cut else {"full": spec.render()}).items():
                k = DeviceKernel(src, spec.entry, spec.uri + "-" + tag)
                res = {spec.uri: read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[spec.entry]}
                ln = fam.launch_variant(p, 1, PlanContext(arch, sms, res), th, "plain", max_tokens=1, k_warps=kw)
                calls = [lambda i=i: k.launch(ln.grid, ln.block, bufs.args(p, ln, i), smem=ln.dynamic_smem_bytes,
                                              stream=stream, pdl=True) for i in range(max(bufs.copies, 24))]
                t = time_graph(cp, stream, calls)
                r = {"shape": name, "kind": kind, "variant": tag, "threads": th, "k_warps": kw, "ctas": ln.ctas,
                     "ctas_per_sm": ln.ctas_per_sm, "regs": res[spec.uri].registers, "us": t * 1e6,
                     "gbps": p.weight_bytes / t / 1e9}
                rows.append(r)
                print(f"{name:10} {kind} th{th} kw{kw} {tag:12} regs {r['regs']:3} cta/sm {ln.ctas_per_sm:2} "
                      f"{r['us']:7.1f} us {r['gbps']:6.0f} GB/s", flush=True)
        bufs = None  # frees the buffers (not `del`: the timing lambdas above close over the name)
        cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": sms,
                       "commit": git_commit(), "command": "python bench/w8_layout_probe.py " + " ".join(argv or sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
