"""Device probe (diagnostic, runs 87-92): a timeline of the planned persistent w4 dp decode GEMVs of a GDN layer
(``--wfmt w8``: the planned w8 ones, fp32 FMA kernels of one CTA per row block)
(27B shapes, T = 1: GDN in -> GDN out -> gate|up -> down, 16 layers over distinct weight copies, one CUDA graph
of PDL launches, as bench/dp_layer_probe.py). Each kernel is the planned one compiled with the probe's hooks
(:func:`traced_gemv_spec`, :data:`GEMV_TRACE_HOOKS`): thread 0 of every CTA records globaltimer and clock64 at its entry, after the PDL wait,
after the first staging of x, after its first work item and at its exit. Per launch it reports (microseconds from
the previous launch's last CTA exit): the first / median / last CTA entry, PDL-wait release, staging done, first
item done and exit, and the medians of the per-CTA phases from clock64. The traced graph is timed beside the
untraced one (the probe's own cost).

Usage (GPU machine): python bench/dp_trace_probe.py [--json FILE] [--layers 16] [--wfmt w4|w8]
[--params DICT] [--family DICT] [--grid planned|full]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from dp_layer_probe import NAMES, layer  # noqa: E402
from gemv_ksplit_sweep import Bufs, capture_graph, time_graph, write_rows  # noqa: E402

from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_bandwidth_gbs, device_sm_count  # noqa: E402
from ninferc.targets.arch import get_arch  # noqa: E402
from ninferc.targets.cubin import read_resources  # noqa: E402
from ninferc.targets.kernels.gemv import GemvFamily, GemvTuning  # noqa: E402
from ninferc.targets.plan import KernelSpec, PlanContext  # noqa: E402

WORDS, MAX_RECORDS = 12, 131072  # the template's kTraceWords, kTraceMax
PHASES = ["entry", "wait", "staged", "item1", "exit"]


def with_params(spec: KernelSpec, **extra) -> KernelSpec:
    """``spec`` with more template parameters (e.g. ``min_ctas``)."""
    return KernelSpec.make(spec.family, spec.template, {**dict(spec.params), **extra}, spec.threads,
                           spec.cooperative)


#: the dp GEMV template's probe hooks (templates/gemv_dp.cu.j2 GEMV_TRACE_BEGIN / GEMV_STAMP / GEMV_TRACE_END): thread 0
#: of each CTA appends one record of WORDS 64-bit words to the module's __device__ array gemv_trace -- globaltimer (ns)
#: at the kernel's entry, after the PDL wait, after the first staging of x, after its first item and at its exit, the
#: same five clock64 stamps, %smid (blockIdx.x in its upper 32 bits) and the CTA's item count
GEMV_TRACE_HOOKS = """// The probe's records: kTraceWords 64-bit words each, appended in the order the CTAs
// exit (one launch's records are contiguous: the next launch of the module exits only after this one completes).
constexpr int kTraceWords = 12, kTraceMax = 131072;  // (w8 gate|up: 4,352 CTAs x 16 launches)
__device__ unsigned long long gemv_trace[kTraceMax * kTraceWords];
__device__ unsigned int gemv_trace_n;
__device__ __forceinline__ unsigned long long trace_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// thread 0's stamps in shared memory, so the probe holds no registers across the loop
#define GEMV_TRACE_BEGIN()                          \\
  __shared__ unsigned long long tr_s[kTraceWords]; \\
  if (threadIdx.x == 0) {                           \\
    tr_s[0] = trace_ns();                           \\
    tr_s[5] = clock64();                            \\
    tr_s[1] = tr_s[2] = tr_s[3] = 0ull;             \\
  }
#define GEMV_STAMP(i)                           \\
  if (threadIdx.x == 0 && tr_s[i] == 0ull) {    \\
    tr_s[i] = trace_ns();                       \\
    tr_s[i + 5] = clock64();                    \\
  }
// the exit record: after a barrier, thread 0 stamps the exit and appends its record; `items` is its work-item count
#define GEMV_TRACE_END(items)                                                                            \\
  __syncthreads();                                                                                       \\
  if (threadIdx.x == 0) {                                                                                \\
    tr_s[4] = trace_ns();                                                                                \\
    tr_s[9] = clock64();                                                                                 \\
    const unsigned int slot = atomicAdd(&gemv_trace_n, 1u);                                              \\
    if (slot < kTraceMax) {                                                                              \\
      unsigned long long* r = gemv_trace + (size_t)slot * kTraceWords;                                   \\
      _Pragma("unroll") for (int i = 0; i < 10; ++i) r[i] = tr_s[i];                                     \\
      unsigned int smid;                                                                                 \\
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));                                                  \\
      r[10] = (unsigned long long)smid | ((unsigned long long)blockIdx.x << 32); /* blockIdx.x above */ \\
      r[11] = (unsigned long long)(items);                                                               \\
    }                                                                                                    \\
  }
