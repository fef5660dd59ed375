"""Shared parts of the same-process decode A/B benchmarks (``bench/pdl_ab.py``, ``bench/fuse_norm_ab.py``,
``bench/prefetch_ab.py``): a 27B-shape engine on synthetic weights with a prefilled random prompt, the
alternating timed decode rounds, and the result JSON with provenance.

Why alternate: decode latency drifts by a few per cent between processes on the lent H200 (bench/NOTES.md),
so variants are compared inside one process, round by round (ABAB...), and each variant's figure is the
median over rounds of its per-round median per-token latency (seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable

import numpy as np

from ninferc.bench import git_commit
from ninferc.sampling import SamplingParams

GREEDY = SamplingParams()
WARMUP_STEPS = 3  # decode steps of a variant's first round left untimed (they capture its CUDA graph)


def arg_parser(weights: str = "bf16") -> argparse.ArgumentParser:
    """The options every A/B takes: --context (prompt tokens, 512), --steps (timed decode steps per round, 40),
    --rounds (3), --weights (recipe, default ``weights``), --json (result file)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--weights", default=weights)
    ap.add_argument("--json", default=None)
    return ap


def preset_engine(weights: str, max_context: int, context: int, graph=None, kv_dtype: str = "bf16"):
    """An engine for the ``qwen3.8-27b`` preset with synthetic weights, planned for this device (decode batch 1),
    and a session holding a random ``context``-token prompt (prefilled in chunks of up to 1,024).

    Args:
        weights: weight recipe (``bf16``, ``w8``, ``w4`` ...). max_context: the engine's KV capacity (tokens).
        context: prompt tokens. graph: a compiled graph to reuse (default: built from the preset).
        kv_dtype: the KV cache dtype of the built graph (``bf16`` or ``int8``; ignored when ``graph`` is given).

    Returns:
        (engine, session, first sampled token id).

    Raises:
        whatever planning or the engine raise (no GPU: NinfercError from ``cupy()``).
    """
    from ninferc.ir.config import preset
    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.runtime.engine import Engine
    from ninferc.runtime.kernels import device_arch, device_sm_count
    from ninferc.runtime.synthetic import SyntheticArtifact
    from ninferc.targets.model_plan import plan_model

    cfg = preset("qwen3.8-27b")
    graph = graph if graph is not None else run_pipeline(build_graph(cfg, lm_rows="last"), weights=weights,
                                                                kv_dtype=kv_dtype)
    mp = plan_model(graph, device_arch(), sms=device_sm_count(), max_context=max_context, decode_batches=(1,),
                    prefill_tokens=(1, 64, 1024))
    eng = Engine(SyntheticArtifact(cfg, graph, mp), max_context=max_context, prefill_chunk=min(1024, context))
    s = eng.session()
    s.prefill(np.random.default_rng(0).integers(0, eng.vocab, context).tolist(), min(1024, context))
    return eng, s, s.sample(GREEDY)


def alternate(variants: dict[str, tuple[Callable[[], None], object]], tok: dict[str, int], *, rounds: int,
              steps: int, recapture: bool, log=print) -> dict[str, list[float]]:
    """Time ``steps`` greedy decode steps of each variant per round, variants in turn, for ``rounds`` rounds.

    Args:
        variants: name -> (switch, session): ``switch()`` makes the variant current (e.g. sets an engine
            attribute and clears its cached graphs); ``session`` decodes (``decode(tok)``, ``sample(params)``).
        tok: name -> the token each variant decodes next (updated in place).
        recapture: True when ``switch`` discards the captured graph (every round then leaves its first
            ``WARMUP_STEPS`` untimed); False when each variant keeps its own (only round 0 does).

    Returns:
        name -> per-round median seconds per token.
    """
    res = {name: [] for name in variants}
    for r in range(rounds):
        for name, (switch, s) in variants.items():
            switch()
            lat = []
            skip = WARMUP_STEPS if (recapture or r == 0) else 0
            for i in range(steps + skip):
                t = time.perf_counter()
                s.decode(tok[name])
                tok[name] = s.sample(GREEDY)
                if i >= skip:
                    lat.append(time.perf_counter() - t)
            res[name].append(float(np.median(lat)))
            log(f"round {r} {name}: median {res[name][-1] * 1e3:.3f} ms/token ({1 / res[name][-1]:.2f} tok/s)")
    return res


def medians(res: dict[str, list[float]]) -> dict[str, float]:
    """name -> median over rounds (seconds per token)."""
    return {name: float(np.median(v)) for name, v in res.items()}


def write_json(path: str | None, script: str, argv, **fields) -> None:
    """Write ``fields`` plus provenance (the device's name, commit, command) to ``path`` (nothing when ``path`` is
    None)."""
    if not path:
        return
    from ninferc.runtime.kernels import cupy

    name = cupy().cuda.runtime.getDeviceProperties(0)["name"]
    args = " ".join(argv if argv is not None else sys.argv[1:])
    with open(path, "w") as f:
        json.dump({"gpu": name.decode() if isinstance(name, bytes) else str(name), "commit": git_commit(),
                   "command": f"python {script} {args}".strip(), **fields}, f, indent=1)
