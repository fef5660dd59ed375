"""GEMV L2-prefetch depth A/B in one process: the 27B decode step (synthetic weights) with the GEMV kernels
prefetching S K steps of each weight row into L2 before their PDL wait (``GemvCoopFamily.prefetch_steps``),
one engine per S, all alive at once, their CUDA-graph-replayed decode steps timed in alternation (ABCABC) at
one context; median per-token latency of each. Only the kernels' prologue differs, so device drift cancels.

Usage (GPU machine): python bench/prefetch_ab.py [--weights w8] [--steps-list 1,4,8] [--context 512]
[--steps 40] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from ninferc.bench import git_commit
from ninferc.ir.config import preset
from ninferc.ir.passes import run_pipeline
from ninferc.ir.qwen3_5 import build_graph
from ninferc.runtime.engine import Engine
from ninferc.runtime.kernels import device_arch, device_sm_count
from ninferc.runtime.synthetic import SyntheticArtifact
from ninferc.sampling import SamplingParams
from ninferc.targets.kernels import FAMILIES
from ninferc.targets.model_plan import plan_model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default="w8")
    ap.add_argument("--steps-list", default="1,4,8")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    fam = FAMILIES["gemv_coop"]  # the family the lowering and the engine's step plans use
    cfg = preset("qwen3.8-27b")
    graph = run_pipeline(build_graph(cfg, lm_rows="last"), weights=a.weights)
    max_ctx = a.context + (a.steps + 3) * a.rounds + 16
    greedy = SamplingParams()
    runs = {}
    for S in [int(x) for x in a.steps_list.split(",")]:  # noqa: N806
        fam.prefetch_steps = S
        mp = plan_model(graph, device_arch(), sms=device_sm_count(), max_context=max_ctx, decode_batches=(1,),
                        prefill_tokens=(1, 64, 1024))
        eng = Engine(SyntheticArtifact(cfg, graph, mp), max_context=max_ctx, prefill_chunk=min(1024, a.context))
        s = eng.session()
        s.prefill(np.random.default_rng(0).integers(0, eng.vocab, a.context).tolist(), min(1024, a.context))
        runs[S] = {"engine": eng, "session": s, "tok": s.sample(greedy), "lat": []}
        print(f"engine with prefetch_steps {S} ready", flush=True)
    for r in range(a.rounds):
        for S, run in runs.items():  # noqa: N806
            fam.prefetch_steps = S  # any step plan derived now must name this engine's kernels
            s, lat = run["session"], []
            for i in range(a.steps + 3):
                t = time.perf_counter()
                s.decode(run["tok"])
                run["tok"] = s.sample(greedy)
                if i >= 3 or r > 0:  # round 0's first steps capture the graph
                    lat.append(time.perf_counter() - t)
            run["lat"].append(float(np.median(lat)))
            print(f"round {r} prefetch_steps {S}: median {run['lat'][-1] * 1e3:.3f} ms/token", flush=True)
    med = {S: float(np.median(run["lat"])) for S, run in runs.items()}  # noqa: N806
    base = med[min(med)]
    for S, m in med.items():  # noqa: N806
        print(f"prefetch_steps {S}: {m * 1e3:.3f} ms/token ({1 / m:.2f} tok/s), speed-up vs {min(med)}: {base / m:.4f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": "H200", "commit": git_commit(), "command": "python bench/prefetch_ab.py " +
                       " ".join(argv or sys.argv[1:]), "context": a.context, "weights": a.weights,
                       "per_round_s": {S: run["lat"] for S, run in runs.items()}, "median_s": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
