"""Device probe (diagnostic, issue 38): why does a 4-token decode GEMV cost more than the one-token one? Times the 27B
gate|up and down_proj GEMVs, bf16 and w4, as the planner launches them at T = 1 and T = 4, and the T = 4 kernels with
parts of their work cut from the rendered source -- ``nomath``: the dot products (FMAs or mma, with the conversions
or dequantisation they need) replaced by one xor-and-add per step that keeps every load live; ``nox`` (w4 mma): no x
read from the ring -- and, for bf16, the fp32-FMA kernel (``bf16_mma_tiles=()``; the planned one is on tensor cores
since 487d762) beside the planned one, and for w4 the integer-dot-product kernels (``w4_dp_tiles=(1, 4)``, their x
over the default cap: ``dp_x_bytes``) beside the planned tensor-core one. A cut variant's time near the T = 1 time
says the cut work bounds the kernel; near the full time, the stream does. Each launch in a CUDA graph of back-to-back
PDL launches over distinct weight copies (bench/gemv_ksplit_sweep.py's method). The cut kernels' outputs are
meaningless; only times. (Runs 229-232, bench/NOTES.md, cut the bf16 mma kernel of 04ccdfc, which staged x in shared
memory, also without the staging and reading x from global memory; the kernel does the latter since.)

``--sweep`` times every plain CTA shape of the tensor-core kernels at the T-token tile: w4 as built and with 2 scale
groups per ring stage (``chunk2``), bf16 as built (``--bf16-shapes`` replaces ``GemvTuning.bf16_mma_shapes`` there).

At T = 5..8 (the 8-token tile; since 2026-12-06) the bf16 tensor-core kernel also runs with fewer distinct x rows --
``x4``: lane row fr reads token fr % 4's x, ``x1``: every lane token 0's (the same mma and weight stream, the x
traffic of 4 and 1 tokens). A kernel with the in_norm parts also runs without its per-token norm factors (``nonorm``:
1.0, no read of the parts before the writer warp streams) and with them computed after the stream (``norm_late``).
``--part-grids`` times the planned T-token kernel on a grid of 1 and 2 CTAs per SM (the first row blocks only; its
``us_scaled`` is the time per CTA times the planned grid): near the full time per CTA, the SMs that hold one CTA more
than others (320 row tiles on 132 SMs) set the kernel's time. (bench/NOTES.md runs 259-260: alone, the 8-token
GEMVs cost 1.11-1.21x their one-token time; neither x traffic nor the uneven CTAs per SM set it.)

Usage (GPU machine): python bench/gemv_tokens_probe.py [--formats bf16,w4] [--shapes gate_up,down,gdn_out] [--tokens T]
    [--part-grids] [--sweep [--bf16-shapes 64x2,128x4,...]] [--json FILE]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemv_ksplit_sweep import MAX_TOKENS, Bufs, device_setup, load_specs, time_graph, write_rows  # noqa: E402
from w4_stream_probe import variants as w4_variants  # noqa: E402

from ninferc.runtime.kernels import DeviceKernel  # noqa: E402
from ninferc.targets.cubin import read_resources  # noqa: E402
from ninferc.targets.plan import PlanContext  # noqa: E402
from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem, GemvTuning, mma  # noqa: E402

SHAPES = {"gate_up": lambda f: GemvProblem(5120, 17408, "swiglu", f, in_norm="parts"),
          "down": lambda f: GemvProblem(17408, 5120, "add_norm_parts", f),
          "gdn_out": lambda f: GemvProblem(6144, 5120, "add_norm_parts", f)}

# bf16 mma: the four k-tiles of a block
BF16_MMA_MATH = re.compile(r"(            mma_bf16_ktile\(c, .*\n){4}")
BF16_MMA_NOMATH = ("            c[0] += __uint_as_float((wa[u][0].x ^ wa[u][0].y ^ wa[u][0].z ^ wa[u][0].w ^ wa[u][1].x ^ "
                   "wa[u][1].y ^ wa[u][1].z ^ wa[u][1].w ^ x0.x ^ x0.w ^ x1.y) & 0x3f7fffffu);\n"
                   "            c[2] += __uint_as_float((wb[u][0].x ^ wb[u][0].y ^ wb[u][0].z ^ wb[u][0].w ^ wb[u][1].x ^ "
                   "wb[u][1].y ^ wb[u][1].z ^ wb[u][1].w ^ x0.y ^ x0.z ^ x1.x ^ x1.z ^ x1.w) & 0x3f7fffffu);\n")
# bf16 mma: the lane's B column (its token's x)
BF16_MMA_XTOK = "const int xtok = fr < nt ? fr : 0;"
# the in_norm parts' per-token factor (every mma kernel with in_norm parts)
NORM_IN_FACTOR = "inv_rms[t] = norm_factor(ps, ss_in + (size_t)(t0 + t) * ss_parts, ss_parts, lane, k, in_eps);"
NORM_IN_BLOCK = ("  float inv_rms[kMaxTokens];\n  if constexpr (kParts) {\n#pragma unroll\n"
                 "    for (int t = 0; t < kMaxTokens; ++t) {\n      inv_rms[t] = 0.0f;\n      if (kw == 0 && t < nt) {\n"
                 "        float ps[8];\n        " + NORM_IN_FACTOR + "\n      }\n    }\n  }\n")
TAIL_START = "  const int ta = 2 * fq, tb = 2 * fq + 1;"
# w4 mma with 2 scale groups per ring stage (the stage's 16-byte pieces swizzled within the row's 4 pieces)
W4_CHUNK2 = [("constexpr int kChunk = 4;", "constexpr int kChunk = 2;"),
             ("((cp ^ (r % 8)) * 16)", "((cp ^ (r % kPieces)) * 16)"),
             ("(((2 * u + fq / 2) ^ fr) * 16)", "(((2 * u + fq / 2) ^ (fr % kPieces)) * 16)")]
# bf16 fp32 FMAs with the weights converted once per vector (unpack_w): the first dot8 in the source is that loop's
BF16_FMA_MATH = "acc[j][t] = dot8(wf[j], xf, acc[j][t]);"
BF16_FMA_NOMATH = "acc[j][t] += xf[0] + __uint_as_float((wv[j].x ^ wv[j].y ^ wv[j].z ^ wv[j].w) & 0x3f7fffffu);"


def _once(src: str, old: str, new: str, first: bool = False) -> str:
    """``src`` with ``old`` replaced by ``new``. Raises AssertionError if ``old`` is not there exactly once (or at all,
    with ``first``): the template changed and the probe is stale."""
    n = src.count(old)
    assert n == 1 or (first and n >= 1), f"{old!r} found {n} times"
    return src.replace(old, new, 1)


def cuts(src: str, engine: str) -> dict[str, str]:
    """The cut variants of a rendered T = 4 kernel ``src`` of ``engine`` ("w4_mma", "bf16_mma", "bf16_fma")."""
    if engine == "w4_mma":  # bench/w4_stream_probe.py's cuts (that probe asked the same at one token)
        v = w4_variants(src)
        return {"nomath": v["nomath"], "nomath_nox": v["nox"]}
    if engine == "bf16_mma":
        nomath, n = BF16_MMA_MATH.subn(BF16_MMA_NOMATH, src)
        assert n == 1, "bf16 mma block not found"
        out = {"nomath": nomath}
        if "constexpr bool kParts = true;" in src:  # in_norm parts: no per-token norm factor before the stream
            out["nonorm"] = _once(src, NORM_IN_FACTOR, "inv_rms[t] = 1.0f;")
            # ... or the same factors computed after the stream, just before the tail uses them
            late = _once(src, NORM_IN_BLOCK, "  float inv_rms[kMaxTokens];\n")
            out["norm_late"] = _once(late, TAIL_START, NORM_IN_BLOCK.replace("  float inv_rms[kMaxTokens];\n", "")
                                     + TAIL_START)
        if "constexpr int kMaxTokens = 8;" in src:  # the 8-token tile: the x traffic of 4 and 1 tokens
            out["x4"] = _once(src, BF16_MMA_XTOK, "const int xtok = fr % 4 < nt ? fr % 4 : 0;")
            out["x1"] = _once(src, BF16_MMA_XTOK, "const int xtok = 0;")
        return out
    if "constexpr bool kUnpackW = true" not in src:  # the 8-token FMA kernel converts per token: no cut of it
        return {}
    return {"nomath": _once(src, BF16_FMA_MATH, BF16_FMA_NOMATH, first=True)}


def sweep_sources(src: str, engine: str) -> dict[str, str]:
    """``--sweep``: the sources timed at every plain CTA shape of the T-token tile, by variant name."""
    if engine == "w4_mma":
        return {"as built": src}
    if engine == "w4_mma_chunk2":
        for a, b in W4_CHUNK2:
            src = _once(src, a, b)
        return {"chunk2": src}
    return {"as built": src}


def sweep(cp, arch, sms, bw, stream, fmt: str, shape: str, T: int, rows: list, bf16_shapes=None) -> None:
    """Every plain CTA shape of the tensor-core kernels at tile T, as built (w4), with 2 scale groups per ring stage
    (w4; ``mma.MMA_CHUNK`` set to 2 while the variants are made, so the rings get their stages from the smaller
    stage); bf16 at ``bf16_shapes`` ((threads, k_warps) pairs) when given, else at the tuning's."""
    p = SHAPES[shape](fmt)
    bufs = Bufs(cp, p, 1 << 30)
    engines = ("w4_mma", "w4_mma_chunk2") if fmt == "w4" else ("bf16_mma",)
    for engine in engines:
        fam = GemvFamily(GemvTuning(bf16_mma_tiles=(T,), **({"bf16_mma_shapes": bf16_shapes} if bf16_shapes else {}))
                         if fmt == "bf16" else GemvTuning())
        chunk = mma.MMA_CHUNK
        mma.MMA_CHUNK = 2 if engine == "w4_mma_chunk2" else chunk
        try:
            specs = [fam.spec(p, th, "plain", T, kw) for th, kw in fam.shapes_for(p, T)]
            for spec in specs:
                for tag, src in sweep_sources(spec.render(), engine).items():
                    k = DeviceKernel(src, spec.entry, spec.uri + "-" + tag.replace(" ", ""))
                    res = read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[spec.entry]
                    ctx = PlanContext(arch, sms, {spec.uri: res}, bandwidth_gbs=bw)
                    ln = fam.launch_variant(p, T, ctx, spec.threads, "plain", max_tokens=T,
                                            k_warps=dict(spec.params).get("k_warps", 1))
                    calls = [lambda i=i, k=k, ln=ln: k.launch(ln.grid, ln.block, bufs.args(p, ln, i),
                                                              smem=ln.dynamic_smem_bytes, stream=stream, pdl=True)
                             for i in range(max(bufs.copies, 24))]
                    t = time_graph(cp, stream, calls)
                    r = {"format": fmt, "shape": shape, "kernels": engine, "tokens": T, "variant": tag,
                         "uri": spec.uri, "threads": spec.threads, "k_warps": dict(spec.params).get("k_warps", 1),
                         "ctas": ln.ctas, "regs": res.registers, "us": t * 1e6, "gbps": p.weight_bytes / t / 1e9}
                    rows.append(r)
                    print(f"sweep {fmt:4} {shape:7} {engine:13} {tag:15} th{spec.threads} kw{r['k_warps']} ctas "
                          f"{ln.ctas:5} regs {res.registers:3} {r['us']:7.1f} us {r['gbps']:6.0f} GB/s", flush=True)
        finally:
            mma.MMA_CHUNK = chunk
    cp.get_default_memory_pool().free_all_blocks()