"""


def traced_gemv_spec(spec: KernelSpec, **extra) -> KernelSpec:
    """The dp GEMV kernel ``spec`` (more template parameters ``extra``, e.g. ``min_ctas``) with the probe's stamps:
    parameter ``trace`` added (its URI and entry say so; the template ignores it) and a source with
    :data:`GEMV_TRACE_HOOKS` inserted before the template's empty hooks.

    Raises:
        AssertionError: ``spec`` is not an integer-dot-product GEMV kernel (the only template with the hooks).
    """
    class TracedSpec(KernelSpec):
        def render(self) -> str:
            src = super().render()
            anchor = "#ifndef GEMV_TRACE_BEGIN"
            assert src.count(anchor) == 1, f"{self.uri}: the template has no single {anchor!r}"
            return src.replace(anchor, GEMV_TRACE_HOOKS + anchor)

    assert spec.family == "gemv" and dict(spec.params).get("dp"), f"{spec.uri}: not a dp GEMV kernel"
    return TracedSpec.make(spec.family, spec.template, {**dict(spec.params), **extra, "trace": True}, spec.threads,
                           spec.cooperative)


def trace_gemv(fam, epilogues) -> None:
    """Make the GEMV family instance ``fam`` plan traced kernels (:func:`traced_gemv_spec`) for its dp variants of these
    epilogues (e.g. ``("swiglu",)``: every gate|up GEMV). The stamps cost registers: the plan's occupancy and grid follow
    the traced kernel's and can differ from the untraced plan's."""
    plain = type(fam).spec.__get__(fam)

    def spec(problem, threads, mode, max_tokens=None, k_warps=1, carry=None, ring=None):
        s = plain(problem, threads, mode, max_tokens, k_warps, carry, ring)
        return traced_gemv_spec(s) if problem.epilogue in epilogues and dict(s.params).get("dp") else s

    fam.spec = spec


def device_var(cp, module, name: str, shape, dtype):
    """A CuPy view of the module's ``__device__`` variable ``name`` (cuModuleGetGlobal)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    mem = cp.cuda.UnownedMemory(module.get_global_var(name), nbytes, module)
    return cp.ndarray(shape, dtype, memptr=cp.cuda.MemoryPointer(mem, 0))


