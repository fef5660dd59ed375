"""Kernel-family parameter A/B in one process: the 27B decode step (synthetic weights) under variants that differ
only in attributes of the registered kernel families (``ninferc.targets.kernels.FAMILIES``), one engine per
variant, all alive at once, their graph-replayed decode steps (+ greedy sampler) timed in alternation (ABAB...)
at one context; median per-token latency of each and its ratio to the first variant (bench/ab.py).

A variant is ``NAME`` or ``NAME:family.attr=value;family.attr=value`` (values are Python literals), e.g.
``now fma:gemv.w8_dp_tiles=() one_cta_argmax:sample.split_argmax=False``. Each variant's engine is built, and each of its rounds timed, with
its attributes set (and every other variant's reverted to the family defaults).

Usage (GPU machine): python bench/family_ab.py --weights w8 VARIANT [VARIANT ...] [--context 512] [--steps 40]
[--rounds 3] [--max-context N] [--kv-dtype bf16|int8] [--json FILE]

``--repeat-first`` builds a second engine of the first variant last and times it last in every round
(``<first>_again``): the two engines of the same kernels show the harness's own spread in that process (bench/NOTES.md
run 165: three identical engines differed by ~0.2 %, the first one slower), to read the other ratios against.

``--max-context`` sets the engines' KV capacity (default: just what the rounds need); the attention decode's split
count follows it, so ``ninferc bench``'s setting (one engine for 512- and 8,192-token prompts) is ``--max-context
8248``.
"""

from __future__ import annotations

import ast
import sys

from ab import alternate, arg_parser, medians, preset_engine, write_json

from ninferc.targets.kernels import FAMILIES


def parse_variant(text: str) -> tuple[str, dict[tuple[str, str], object]]:
    """``NAME[:family.attr=value;...]`` -> (NAME, {(family, attr): value}).

    Raises:
        SystemExit: a malformed setting, an unknown family, or an attribute the family does not have."""
    name, _, rest = text.partition(":")
    sets = {}
    for item in filter(None, (x.strip() for x in rest.split(";"))):
        key, eq, val = item.partition("=")
        fam, dot, attr = key.strip().partition(".")
        if not eq or not dot:
            raise SystemExit(f"variant {text!r}: setting {item!r} is not family.attr=value")
        if fam not in FAMILIES or not hasattr(FAMILIES[fam], attr):
            raise SystemExit(f"variant {text!r}: {fam}.{attr} is not an attribute of a registered family "
                             f"(families: {sorted(FAMILIES)})")
        sets[(fam, attr)] = ast.literal_eval(val.strip())
    return name, sets


def with_repeat(texts: list[str], repeat_first: bool) -> list[tuple[str, dict[tuple[str, str], object]]]:
    """The parsed variants (:func:`parse_variant`), plus -- with ``repeat_first`` -- the first one again, last, named
    ``<first>_again``.

    Raises:
        SystemExit: a malformed variant, or two variants of one name (each gets its own engine and result row)."""
    parsed = [parse_variant(v) for v in texts]
    if repeat_first:
        parsed.append((parsed[0][0] + "_again", parsed[0][1]))
    names = [n for n, _ in parsed]
    if len(set(names)) != len(names):
        raise SystemExit(f"variant names must differ (each is one engine and one result row): {names}")
    return parsed


def main(argv=None) -> int:
    ap = arg_parser("w8")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--max-context", type=int, default=None)
    ap.add_argument("--kv-dtype", default="bf16", choices=["bf16", "int8"])
    ap.add_argument("--repeat-first", action="store_true",
                    help="also build the first variant's engine again, last, and report the two engines' spread")
    a = ap.parse_args(argv)
    parsed = with_repeat(a.variants, a.repeat_first)
    keys = {k for _, s in parsed for k in s}
    defaults = {k: getattr(FAMILIES[k[0]], k[1]) for k in keys}
    max_ctx = a.context + (a.steps + 3) * a.rounds + 16
    if a.max_context is not None:
        if a.max_context < max_ctx:
            raise SystemExit(f"--max-context {a.max_context} is below the {max_ctx} tokens the rounds need")
        max_ctx = a.max_context
    variants, toks = {}, {}
    for name, sets in parsed:
        def switch(sets=sets):
            for (fam, attr), v in {**defaults, **sets}.items():
                setattr(FAMILIES[fam], attr, v)
        switch()
        _, s, toks[name] = preset_engine(a.weights, max_ctx, a.context, kv_dtype=a.kv_dtype)
        variants[name] = (switch, s)
        print(f"engine {name} ready ({sets or 'family defaults'})", flush=True)
    res = alternate(variants, toks, rounds=a.rounds, steps=a.steps, recapture=False)
    med = medians(res)
    first = parsed[0][0]
    for n, m in med.items():
        print(f"{n}: {m * 1e3:.3f} ms/token ({1 / m:.2f} tok/s), speed-up vs {first}: {med[first] / m:.4f}x")
    spread = None
    if a.repeat_first:
        spread = med[first] / med[parsed[-1][0]]
        print(f"instance spread ({first} vs {parsed[-1][0]}, the same kernels): {spread:.4f}x -- ratios closer to 1 "
              "than this are ties")
    write_json(a.json, "bench/family_ab.py", argv, context=a.context, max_context=max_ctx, weights=a.weights,
               kv_dtype=a.kv_dtype,
               variants=a.variants,
               per_round_s=res, median_s=med, instance_spread=spread)
    return 0


if __name__ == "__main__":
    sys.exit(main())
