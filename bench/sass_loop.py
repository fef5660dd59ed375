"""Instruction mix of a kernel's hot loops, from its SASS (no GPU): the GEMV variants the family would launch for
T tokens of one problem, compiled for one arch, disassembled with ``nvdisasm``, split at the SASS labels, and every
block with at least ``--min-math`` math instructions (FFMA, HMMA, IDP, IMMA) printed with its instruction count and
its most frequent opcodes. Used on 2026-12-06 (bench/NOTES.md, after run 216) to find why a 4-token bf16 GEMV costs
more than its weight reads: each token's block re-converted every weight vector.

``nvdisasm`` is not a project requirement: it comes with a CUDA toolkit, or from the ``nvidia-cuda-nvdisasm`` wheel
(``pip download --no-deps nvidia-cuda-nvdisasm`` and unzip: ``nvidia/cu13/bin/nvdisasm``); ``--nvdisasm PATH``
or ``$NVDISASM`` names it.

Usage: python bench/sass_loop.py --arch sm_90 --k 5120 --n 17408 --epilogue swiglu --in-norm parts --tokens 4
[--wfmt bf16] [--threads 256] [VARIANT]   (VARIANT: ``NAME:gemv.attr=value;...`` as bench/family_ab.py's)
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

MATH_OPS = ("FFMA", "HMMA", "IDP", "IMMA")
LABEL = re.compile(r"^\.L_x_\d+:")
OPCODE = re.compile(r"\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*)")


def sass_blocks(sass: str) -> list[tuple[str, collections.Counter]]:
    """Split ``nvdisasm -c`` output at its labels: [(label, Counter of base opcodes)], in order (the first block,
    before any label, is named ``entry``). The base opcode drops modifiers (``LDG.E.128`` -> ``LDG``)."""
    blocks, name, ops = [], "entry", collections.Counter()
    for line in sass.splitlines():
        if LABEL.match(line):
            blocks.append((name, ops))
            name, ops = line.strip().rstrip(":"), collections.Counter()
            continue
        m = OPCODE.search(line)
        if m:
            ops[m.group(1)] += 1
    blocks.append((name, ops))
    return blocks


def hot_blocks(sass: str, min_math: int) -> list[tuple[str, int, collections.Counter]]:
    """The blocks of :func:`sass_blocks` with at least ``min_math`` math instructions: (label, instructions, ops)."""
    return [(n, sum(o.values()), o) for n, o in sass_blocks(sass) if sum(o[m] for m in MATH_OPS) >= min_math]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant", nargs="?", default="now")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--epilogue", default="store")
    ap.add_argument("--wfmt", default="bf16")
    ap.add_argument("--in-norm", default="none")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="only variants of this CTA size")
    ap.add_argument("--min-math", type=int, default=16)
    ap.add_argument("--nvdisasm", default=os.environ.get("NVDISASM", "nvdisasm"))
    a = ap.parse_args(argv)

    from family_ab import parse_variant

    from ninferc.targets.kernels import FAMILIES
    from ninferc.targets.kernels.gemv import GemvProblem
    from ninferc.targets.plan import compile_variants

    name, sets = parse_variant(a.variant)
    for (fam, attr), v in sets.items():
        setattr(FAMILIES[fam], attr, v)
    gemv = FAMILIES["gemv"]
    prob = GemvProblem(a.k, a.n, a.epilogue, a.wfmt, in_norm=a.in_norm)
    tile = gemv.tile_for(a.tokens, a.wfmt)
    specs = [s for s in gemv.variants(prob) if s.param("max_tokens") == tile and (not a.threads or s.threads == a.threads)]
    if not specs:
        raise SystemExit(f"no gemv variant of tile {tile} (T = {a.tokens}) with {a.threads or 'any'} threads")
    compiled = compile_variants(specs, a.arch)
    print(f"variant {name}: {prob}, T = {a.tokens} (tile {tile}), {a.arch}")
    for uri, (res, kr) in compiled.items():
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(res.cubin)
            f.flush()
            try:
                sass = subprocess.run([a.nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError) as e:
                raise SystemExit(f"nvdisasm ({a.nvdisasm}) failed: {e}; give --nvdisasm PATH (module docstring)")
        print(f"{uri}: {kr.registers} registers, {kr.local_bytes} B local")
        for label, n, ops in hot_blocks(sass, a.min_math):
            print(f"  {label}: {n} instructions, {dict(ops.most_common(8))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
