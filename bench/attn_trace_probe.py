"""Device probe (diagnostic, runs 112-120; ``--family gdn_recurrent`` since runs 136-140): the per-CTA timeline of attn_decode
(or gdn_recurrent) inside the graph-replayed 27B decode step. The engine is built with the family's kernels rendered
with their template's trace hooks defined (attn_decode: :func:`trace_attn_decode`, the ATTN_TRACE hook defined by
:data:`ATTN_TRACE_HOOKS`; gdn_recurrent: see below): thread 0 of every CTA records globaltimer at entry, after the PDL
wait, after its first tile's scores and softmax, after its last P.V and at exit. Per launch (one per attention layer and step) it reports,
relative to the first CTA's PDL-wait release (~ the end of the previous kernel plus the memory flush): the spread of
entries and wait releases, and for the CTAs with keys the median / last time each phase ended -- where the ~9 us the
kernel adds to the step at 512 tokens goes. With ``--family gdn_recurrent`` (:func:`trace_gdn_recurrent`: the decode
kernel rendered with the template's GDN_TRACE_BEGIN / GDN_STAMP / GDN_TRACE_END hooks defined by :data:`GDN_TRACE_HOOKS`)
the phases are entry, wait, conv (q / k / v in shared memory), the q / k norms, kv = S^T k, o = S^T q, the y store and
the state store (with onepass the middle ones are: partials summed, reduction read, state updated and stored, y
stored), every CTA counted. With ``--family gemv`` (runs 162-169; ``--trace-epilogues``, default ``swiglu``: every
gate|up GEMV, the dp kernels rendered with the template's hooks by bench/dp_trace_probe.py ``trace_gemv``) the phases are the dp GEMV's: entry, wait, x staged, first item, exit, every CTA
counted, and the launches are summarised apart by whether their layer is an attention layer -- to see where the MLP
after an attention layer spends the time a faster attention decode gives it (bench/NOTES.md runs 163-164).

Usage (GPU machine, torch not needed): python bench/attn_trace_probe.py [--family attn_decode|gdn_recurrent|gemv]
[--weights w8] [--context 512] [--max-context 8248] [--steps 3] [--set family.attr=value ...] [--json FILE];
``--set attn_decode.stage_mma=True`` sets a kernel family's attribute (a Python literal) before the engine is built,
as bench/graph_profile.py does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dp_trace_probe import device_var, trace_gemv  # noqa: E402

#: per family: the module's record array and counter, records (the template's kTraceMax), the phases stamped, the
#: phases counted only over CTAs that did work (attn_decode: CTAs with keys, whose scores stamp moved), the 64-bit
#: words per record, the word of the first stamp and the word holding %smid
FAMILY_TRACES = {
    "attn_decode": ("attn_trace", "attn_trace_n", 65536, ["entry", "wait", "scores", "softmax", "pv", "exit"],
                    ("scores", "softmax", "pv"), 9, 3, 2),
    "gdn_recurrent": ("gdn_trace", "gdn_trace_n", 16384, ["entry", "wait", "conv", "norms", "kv", "o", "y", "state"], (),
                   11, 3, 2),
    "gemv": ("gemv_trace", "gemv_trace_n", 131072, ["entry", "wait", "staged", "item1", "exit"], (), 12, 0, 10),
}


#: the gdn_recurrent template's probe hooks: thread 0 of each CTA appends one record {blockIdx.x, blockIdx.y, %smid,
#: 8 globaltimer stamps} to the module's __device__ array gdn_trace (FAMILY_TRACES["gdn_recurrent"])
GDN_TRACE_HOOKS = """// the probe's records (global scope: the probe finds them by name with cuModuleGetGlobal)
constexpr unsigned int kTraceMax = 16384;
__device__ unsigned long long gdn_trace[kTraceMax * 11];
__device__ unsigned int gdn_trace_n;
#define GDN_TRACE_BEGIN() unsigned long long tr[8] = {ninfer_trace::now_ns(), 0, 0, 0, 0, 0, 0, 0}
#define GDN_STAMP(i) tr[i] = ninfer_trace::now_ns()
#define GDN_TRACE_END() if (threadIdx.x == 0) ninfer_trace::record(gdn_trace, &gdn_trace_n, kTraceMax, tr)
"""


#: the attn_decode template's probe hook: thread 0 of each CTA appends one record {blockIdx.x, blockIdx.y, %smid,
#: 6 globaltimer stamps} to the module's __device__ array attn_trace (FAMILY_TRACES["attn_decode"])
ATTN_TRACE_HOOKS = """// the probe's records (global scope: the probe finds them by name with cuModuleGetGlobal)
constexpr int kTraceWords = 9;
constexpr unsigned int kTraceMax = 65536;
__device__ unsigned long long attn_trace[kTraceMax * kTraceWords];
__device__ unsigned int attn_trace_n;
#define ATTN_TRACE(...) __VA_ARGS__
"""


def _traced_spec(spec, anchor: str, hooks: str):
    """``spec`` with parameter ``trace`` added (its URI and entry say so; the template ignores it) and a source with
    ``templates/ninfer_trace.cuh`` and ``hooks`` inserted before ``anchor``, the template's empty hooks (exactly one).

    Raises:
        AssertionError (at render): the rendered template does not hold ``anchor`` exactly once."""
    from ninferc.targets.plan import KernelSpec
    from ninferc.targets.render import read_template_file

    class TracedSpec(KernelSpec):
        def render(self) -> str:
            src = super().render()
            assert src.count(anchor) == 1, f"{self.uri}: the template has no single {anchor!r}"
            header = "".join(ln for ln in read_template_file("ninfer_trace.cuh").splitlines(keepends=True)
                             if not ln.startswith("#pragma once"))
            return src.replace(anchor, header + hooks + anchor)

    return TracedSpec.make(spec.family, spec.template, {**dict(spec.params), "trace": True}, spec.threads,
                           spec.cooperative)


def traced_gdn_spec(spec):
    """The gdn_recurrent decode kernel ``spec`` with the probe's stamps (:data:`GDN_TRACE_HOOKS`)."""
    assert spec.family == "gdn_recurrent" and spec.param("mode") == "decode", spec.uri
    return _traced_spec(spec, "#ifndef GDN_TRACE_BEGIN", GDN_TRACE_HOOKS)


