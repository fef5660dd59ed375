"""Batched-decode probe: the 27B decode step at B sequences (synthetic weights) under kernel-family variants, one
engine per variant built and timed in turn (not alternated: a first look at differences of more than a few percent;
``--repeat-first`` times the first variant's engine again at the end for the order's spread). Each engine runs
``ninferc.bench.run_bench`` at one prompt length with ``batch`` = B: its ``batch_decode`` row (aggregate tok/s of
graph-replayed B-sequence steps) and the one-sequence decode of the same engine.

A variant is ``NAME`` or ``NAME:family.attr=value;...`` as in ``bench/family_ab.py``, e.g.
``now dp4:gemv.w8_mma_tiles=();gemv.w8_dp_tiles=(1,4)``.

``--tokens-per-seq T`` also times, in each variant's engine, one sequence x T tokens through the verify program (the
speculative verify step of T - 1 drafts: the engine carries the synthetic MTP head) and the prefill program, against
its one-token step (``ninferc.bench.multi_token_steps``): the multi-token step's ratio per variant.

Usage (GPU machine): python bench/batch_ab.py --weights w8 --batch 4 [--context 512] [--steps 32] [--tokens-per-seq T]
[--repeat-first] [--json FILE] VARIANT [VARIANT ...]
"""

from __future__ import annotations

import argparse
import gc
import sys

from ab import write_json
from family_ab import with_repeat

from ninferc.targets.kernels import FAMILIES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--weights", default="w8")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--tokens-per-seq", type=int, default=0, help="also one sequence x T tokens (T >= 2)")
    ap.add_argument("--repeat-first", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from ninferc.targets.lower import MAX_DRAFT_TOKENS

    if a.tokens_per_seq and not 2 <= a.tokens_per_seq <= MAX_DRAFT_TOKENS + 1:
        ap.error(f"--tokens-per-seq {a.tokens_per_seq}: give 2 <= T <= {MAX_DRAFT_TOKENS + 1} (T = 1 is the decode "
                 f"step every variant times; the verify program takes at most {MAX_DRAFT_TOKENS} drafts + 1)")
    tps = (a.tokens_per_seq,) if a.tokens_per_seq else ()
    from ninferc.bench import run_bench, synthetic_artifact
    from ninferc.ir.quant import recipe_name
    from ninferc.runtime.engine import Engine
    from ninferc.runtime.kernels import cupy

    parsed = with_repeat(a.variants, a.repeat_first)
    keys = {k for _, s in parsed for k in s}
    defaults = {k: getattr(FAMILIES[k[0]], k[1]) for k in keys}
    max_ctx = a.context + 2 * a.steps + a.tokens_per_seq + 8  # as ninferc bench: + the multi-token steps
    rows = {}
    for name, sets in parsed:
        for (fam, attr), v in {**defaults, **sets}.items():
            setattr(FAMILIES[fam], attr, v)
        art = synthetic_artifact("qwen3.8-27b", recipe_name(a.weights), "bf16", target=None,
                                 max_context=max_ctx, batch=a.batch, mtp=bool(tps))
        eng = Engine(art, max_context=max_ctx, prefill_chunk=a.context, max_batch=a.batch,
                     max_logit_rows=max((a.batch, *tps)), spec_tokens=a.tokens_per_seq - 1 if tps else 0)
        res = run_bench(eng, prompt_tokens=[a.context], decode_tokens=a.steps, chunk=a.context, batch=a.batch,
                        log=lambda m: None, tokens_per_seq=tps)
        b = res["batch_decode"][0]
        rows[name] = {"batch_tok_s": b["tok_s"], "batch_step_ms": b["median_step_ms"],
                      "single_tok_s": res["decode"][0]["tok_s"], "settings": {f"{f}.{t}": repr(v) for (f, t), v in sets.items()}}
        line = (f"{name}: {a.batch} sequences {b['tok_s']:.1f} tok/s ({b['median_step_ms']:.2f} ms per step); one "
                f"sequence {res['decode'][0]['tok_s']:.2f} tok/s")
        if tps:  # (multi_token_steps' rows start with the one-token step)
            m = next(r for r in res["tokens_per_seq"] if r["tokens"] == a.tokens_per_seq)
            rows[name].update(verify_step_ms=m["verify_median_step_ms"], verify_ratio=m["verify_ratio_to_one"],
                              prefill_step_ms=m["median_step_ms"], prefill_ratio=m["ratio_to_one"])
            line += (f"; one sequence x {a.tokens_per_seq} tokens: verify {m['verify_median_step_ms']:.2f} ms "
                     f"({m['verify_ratio_to_one']:.3f}x), prefill program {m['median_step_ms']:.2f} ms "
                     f"({m['ratio_to_one']:.3f}x)")
        print(line, flush=True)
        del eng, art
        gc.collect()  # the engine's CUDA graphs and kernels sit in reference cycles: free its 55 GB before the next
        cupy().get_default_memory_pool().free_all_blocks()
    for (fam, attr), v in defaults.items():
        setattr(FAMILIES[fam], attr, v)
    first = parsed[0][0]
    for n, r in rows.items():
        print(f"{n}: batched step {rows[first]['batch_step_ms'] / r['batch_step_ms']:.4f}x vs {first}")
    write_json(a.json, "bench/batch_ab.py", argv, weights=a.weights, batch=a.batch, context=a.context,
               tokens_per_seq=a.tokens_per_seq or None, variants=a.variants, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
