"""Programmatic dependent launch A/B in one process: the 27B decode step (synthetic weights) captured as a CUDA
graph with PDL launches and without, replayed alternately (ABABAB) at one context, median per-token latency of
each. Same engine, same weights, same sequence state -- only the launch attribute differs -- so run-to-run
drift of the device cancels (bench/ab.py).

Usage (GPU machine): python bench/pdl_ab.py [--weights bf16] [--context 512] [--steps 40] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import sys

from ab import alternate, arg_parser, medians, preset_engine, write_json


def main(argv=None) -> int:
    a = arg_parser("bf16").parse_args(argv)
    max_ctx = a.context + (a.steps + 3) * a.rounds * 2 + 16
    eng, s, tok = preset_engine(a.weights, max_ctx, a.context)
    if not eng.pdl:
        print("PDL is off on this device (needs sm_90+ and NINFERC_PDL != 0); nothing to compare")
        return 1

    def use(pdl):
        def switch():
            eng.pdl = pdl
            eng._graphs.clear()  # recapture the decode graph with (or without) the PDL attribute
        return switch

    res = alternate({"pdl": (use(True), s), "no_pdl": (use(False), s)}, {"pdl": tok, "no_pdl": tok},
                    rounds=a.rounds, steps=a.steps, recapture=True)
    med = medians(res)
    pdl, nopdl = med["pdl"], med["no_pdl"]
    print(f"median over rounds: PDL {pdl * 1e3:.3f} ms, no PDL {nopdl * 1e3:.3f} ms, PDL speed-up {nopdl / pdl:.4f}x")
    write_json(a.json, "bench/pdl_ab.py", argv, context=a.context, weights=a.weights, per_round_s=res, pdl_s=pdl,
               no_pdl_s=nopdl, speedup=nopdl / pdl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
