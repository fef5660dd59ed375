"""Folded-norm A/B in one process: the 27B decode step (synthetic weights) with every AddRMSNorm between two
Linears done by the GEMVs on either side (the producer's ``add_norm_parts`` epilogue, the consumer's
``in_norm="parts"``: 129 fewer launches per token, no grid barrier) and with every norm as its own ``rmsnorm``
kernel (``lower(..., fuse_norm=False)``), each captured as a CUDA graph and replayed alternately (ABAB) at one
context; median per-token latency of each. Same engine, weights and sequence state -- only the lowered
program differs -- so run-to-run drift of the device cancels (bench/ab.py).

Usage (GPU machine): python bench/fuse_norm_ab.py [--weights bf16|w8|w4] [--context 512] [--steps 40]
[--rounds 3] [--json FILE]
"""

from __future__ import annotations

import sys

from ab import alternate, arg_parser, medians, preset_engine, write_json

from ninferc.targets.lower import lower


def main(argv=None) -> int:
    a = arg_parser("bf16").parse_args(argv)
    max_ctx = a.context + (a.steps + 3) * a.rounds * 2 + 16
    eng, s, tok = preset_engine(a.weights, max_ctx, a.context)
    programs = {"fused": eng.program,
                "unfused": lower(eng.graph, page_size=eng.page_size, max_context=max_ctx, fuse_norm=False)}

    def use(mode):
        def switch():
            eng.use_program(programs[mode])  # compiles the unfused program's own GEMVs once; recaptures the graph
        return switch

    res = alternate({m: (use(m), s) for m in programs}, {m: tok for m in programs}, rounds=a.rounds, steps=a.steps,
                    recapture=True)
    launches = {}
    for m in programs:
        use(m)()
        launches[m] = len(eng.step_plan("decode", 1, 1, 1).launches)
    med = medians(res)
    fu, un = med["fused"], med["unfused"]
    print(f"median over rounds ({a.weights}): fused {fu * 1e3:.3f} ms ({launches['fused']} launches), unfused "
          f"{un * 1e3:.3f} ms ({launches['unfused']} launches), fused speed-up {un / fu:.4f}x")
    write_json(a.json, "bench/fuse_norm_ab.py", argv, context=a.context, weights=a.weights, decode_launches=launches,
               per_round_s=res, fused_s=fu, unfused_s=un, speedup=un / fu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
