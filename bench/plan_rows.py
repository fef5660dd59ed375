"""The 27B decode step's GEMV launch rows (kernel, threads, registers, local bytes, CTAs/SM, grid at B = 1) under
kernel-family variants, compiled by this machine's NVRTC -- on the device, the registers and grids the engines of
``bench/family_ab.py`` get (its NVRTC can differ from the CPU machine's by several registers per kernel).

Usage: python bench/plan_rows.py --weights w4 VARIANT [VARIANT ...] [--target sm_90 --sku h200]
(variants as ``bench/family_ab.py``'s: ``NAME`` or ``NAME:family.attr=value;...``).
"""

from __future__ import annotations

import argparse
import sys

from family_ab import parse_variant

from ninferc.targets.kernels import FAMILIES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--weights", default="w4", choices=["bf16", "w8", "w4"])
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--sku", default="h200")
    a = ap.parse_args(argv)
    from ninferc.cli import main as cli

    parsed = [parse_variant(v) for v in a.variants]
    defaults = {k: getattr(FAMILIES[k[0]], k[1]) for _, s in parsed for k in s}
    for name, sets in parsed:
        for (fam, attr), v in {**defaults, **sets}.items():
            setattr(FAMILIES[fam], attr, v)
        print(f"== {name} ({sets or 'family defaults'})", flush=True)
        try:
            cli(["plan", "--target", a.target, "--sku", a.sku, "--preset", "qwen3.8-27b", "--weights", a.weights,
                 "--batch", "1", "--tokens", "1"], standalone_mode=False)
        except SystemExit as exc:  # click's exit after the command
            if exc.code:
                raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