def part_grids(cp, stream, bufs, p, ln, k, sms: int, t1: float, rows: list, key: dict) -> None:
    """``--part-grids``: launch ``ln``'s kernel ``k`` on grids of 1 and 2 CTAs per SM (only those smaller than its
    planned grid; the first row blocks, so only their outputs are written) and record each time with ``us_scaled``,
    the time per CTA times the planned grid."""
    for per_sm in (1, 2):
        grid = per_sm * sms
        if grid >= ln.ctas:
            continue
        calls = [lambda i=i: k.launch((grid, 1, 1), ln.block, bufs.args(p, ln, i), smem=ln.dynamic_smem_bytes,
                                      stream=stream, pdl=True) for i in range(max(bufs.copies, 24))]
        t = time_graph(cp, stream, calls)
        r = {**key, "variant": f"grid{grid}", "uri": ln.kernel.uri, "threads": ln.threads, "ctas": grid,
             "planned_ctas": ln.ctas, "us": t * 1e6, "us_scaled": t * 1e6 * ln.ctas / grid, "vs_t1": t / t1}
        rows.append(r)
        print(f"{key['format']:4} {key['shape']:7} {key['kernels']:8} T={key['tokens']} grid {grid:5} of {ln.ctas:5} "
              f"{r['us']:7.1f} us (x {ln.ctas / grid:.2f} = {r['us_scaled']:7.1f}) {r['vs_t1']:.3f}x", flush=True)


