"""Programmatic dependent launch A/B in one process: the 27B bf16 decode step (synthetic weights) captured
as a CUDA graph with PDL launches and without, replayed alternately (ABABAB) at one context, median
per-token latency of each. Same engine, same weights, same sequence state -- only the launch attribute
differs -- so run-to-run drift of the device cancels.

Usage (GPU machine): python bench/pdl_ab.py [--context 512] [--steps 40] [--rounds 3] [--json FILE]
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
from ninferc.targets.model_plan import plan_model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--weights", default="bf16")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cfg = preset("qwen3.8-27b")
    graph = run_pipeline(build_graph(cfg, lm_rows="last"), weights=a.weights)
    max_ctx = a.context + (a.steps + 3) * a.rounds * 2 + 16
    mp = plan_model(graph, device_arch(), sms=device_sm_count(), max_context=max_ctx, decode_batches=(1,),
                    prefill_tokens=(1, 64, 1024))
    eng = Engine(SyntheticArtifact(cfg, graph, mp), max_context=max_ctx, prefill_chunk=min(1024, a.context))
    if not eng.pdl:
        print("PDL is off on this device (needs sm_90+ and NINFERC_PDL != 0); nothing to compare")
        return 1
    rng = np.random.default_rng(0)
    s = eng.session()
    s.prefill(rng.integers(0, eng.vocab, a.context).tolist(), min(1024, a.context))
    greedy = SamplingParams()
    tok = s.sample(greedy)
    res = {"pdl": [], "no_pdl": []}
    for r in range(a.rounds):
        for mode in ("pdl", "no_pdl"):
            eng.pdl = mode == "pdl"
            eng._graphs.clear()  # recapture the decode graph with (or without) the PDL attribute
            lat = []
            for i in range(a.steps + 3):
                t = time.perf_counter()
                s.decode(tok)
                tok = s.sample(greedy)
                if i >= 3:  # the first steps capture the graph
                    lat.append(time.perf_counter() - t)
            res[mode].append(float(np.median(lat)))
            print(f"round {r} {mode:7}: median {res[mode][-1] * 1e3:.3f} ms/token ({1 / res[mode][-1]:.2f} tok/s)",
                  flush=True)
    pdl, nopdl = float(np.median(res["pdl"])), float(np.median(res["no_pdl"]))
    print(f"median over rounds: PDL {pdl * 1e3:.3f} ms, no PDL {nopdl * 1e3:.3f} ms, PDL speed-up {nopdl / pdl:.4f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": "H200", "commit": git_commit(), "command": "python bench/pdl_ab.py " + " ".join(argv or sys.argv[1:]),
                       "context": a.context, "weights": a.weights, "per_round_s": res, "pdl_s": pdl, "no_pdl_s": nopdl,
                       "speedup": nopdl / pdl}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
