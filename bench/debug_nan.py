"""Device debug: reproduce the non-finite logits after a multi-chunk prefill over used state."""
import json, os, traceback
import numpy as np
os.environ["NINFERC_CHECK_FINITE"] = "1"
from ninferc.pipeline import compile_model
from ninferc.artifact import Artifact
from ninferc.runtime.engine import Engine
from ninferc.testing import models_dir
tiny = models_dir() / "qwen35-tiny-code"
compile_model(tiny, "sm_90", "/tmp/t90.ninfer", sku="h200")
gl = json.loads((tiny / "goldens-long.json").read_text())
ids = gl["prompt_ids"]
e = Engine(Artifact.open("/tmp/t90.ninfer"), max_logit_rows=64)
for trial, rows in enumerate([None, [0, 97, 2999], None, None]):
    s = e.session()
    try:
        out = s.prefill(ids, 1024, logit_rows=rows)
        arr = out if isinstance(out, np.ndarray) else out.get()
        print("trial", trial, "rows", rows, "finite", bool(np.isfinite(arr).all()), flush=True)
    except Exception as exc:
        print("trial", trial, "FAILED:", exc, flush=True)
        traceback.print_exc()
        break