def traced_attn_spec(spec):
    """The attn_decode kernel ``spec`` (any variant) with the probe's stamps (:data:`ATTN_TRACE_HOOKS`)."""
    assert spec.family == "attn_decode", spec.uri
    return _traced_spec(spec, "#ifndef ATTN_TRACE", ATTN_TRACE_HOOKS)


def trace_gdn_recurrent(fam) -> None:
    """Make the ``gdn_recurrent`` family instance ``fam`` plan traced decode kernels (:func:`traced_gdn_spec`)."""
    plain = type(fam).spec.__get__(fam)
    fam.spec = lambda problem, threads=None: traced_gdn_spec(plain(problem, threads))


def trace_attn_decode(fam) -> None:
    """Make the ``attn_decode`` family instance ``fam`` plan traced kernels (:func:`traced_attn_spec`)."""
    plain = type(fam).spec.__get__(fam)
    fam.spec = lambda problem, staged=None: traced_attn_spec(plain(problem, staged))


def main(argv=None) -> int:
    """Run the probe (module docstring), print one summary row per launch and their medians; write ``--json``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="attn_decode", choices=sorted(FAMILY_TRACES))
    ap.add_argument("--weights", default="w8")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--max-context", type=int, default=8248)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="FAMILY.ATTR=VALUE",
                    help="a kernel family attribute for this run, e.g. attn_decode.stage_mma=True")
    ap.add_argument("--trace-epilogues", default="swiglu",
                    help="gemv: the epilogues whose dp GEMVs are traced (comma-separated; default the gate|up)")
    ap.add_argument("--dump-ctas", action="store_true",
                    help="also write every CTA's %%smid and phase stamps (us from the launch's first wait release; "
                         "gemv: then its blockIdx.x and work items) per launch into the JSON (key 'ctas_rows')")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    from ninferc.bench import git_commit, synthetic_artifact
    from ninferc.runtime.engine import Engine
    from ninferc.runtime.kernels import cupy as cp_mod
    from ninferc.sampling import SamplingParams
    from ninferc.targets.kernels import FAMILIES

    cp = cp_mod()
    from family_ab import parse_variant

    array, counter, max_records, phases, work_phases, words, t_col, sm_col = FAMILY_TRACES[a.family]
    if a.family == "gemv":
        trace_gemv(FAMILIES[a.family], tuple(a.trace_epilogues.split(",")))
    elif a.family == "gdn_recurrent":
        trace_gdn_recurrent(FAMILIES[a.family])
    else:
        trace_attn_decode(FAMILIES[a.family])
    for (fam, attr), v in parse_variant("set:" + ";".join(a.set))[1].items():
        setattr(FAMILIES[fam], attr, v)
    art = synthetic_artifact("qwen3.8-27b", a.weights, "bf16", target=None, max_context=a.max_context)
    eng = Engine(art, max_context=a.max_context, prefill_chunk=a.context, max_batch=1,
                 log=lambda m: print(m, file=sys.stderr))
    sp = eng.step_plan("decode", 1, 1, 1)
    traced = [(step.name, ln, k) for step, ln, k, _ in sp.launches
              if ln.kernel.family == a.family and dict(ln.kernel.params).get("trace")]
    assert traced, f"no traced {a.family} launch in the decode step plan"
    uris = {ln.kernel.uri for _, ln, _ in traced}
    assert len(uris) == 1, f"the traced launches run {len(uris)} kernels ({sorted(uris)}); trace one kernel at a time"
    _, ln0, k = traced[0]
    grid = ln0.grid
    ctas = grid[0] * grid[1] * grid[2]
    attn_layers = {step.name.split(".")[0] for step, *_ in sp.launches if ".attn." in step.name}
    rng = np.random.default_rng(0)
    s = eng.session()
    s.prefill(rng.integers(0, eng.vocab, a.context).tolist(), a.context)
    greedy = SamplingParams()
    tok = s.sample(greedy)
    for _ in range(4):  # capture + warm the graph
        s.decode(tok)
        tok = s.sample(greedy)
    s.synchronize()
    device_var(cp, k.module, counter, (1,), np.uint32)[...] = 0
    cp.cuda.runtime.deviceSynchronize()
    for _ in range(a.steps):
        s.decode(tok)
        tok = s.sample(greedy)
    s.synchronize()
    n = int(device_var(cp, k.module, counter, (1,), np.uint32).get()[0])
    rec = device_var(cp, k.module, array, (max_records, words), np.uint64).get()[:min(n, max_records)]
    rec = rec[np.argsort(rec[:, t_col], kind="stable")]  # by entry time: launches are > 50 us apart
    launches = [rec[i:i + ctas] for i in range(0, len(rec), ctas)]
    rows = []
    for li, L in enumerate(launches):
        if len(L) < ctas:
            continue
        t = L[:, t_col:t_col + len(phases)].astype(np.int64)
        t0 = t[:, 1].min()
        rel = (t - t0) / 1e3  # us from the first wait release
        work = t[:, 2] != t[:, 1] if work_phases else np.ones(len(t), bool)  # attn: CTAs whose scores stamp moved
        step_name = traced[li % len(traced)][0]
        row = {"step": step_name, "after_attention": step_name.split(".")[0] in attn_layers, "ctas": int(len(L)),
               "ctas_with_keys": int(work.sum()), "sms": int(len(set((L[:, sm_col] & 0xFFFFFFFF).tolist())))}
        for j, ph in enumerate(phases):
            sel = rel[work, j] if ph in work_phases and work.any() else rel[:, j]
            row[ph] = [float(sel.min()), float(np.median(sel)), float(sel.max())]
        if a.dump_ctas:  # [smid, stamp per phase...] per CTA, in entry order (gemv: then blockIdx.x, items)
            extra = (lambda i: [int(L[i, sm_col]) >> 32, int(L[i, 11])]) if a.family == "gemv" else (lambda i: [])
            row["ctas_rows"] = [[int(L[i, sm_col]) & 0xFFFFFFFF] + [round(float(x), 3) for x in rel[i]] + extra(i)
                                for i in range(len(L))]
        rows.append(row)
    print(f"{a.weights} context {a.context} of {a.max_context}: {ln0.kernel.uri}, grid {grid}, {ln0.ctas_per_sm} "
          f"CTAs/SM ({ln0.limiter}), {n} records, {len(rows)} launches")
    print("us from the first CTA's PDL-wait release: min / median / max over the launch's CTAs" +
          (f" (phases {', '.join(work_phases)}: the CTAs with work)" if work_phases else ""))
    groups = {"all": rows}
    if len({r["after_attention"] for r in rows}) > 1:  # e.g. the gate|up of attention layers vs of GDN layers
        groups = {"attention layers": [r for r in rows if r["after_attention"]],
                  "other layers": [r for r in rows if not r["after_attention"]]}
    for g, rs in groups.items():
        print(f" {g} ({len(rs)} launches)")
        for ph in phases:
            m = np.median([[r[ph][0], r[ph][1], r[ph][2]] for r in rs], axis=0)
            print(f"  {ph:8s} {m[0]:7.2f} {m[1]:7.2f} {m[2]:7.2f}")
    print(f"  CTAs with keys {rows[0]['ctas_with_keys']} of {rows[0]['ctas']} on {rows[0]['sms']} SMs")
    if a.json:
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        Path(a.json).write_text(json.dumps({"gpu": gpu, "commit": git_commit(), "command": "python bench/attn_trace_probe.py " +
                                            " ".join(argv or sys.argv[1:]), "family": a.family, "grid": list(grid), "weights": a.weights,
                                            "context": a.context, "max_context": a.max_context, "set": a.set,
                                            "launches": rows},
                                           indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
