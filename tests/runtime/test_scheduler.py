"""The continuous-batching scheduler over a recording fake backend (policy) and over the numpy reference backend
(exactness: a request's greedy output is the same alone and in a batch, over pages and slots full of garbage)."""

from __future__ import annotations

import pytest

from ninferc.checkpoint import Checkpoint
from ninferc.generate import generate
from ninferc.reference_backend import ReferenceBackend, ReferenceBatchBackend
from ninferc.runtime.scheduler import (ErrorEvent, FinishEvent, Overloaded, QueueTimeout,
                                       Scheduler, ServingError, TooLarge)
from ninferc.sampling import SamplingParams
from ninferc.testing import FAKE_VOCAB as V
from ninferc.testing import FakeBackend
from ninferc.testing import collecting_request as _req
from ninferc.testing import event_ids as _ids
from ninferc.testing import run_until_idle as _run


def test_long_prompt_delays_others_by_at_most_one_chunk():
    be = FakeBackend(num_pages=64, page_size=16)
    s = Scheduler(be, max_concurrency=2, prefill_chunk=16)
    ev = {}
    s.submit(_req("a", [1, 2, 3], 40, ev))
    s.step()  # a: prefilled and its first token sampled, first decode step
    s.submit(_req("b", list(range(100)), 5, ev))
    before = len(_ids(ev["a"]))
    for _ in range(7):   # b's 100 tokens take 7 chunks of 16; a gets a token every iteration meanwhile
        n = len(be.calls)
        s.step()
        kinds = [c[0] for c in be.calls[n:]]
        assert kinds.count("prefill") <= 1 and kinds.count("decode") == 1
    assert len(_ids(ev["a"])) == before + 7
    assert [c for c in be.calls if c[0] == "prefill" and c[1] == 1] == [("prefill", 1, 16)] * 6 + [("prefill", 1, 4)]
    _run(s)
    assert _ids(ev["b"]) == [(99 + 1 + i) % V for i in range(5)]
    assert any(c[0] == "decode" and len(c[1]) == 2 for c in be.calls)  # they shared decode steps


def test_admission_reserves_prompt_plus_max_tokens_and_waits_for_memory():
    be = FakeBackend(num_pages=4, page_size=16, num_slots=4, max_context=64)
    s = Scheduler(be, max_concurrency=4)
    ev = {}
    s.submit(_req("a", [1] * 10, 40, ev))   # 50 tokens: 4 pages
    s.submit(_req("b", [1] * 5, 5, ev))     # 10 tokens: 1 page, must wait
    s.step()
    assert [a.req.request_id for a in s.running] == ["a"] and len(s.waiting) == 1
    assert s.pools.pages.free == 0
    _run(s)
    assert isinstance(ev["a"][-1], FinishEvent) and isinstance(ev["b"][-1], FinishEvent)
    assert s.pools.pages.free == 4 and s.pools.slots.free == 4


def test_refusals_overloaded_too_large_and_queue_timeout():
    now = [0.0]
    be = FakeBackend(num_pages=8, page_size=16, num_slots=2, max_context=64)
    s = Scheduler(be, max_concurrency=1, max_pending=1, pending_timeout_s=5.0, clock=lambda: now[0])
    ev = {}
    s.submit(_req("a", [1, 2], 30, ev))
    s.submit(_req("b", [1, 2], 3, ev))
    with pytest.raises(Overloaded, match="1 requests running and 1 waiting"):
        s.submit(_req("c", [1, 2], 3, ev))
    with pytest.raises(TooLarge, match=r"the prompt \(60 tokens\) plus max_tokens \(10\) is 70 tokens, over the "
                                        r"context of 64 tokens"):
        s.check(60, 10)
    assert s.check(60, None) == 4
    for mt in (None, 1, 100):  # a prompt with no room for a generated token names the prompt, whatever max_tokens
        with pytest.raises(TooLarge, match=r"^the prompt is 64 tokens; the context is 64 tokens, which leaves no ") as e:
            s.check(64, mt, prompt_param="messages")
        assert e.value.param == "messages"
    with pytest.raises(TooLarge, match=r"the prompt \(1 token\) plus max_tokens \(64\)") as e:
        s.check(1, 64)
    assert e.value.param == "max_tokens"
    s.step()
    now[0] = 6.0
    s.step()
    err = ev["b"][-1]
    assert isinstance(err, ErrorEvent) and isinstance(err.error, QueueTimeout) and err.error.status == 503
    _run(s)
    assert isinstance(ev["a"][-1], FinishEvent) and len(_ids(ev["a"])) == 30


def test_cancel_frees_pages_and_slot_within_one_iteration():
    be = FakeBackend(num_pages=16, page_size=16, num_slots=2)
    s = Scheduler(be, max_concurrency=2)
    ev = {}
    s.submit(_req("a", [1, 2, 3], 100, ev))
    s.submit(_req("b", [4], 100, ev))
    for _ in range(3):
        s.step()
    assert s.pools.pages.free < 16 and s.pools.slots.free == 0
    s.cancel("a")
    s.step()
    assert isinstance(ev["a"][-1], FinishEvent) and ev["a"][-1].reason == "abort"
    assert s.pools.slots.free == 1 and [a.req.request_id for a in s.running] == ["b"]
    s.cancel("b")
    s.cancel("unknown")
    s.step()
    assert s.pools.pages.free == 16 and s.pools.slots.free == 2 and s.idle


