"""Device probe (diagnostic, runs 112-120): attn_decode + attn_combine alone at the 27B shape (24 q heads, 4 KV heads,
head_dim 256, 64-token pages), B = 1, timed per launch over back-to-back launches (CUDA events around 200 launches,
median of 5 repeats; each launch also pays the stream's launch gap, the same for every row). Rows: context x split
mode -- the bench's plan at max_context 8,248 (129 splits of one page, balanced granule 16), page-aligned splits,
the family_ab's max_context 700 (11 splits), one split -- so the kernel's own time at 512 tokens can be set against
its ~12 us exposed in the graph-replayed step (bench/NOTES.md runs 75 / 98).

Usage (GPU machine): python bench/attn_decode_probe.py [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kernels"))

from attn_cases import make_cache, make_step  # noqa: E402
from test_attention_gpu import COMBINE, DECODE, _cp, device_ctx, device_kernel, device_step  # noqa: E402

from ninferc.bench import git_commit  # noqa: E402
from ninferc.targets.kernels import attention as A  # noqa: E402


def time_launches(launch, args, reps: int = 200, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean microseconds per launch of ``reps`` back-to-back launches."""
    cp = _cp()
    k = device_kernel(launch.kernel)
    for _ in range(10):
        k.launch(launch.grid, launch.block, args, smem=launch.dynamic_smem_bytes)
    cp.cuda.runtime.deviceSynchronize()
    out = []
    for _ in range(repeats):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(reps):
            k.launch(launch.grid, launch.block, args, smem=launch.dynamic_smem_bytes)
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / reps)
    return float(np.median(out))


def main(argv=None) -> int:
    """Run the probe (module docstring), print one row per configuration, write ``--json``. Returns 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    ctx = device_ctx()
    rows = []
    for max_pages in (129, 11):
        p = A.AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, page_size=64, max_pages=max_pages)
        for c in ((1, 512, 8192) if max_pages == 129 else (1, 512)):
            rng = np.random.default_rng(c)
            cache = make_cache(p, [c - 1], [c], rng, nan=False)
            st = make_step(p, [c - 1], [1], rng)
            dev = device_step(p, cache, st)
            dev["q"] = dev["q_out"]
            splits0, pps0 = DECODE.splits(p, 1, ctx)
            for mode, granule, splits, pps in (("plan_balanced16", 16, splits0, pps0), ("plan_pages", 0, splits0, pps0),
                                               ("one_split", 0, 1, p.max_pages)):
                kernel = A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, granule, granule).spec(p)
                ln_d = dataclasses.replace(DECODE.launch(p, 1, ctx), kernel=kernel, grid=(splits, p.heads_kv, 1),
                                           split_k=splits, workspace_bytes=DECODE.workspace_bytes(p, 1, splits))
                ln_c = dataclasses.replace(COMBINE.launch(p, 1, ctx), split_k=splits,
                                           dynamic_smem_bytes=COMBINE.dynamic_smem_bytes(splits))
                cp = _cp()
                dev["ws"] = cp.zeros(ln_d.workspace_bytes // 4, dtype=cp.float32)
                dev["out"] = cp.zeros((1, p.heads_q * p.head_dim), dtype=cp.uint16)
                us_d = time_launches(ln_d, DECODE.kernel_args(p, ln_d, dev, pps))
                us_c = time_launches(ln_c, COMBINE.kernel_args(p, ln_c, dev))
                row = {"max_pages": max_pages, "context": c, "mode": mode, "splits": splits, "pages_per_split": pps,
                       "ctas": splits * p.heads_kv, "decode_us": us_d, "combine_us": us_c}
                rows.append(row)
                print(f"max_pages {max_pages:4d} ctx {c:5d} {mode:16s} splits {splits:4d}  attn_decode {us_d:6.2f} us  "
                      f"attn_combine {us_c:6.2f} us", flush=True)
    # an empty kernel's launch gap for reference: attn_combine of a 1-split, 1-token problem is nearly no work
    if a.json:
        cp = _cp()
        Path(a.json).write_text(json.dumps({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                            "commit": git_commit(), "command": "python bench/attn_decode_probe.py",
                                            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
