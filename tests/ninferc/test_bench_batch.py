"""Batched decode, the CPU-checkable half: ``run_bench`` and ``Engine.decode_batch`` refuse bad batches with the
value and the limit before touching a GPU (the GPU half: tests/runtime/test_engine_gpu.py
``test_batched_decode_reproduces_the_goldens``)."""

from types import SimpleNamespace

import pytest

from ninferc.bench import run_bench
from ninferc.errors import NinfercError
from ninferc.runtime.engine import Engine


def test_run_bench_refuses_a_batch_above_max_batch():
    with pytest.raises(NinfercError, match="--batch 3 exceeds the engine's max_batch 2"):
        run_bench(SimpleNamespace(max_batch=2, cp=None, vocab=16), prompt_tokens=(8,), batch=3)


def _fake(max_batch=2):
    return SimpleNamespace(max_batch=max_batch)


def _sess(prefilled=True):
    return SimpleNamespace(seq=SimpleNamespace(length=3) if prefilled else None)


@pytest.mark.parametrize("sessions,tokens,match", [
    ("none", None, "0 sequences; this engine decodes 1 to 2 together"),
    ("three", None, "3 sequences; this engine decodes 1 to 2 together"),
    ("dup", None, "every session must be prefilled and appear once"),
    ("unprefilled", None, "every session must be prefilled and appear once"),
    ("two", [1], "1 tokens for 2 sequences"),
])
def test_decode_batch_refuses_bad_batches(sessions, tokens, match):
    a, b = _sess(), _sess()
    sessions = {"none": [], "three": [a, b, _sess()], "dup": [a, a], "unprefilled": [a, _sess(False)],
                "two": [a, b]}[sessions]
    with pytest.raises(NinfercError, match=match):
        Engine.decode_batch(_fake(), sessions, tokens)


def test_multi_token_steps_times_one_sequence_x_t_tokens_against_one(monkeypatch):
    """``multi_token_steps`` writes positions L..L+T-1 with a logit row per token, replays the prefill program's
    graph for T > 1 (the decode program's for T = 1) and divides medians (a fake engine and fake CUDA events: the
    "graph" of T tokens takes 10 + T ms)."""
    import numpy as np

    from ninferc.bench import multi_token_steps

    metas, graphs, current = [], [], {}

    class Graph:
        def __init__(self, key):
            self.key = key

        def launch(self, stream=None):
            current["ms"] = 10.0 + self.key[1]

    class Event:
        def record(self, stream=None):
            self.t = current.get("ms")

    class Stream:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def synchronize(self):
            pass

    cp = SimpleNamespace(cuda=SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: b.t))
    seq = SimpleNamespace(length=100, slot=3, pages=[7, 8], ensure_capacity=lambda n, pool, mx: metas.append(("cap", n)))
    eng = SimpleNamespace(cp=cp, stream=Stream(), vocab=50, pages=None, max_pages=4,
                          write_meta=lambda **kw: metas.append(kw),
                          step_graph=lambda *key: graphs.append(key) or Graph(key))
    rows = multi_token_steps(eng, SimpleNamespace(seq=seq), (4, 2), reps=5, rng=np.random.default_rng(1))
    assert [r["tokens"] for r in rows] == [1, 4, 2]
    assert [r["median_step_ms"] for r in rows] == [11.0, 14.0, 12.0]
    assert rows[1]["ratio_to_one"] == pytest.approx(14 / 11)
    assert graphs == [("decode", 1, 1, 1), ("prefill", 4, 1, 4), ("prefill", 2, 1, 2)]
    assert metas[0] == ("cap", 104)
    m4 = metas[2]
    assert list(m4["tok_pos"]) == [100, 101, 102, 103] and list(m4["row_index"]) == [0, 1, 2, 3]
    assert m4["seq_ctx"] == [104] and m4["seq_slot"] == [3] and len(m4["tokens"]) == 4
    assert seq.length == 100  # the session's length is left alone
    assert "verify_median_step_ms" not in rows[1]  # an engine without spec_tokens has no verify program

    # an engine built with spec_tokens K = 2: T <= 3 also replays the verify program (its own graph and slots), and
    # the profile sums each program's kernels per family
    metas.clear()
    graphs.clear()
    eng.spec_tokens = 2
    profiled = []
    eng.profile = lambda mode, T, B, R, reps: profiled.append((mode, T, B, R)) or [  # noqa: ARG005
        (f"layer.{i}.mix", "gdn_recurrent" if mode == "verify" else "gdn_chunk", 1.0) for i in range(2)]
    logged = []
    rows = multi_token_steps(eng, SimpleNamespace(seq=seq), (4, 2), reps=5, rng=np.random.default_rng(1),
                             profile=True, log=logged.append)
    assert graphs == [("decode", 1, 1, 1), ("prefill", 4, 1, 4), ("prefill", 2, 1, 2), ("verify", 2, 1, 2)]
    assert profiled == [("decode", 1, 1, 1), ("prefill", 4, 1, 4), ("prefill", 2, 1, 2), ("verify", 2, 1, 2)]
    assert "verify_median_step_ms" not in rows[1]  # T = 4 > K + 1
    assert rows[2]["verify_median_step_ms"] == 12.0 and rows[2]["verify_ratio_to_one"] == pytest.approx(12 / 11)
    assert rows[2]["verify_profile"] == {"gdn_recurrent": 2.0} and rows[2]["profile"] == {"gdn_chunk": 2.0}
    verify_meta = metas[-1]
    assert verify_meta["seq_slot_out"] == [0] and verify_meta["seq_slot"] == [3]
    assert all("seq_slot_out" not in m for m in metas[:-1] if isinstance(m, dict))
    assert len(logged) == 4 and "verify step of one sequence x 2 tokens" in logged[-1]


def test_bench_refuses_bad_tokens_per_seq():
    from click.testing import CliRunner

    from ninferc.cli import main

    for arg, needle in (("1", "each T must be in 2..64"), ("4,x", "comma-separated integers")):
        r = CliRunner().invoke(main, ["bench", "--preset", "qwen3.8-27b", "--synthetic-weights",
                                      "--tokens-per-seq", arg])
        assert r.exit_code != 0 and needle in r.output, r.output
