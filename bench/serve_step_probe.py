"""Where a serving decode step's time goes on the CUDA engine: the per-step wall time of the server's backend
(:class:`~ninferc.runtime.cuda_backend.CudaBatchBackend`: ``decode`` = metadata upload + graph replay, then
``sample`` = the GPU sampler + reading the ids back; until 2026-12-05 also a non-finite reduction over the logits)
against the captured decode graph alone, replayed back to back with one synchronisation per step, at B = 1, 2, 4, 8 sequences.

The difference is host time the GPU waits for between steps when each step is read before the next is launched.
The server's decode ahead (``ahead_step_ms``: ``decode_next`` + ``sample_async`` queued before the previous
step's ``result()``) is timed the same way beside it. Usage (on a GPU)::

    python bench/serve_step_probe.py model.ninfer [--steps 100] [--json out.json]
    python bench/serve_step_probe.py --preset qwen3.8-27b [--weights w4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifact", nargs="?")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--weights", default="bf16")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.runtime.paged_kv import Sequence
    from ninferc.sampling import HostSampler, SamplingParams

    bs = [int(x) for x in a.batches.split(",")]
    ctx, page = 1024, None
    if a.preset:
        from ninferc.bench import synthetic_artifact
        from ninferc.ir.quant import recipe_name

        art = synthetic_artifact(a.preset, recipe_name(a.weights, None), "bf16", target=None,
                                 max_context=ctx, batch=max(bs))
    else:
        from ninferc.artifact import Artifact

        art = Artifact.open(a.artifact)
    page = int(art.header["compile"]["page_size"])
    per = -(-ctx // page)
    be = CudaBatchBackend(art, max_context=ctx, num_slots=max(bs), num_pages=max(bs) * per, prefill_chunk=256)
    e = be.engine
    out = {"artifact": a.artifact or f"{a.preset} {a.weights} (synthetic)", "rows": []}
    for B in bs:  # noqa: N806
        seqs = [Sequence(slot=i, pages=list(range(i * per, (i + 1) * per))) for i in range(B)]
        for s in seqs:
            be.prefill(s, list(range(1, 65)))
        rows = [(HostSampler(SamplingParams()), None) for _ in range(B)]
        toks = [1] * B
        for _ in range(3):  # capture + warm
            toks = [x.token for x in be.sample(be.decode(seqs, toks), rows)]
        wall, t_dec, t_smp = [], [], []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            lg = be.decode(seqs, toks)
            t1 = time.perf_counter()
            toks = [x.token for x in be.sample(lg, rows)]
            t2 = time.perf_counter()
            wall.append(t2 - t0)
            t_dec.append(t1 - t0)
            t_smp.append(t2 - t1)
        pend = be.sample_async(be.decode(seqs, toks), rows)
        ahead = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            nxt = be.sample_async(be.decode_next(seqs, pend), rows)
            pend.result()
            pend = nxt
            ahead.append(time.perf_counter() - t0)
        pend.result()
        g = e.model_graph(B)
        gl = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            g.launch(stream=e.stream)
            e.stream.synchronize()
            gl.append(time.perf_counter() - t0)
        r = {"batch": B, "backend_step_ms": statistics.median(wall) * 1e3,
             "decode_call_ms": statistics.median(t_dec) * 1e3, "sample_call_ms": statistics.median(t_smp) * 1e3,
             "graph_only_ms": statistics.median(gl) * 1e3, "ahead_step_ms": statistics.median(ahead) * 1e3}
        r["host_ms"] = r["backend_step_ms"] - r["graph_only_ms"]
        out["rows"].append(r)
        print(f"B={B}: backend step {r['backend_step_ms']:.3f} ms (decode call {r['decode_call_ms']:.3f}, sample call "
              f"{r['sample_call_ms']:.3f}) vs graph alone {r['graph_only_ms']:.3f} ms: host {r['host_ms']:.3f} ms; decode "
              f"ahead {r['ahead_step_ms']:.3f} ms per step")
        for s in seqs:
            s.length = 0
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
