"""Per-kernel GPU time of the graph-replayed decode step (27B shape, synthetic weights), from CUPTI.

`ninferc bench --profile` times each launch eagerly between CUDA events, which adds a launch latency per kernel
and removes the programmatic-dependent-launch overlap. This script instead records the kernels of a few replays
of the captured decode graph with the PyTorch profiler (Kineto / CUPTI sees every kernel of the process, CuPy's
too) and attributes each kernel to its step by position in the step plan. For every family it reports the
summed kernel duration and the summed *exposed* time (how much later this kernel ends than the one before it,
i.e. its share of the step's critical path), plus the step's wall time from the first kernel's start to the last
one's end.

``--mode verify --tokens T`` (or ``prefill``) records T-token steps of one sequence instead -- the graph
``ninferc bench --tokens-per-seq`` times (``ninferc.bench.multi_token_graph``), replayed back to back with no sampler --
to see which kernels of the speculative verify step are exposed under PDL (bench/NOTES.md run 234: the bf16 4-token
verify step's kernels summed 1.8 ms less on tensor cores than on FMAs, the replayed step only 0.5 ms less).
``--batch B`` (decode mode) records the decode step of B sequences instead: ``Engine.decode_batch``'s captured graph
(model + greedy sampler), replayed with the ids it wrote -- what ``bench/batch_ab.py`` times, per kernel.

Usage (on a GPU with torch): python3 bench/graph_profile.py --weights w4 [--context 512] [--steps 6]
[--mode decode|prefill|verify] [--tokens T] [--batch B] [--set family.attr=value ...] --json F
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen3.8-27b")
    ap.add_argument("--weights", default="w4")
    ap.add_argument("--kv-dtype", default="bf16")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=6, help="steps recorded")
    ap.add_argument("--mode", default="decode", choices=["decode", "prefill", "verify"],
                    help="the decode step (default), or one sequence x --tokens through the prefill / verify program")
    ap.add_argument("--tokens", type=int, default=4, help="T of --mode prefill / verify (2..6 for verify)")
    ap.add_argument("--batch", type=int, default=1,
                    help="--mode decode: sequences per step (B > 1: Engine.decode_batch's graph, B prefilled sequences)")
    ap.add_argument("--max-context", type=int, default=None,
                    help="the engine's max_context (default context + 64 + steps; the bench's 512 row runs at 8,248)")
    ap.add_argument("--loop", default="stream", choices=["stream", "step"],
                    help="Session.decode_stream (one step queued ahead) or decode + sample per token")
    ap.add_argument("--set", action="append", default=[], metavar="FAMILY.ATTR=VALUE",
                    help="a kernel-family attribute for this profile (Python literal value; repeatable), as "
                         "bench/family_ab.py's variants")
    ap.add_argument("--pad-mib", type=float, default=0.0,
                    help="allocate this many MiB of device memory before the engine (kept alive): moves every later "
                         "allocation, to see whether the step's kernels depend on where their buffers lie")
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    if a.batch < 1 or a.batch > 1 and a.mode != "decode":
        ap.error(f"--batch {a.batch}: 1 or more, and above 1 only with --mode decode (found --mode {a.mode})")
    if a.set:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from family_ab import parse_variant

        from ninferc.targets.kernels import FAMILIES
        for (fam, attr), v in parse_variant("set:" + ";".join(a.set))[1].items():
            setattr(FAMILIES[fam], attr, v)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from ninferc.bench import family_key, git_commit, multi_token_graph, synthetic_artifact
    from ninferc.runtime.engine import Engine
    from ninferc.sampling import SamplingParams

    torch.cuda.init()
    multi = a.mode != "decode"
    max_context = a.max_context or a.context + 64 + a.steps + (a.tokens if multi else 0) + (4 if a.batch > 1 else 0)
    art = synthetic_artifact(a.preset, a.weights, a.kv_dtype, target=None, max_context=max_context,
                             mtp=a.mode == "verify")
    pad = None
    if a.pad_mib:
        import cupy

        pad = cupy.empty(int(a.pad_mib * 2**20), cupy.uint8)  # noqa: F841 (kept alive until the script ends)
    batched = a.batch > 1
    eng = Engine(art, max_context=max_context, prefill_chunk=a.context, max_batch=a.batch,
                 log=lambda m: print(m, file=sys.stderr),
                 **({"max_logit_rows": a.tokens} if multi else {}),
                 **({"spec_tokens": a.tokens - 1} if a.mode == "verify" else {}))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, eng.vocab, a.context).tolist()
    s = eng.session()
    s.prefill(ids, a.context)
    greedy = SamplingParams()
    tok = s.sample(greedy)
    batch = [s]
    if batched:  # B prefilled sequences (distinct prompts), one eager step with their first ids, then the graph
        for _ in range(a.batch - 1):
            x = eng.session()
            x.prefill(rng.integers(0, eng.vocab, a.context).tolist(), a.context)
            batch.append(x)
        eng.decode_batch(batch, [tok] + [x.sample(greedy) for x in batch[1:]])
        for _ in range(3):  # capture + warm the B-sequence graph
            eng.decode_batch(batch)
        eng.stream.synchronize()
    else:
        for _ in range(4):  # capture + warm the graph
            s.decode(tok)
            tok = s.sample(greedy)
        s.synchronize()
    graph = None
    if multi:  # the T-token graph at positions L.. (the session's length is unchanged)
        s.seq.ensure_capacity(s.seq.length + a.tokens, eng.pages, eng.max_pages)
        graph = multi_token_graph(eng, s.seq, a.mode, a.tokens, rng)
        for _ in range(3):
            graph.launch(stream=eng.stream)
        eng.stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        if multi:
            for _ in range(a.steps):
                graph.launch(stream=eng.stream)
            eng.stream.synchronize()
        elif batched:
            for _ in range(a.steps):
                eng.decode_batch(batch)
            eng.stream.synchronize()
        elif a.loop == "stream":
            for tok in s.decode_stream(greedy, a.steps):
                pass
        else:
            for _ in range(a.steps):
                s.decode(tok)
                tok = s.sample(greedy)
        s.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    gpu = sorted((e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and "dur" in e), key=lambda e: e["ts"])
    kev = [e for e in gpu if e["cat"] == "kernel"]
    sp = (eng.step_plan(a.mode, a.tokens, 1, a.tokens) if multi
          else eng.step_plan("decode", a.batch, a.batch, a.batch))
    plan = [(step.name, ln.kernel.family, k.entry) for step, ln, k, _ in sp.launches]
    first = plan[0][2]
    starts = [i for i, e in enumerate(kev) if e["name"] == first]
    # a step = the plan's kernels in order from one embedding launch (a step the trace cut short is skipped)
    starts = [si for si in starts if len(kev) >= si + len(plan)
              and all(e["name"] == p[2] for e, p in zip(kev[si:si + len(plan)], plan))]
    rows, walls = {}, []
    for si in starts:
        seq = kev[si:si + len(plan)]
        walls.append(seq[-1]["ts"] + seq[-1]["dur"] - seq[0]["ts"])
        prev_end = seq[0]["ts"]
        for e, (name, fam, _) in zip(seq, plan):
            end = e["ts"] + e["dur"]
            r = rows.setdefault(family_key(name, fam), {"dur_us": [], "exposed_us": []})
            r["dur_us"].append(e["dur"])
            r["exposed_us"].append(end - prev_end)
            prev_end = max(prev_end, end)
    # Between steps: from the model's last kernel (the LM head) to the next step's first kernel -- the sampler,
    # the id's copy to the host, and any time the GPU waits for the host's next launch.
    between, samp, copies = [], [], []
    for si, sj in zip(starts, starts[1:]):
        last = kev[si + len(plan) - 1]
        end = last["ts"] + last["dur"]
        between.append(kev[sj]["ts"] - end)
        # the kernels after the model's (the sampler; under PDL they may start before the LM head ends) and the
        # copies up to the next step's first kernel
        samp.append(sum(e["dur"] for e in kev[si + len(plan):sj]))
        copies.append(sum(e["dur"] for e in gpu if e["cat"] != "kernel" and end <= e["ts"] < kev[sj]["ts"]))
    nstep = len(walls)
    if not nstep:
        print(f"no {a.mode} step in the trace matched the step plan", file=sys.stderr)
        print("kernel names seen:", sorted({e["name"] for e in kev})[:40], file=sys.stderr)
        return 1
    fam = {k: {"launches": len(v["dur_us"]) // nstep, "kernel_ms": sum(v["dur_us"]) / nstep / 1e3,
               "exposed_ms": sum(v["exposed_us"]) / nstep / 1e3} for k, v in rows.items()}
    others = sorted({e["name"] for e in kev} - {p[2] for p in plan})
    # The timeline of layers 2-3 (a GDN layer, then the first attention layer): per kernel the median over steps of
    # its start and end relative to the end of the kernel before it (a negative start: launched early under PDL)
    win = [i for i, (name, _, _) in enumerate(plan) if name.startswith(("L2.", "L3."))]
    timeline = []
    for i in win:
        st = [kev[si + i]["ts"] - (kev[si + i - 1]["ts"] + kev[si + i - 1]["dur"]) for si in starts]
        en = [kev[si + i]["ts"] + kev[si + i]["dur"] - (kev[si + i - 1]["ts"] + kev[si + i - 1]["dur"]) for si in starts]
        timeline.append({"step": plan[i][0], "family": plan[i][1], "start_us": float(np.median(st)),
                         "end_us": float(np.median(en)), "dur_us": float(np.median([kev[si + i]["dur"] for si in starts]))})
    out = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "weights": a.weights,
           "kv_dtype": a.kv_dtype, "context": a.context, "mode": a.mode, "tokens": a.tokens if multi else 1,
           "batch": a.batch,
           "steps_matched": nstep,
           "step_wall_ms_median": float(np.median(walls)) / 1e3, "loop": a.loop,
           "between_steps_us_median": float(np.median(between)) if between else None,
           "sampler_kernels_us_median": float(np.median(samp)) if samp else None,
           "copies_us_median": float(np.median(copies)) if copies else None,
           "families": fam, "timeline_L2_L3": timeline, "other_kernels": others, "family_settings": a.set, "pad_mib": a.pad_mib,
           "command": "python3 bench/graph_profile.py " + " ".join(argv or sys.argv[1:])}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{a.weights} context {a.context}: {nstep} steps, step wall (first kernel start -> last end) median "
          f"{out['step_wall_ms_median']:.3f} ms; between steps (LM head end -> next embed start) "
          f"{out['between_steps_us_median']} us, of which sampler kernels {out['sampler_kernels_us_median']} us, "
          f"copies {out['copies_us_median']} us")
    print(f"  {'family':<44} {'launches':>8} {'kernel ms':>9} {'exposed ms':>10} {'us/launch':>9}")
    for k, v in sorted(fam.items(), key=lambda kv: -kv[1]["exposed_ms"]):
        print(f"  {k:<44} {v['launches']:>8} {v['kernel_ms']:>9.3f} {v['exposed_ms']:>10.3f} "
              f"{v['kernel_ms'] * 1e3 / max(v['launches'], 1):>9.1f}")
    print("  timeline of layers 2-3 (us, relative to the previous kernel's end; median over steps):")
    for t in timeline:
        print(f"    {t['step']:<44} {t['family']:<14} start {t['start_us']:8.2f}  end {t['end_us']:7.2f}  dur {t['dur_us']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
