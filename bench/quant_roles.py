"""Which w4 tensors cost the fixture its top-1 agreement: the w4 recipe with one tensor role (or layer range) kept
at w8 (or bf16), CPU numpy reference, the sets of bench/quant_fidelity.py (240 short golden positions, 3,031 long).

A recipe assigns formats per tensor *class* (attention, GDN, MLP, ...); this finer ablation overrides the w4
recipe's format per IR param name (a regular expression), to see whether any recipe that keeps a few sensitive
tensors wider -- as llama.cpp's Q4_K_M keeps ffn_down / attn_v at 6 bits -- reaches issue 6's 0.90 on the long
prompt. Columns: top-1 agreement with the bf16 model (short / long / all 3,271 positions), mean KL (short / long),
and the fixture's stored weight bytes under that mix.

Usage: ``python bench/quant_roles.py [--json bench/results/quant_roles_cpu.json]``
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quant_fidelity import _git, long_logits, short_logits  # noqa: E402

from ninferc.checkpoint import Checkpoint  # noqa: E402
from ninferc.fidelity import compare  # noqa: E402
from ninferc.ir.qwen3_5 import build_graph  # noqa: E402
from ninferc.ir.quant import FakeQuantWeights, FormatPlan, assign_formats  # noqa: E402
from ninferc.ir.reference import ReferenceExecutor  # noqa: E402
from ninferc.testing import models_dir  # noqa: E402

#: (label, IR param names matched, format they take instead of w4)
MIXES = [
    ("w4", r"^$", "w8"),
    ("mlp.down w8", r"mlp\.down$", "w8"),
    ("mlp.gate+up w8", r"mlp\.(gate|up)$", "w8"),
    ("gdn.out w8", r"gdn\.out$", "w8"),
    ("gdn.in_* w8", r"gdn\.in_", "w8"),
    ("gdn.in_a/in_b bf16", r"gdn\.in_[ab]$", "bf16"),
    ("attn.v w8", r"attn\.v$", "w8"),
    ("attn.o w8", r"attn\.o$", "w8"),
    ("mlp.down + gdn.out w8", r"mlp\.down$|gdn\.out$", "w8"),
    ("layers 0, 7 w8", r"^L(0|7)\.", "w8"),
    ("layers 0-3 w8", r"^L[0-3]\.", "w8"),
    ("layers 4-7 w8", r"^L[4-7]\.", "w8"),
    ("all but mlp.gate+up w8", r"^(?!.*mlp\.(gate|up)$)", "w8"),
]


def main(argv=None) -> int:
    """Run every mix of :data:`MIXES`, print one row each, write ``--json`` with provenance. Returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent / "results" / "quant_roles_cpu.json"))
    a = ap.parse_args(argv)
    ckpt = Checkpoint(models_dir() / "qwen35-tiny-code", notice=None)
    goldens = json.loads((ckpt.dir / "goldens.json").read_text())
    gl = json.loads((ckpt.dir / "goldens-long.json").read_text())
    graph = build_graph(ckpt.config)
    ref = ReferenceExecutor(graph, FakeQuantWeights(ckpt, ckpt.specs, "bf16"))
    rs, rl = short_logits(ref, goldens), long_logits(ref, gl)
    base = assign_formats(ckpt.specs, "w4")
    rows = []
    for label, pattern, fmt in MIXES:
        formats = {n: (fmt if f == "w4" and re.search(pattern, n) else f) for n, f in base.formats.items()}
        fq = FakeQuantWeights(ckpt, ckpt.specs, "w4")
        fq.plan = FormatPlan(formats, base.fallbacks, base.recipe)
        ex = ReferenceExecutor(graph, fq)
        s, lg = compare(rs, short_logits(ex, goldens)), compare(rl, long_logits(ex, gl))
        every = (s["top1_agreement"] * s["positions"] + lg["top1_agreement"] * lg["positions"]) / (
            s["positions"] + lg["positions"])
        row = {"mix": label, "pattern": pattern, "format": fmt, "short": s, "long": lg, "all_top1_agreement": every,
               "weight_bytes": int(sum(fq.plan.nbytes(ckpt.specs).values())),
               "wider": sorted(n for n in formats if formats[n] != base.formats[n])}
        rows.append(row)
        print(f"{label:26s} top-1 short {s['top1_agreement']:.4f} long {lg['top1_agreement']:.4f} all {every:.4f}  "
              f"KL {s['kl_mean']:.4f} / {lg['kl_mean']:.4f}  bytes {row['weight_bytes']:,}", flush=True)
    Path(a.json).write_text(json.dumps({"what": __doc__.split("\n\n")[0], "command": "python bench/quant_roles.py",
                                        "commit": _git("rev-parse", "--short", "HEAD"), "fixture": "qwen35-tiny-code",
                                        "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
