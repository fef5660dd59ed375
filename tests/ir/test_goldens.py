"""The numpy reference executor reproduces HF transformers' goldens on the real fixture checkpoint."""

import numpy as np
import pytest

from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.reference import ReferenceExecutor
from ninferc.ir.tolerances import GREEDY_MARGIN, REFERENCE_LOGITS


def greedy_prefix_len(margins, threshold=GREEDY_MARGIN) -> int:
    """Number of leading golden positions whose top-1 margin is >= threshold (tokens compared there)."""
    for i, m in enumerate(margins):
        if m < threshold:
            return i
    return len(margins)


def check_top5(row: np.ndarray, top5, what: str):
    ids = [t for t, _ in top5]
    REFERENCE_LOGITS.check(row[ids], [v for _, v in top5], what)


@pytest.fixture(scope="module")
def executor(tiny_ckpt):
    return ReferenceExecutor(build_graph(tiny_ckpt.config), tiny_ckpt)


def test_teacher_forced_logits_all_cases(executor, goldens):
    """Logits at every generated position (prompt + golden greedy ids, one forward) match the golden top-5."""
    for ci, case in enumerate(goldens["cases"]):
        ids = case["prompt_ids"] + case["greedy_ids"]
        logits = executor.forward(ids, executor.new_state())
        P = len(case["prompt_ids"])
        for i, top5 in enumerate(case["top5"]):
            check_top5(logits[P - 1 + i], top5, f"case {ci} position {i}")
        assert abs(np.linalg.norm(logits[P - 1]) - case["prompt_last_logits_l2"]) < 1e-3


def test_free_running_greedy_matches(tiny_ckpt, goldens):
    """Prefill then decode one token at a time (recurrent GDN, KV appends) reproduces greedy_ids."""
    ex = ReferenceExecutor(build_graph(tiny_ckpt.config, lm_rows="last"), tiny_ckpt)
    for ci, case in enumerate(goldens["cases"]):
        n = greedy_prefix_len(case["top1_margin"])
        assert n > 0
        st = ex.new_state()
        logits = ex.forward(case["prompt_ids"], st)[-1]
        out = []
        for i in range(n):
            tok = int(np.argmax(logits))
            check_top5(logits, case["top5"][i], f"case {ci} decode step {i}")
            out.append(tok)
            logits = ex.forward([tok], st)[-1]
        assert out == case["greedy_ids"][:n], f"case {ci}"


@pytest.mark.slow  # seconds on 2 cores: the quick loop (-m "not slow") stays under 2 minutes
def test_long_prompt_chunked_prefill(tiny_ckpt, goldens_long):
    """3,000-token prompt prefilled in 1,024-token chunks: sampled prompt logits and the 32-token
    greedy continuation match goldens-long.json."""
    ex = ReferenceExecutor(build_graph(tiny_ckpt.config), tiny_ckpt)
    ids = goldens_long["prompt_ids"]
    st = ex.new_state()
    rows = [ex.forward(ids[s:s + 1024], st) for s in range(0, len(ids), 1024)]
    logits = np.concatenate(rows)
    assert logits.shape[0] == len(ids) == 3000
    for pos, top5 in goldens_long["prompt_top5_at"].items():
        check_top5(logits[int(pos)], top5, f"prompt position {pos}")
    n = greedy_prefix_len(goldens_long["top1_margin"])
    last = logits[-1]
    out = []
    for i in range(n):
        check_top5(last, goldens_long["top5"][i], f"continuation step {i}")
        tok = int(np.argmax(last))
        out.append(tok)
        last = ex.forward([tok], st)[-1]
    assert out == goldens_long["greedy_ids"][:n]
    assert n >= 1