def test_non_finite_logits_end_that_request_only():
    be = FakeBackend(nan_for={7})
    s = Scheduler(be, max_concurrency=2)
    ev = {}
    s.submit(_req("bad", [5], 10, ev))   # 5 -> 6 -> 7 -> NaN row
    s.submit(_req("good", [20], 10, ev))
    _run(s)
    assert isinstance(ev["bad"][-1], ErrorEvent) and "non-finite" in str(ev["bad"][-1].error)
    assert _ids(ev["bad"]) == [6, 7]
    assert isinstance(ev["good"][-1], FinishEvent) and len(_ids(ev["good"])) == 10


def test_stop_ids_and_max_tokens():
    be = FakeBackend()
    s = Scheduler(be)
    ev = {}
    s.submit(_req("a", [1], 10, ev, stop_ids=frozenset({4})))
    s.submit(_req("b", [1], 3, ev))
    _run(s)
    assert _ids(ev["a"]) == [2, 3, 4] and ev["a"][-1].reason == "stop" and ev["a"][-1].stats.generated == 3
    assert _ids(ev["b"]) == [2, 3, 4] and ev["b"][-1].reason == "length"


# ---------------------------------------------------------------------------------------------------------------
# the reference backend: exactness
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ck(tiny_dir):
    return Checkpoint(tiny_dir, notice=None)


def _solo(ck, ids, n, chunk):
    be = ReferenceBackend(ck.config, ck)
    return generate(be, ids, max_new=n, params=SamplingParams(), prefill_chunk=chunk).ids


def test_batched_greedy_equals_solo_over_garbage_pages(ck, goldens):
    be = ReferenceBatchBackend(ck.config, ck, num_pages=24, page_size=32, num_slots=4, max_context=256)
    be.poison(pages=range(24), slots=range(4))   # free memory is never trusted clean
    s = Scheduler(be, max_concurrency=4, prefill_chunk=7)
    ev = {}
    cases = goldens["cases"][:4]
    n = [12, 20, 9, 16]
    for i, c in enumerate(cases):
        s.submit(_req(str(i), c["prompt_ids"], n[i], ev))
    _run(s)
    for i, c in enumerate(cases):
        got = _ids(ev[str(i)])
        assert got == c["greedy_ids"][:n[i]]
        assert got == _solo(ck, c["prompt_ids"], n[i], 7)
    shared = [e[-1].stats.steps_shared for e in ev.values()]
    assert min(shared) > 0
    # a second wave reuses the freed (dirty) pages and slots
    s.submit(_req("again", cases[2]["prompt_ids"], 9, ev))
    _run(s)
    assert _ids(ev["again"]) == cases[2]["greedy_ids"][:9]


def test_a_cancel_ends_only_requests_submitted_before_it():
    """A client reusing a request id right after its request finished: the late cancel of the first must not end
    the second (the inbox is applied in arrival order)."""
    s = Scheduler(FakeBackend())
    ev = {}
    s.submit(_req("a", [1], 2, ev))
    _run(s)
    assert ev["a"][-1].reason == "length"
    s.cancel("a")                      # arrives late, after the first "a" finished
    s.submit(_req("a", [5], 3, ev))    # the same id again
    _run(s)
    assert ev["a"][-1].reason == "length" and _ids(ev["a"])[-3:] == [6, 7, 8]


def test_a_group_is_admitted_whole_or_not_at_all():
    """``submit_group`` (the server's request of n choices): a group over the room left is refused with nothing in
    flight; one that fits is queued whole; a duplicate id inside the group or in flight is refused."""
    be = FakeBackend(num_pages=8, page_size=16, num_slots=2, max_context=64)
    s = Scheduler(be, max_concurrency=1, max_pending=2)
    ev = {}
    s.submit(_req("a", [1, 2], 3, ev))
    with pytest.raises(Overloaded, match="at capacity for 3 more"):
        s.submit_group([_req(f"g{i}", [1, 2], 3, ev) for i in range(3)])
    assert s.inflight == 1
    with pytest.raises(ServingError, match="'g0' is given twice in one group"):
        s.submit_group([_req("g0", [1, 2], 3, ev), _req("g0", [1, 2], 3, ev)])
    with pytest.raises(ServingError, match="'a' is already in flight"):
        s.submit_group([_req("g0", [1, 2], 3, ev), _req("a", [1, 2], 3, ev)])
    assert s.inflight == 1
    s.submit_group([_req(f"g{i}", [1, 2], 3, ev) for i in range(2)])
    assert s.inflight == 3
    _run(s)
    assert all(isinstance(ev[k][-1], FinishEvent) for k in ("a", "g0", "g1"))
