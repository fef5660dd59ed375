"""Fidelity of the quantised weight recipes on the fixture, and their decode roofline at the 27B shape.

CPU only (numpy reference executor, no GPU). For each recipe the unfused fixture graph runs teacher-
forced over

* ``short``: the five cases of ``goldens.json`` (prompt + greedy ids in one forward per case), scored at
  the 240 golden positions (the logits that predict each golden greedy token), and
* ``long``: ``goldens-long.json`` (3,000-token prompt + 31 of the greedy ids, prefilled in 1,024-token
  chunks), scored at every one of its 3,031 positions,

with bf16 weights (the reference) and with fake-quantised weights (``ninferc.ir.quant.fake_quant``:
dequantised fp32). Columns: top-1 agreement with the bf16 model's own argmax; the same restricted to
positions where the bf16 model's own top-1 margin > 0.25 (``agr@m>.25``: near-ties, which any
perturbation flips, excluded); mean and max KL(bf16 || quant) per position (nats); max |Δlogit|;
greedy-token agreement with the goldens' greedy ids where the golden top-1 margin > 0.5 (short: the
greedy positions; long: the continuation and the sampled prompt positions of ``prompt_top5_at``).
The last fidelity row is the w4 recipe under the symmetric [-7, 7] rule the quantiser rejected.

Then the bytes one decode token reads for the weights of the ``qwen3.8-27b`` preset under each recipe
(codes + scales; every weight except the embedding, which counts one row; norms and other small
params at their bf16 checkpoint size; no KV or GDN-state traffic) and the roofline tok/s at 4,173 GB/s.

Usage: ``python bench/quant_fidelity.py [--json bench/results/quant_fidelity_cpu.json] [--no-long]
[--recipe R ...]``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ninferc.checkpoint import Checkpoint
from ninferc.fidelity import (GREEDY_MARGIN_Q, REF_MARGIN, compare, greedy, long_golden_targets,  # noqa: F401
                              short_greedy_targets)
from ninferc.ir.config import preset
from ninferc.ir.graph import DTYPE_BYTES
from ninferc.ir.qwen3_5 import build_graph, param_specs
from ninferc.ir.quant import GROUP_SIZE, FakeQuantWeights, assign_formats, fake_quant, nbytes_as, recipe
from ninferc.ir.reference import ReferenceExecutor
from ninferc.testing import models_dir

REPO = Path(__file__).resolve().parents[1]
#: bandwidth the roofline is quoted at (GB/s, 1e9 B/s), as the brief for issue 6 gives it
ROOFLINE_GBPS = 4173.0
PREFILL_CHUNK = 1024
#: the recipes measured: the three shipped ones, then ablations (one class changed, or one class alone)
RECIPES = [
    "bf16", "w8", "w4",
    "w8,lm_head=w8", "w8,lm_head=w8,embedding=w8",
    "w4,lm_head=bf16,embedding=bf16", "w4,lm_head=w4", "w4,embedding=w4",
    "bf16,mlp=w4", "bf16,attention=w4", "bf16,gdn=w4", "bf16,lm_head=w4", "bf16,embedding=w4",
]
#: the w4 rule the quantiser rejected (codes [-7, 7], scale max|w| / 7), measured for the record
SYM7 = "w4 [-7,7] max/7 (rejected rule)"
ROOFLINE_RECIPES = ["bf16", "w8", "w8,lm_head=w8", "w4", "w4,lm_head=bf16", "w4,lm_head=w4"]


class Sym7FakeQuant(FakeQuantWeights):
    """The w4 recipe's weights under the rejected symmetric rule: per group of 64, scale = max|w| / 7,
    q = clip(rint(w / scale), -7, 7), dequantised fp32 (w8 params as in ninferc.ir.quant)."""

    def __getitem__(self, name: str) -> np.ndarray:
        if self.plan.formats.get(name) != "w4":
            return super().__getitem__(name)
        w = np.asarray(self.weights[name]).astype(np.float32)
        N, K = w.shape
        g = w.reshape(N, K // GROUP_SIZE, GROUP_SIZE)
        s = (np.abs(g).max(-1, keepdims=True) / np.float32(7)).astype(np.float32)
        s[s == 0] = 1
        return (np.clip(np.rint(g / s), -7, 7) * s).astype(np.float32).reshape(N, K)




def short_logits(ex: ReferenceExecutor, goldens: dict) -> np.ndarray:
    """Logits [240, V] at the golden positions of goldens.json (one teacher-forced forward per case)."""
    rows = []
    for case in goldens["cases"]:
        P, n = len(case["prompt_ids"]), len(case["greedy_ids"])
        logits = ex.forward(case["prompt_ids"] + case["greedy_ids"], ex.new_state())
        rows.append(logits[P - 1:P - 1 + n])
    return np.concatenate(rows)



def long_logits(ex: ReferenceExecutor, gl: dict) -> np.ndarray:
    """Logits [3031, V]: prompt + greedy ids (all but the last) prefilled in 1,024-token chunks."""
    ids = gl["prompt_ids"] + gl["greedy_ids"][:-1]
    st = ex.new_state()
    return np.concatenate([ex.forward(ids[s:s + PREFILL_CHUNK], st) for s in range(0, len(ids), PREFILL_CHUNK)])




def roofline_27b() -> list[dict]:
    """Weight bytes per decode token of the qwen3.8-27b preset per recipe, and the roofline tok/s."""
    cfg = preset("qwen3.8-27b")
    specs = param_specs(cfg)
    out = []
    for r in ROOFLINE_RECIPES:
        plan = assign_formats(specs, r)
        sizes = plan.nbytes(specs)
        artifact = sum(sizes.values())
        emb = specs["embed"]
        per_tok = artifact - sizes["embed"] + nbytes_as((1, emb.shape[1]), plan.formats["embed"],
                                                        DTYPE_BYTES[emb.dtype])
        by_fmt: dict[str, int] = {}
        for n, b in sizes.items():
            if n != "embed":
                by_fmt[plan.formats[n]] = by_fmt.get(plan.formats[n], 0) + b
        out.append({"recipe": r, "formats": recipe(r), "fallbacks": plan.fallbacks,
                    "bytes_per_token": per_tok, "weight_bytes_total": artifact,
                    "bytes_per_token_by_format": by_fmt,
                    "bits_per_param": 8 * artifact / sum(s.numel for s in specs.values()),
                    "roofline_tok_s": ROOFLINE_GBPS * 1e9 / per_tok})
    return out


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def main(argv=None) -> int:
    """Run the measurement, print the tables, write the JSON. Returns the exit status (0)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "quant_fidelity_cpu.json"))
    ap.add_argument("--no-long", action="store_true", help="skip goldens-long.json (3,031 positions)")
    ap.add_argument("--recipe", action="append", default=None,
                    help="measure this recipe (repeatable) instead of the built-in list and the rejected w4 rule")
    args = ap.parse_args(argv)
    t0 = time.time()
    ckpt = Checkpoint(models_dir() / "qwen35-tiny-code", notice=None)
    goldens = json.loads((ckpt.dir / "goldens.json").read_text())
    gl = json.loads((ckpt.dir / "goldens-long.json").read_text())
    graph = build_graph(ckpt.config)
    s_idx, s_tok = short_greedy_targets(goldens)
    l_rows, l_idx, l_tok = long_golden_targets(gl)

    ref_ex = ReferenceExecutor(graph, fake_quant(ckpt, ckpt.specs, "bf16"))
    ref_short = short_logits(ref_ex, goldens)
    ref_long = None if args.no_long else long_logits(ref_ex, gl)

    rows = []
    for r in (args.recipe if args.recipe else RECIPES + [SYM7]):
        fq = Sym7FakeQuant(ckpt, ckpt.specs, "w4") if r == SYM7 else fake_quant(ckpt, ckpt.specs, r)
        ex = ReferenceExecutor(graph, fq)
        qs = short_logits(ex, goldens)
        rec = {"recipe": r, "formats": fq.plan.recipe, "fallbacks": fq.plan.fallbacks,
               "short": {**compare(ref_short, qs), **greedy(qs, s_idx, s_tok)}}
        if ref_long is not None:
            ql = long_logits(ex, gl)
            rec["long"] = {**compare(ref_long, ql), **greedy(ql, l_idx, l_tok),
                           "golden_positions": compare(ref_long[l_rows], ql[l_rows])}
        rows.append(rec)
        print(f"  measured {r} ({time.time() - t0:.0f} s)", file=sys.stderr)

    hdr = (f"{'recipe':34s} {'set':5s} {'pos':>5s} {'top-1 agr':>9s} {'agr@m>.25':>9s} {'mean KL':>9s} {'max KL':>8s} "
           f"{'max|dlogit|':>11s} {'greedy vs golden (margin>0.5)':>30s}")
    print("Fidelity vs the bf16 model (fixture qwen35-tiny-code, numpy reference, fake-quantised weights)")
    print(hdr)
    print("-" * len(hdr))
    for rec in rows:
        for s in ("short", "long"):
            if s not in rec:
                continue
            m = rec[s]
            g = f"{m['greedy_hits']}/{m['greedy_positions']} = {m['greedy_vs_golden']:.3f}"
            print(f"{rec['recipe']:34s} {s:5s} {m['positions']:5d} {m['top1_agreement']:9.4f} "
                  f"{m['top1_agreement_ref_margin']:9.4f} {m['kl_mean']:9.2e} "
                  f"{m['kl_max']:8.2e} {m['max_abs_dlogit']:11.4f} {g:>30s}")
    fall = {r["recipe"]: r["fallbacks"] for r in rows if r["fallbacks"]}
    print(f"fixture fallbacks to bf16: {fall or 'none'}")

    roof = roofline_27b()
    print(f"\nqwen3.8-27b weight bytes per decode token (embedding: one row) and roofline at {ROOFLINE_GBPS:,.0f} GB/s")
    hdr2 = f"{'recipe':20s} {'GB/token':>9s} {'roofline tok/s':>14s} {'weights GB':>10s} {'bits/param':>10s}"
    print(hdr2)
    print("-" * len(hdr2))
    for x in roof:
        print(f"{x['recipe']:20s} {x['bytes_per_token'] / 1e9:9.3f} {x['roofline_tok_s']:14.1f} "
              f"{x['weight_bytes_total'] / 1e9:10.3f} {x['bits_per_param']:10.3f}")

    out = {
        "what": "quantised-weight fidelity on the fixture (CPU numpy reference) and 27B weight roofline",
        "command": "python " + " ".join([str(Path(sys.argv[0]).resolve().relative_to(REPO))
                                         if Path(sys.argv[0]).resolve().is_relative_to(REPO) else sys.argv[0]]
                                        + sys.argv[1:]),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "worktree_dirty": bool(_git("status", "--porcelain")),
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "fixture": str(ckpt.dir.name),
        "greedy_margin": GREEDY_MARGIN_Q,
        "prefill_chunk": PREFILL_CHUNK,
        "sets": {"short": "goldens.json, 5 cases x 48 golden positions (teacher-forced)",
                 "long": "goldens-long.json, all 3,031 positions (prompt + 31 greedy ids, 1,024-token chunks); "
                         "'golden_positions' = prompt_top5_at + the 32 continuation rows"},
        "fidelity": rows,
        "roofline_27b": {"preset": "qwen3.8-27b", "bandwidth_gbps": ROOFLINE_GBPS,
                         "counted": "every weight except the embedding (one row); codes + fp32 scales; "
                                    "small params at bf16; no KV / GDN state traffic",
                         "recipes": roof},
        "seconds": round(time.time() - t0, 1),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
