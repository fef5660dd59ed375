"""GEMV L2-prefetch depth A/B in one process: the 27B decode step (synthetic weights) with the GEMV kernels
prefetching S K steps of each weight row into L2 before their PDL wait (``GemvFamily.prefetch_steps``),
one engine per S, all alive at once, their CUDA-graph-replayed decode steps timed in alternation (ABCABC) at
one context; median per-token latency of each. Only the kernels' prologue differs, so device drift cancels
(bench/ab.py).

Usage (GPU machine): python bench/prefetch_ab.py [--weights w8] [--steps-list 1,4,8] [--context 512]
[--steps 40] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import sys

from ab import alternate, arg_parser, medians, preset_engine, write_json

from ninferc.targets.kernels import FAMILIES


def main(argv=None) -> int:
    ap = arg_parser("w8")
    ap.add_argument("--steps-list", default="1,4,8")
    a = ap.parse_args(argv)
    fam = FAMILIES["gemv"]  # the family the lowering and the engine's step plans use
    max_ctx = a.context + (a.steps + 3) * a.rounds + 16
    variants, toks = {}, {}
    for depth in [int(x) for x in a.steps_list.split(",")]:
        fam.prefetch_steps = depth
        _, s, toks[str(depth)] = preset_engine(a.weights, max_ctx, a.context)

        def switch(d=depth):
            fam.prefetch_steps = d  # any step plan derived now must name this engine's kernels
        variants[str(depth)] = (switch, s)
        print(f"engine with prefetch_steps {depth} ready", flush=True)
    res = alternate(variants, toks, rounds=a.rounds, steps=a.steps, recapture=False)
    med = medians(res)
    base = med[min(med, key=int)]
    for d, m in med.items():
        print(f"prefetch_steps {d}: {m * 1e3:.3f} ms/token ({1 / m:.2f} tok/s), speed-up vs {min(med, key=int)}: "
              f"{base / m:.4f}x")
    write_json(a.json, "bench/prefetch_ab.py", argv, context=a.context, weights=a.weights, per_round_s=res,
               median_s=med)
    return 0


if __name__ == "__main__":
    sys.exit(main())