def main(argv=None) -> int:
    """Time every launch and cut of each format and shape; print one line each, write ``--json`` rows (us, GB/s of
    weight bytes, ratio to the planned T = 1 launch)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="bf16,w4")
    ap.add_argument("--shapes", default="gate_up,down")
    ap.add_argument("--tokens", type=int, default=4, help="T of the multi-token launches (2..8)")
    ap.add_argument("--part-grids", action="store_true", help="also time the planned T-token kernel on 1 and 2 CTAs "
                    "per SM (the first row blocks)")
    ap.add_argument("--bf16-shapes", default=None, help="--sweep's bf16 CTA shapes, THREADSxK_WARPS,... "
                    "(default: GemvTuning.bf16_mma_shapes)")
    ap.add_argument("--sweep", action="store_true", help="also time every CTA shape of the tensor-core kernels "
                    "(w4 as built and with 2 scale groups per stage, bf16 as built)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    T = a.tokens
    if not 2 <= T <= MAX_TOKENS:
        ap.error(f"--tokens {T}: the probe's activations hold 2..{MAX_TOKENS} tokens")
    bf16_shapes = tuple(tuple(int(v) for v in s.split("x")) for s in a.bf16_shapes.split(",")) if a.bf16_shapes else None
    cp, arch, sms, bw, stream = device_setup()
    rows = []
    for fmt in a.formats.split(","):
        for shape in a.shapes.split(","):
            p = SHAPES[shape](fmt)
            fams = {"planned": GemvFamily()}
            if fmt == "bf16":  # the fp32-FMA kernels beside the planned tensor-core ones (the default since 487d762)
                fams["bf16_fma"] = GemvFamily(GemvTuning(bf16_mma_tiles=()))
            if fmt == "w4":  # the integer-dot-product kernels at T tokens (staged x over 48 KiB: opt-in)
                fams["w4_dp"] = GemvFamily(GemvTuning(w4_dp_tiles=(1, T), w4_mma_tiles=()))
            bufs = Bufs(cp, p, 1 << 30)
            t1 = None
            for fname, fam in fams.items():
                kernels, ctx = load_specs(fam.variants(p), arch, sms, bw, jobs=16)
                for tokens in ((1, T) if fname == "planned" else (T,)):
                    ln = fam.launch(p, tokens, ctx)
                    engine = fname if fname != "planned" else (
                        "w4_mma" if fmt == "w4" else "bf16_mma" if fam.mma_for(p, fam.tile_for(tokens)) else "bf16_fma")
                    srcs = {"full": None}
                    if tokens > 1 and fname != "w4_dp":
                        srcs.update(cuts(ln.kernel.render(), engine))
                    for tag, src in srcs.items():
                        if src is None:
                            k, regs = kernels[ln.kernel.uri], ctx.resources[ln.kernel.uri].registers
                        else:
                            k = DeviceKernel(src, ln.kernel.entry, ln.kernel.uri + "-" + tag)
                            regs = read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[ln.kernel.entry].registers
                        calls = [lambda i=i, k=k: k.launch(ln.grid, ln.block, bufs.args(p, ln, i),
                                                           smem=ln.dynamic_smem_bytes, stream=stream, pdl=True)
                                 for i in range(max(bufs.copies, 24))]
                        t = time_graph(cp, stream, calls)
                        if tokens == 1:
                            t1 = t
                        r = {"format": fmt, "shape": shape, "kernels": fname, "tokens": tokens, "variant": tag,
                             "uri": ln.kernel.uri, "threads": ln.threads, "ctas": ln.ctas, "ctas_per_sm": ln.ctas_per_sm,
                             "regs": regs, "us": t * 1e6, "gbps": p.weight_bytes / t / 1e9, "vs_t1": t / t1}
                        rows.append(r)
                        print(f"{fmt:4} {shape:7} {fname:8} T={tokens} {tag:14} th{ln.threads} ctas {ln.ctas:5} "
                              f"occ {ln.ctas_per_sm} regs {regs:3} {r['us']:7.1f} us {r['gbps']:6.0f} GB/s "
                              f"{r['vs_t1']:.3f}x", flush=True)
                    if a.part_grids and tokens > 1 and fname == "planned":
                        part_grids(cp, stream, bufs, p, ln, kernels[ln.kernel.uri], sms, t1, rows,
                                   {"format": fmt, "shape": shape, "kernels": fname, "tokens": tokens})
                kernels = None
            bufs = None  # frees the buffers (not `del`: the timing lambdas above close over the name)
            cp.get_default_memory_pool().free_all_blocks()
    if a.sweep:
        for fmt in a.formats.split(","):
            for shape in a.shapes.split(","):
                sweep(cp, arch, sms, bw, stream, fmt, shape, T, rows, bf16_shapes)
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/gemv_tokens_probe.py", argv if argv is not None else sys.argv[1:], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
