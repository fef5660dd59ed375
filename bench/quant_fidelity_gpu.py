"""Fidelity of the quantised artifacts on the GPU (issue 6): the fixture compiled for this device with
``--weights bf16|w8|w4`` and ``--kv-dtype bf16|int8``, run by the CUDA engine teacher-forced over the
goldens (``ninferc.fidelity``: 240 short positions through the decode path, 3,031 long positions through
chunked prefill), compared with the bf16 artifact's own logits (top-1 agreement, KL) and with the goldens'
greedy ids where the golden margin > 0.5. Also the artifact sizes.

Usage (on a GPU machine): ``python bench/quant_fidelity_gpu.py --json bench/results/quant_fidelity_gpu_<commit>.json``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ninferc.bench import git_commit, write_json
from ninferc.fidelity import (compare, engine_long_logits, engine_short_logits, greedy, long_golden_targets,
                              short_greedy_targets)
from ninferc.testing import models_dir

#: (label, --weights recipe, --kv-dtype) measured; the first is the reference
VARIANTS = [("bf16", "bf16", "bf16"), ("w8", "w8", "bf16"), ("w4", "w4", "bf16"),
            ("kv-int8", "bf16", "int8"), ("w8+kv-int8", "w8", "int8"), ("w4+kv-int8", "w4", "int8")]


def measure(tmp: Path, log=print) -> dict:
    """Compile every variant for the device, run both position sets, compare; returns the result dict."""
    from ninferc.artifact import Artifact
    from ninferc.pipeline import compile_model
    from ninferc.runtime.engine import Engine
    from ninferc.runtime.kernels import device_arch, device_sm_count

    tiny = models_dir() / "qwen35-tiny-code"
    goldens = json.loads((tiny / "goldens.json").read_text())
    gl = json.loads((tiny / "goldens-long.json").read_text())
    arch, sms = device_arch(), device_sm_count()
    sidx, stok = short_greedy_targets(goldens)
    _, lidx, ltok = long_golden_targets(gl)
    logits, out = {}, {"arch": arch, "sms": sms, "variants": []}
    for label, recipe, kv in VARIANTS:
        path = tmp / f"tiny_{label}.ninfer"
        t0 = time.perf_counter()
        compile_model(tiny, arch, path, sms=sms, weights=recipe, kv_dtype=kv)
        eng = Engine(Artifact.open(path), max_context=4096, max_logit_rows=1024)
        short, long_ = engine_short_logits(eng, goldens), engine_long_logits(eng, gl)
        logits[label] = (short, long_)
        rec = {"label": label, "weights": recipe, "kv_dtype": kv, "artifact_bytes": path.stat().st_size,
               "weights_bytes": eng.memory.terms.get("weights", 0), "kv_page_bytes": eng.page_bytes,
               "short_greedy": greedy(short, sidx, stok), "long_greedy": greedy(long_, lidx, ltok)}
        ref = logits["bf16"]
        rec["short"], rec["long"] = compare(ref[0], short), compare(ref[1], long_)
        rec["all"] = compare(np.concatenate(ref), np.concatenate((short, long_)))  # issue 6: every golden position
        out["variants"].append(rec)
        log(f"{label:<12} all agree {rec['all']['top1_agreement']:.4f} | short agree {rec['short']['top1_agreement']:.4f} KL {rec['short']['kl_mean']:.2e} | "
            f"long agree {rec['long']['top1_agreement']:.4f} KL {rec['long']['kl_mean']:.2e} | greedy vs goldens "
            f"{rec['short_greedy']['greedy_vs_golden']:.3f}/{rec['long_greedy']['greedy_vs_golden']:.3f} | "
            f"artifact {rec['artifact_bytes']:,} B ({time.perf_counter() - t0:.0f} s)")
        del eng
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        res = measure(Path(d))
    res.update({"commit": git_commit(), "command": "python bench/quant_fidelity_gpu.py " + " ".join(argv or sys.argv[1:]),
                "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    if a.json:
        write_json(res, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
