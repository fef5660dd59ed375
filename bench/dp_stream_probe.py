"""Device probe (diagnostic, runs 75-82): where the fixed cost of a w4 dp decode GEMV goes. Times the planned
persistent dp kernel of four 27B shapes (T = 1) as rendered, and with parts of its work removed from the rendered
source -- ``nostage``: no x staging (the dot products read whatever shared memory holds); ``nomath``: each word's
four dp2a replaced by one XOR that keeps the weight and the first x piece live; ``stream``: both -- each in a
CUDA graph of 16 back-to-back PDL launches over distinct weight copies (bench/gemv_ksplit_sweep.py's method).
The outputs of the modified kernels are meaningless; only their times.

Usage (GPU machine): python bench/dp_stream_probe.py [--json FILE]
"""

from __future__ import annotations

import argparse
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemv_ksplit_sweep import Bufs, time_graph, write_rows  # noqa: E402

from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_bandwidth_gbs, device_sm_count  # noqa: E402
from ninferc.targets.arch import get_arch  # noqa: E402
from ninferc.targets.cubin import read_resources  # noqa: E402
from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem  # noqa: E402
from ninferc.targets.plan import PlanContext  # noqa: E402

SHAPES = {"GDN out": GemvProblem(6144, 5120, "add_norm_parts", "w4"),
          "down": GemvProblem(17408, 5120, "add_norm_parts", "w4"),
          "GDN in": GemvProblem(5120, 16480, "store", "w4", in_norm="parts"),
          "gate|up": GemvProblem(5120, 17408, "swiglu", "w4", in_norm="parts")}
STAGE = "  if (chunk != staged_chunk) {"
MATH = ("  const unsigned int lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;\n"
        "  s = ninfer::dp2a_lo(x.x, lo, s);\n  s = ninfer::dp2a_hi(x.y, lo, s);\n"
        "  s = ninfer::dp2a_lo(x.z, hi, s);\n  return ninfer::dp2a_hi(x.w, hi, s);\n")


def variants(src: str) -> dict[str, str]:
    """The rendered source and its modified copies (each edit must apply exactly once)."""
    assert src.count(STAGE) == 1 and src.count(MATH) == 1, "the rendered dp source changed: update the probe"
    nostage = src.replace(STAGE, "  if (false) {")
    nomath = src.replace(MATH, "  return s ^ (int)(w ^ x.x);\n")
    return {"as built": src, "nostage": nostage, "nomath": nomath, "stream": nostage.replace(MATH, "  return s ^ (int)(w ^ x.x);\n")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--layers", type=int, default=16)
    a = ap.parse_args(argv)
    cp = cupy()
    arch, sms, bw = get_arch(device_arch()), device_sm_count(), device_bandwidth_gbs()
    stream = cp.cuda.Stream(non_blocking=True)
    fam = GemvFamily()
    rows = []
    for name, p in SHAPES.items():
        b = Bufs(cp, p, p.weight_bytes * a.layers)
        spec = next(s for s in fam.variants(p) if s.param("max_tokens") == 1)
        base = DeviceKernel.from_spec(spec)
        res = read_resources(base.compiled.cubin, arch.name, base.compiled.ptx)[base.entry]
        ctx = PlanContext(arch, sms, {spec.uri: res}, bandwidth_gbs=bw)
        ln = fam.launch(p, 1, ctx)
        r = {"shape": name, "uri": ln.kernel.uri, "ctas": ln.ctas, "ctas_per_sm": ln.ctas_per_sm,
             "weight_bytes": p.weight_bytes}
        for vname, src in variants(ln.kernel.render()).items():
            k = base if vname == "as built" else DeviceKernel(src, base.entry, f"{spec.uri}:{vname}")
            calls = [lambda k=k, i=i: k.launch(ln.grid, ln.block, b.args(p, ln, i), smem=ln.dynamic_smem_bytes,
                                               stream=stream, pdl=True) for i in range(a.layers)]
            us = time_graph(cp, stream, calls) * 1e6
            r[vname] = us
        rows.append(r)
        print(f"{name:8} grid {ln.ctas:4} ({ln.ctas_per_sm}/SM)  " + "  ".join(
            f"{v} {r[v]:6.1f} us ({p.weight_bytes / r[v] / 1e3:5.0f} GB/s)" for v in ("as built", "nostage", "nomath", "stream")), flush=True)
        b = None  # frees the buffers (not `del`: the timing lambdas above close over the name)
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/dp_stream_probe.py", argv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
