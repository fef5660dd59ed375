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