def main(argv=None) -> int:
    """Run the probe (module docstring); prints the timeline, writes ``--json`` with provenance. Returns 0.

    Raises:
        TargetError: no CuPy / no GPU (from the runtime's kernel loader).
    """
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--family", default="", help="GemvFamily keyword arguments as a Python dict literal")
    ap.add_argument("--wfmt", default="w4", choices=["w4", "w8"],
                    help="w8: the planned w8 GEMVs (fp32 FMA kernels, one CTA per row block: no staging stamp)")
    ap.add_argument("--params", default="", help="more template parameters of every planned kernel (a dict literal; "
                    "keyed by CTA threads, e.g. {256: {'ring': 4}, 640: {'ring': 7}}, for each size's kernels)")
    ap.add_argument("--grid", default="planned", choices=["planned", "full"],
                    help="full: one CTA per resident slot (min(items, cap)) instead of the planned persistent grid")
    a = ap.parse_args(argv)
    cp = cupy()
    arch, sms, bw = get_arch(device_arch()), device_sm_count(), device_bandwidth_gbs()
    stream = cp.cuda.Stream(non_blocking=True)
    fam_opts = eval(a.family) if a.family else {}  # noqa: S307 (a probe's CLI)
    fam = GemvFamily(GemvTuning(**({"w4_dp_tiles": (1,)} if a.wfmt == "w4" else {}), **fam_opts))
    LAYER = layer(a.wfmt)[:4]  # noqa: N806
    loaded, res = {}, {}

    def load(spec: KernelSpec) -> None:
        """Compile and load ``spec`` once; its resources as this device's NVRTC compiled it."""
        if spec.uri not in loaded:
            k = loaded[spec.uri] = DeviceKernel.from_spec(spec)
            res[spec.uri] = read_resources(k.compiled.cubin, arch.name, k.compiled.ptx)[k.entry]

    for p in LAYER:
        for s in fam.variants(p):
            if s.param("max_tokens") == 1:
                load(s)
    ctx = PlanContext(arch, sms, res, bandwidth_gbs=bw)
    lns = [fam.launch(p, 1, ctx) for p in LAYER]
    extra = eval(a.params) if a.params else {}  # noqa: S307 (a probe's CLI)
    by_threads = bool(extra) and all(isinstance(key, int) for key in extra)  # {threads: {param: value}}
    if extra or a.grid != "planned":  # the planned shapes with these parameters / this grid
        new = []
        for p, ln in zip(LAYER, lns):
            spec = with_params(ln.kernel, **(extra.get(ln.kernel.threads, {}) if by_threads else extra))
            load(spec)
            dyn = fam.dynamic_smem_bytes(p, 1, spec)  # (with the spec's weight ring, if any)
            occ = PlanContext(arch, sms, res, bandwidth_gbs=bw).occupancy(spec, dyn)
            while occ.ctas_per_sm == 0 and dict(spec.params).get("ring", 0) > 2:  # a ring too large: fewer stages
                spec = with_params(spec, ring=dict(spec.params)["ring"] - 1)
                load(spec)
                dyn = fam.dynamic_smem_bytes(p, 1, spec)
                occ = PlanContext(arch, sms, res, bandwidth_gbs=bw).occupancy(spec, dyn)
            items = fam.row_blocks(p, spec.threads, dict(spec.params).get("k_warps", 1), 1)
            cap = occ.ctas_per_sm * sms
            if not dict(spec.params).get("persist"):
                grid = ln.ctas  # one CTA per row block
            else:
                grid = min(items, cap) if a.grid == "full" else fam.persistent_grid(items, cap)
            new.append(dataclasses.replace(ln, kernel=spec, grid=(grid, 1, 1), ctas_per_sm=occ.ctas_per_sm,
                                           dynamic_smem_bytes=dyn))
        lns = new
    tk = {}
    for ln in lns:
        if ln.kernel.uri not in tk:
            # the untraced kernel's resident CTAs/SM as a register cap (the stamps alone cost 4-8 registers)
            tk[ln.kernel.uri] = DeviceKernel.from_spec(traced_gemv_spec(ln.kernel, min_ctas=ln.ctas_per_sm))
    bufs = [Bufs(cp, p, p.weight_bytes * a.layers) for p in LAYER]

    # the norm input's parts as in the decode step: those of the add_norm_parts GEMV before (down -> GDN in,
    # GDN out -> gate|up), not Bufs' 640
    parts = {0: fam.norm_parts(lns[3]), 2: fam.norm_parts(lns[1])}

    def args(j, p, ln, b, i):
        r = b.args(p, ln, i)
        return (*r[:-2], np.int32(parts[j]), r[-1]) if p.norm_in else r

    def calls(kernels):
        out = []
        for i in range(a.layers):
            for j, (p, ln, b) in enumerate(zip(LAYER, lns, bufs)):
                k = kernels[ln.kernel.uri]
                out.append(lambda k=k, ln=ln, b=b, p=p, i=i, j=j: k.launch(ln.grid, ln.block, args(j, p, ln, b, i),
                                                                      smem=ln.dynamic_smem_bytes, stream=stream,
                                                                      pdl=True))
        return out

    t_plain = time_graph(cp, stream, calls(loaded)) * len(LAYER) * 1e6
    traced_calls = calls(tk)
    t_traced = time_graph(cp, stream, traced_calls) * len(LAYER) * 1e6
    print(f"us per layer: planned {t_plain:.1f}, traced {t_traced:.1f}", flush=True)
    for ln in lns:
        print(f"  {ln.kernel.uri}: grid {ln.ctas}, {ln.ctas_per_sm} CTAs/SM, {res[ln.kernel.uri].registers} regs, "
              f"traced {tk[ln.kernel.uri].attributes().registers} regs", flush=True)
    # one replay of the traced sequence with the counters cleared
    g = capture_graph(stream, traced_calls)
    for k in tk.values():
        n = device_var(cp, k.module, "gemv_trace_n", (1,), np.uint32)
        n[...] = 0
    cp.cuda.Device().synchronize()  # (the zeroing ran on CuPy's stream, the graph runs on a non-blocking one)
    g.launch(stream=stream)
    stream.synchronize()
    recs = {}
    for u, k in tk.items():
        n = int(device_var(cp, k.module, "gemv_trace_n", (1,), np.uint32).get()[0])
        if n > MAX_RECORDS:
            raise SystemExit(f"{u}: {n} CTA records, more than the template's {MAX_RECORDS}: use fewer --layers")
        arr = device_var(cp, k.module, "gemv_trace", (MAX_RECORDS, WORDS), np.uint64).get()[:n]
        arr[:, 2] = np.where(arr[:, 2] == 0, arr[:, 1], arr[:, 2])  # no staging (FMA kernels): staged = waited
        arr[:, 7] = np.where(arr[:, 7] == 0, arr[:, 6], arr[:, 7])
        recs[u] = arr
    # walk the launches in order: each takes the next `grid` records of its module
    pos = {u: 0 for u in tk}
    launches = []
    for i in range(a.layers):
        for nm, ln in zip(NAMES, lns):
            u = ln.kernel.uri
            r = recs[u][pos[u]:pos[u] + ln.ctas]
            pos[u] += ln.ctas
            launches.append((i, nm, ln, r))
    t0 = min(int(r[:, 0].min()) for *_, r in launches)
    g_all = np.concatenate([r[:, :5].ravel() for *_, r in launches]).astype(np.int64)
    diffs = np.diff(np.unique(g_all))
    # the SM clock from each CTA's whole life: clock64 cycles over globaltimer ns
    life = np.concatenate([(r[:, 9].astype(np.int64) - r[:, 5].astype(np.int64))
                           / np.maximum(1, r[:, 4].astype(np.int64) - r[:, 0].astype(np.int64)) for *_, r in launches])
    clock_khz = float(np.median(life)) * 1e6
    print(f"globaltimer: smallest step between distinct stamps {int(diffs.min()) if len(diffs) else 0} ns; "
          f"SM clock {clock_khz / 1e3:.0f} MHz (clock64 / globaltimer over each CTA's life)", flush=True)
    rows, prev_exit = [], None
    hdr = (f"{'layer':>5} {'shape':8} {'grid':>4} | us from the previous launch's last exit: entry first/med/last, "
           "wait first/med/last, staged med, item1 med, exit first/med/last | per-CTA clock us: wait-entry, "
           "staged-wait, item1-staged, exit-item1 (med)")
    print(hdr)
    for i, nm, ln, r in launches:
        g = (r[:, :5].astype(np.int64) - t0) / 1e3  # us since the graph's first CTA entry
        c = r[:, 5:10].astype(np.int64)
        ref = prev_exit if prev_exit is not None else float(g[:, 0].min())
        rel = g - ref
        cyc = np.median(np.diff(c, axis=1), axis=0) / (clock_khz / 1e3)  # us at the nominal clock
        row = {"layer": i, "shape": nm, "grid": ln.ctas, "ctas_per_sm": ln.ctas_per_sm,
               "items_per_cta": [int(r[:, 11].min()), int(r[:, 11].max())],
               "sms_used": int(len(np.unique(r[:, 10] & 0xFFFFFFFF))),  # (blockIdx.x in the upper half)
               **{f"{ph}_us": [float(rel[:, j].min()), float(np.median(rel[:, j])), float(rel[:, j].max())]
                  for j, ph in enumerate(PHASES)},
               "clock_phase_us": {f"{PHASES[j]}->{PHASES[j + 1]}": float(cyc[j]) for j in range(4)},
               "duration_us": float(g[:, 4].max() - (prev_exit if prev_exit is not None else g[:, 0].min()))}
        prev_exit = float(g[:, 4].max())
        rows.append(row)
        e, w, s, it, x = (row[f"{ph}_us"] for ph in PHASES)
        print(f"{i:5} {nm:8} {ln.ctas:4} | {e[0]:6.1f} {e[1]:6.1f} {e[2]:6.1f}  {w[0]:6.1f} {w[1]:6.1f} {w[2]:6.1f}  "
              f"{s[1]:6.1f}  {it[1]:6.1f}  {x[0]:6.1f} {x[1]:6.1f} {x[2]:6.1f} | "
              + " ".join(f"{v:5.2f}" for v in row["clock_phase_us"].values()), flush=True)
    # steady-state averages (layers 2 .. n-2)
    print("mean over layers 2 .. n-2 (us from the previous launch's last exit):")
    for nm in NAMES[:4]:
        sel = [r for r in rows if r["shape"] == nm and 2 <= r["layer"] <= a.layers - 2]
        if not sel:
            continue
        m = {k: float(np.mean([r[k][1] if isinstance(r[k], list) else r[k] for r in sel]))
             for k in ("entry_us", "wait_us", "staged_us", "item1_us", "exit_us", "duration_us")}
        first_wait = float(np.mean([r["wait_us"][0] for r in sel]))
        last_exit = float(np.mean([r["exit_us"][2] for r in sel]))
        print(f"  {nm:8} entry {m['entry_us']:5.1f}  wait first {first_wait:5.1f} med {m['wait_us']:5.1f}  "
              f"staged {m['staged_us']:5.1f}  item1 {m['item1_us']:5.1f}  exit med {m['exit_us']:5.1f} "
              f"last {last_exit:5.1f}")
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/dp_trace_probe.py", argv, rows, us_per_layer=t_plain,
                   us_per_layer_traced=t_traced)
    return 0


if __name__ == "__main__":
    sys.exit(main())
