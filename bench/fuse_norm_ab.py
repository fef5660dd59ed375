"""Fused add+RMSNorm A/B in one process: the 27B decode step (synthetic weights) with the residual add and
RMSNorm fused into the GEMV that produces their input (``gemv_coop`` epilogue ``add_rmsnorm``, route
``coop_norm``: 130 fewer launches per token) and with every norm as its own ``rmsnorm`` kernel
(``lower(..., fuse_norm=False)``), each captured as a CUDA graph and replayed alternately (ABAB) at one
context; median per-token latency of each. Same engine, weights and sequence state -- only the lowered
program differs -- so run-to-run drift of the device cancels.

Usage (GPU machine): python bench/fuse_norm_ab.py [--weights bf16|w8|w4] [--context 512] [--steps 40]
[--rounds 3] [--json FILE]
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
from ninferc.runtime.memory import workspace_sizes
from ninferc.runtime.synthetic import SyntheticArtifact
from ninferc.sampling import SamplingParams
from ninferc.targets.lower import lower
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
    programs = {"fused": eng.program,
                "unfused": lower(eng.graph, page_size=eng.page_size, max_context=max_ctx, fuse_norm=False)}
    need = workspace_sizes(programs["unfused"], eng.geo_ctx, t_cap=eng.t_cap, max_batch=eng.max_batch)
    cp = eng.cp
    for k, v in need.items():  # the unfused program's split-K may want more GEMV workspace
        if v > eng.ws[k].nbytes:
            eng.ws[k] = cp.empty(v, cp.uint8)
    rng = np.random.default_rng(0)
    s = eng.session()
    s.prefill(rng.integers(0, eng.vocab, a.context).tolist(), min(1024, a.context))
    greedy = SamplingParams()
    tok = s.sample(greedy)
    res = {"fused": [], "unfused": []}
    launches = {}
    for r in range(a.rounds):
        for mode in ("fused", "unfused"):
            eng.program = programs[mode]
            eng._steps.clear()
            eng._graphs.clear()  # recapture the decode graph from this program
            lat = []
            for i in range(a.steps + 3):
                t = time.perf_counter()
                s.decode(tok)
                tok = s.sample(greedy)
                if i >= 3:  # the first steps capture the graph
                    lat.append(time.perf_counter() - t)
            launches[mode] = len(eng.step_plan("decode", 1, 1, 1).launches)
            res[mode].append(float(np.median(lat)))
            print(f"round {r} {mode:7}: {launches[mode]} launches, median {res[mode][-1] * 1e3:.3f} ms/token "
                  f"({1 / res[mode][-1]:.2f} tok/s)", flush=True)
    fu, un = float(np.median(res["fused"])), float(np.median(res["unfused"]))
    print(f"median over rounds ({a.weights}): fused {fu * 1e3:.3f} ms, unfused {un * 1e3:.3f} ms, "
          f"fused speed-up {un / fu:.4f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": "H200", "commit": git_commit(),
                       "command": "python bench/fuse_norm_ab.py " + " ".join(argv or sys.argv[1:]),
                       "context": a.context, "weights": a.weights, "decode_launches": launches,
                       "per_round_s": res, "fused_s": fu, "unfused_s": un, "speedup": un / fu}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
