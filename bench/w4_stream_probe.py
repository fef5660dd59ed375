"""Device probe (diagnostic, runs 35-43): what limits the w4 decode GEMV at T = 1? Times the tensor-core w4 kernel of
the 27B gate|up and down_proj shapes as rendered, and with parts of its work removed from the rendered source --
``nomath``: the dequantisation and the mma replaced by one FMA per group that keeps every load live; ``nox``: also
no x reads (runs 35-43 run 41: x loaded from L1 / L2 at each group; since 2df7107 x comes through the ring, and
``nox`` drops only its shared-memory reads) -- next to the fp32-FMA kernel, each in a CUDA graph of back-to-back PDL launches over distinct weight
copies (bench/gemv_ksplit_sweep.py's method). The outputs of the modified kernels are meaningless; only times.

Usage (GPU machine): python bench/w4_stream_probe.py [--json FILE]
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

SHAPES = {"gate_up": GemvProblem(5120, 17408, "swiglu", "w4", in_norm="parts"),
          "down": GemvProblem(17408, 5120, "add_norm_parts", "w4")}
MMA_MATH = re.compile(r"        float d\[4\] = \{0\.0f, 0\.0f, 0\.0f, 0\.0f\};\n.*?c\[3\] = fmaf\(d\[3\], sb, c\[3\]\);\n", re.S)
NOMATH = ("        c[0] = fmaf(__uint_as_float((wa.x ^ wb.y ^ xa.x ^ xb.w) & 0x3f7fffffu), sa, c[0]);\n"
          "        c[2] = fmaf(__uint_as_float((wa.y ^ wb.x ^ xa.z ^ xb.y) & 0x3f7fffffu), sb, c[2]);\n")
X_LOADS = [("uint4 xa = *reinterpret_cast<const uint4*>(st + xoff + u * 128);", "uint4 xa = make_uint4(gi, 1u, 2u, 3u);"),
           ("uint4 xb = *reinterpret_cast<const uint4*>(st + xoff + u * 128 + 16);", "uint4 xb = make_uint4(4u, gi, 6u, 7u);")]


def variants(src: str) -> dict[str, str]:
    """The rendered mma kernel ``src`` as run ("full"), without its math ("nomath") and also without its x reads
    ("nox"). Raises AssertionError if the template no longer has the blocks this cuts (the probe is then stale)."""
    out = {"full": src}
    nomath, n = MMA_MATH.subn(NOMATH, src)
    assert n == 1, "mma block not found"
    out["nomath"] = nomath
    nox = nomath
    for a, b in X_LOADS:
        assert nox.count(a) == 1, a
        nox = nox.replace(a, b)
    out["nox"] = nox
    return out


def main(argv=None) -> int:
    """Time every variant of both shapes; print one line each, write ``--json`` rows (us, GB/s of weight bytes)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cp = cupy()
    arch, sms = get_arch(device_arch()), device_sm_count()
    stream = cp.cuda.Stream(non_blocking=True)
    mma = GemvFamily(GemvTuning(w4_mma_tiles=(1, 4)))
    fma = GemvFamily(GemvTuning(w4_mma_tiles=()))
    rows = []
    for name, p in SHAPES.items():
        bufs = Bufs(cp, p, 1 << 30)
        cases = [("fma", fma, 128, 1 if name == "gate_up" else 4, {"full": None}),
                 ("mma", mma, 128, 4, None), ("mma", mma, 256, 8, None)]
        for kind, fam, th, kw, srcs in cases:
            spec = fam.spec(p, th, "plain", 1, kw)
            for tag, src in (variants(spec.render()) if srcs is None else {"full": spec.render()}).items():
                k = DeviceKernel(src, spec.entry, spec.uri + "-" + tag)
                res = {spec.uri: read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[spec.entry]}
                ln = fam.launch_variant(p, 1, PlanContext(arch, sms, res), th, "plain", max_tokens=1, k_warps=kw)
                calls = [lambda i=i: k.launch(ln.grid, ln.block, bufs.args(p, ln, i), smem=ln.dynamic_smem_bytes, stream=stream, pdl=True)
                         for i in range(max(bufs.copies, 24))]
                t = time_graph(cp, stream, calls)
                r = {"shape": name, "kind": kind, "variant": tag, "threads": th, "k_warps": kw, "ctas": ln.ctas,
                     "regs": res[spec.uri].registers, "us": t * 1e6, "gbps": p.weight_bytes / t / 1e9}
                rows.append(r)
                print(f"{name:8} {kind} th{th} kw{kw} {tag:7} regs {r['regs']:3} {r['us']:7.1f} us {r['gbps']:6.0f} GB/s",
                      flush=True)
        bufs = None  # frees the buffers (not `del`: the timing lambdas above close over the name)
        cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": sms,
                       "commit": git_commit(), "command": "python bench/w4_stream_probe.py " + " ".join(argv or sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
