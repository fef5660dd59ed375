"""Device probe: what the host-side work between two decode steps costs the GPU.

``Session.decode_stream`` used to run, per token: the metadata upload (``Engine.write_meta``: a pinned host block
copied to the device on the engine stream), the captured decode graph (model + greedy sampler), and a 4-byte copy of
the sampled id to pinned host memory, with one step queued ahead. This replays the 27B decode graph (synthetic
weights) in that loop with and without the metadata upload and the id copy (timing only: without the upload the
positions run on as the sampler advances them, over KV pages the sequence does not own) and prints the median time
between consecutive steps' completions of each, so the GPU time those two stream operations add per token is
measured rather than guessed; then ``decode_stream`` itself (since run 174 it uploads metadata only when a page is
added or an id half fills, and copies nothing), timed as ``ninferc bench`` times it (median gap between ids).

Usage (GPU machine): python bench/step_gap_probe.py [--weights w8] [--context 512] [--max-context 8248]
[--steps 64] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from ab import preset_engine  # noqa: E402

from ninferc.bench import git_commit  # noqa: E402
from ninferc.runtime.kernels import cupy  # noqa: E402
from ninferc.sampling import SamplingParams  # noqa: E402


def run_loop(e, s, steps: int, meta: bool, copy: bool) -> float:
    """Median seconds between consecutive step completions of ``steps`` graph replays with one step queued ahead
    (as decode_stream), with or without the metadata upload (``meta``) and the id copy (``copy``)."""
    cp = e.cp
    host = cp.cuda.alloc_pinned_memory(8)
    seq = s.seq
    g = e.decode_graph(1, True)
    evs = []

    def launch(i: int) -> None:
        if meta:
            e.write_meta(tok_pos=[seq.length], tok_seq=[0], seq_start=[0, 1], seq_ctx=[seq.length + 1],
                         seq_slot=[seq.slot], row_index=[0], page_rows=[seq.pages])
        g.launch(stream=e.stream)
        if copy:
            cp.cuda.runtime.memcpyAsync(host.ptr + 4 * (i % 2), e.tokens.data.ptr, 4,
                                        cp.cuda.runtime.memcpyDeviceToHost, e.stream.ptr)
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(e.stream)
        evs.append(ev)

    e.stream.synchronize()
    done = []
    launch(0)
    for i in range(1, steps + 1):
        if i < steps:
            launch(i)
        evs[i - 1].synchronize()
        done.append(time.perf_counter())
    return float(np.median(np.diff(done)))


def main(argv=None) -> int:
    """Print the median step-to-step time of each loop form and its difference to the full loop. Returns 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default="w8")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--max-context", type=int, default=8248)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cp = cupy()
    e, s, _ = preset_engine(a.weights, a.max_context, a.context)
    forms = {"meta+copy": (True, True), "copy only": (False, True), "meta only": (True, False),
             "graph only": (False, False)}
    times = {k: [] for k in (*forms, "decode_stream")}
    greedy = SamplingParams()
    with e.stream:
        run_loop(e, s, 8, True, True)  # warm-up (graph capture)
        for _ in range(a.rounds):
            for k, (m, c) in forms.items():
                times[k].append(run_loop(e, s, a.steps, m, c))
            s.sample(greedy)
            done = [time.perf_counter()]
            for _ in s.decode_stream(greedy, a.steps):
                done.append(time.perf_counter())
            times["decode_stream"].append(float(np.median(np.diff(done[1:]))))
    med = {k: float(np.median(v)) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:10s} {v * 1e3:.4f} ms per step ({(med['meta+copy'] - v) * 1e6:+.1f} us vs meta+copy)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "commit": git_commit(),
                       "command": "python bench/step_gap_probe.py " + " ".join(argv or sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"), "weights": a.weights, "context": a.context,
                       "max_context": a.max_context, "steps": a.steps, "per_round_s": times, "median_s": med}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
