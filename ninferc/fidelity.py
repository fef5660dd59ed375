"""Fidelity of a quantised model against the bf16 one: teacher-forced logits over the fixture goldens and
the metrics issue 6 asks for (top-1 agreement, KL, greedy tokens vs the goldens).

Used by ``bench/quant_fidelity.py`` (numpy reference, CPU) and ``bench/quant_fidelity_gpu.py`` /
``tests/runtime/test_quant_gpu.py`` (the CUDA engine). Position sets (``goldens.json`` /
``goldens-long.json`` of a fixture model):

* ``short``: for each case, the logits that predict each golden greedy token (prompt, then the greedy ids
  fed back one at a time): 5 cases x 48 = 240 positions on the fixture.
* ``long``: every position of the 3,000-token prompt followed by all but the last of the 32 greedy ids
  (3,031 positions), prefilled in chunks.
"""

from __future__ import annotations

import numpy as np

#: golden top-1 margin above which greedy tokens are compared with the goldens (issue 6)
GREEDY_MARGIN_Q = 0.5
#: reference top-1 margin (logits) above which a position counts as a clear decision (extra column)
REF_MARGIN = 0.25


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64: x [P, V] -> [P, V]."""
    x = np.asarray(x, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare(ref: np.ndarray, q: np.ndarray) -> dict:
    """Metrics of logits ``q`` [P, V] against reference ``ref`` [P, V]: top-1 agreement (fraction), the
    same restricted to positions where the reference's own top-1 margin > :data:`REF_MARGIN` (near-ties
    excluded), mean and max KL(ref || q) in nats, max |Δlogit|.

    Raises:
        ValueError: shapes differ.
    """
    ref, q = np.asarray(ref, np.float64), np.asarray(q, np.float64)
    if ref.shape != q.shape:
        raise ValueError(f"compare: logits shapes differ, {ref.shape} vs {q.shape}")
    lp, lq = log_softmax(ref), log_softmax(q)
    kl = np.sum(np.exp(lp) * (lp - lq), axis=-1)
    agree = ref.argmax(-1) == q.argmax(-1)
    top2 = np.sort(ref, axis=-1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > REF_MARGIN
    return {"positions": int(ref.shape[0]),
            "top1_agreement": float(np.mean(agree)),
            "ref_margin_positions": int(clear.sum()),
            "top1_agreement_ref_margin": float(np.mean(agree[clear])) if clear.any() else 1.0,
            "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
            "max_abs_dlogit": float(np.max(np.abs(q - ref)))}


def short_greedy_targets(goldens: dict) -> tuple[np.ndarray, np.ndarray]:
    """(row indices into the short logits, golden token ids) where the golden top-1 margin > 0.5."""
    idx, tok, off = [], [], 0
    for case in goldens["cases"]:
        for i, (m, t) in enumerate(zip(case["top1_margin"], case["greedy_ids"])):
            if m > GREEDY_MARGIN_Q:
                idx.append(off + i)
                tok.append(t)
        off += len(case["greedy_ids"])
    return np.array(idx, np.int64), np.array(tok, np.int64)


def long_golden_targets(gl: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(golden row indices, and of those, the rows and golden ids where the golden margin > 0.5) into
    the long logits."""
    P = len(gl["prompt_ids"])  # noqa: N806
    rows, gidx, gtok = [], [], []
    for pos, top5 in sorted(gl["prompt_top5_at"].items(), key=lambda kv: int(kv[0])):
        rows.append(int(pos))
        if top5[0][1] - top5[1][1] > GREEDY_MARGIN_Q:
            gidx.append(int(pos))
            gtok.append(top5[0][0])
    for i, (m, t) in enumerate(zip(gl["top1_margin"], gl["greedy_ids"])):
        rows.append(P - 1 + i)
        if m > GREEDY_MARGIN_Q:
            gidx.append(P - 1 + i)
            gtok.append(t)
    return np.array(rows, np.int64), np.array(gidx, np.int64), np.array(gtok, np.int64)


def greedy(q: np.ndarray, idx: np.ndarray, tok: np.ndarray) -> dict:
    """Greedy-token agreement of logits ``q`` with golden ids ``tok`` at rows ``idx``."""
    hits = int(np.sum(np.asarray(q)[idx].argmax(-1) == tok))
    return {"greedy_vs_golden": hits / max(len(idx), 1), "greedy_hits": hits, "greedy_positions": int(len(idx))}


def engine_short_logits(engine, goldens: dict, chunk: int = 1024) -> np.ndarray:
    """fp32 [sum of greedy lengths, V] from the CUDA engine: prefill each case's prompt, then decode its
    greedy ids one at a time (the decode GEMV path); row i predicts greedy id i."""
    s = engine.session()
    rows = []
    try:
        for case in goldens["cases"]:
            logits = s.prefill(case["prompt_ids"], min(chunk, engine.prefill_chunk))
            for i, t in enumerate(case["greedy_ids"]):
                rows.append(np.asarray(logits.get(), np.float32).reshape(-1))
                if i + 1 < len(case["greedy_ids"]):
                    logits = s.decode(t)
    finally:
        s.close()
    return np.stack(rows)


def engine_long_logits(engine, gl: dict, chunk: int = 1024) -> np.ndarray:
    """fp32 [P + n - 1, V] from the CUDA engine: the long prompt + all but the last greedy id prefilled in
    chunks (the prefill GEMM path), every position's logits (the engine needs max_logit_rows >= chunk)."""
    ids = gl["prompt_ids"] + gl["greedy_ids"][:-1]
    s = engine.session()
    try:
        out = s.prefill(ids, min(chunk, engine.prefill_chunk), logit_rows=list(range(len(ids))))
    finally:
        s.close()
    return np.asarray(out, np.float32)
