"""Device sweep of the decode GEMV's CTA shape (27B shapes, T = 1): threads x k_warps (warps sharing one row
group, each streaming part of K) x rows_per_warp, for the GEMVs of a decode step as the planner lowers them
(``add_norm_parts`` for the projections that feed a norm, ``in_norm="parts"`` for those that read one), with the
cost model's estimate (``ninferc.targets.kernels.gemv.estimate_us``) of every variant next to its time and
the planner's own pick -- the data the model's constants are fitted on. Every launch is timed inside a CUDA
graph of back-to-back PDL launches over distinct weight copies (more bytes than L2 holds), as the decode step
runs them.

Correctness is the GPU tier's job (tests/targets/test_gemv_gpu.py); this only times.

Usage (GPU machine): python bench/gemv_ksplit_sweep.py [--json FILE] [--formats bf16,w8,w4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ninferc.bench import git_commit
from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_bandwidth_gbs, device_sm_count
from ninferc.targets.arch import get_arch
from ninferc.targets.cubin import read_resources
from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem, GemvTuning, estimate_us, kernel_args, ring_fits
from ninferc.targets.plan import PlanContext

#: (name, K, N, epilogue, in_norm) of the 27B decode GEMVs as lowered
SHAPES = [("gdn_in", 5120, 16480, "store", "parts"), ("gdn_out", 6144, 5120, "add_norm_parts", "none"),
          ("gate_up", 5120, 17408, "swiglu", "parts"), ("down", 17408, 5120, "add_norm_parts", "none"),
          ("qkv", 5120, 14336, "store", "parts"), ("lm_head", 5120, 248320, "store", "none")]
CONFIGS = [(th, kw) for th in (128, 256, 512) for kw in (1, 2, 4, 8) if (th // 32) % kw == 0]
#: the tensor-core w4 variants' shapes: those that exist at one token (mma.ring_fits; GemvFamily.shapes_for drops the
#: ones that do not exist at a larger tile)
MMA_CONFIGS = [(th, kw) for th, kw in CONFIGS if ring_fits(GemvTuning(), th, 1)]


#: token rows of :class:`Bufs`' activations (x, y, h, xs; ss 8,192 per token): launches of up to 8 tokens (the GEMV's
#: largest tile; 4 before 2026-12-06, so the x values of runs before then differ -- times do not depend on them)
MAX_TOKENS = 8


class Bufs:
    """Distinct weight copies of one problem (so a graph of launches streams from DRAM, not L2) + activations of
    ``MAX_TOKENS`` tokens."""

    def __init__(self, cp, p: GemvProblem, min_bytes: int):
        self.copies = max(3, -(-min_bytes // p.weight_bytes))
        rng = cp.random.RandomState(1)
        K, R = p.k, p.w_rows
        self.w, self.sc = [], []
        for _ in range(self.copies):
            if p.wfmt == "bf16":
                self.w.append(rng.randint(0x3000, 0x3C00, (R, K), dtype=cp.int32).astype(cp.uint16))
                self.sc.append(None)
            elif p.wfmt == "w8":
                self.w.append(rng.randint(-127, 128, (R, K), dtype=cp.int32).astype(cp.int8))
                self.sc.append(cp.full(R, 1e-3, cp.float32))
            else:
                self.w.append(rng.randint(0, 256, (R, K // 2), dtype=cp.int32).astype(cp.uint8))
                self.sc.append(cp.full((R, K // 64), 1e-3, cp.float32))
        self.x = rng.randint(0x3000, 0x3C00, (MAX_TOKENS, K), dtype=cp.int32).astype(cp.uint16)
        n = p.n
        self.y = cp.zeros((MAX_TOKENS, n), cp.uint16 if p.epilogue == "swiglu" else cp.float32)
        self.h = rng.standard_normal((MAX_TOKENS, n), dtype=cp.float32)
        self.xs = cp.zeros((MAX_TOKENS, n), cp.uint16)
        self.nw = cp.zeros(n, cp.float32)
        self.ss = cp.ones(MAX_TOKENS * 8192, cp.float32)
        self.ws = cp.empty(64 << 20, cp.uint8)
        self.barrier = cp.zeros(64, cp.uint32)

    def args(self, p: GemvProblem, ln, i: int):
        i %= self.copies
        y = self.h if p.epilogue in ("residual_add", "add_norm_parts") else self.y
        extra = {}
        if p.norm_out:
            extra = {"norm_w": self.nw, "xs": self.xs, "ss_out": self.ss}
        if p.norm_in:
            extra = {"ss_in": self.ss, "ss_parts": 640, "in_eps": 1e-6}
        return kernel_args(p, ln, self.w[i], self.x, y, self.ws, self.barrier, scales=self.sc[i], **extra)


def capture_graph(stream, calls):
    """A CUDA graph of ``calls`` (zero-argument launchers) captured on ``stream``, replayed once (warm-up)."""
    stream.synchronize()
    stream.begin_capture()
    for c in calls:
        c()
    g = stream.end_capture()
    g.launch(stream=stream)
    stream.synchronize()
    return g


def time_graph(cp, stream, calls, reps: int = 5) -> float:
    """Median seconds per call of a CUDA graph that runs ``calls`` (zero-argument launchers) back to back."""
    g = capture_graph(stream, calls)
    ts = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream)
        g.launch(stream=stream)
        e1.record(stream)
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3 / len(calls))
    return float(np.median(ts))


def device_setup():
    """The current device as every GEMV sweep starts from it: (cupy module, :class:`Arch`, SM count, DRAM GB/s or
    None -- ``device_bandwidth_gbs`` --, a non-blocking stream).

    Raises:
        TargetError: no CuPy, no usable device, or a compute capability ninferc has no target for."""
    cp = cupy()
    arch, sms, bw = get_arch(device_arch()), device_sm_count(), device_bandwidth_gbs()
    return cp, arch, sms, bw, cp.cuda.Stream(non_blocking=True)


def load_specs(specs, arch, sms: int, bw, jobs: int = 1):
    """Compile ``specs`` on the device (``DeviceKernel.from_spec``, ``jobs`` threads) and read their resources.

    Returns:
        ({uri: DeviceKernel}, a :class:`PlanContext` of ``sms`` SMs and ``bw`` GB/s over those resources).

    Raises:
        CompileError: NVRTC failed on the device."""
    todo = {s.uri: s for s in specs}
    if jobs > 1:
        with ThreadPoolExecutor(jobs) as pool:
            loaded = dict(zip(todo, pool.map(DeviceKernel.from_spec, todo.values())))
    else:
        loaded = {u: DeviceKernel.from_spec(s) for u, s in todo.items()}
    res = {u: read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[k.entry] for u, k in loaded.items()}
    return loaded, PlanContext(arch, sms, res, bandwidth_gbs=bw)


def write_rows(path: str, cp, sms: int, bandwidth_gbs: float, script: str, argv, rows: list, **extra) -> None:
    """Write a device sweep's rows as JSON with provenance (GPU, SMs, DRAM bandwidth, commit, command, date)."""
    with open(path, "w") as f:
        json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": sms,
                   "bandwidth_gbs": bandwidth_gbs, "commit": git_commit(),
                   "command": f"python {script} " + " ".join(argv or sys.argv[1:]),
                   "date": time.strftime("%Y-%m-%d %H:%M:%S"), **extra, "rows": rows}, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--formats", default="bf16,w8,w4")
    ap.add_argument("--tokens", type=int, default=1, help="T of every launch (the token tile is the family's for T)")
    ap.add_argument("--min-bytes", type=int, default=1 << 30, help="weight bytes per timed graph (distinct copies)")
    a = ap.parse_args(argv)
    t_start = time.time()
    cp, arch, sms, bw, stream = device_setup()
    planner = GemvFamily()
    rows = []
    for fmt in a.formats.split(","):
        # (rows per warp, kind: fma | mma | dp) -> the family whose plain variants are swept
        fams = {(rw, "fma"): GemvFamily(GemvTuning(plain_shapes=tuple(CONFIGS), rows_per_warp=rw, quant_rows_per_warp=rw,
                                            norm_rows_per_warp=rw, w4_mma_tiles=(), w8_mma_tiles=(), w8_dp_tiles=(),
                                            w4_dp_tiles=()))
                for rw in (2, 4)}
        if fmt == "w4":
            fams[(16, "mma")] = GemvFamily(GemvTuning(mma_shapes=tuple(MMA_CONFIGS), w4_mma_tiles=(1, 4), w4_dp_tiles=()))
        if fmt == "w8":  # the fp16-mma w8 kernels (where the tile's x fits shared memory)
            fams[(16, "mma")] = GemvFamily(GemvTuning(mma_shapes=tuple(CONFIGS), w8_mma_tiles=(1, 4), w8_dp_tiles=()))
        if fmt in ("w8", "w4"):  # integer dot products on int16 x (the tiles given, no mma tiles); dpp: persistent
            for rw in (2, 4):
                for kind in ("dp", "dpp"):
                    fams[(rw, kind)] = GemvFamily(GemvTuning(plain_shapes=tuple(CONFIGS), quant_rows_per_warp=rw,
                                                      norm_rows_per_warp=rw, w4_mma_tiles=(), w8_mma_tiles=(),
                                                      w8_dp_tiles=(1, 4), w4_dp_tiles=(1, 4),
                                                      dp_persistent=kind == "dpp"))
        probs = {name: GemvProblem(K, N, ep, fmt, in_norm=inn) for name, K, N, ep, inn in SHAPES}
        todo = [s for p in probs.values() for fam in (planner, *fams.values()) for s in fam.variants(p)
                if s.param("max_tokens") == planner.tile_for(a.tokens)]
        t0 = time.time()
        loaded, ctx = load_specs(todo, arch, sms, bw, jobs=16)
        print(f"{fmt}: {len(loaded)} kernels compiled in {time.time() - t0:.1f} s (DRAM {bw} GB/s)", flush=True)
        for name, p in probs.items():
            bufs = Bufs(cp, p, a.min_bytes)

            def run(ln, tag, **extra):
                k = loaded[ln.kernel.uri]
                calls = [lambda i=i: k.launch(ln.grid, ln.block, bufs.args(p, ln, i), cooperative=ln.cooperative,
                                              smem=ln.dynamic_smem_bytes, stream=stream, pdl=True)
                         for i in range(max(bufs.copies, 24))]
                t = time_graph(cp, stream, calls)
                r = {"fmt": fmt, "shape": name, "tag": tag, "uri": ln.kernel.uri, "route": ln.route, "ctas": ln.ctas,
                     "split_k": ln.split_k, "ctas_per_sm": ln.ctas_per_sm, "regs": ctx.resources[ln.kernel.uri].registers,
                     "us": t * 1e6, "gbps": p.weight_bytes / t / 1e9, **extra}
                rows.append(r)
                return r

            T, tile = a.tokens, planner.tile_for(a.tokens)
            pick = run(planner.launch(p, T, ctx), "planner")
            cands = []
            for (rw, kind), fam in fams.items():
                mma = kind == "mma"
                if (mma and not fam.mma_for(p, tile)) or (kind.startswith("dp") and not fam.dp_for(p, tile)):
                    continue  # e.g. w8 at a token tile without mma kernels, a dp x that does not fit
                for th, kw in fam.shapes_for(p, tile) if mma else CONFIGS:
                    ln = fam.launch_variant(p, T, ctx, th, "plain", max_tokens=tile, k_warps=kw)
                    est = estimate_us(p, T, threads=th, k_warps=kw, rows_per_warp=rw, tile=tile,
                                      ctas_per_sm=ln.ctas_per_sm, sms=sms, bandwidth_per_sm_gbs=ctx.bandwidth_per_sm_gbs,
                                      mma=mma)
                    cands.append(run(ln, "sweep", rw=rw, mma=mma, kind=kind, threads=th, k_warps=kw, tile=tile,
                                     tokens=T, estimate_us=est))
            for kind in sorted({r["kind"] for r in cands}):
                best = min((r for r in cands if r["kind"] == kind), key=lambda r: r["us"])
                print(f"{fmt:4} {name:8} planner {pick['uri'].split('__')[1]:52} {pick['us']:7.1f} us "
                      f"{pick['gbps']:6.0f} GB/s | best {kind:3} rw{best['rw']} th{best['threads']} "
                      f"kw{best['k_warps']} {best['us']:7.1f} us {best['gbps']:6.0f} GB/s", flush=True)
            bufs = None  # frees the buffers (not `del`: the timing lambdas above close over the name)
            cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/gemv_ksplit_sweep.py", argv, rows, seconds=time.time() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
