"""The scheduler's decode ahead (:mod:`ninferc.runtime.scheduler`): the next decode step is queued, fed with the ids
the device sampler drew, before the host reads them -- over a fake backend that defers its reads as the CUDA one
does (policy: order of calls, reservation, stop / cancel / NaN / join), and over the numpy reference (exactness:
the same tokens with and without it, greedy and seeded sampling, and a prefix-cache turn after a generation that had
a step queued past its end)."""

from __future__ import annotations

import pytest

from ninferc.checkpoint import Checkpoint
from ninferc.reference_backend import ReferenceBatchBackend
from ninferc.runtime.scheduler import ErrorEvent, FinishEvent, Scheduler
from ninferc.sampling import SamplingParams
from ninferc.testing import FAKE_VOCAB as V
from ninferc.testing import FakeBackend
from ninferc.testing import collecting_request as _req
from ninferc.testing import event_ids as _ids
from ninferc.testing import run_until_idle as _run


def test_the_next_step_is_queued_before_the_last_is_read():
    be = FakeBackend(ahead=True)
    s = Scheduler(be, max_concurrency=2)
    ev = {}
    s.submit(_req("a", [1], 10, ev))
    _run(s)
    assert _ids(ev["a"]) == list(range(2, 12)) and ev["a"][-1].reason == "length"
    kinds = [c[0] for c in be.calls]
    # prefill (first token read synchronously), then 9 decode steps: each after the first is queued (decode_next)
    # before the previous one's ids are read; the 10th token is the last, so no step is queued past it
    assert kinds[:4] == ["prefill", "decode", "sample_async", "decode_next"]
    assert kinds.count("decode") + kinds.count("decode_next") == 9
    nxt = [i for i, k in enumerate(kinds) if k == "decode_next"]
    res = [i for i, k in enumerate(kinds) if k == "result"]
    assert len(nxt) == 8 and len(res) == 9
    assert all(r > n for n, r in zip(nxt, res))  # step k + 1 queued before step k is read
    assert ev["a"][-1].stats.decode_steps == 9


def test_a_stop_drops_the_step_queued_past_it_and_frees_everything():
    be = FakeBackend(num_pages=8, page_size=16, ahead=True)
    s = Scheduler(be, max_concurrency=2)
    ev = {}
    s.submit(_req("a", [1], 20, ev, stop_ids=frozenset({6})))
    s.submit(_req("b", [30], 12, ev))
    _run(s)
    assert _ids(ev["a"]) == [2, 3, 4, 5, 6] and ev["a"][-1].reason == "stop"
    assert _ids(ev["b"]) == [(31 + i) % V for i in range(12)] and ev["b"][-1].reason == "length"
    assert ev["a"][-1].stats.generated == 5
    # the step queued after the stop token ran (it fed 6) and its result was dropped
    assert any(c[0] == "decode_next" and len(c[1]) == 2 for c in be.calls)
    assert s.pools.pages.free == 8 and s.pools.slots.free == s.pools.slots.num_slots


def test_a_request_joining_waits_one_step_then_shares_them():
    be = FakeBackend(ahead=True)
    s = Scheduler(be, max_concurrency=2)
    ev = {}
    s.submit(_req("a", [1], 30, ev))
    for _ in range(4):
        s.step()
    s.submit(_req("b", [20], 10, ev))
    _run(s)
    assert _ids(ev["a"]) == [(2 + i) % V for i in range(30)]
    assert _ids(ev["b"]) == list(range(21, 31))
    both = [c for c in be.calls if c[0] == "decode_next" and len(c[1]) == 2]
    assert len(both) >= 7  # b's 9 decode steps ride with a's, all but the first queued ahead


def test_cancel_and_non_finite_rows_in_flight():
    be = FakeBackend(nan_for={7}, ahead=True)
    s = Scheduler(be, max_concurrency=3)
    ev = {}
    s.submit(_req("bad", [5], 10, ev))    # 5 -> 6 -> 7 -> NaN row
    s.submit(_req("good", [20], 10, ev))
    s.submit(_req("gone", [12], 50, ev))   # cancelled long before it wraps to 7
    for _ in range(6):
        s.step()
    s.cancel("gone")
    _run(s)
    assert isinstance(ev["bad"][-1], ErrorEvent) and "non-finite" in str(ev["bad"][-1].error)
    assert _ids(ev["bad"]) == [6, 7]
    assert isinstance(ev["good"][-1], FinishEvent) and _ids(ev["good"]) == list(range(21, 31))
    assert ev["gone"][-1].reason == "abort"
    assert s.pools.pages.free == s.pools.pages.num_pages and s.pools.slots.free == s.pools.slots.num_slots


class _AnyToken:
    """A grammar state that allows every token (the host sampler computes a grammar's mask)."""

    def allowed(self):
        return None

    def advance(self, token):
        pass


def test_host_sampled_rows_do_not_go_ahead():
    """A row under a grammar is sampled on the host (no decode ahead); a penalised one goes ahead (the CUDA backend
    applies penalties on the device)."""
    be = FakeBackend(ahead=True)
    s = Scheduler(be)
    ev = {}
    s.submit(_req("a", [1], 6, ev, constraint=_AnyToken()))
    _run(s)
    assert len(_ids(ev["a"])) == 6
    assert not any(c[0] in ("sample_async", "decode_next") for c in be.calls)
    be = FakeBackend(ahead=True)
    s = Scheduler(be)
    s.submit(_req("b", [1], 6, ev, params=SamplingParams(frequency_penalty=0.5)))
    _run(s)
    assert len(_ids(ev["b"])) == 6
    assert any(c[0] == "decode_next" for c in be.calls)


# ---------------------------------------------------------------------------------------------------------------
# the reference backend: the same tokens with and without decode ahead
# ---------------------------------------------------------------------------------------------------------------
class _NoAhead:
    """A backend seen without its decode-ahead methods (the scheduler then reads every step before the next)."""

    def __init__(self, be):
        self._be = be

    def __getattr__(self, name):
        if name in ("sample_async", "decode_next", "samples_on_device"):
            raise AttributeError(name)
        return getattr(self._be, name)


@pytest.fixture(scope="module")
def ck(tiny_dir):
    return Checkpoint(tiny_dir, notice=None)


def _serve(ck, cases, ahead: bool, **kw):
    be = ReferenceBatchBackend(ck.config, ck, num_pages=40, page_size=16, num_slots=3, max_context=256)
    s = Scheduler(be if ahead else _NoAhead(be), max_concurrency=3, prefill_chunk=8, **kw)
    assert s.decode_ahead is ahead
    ev = {}
    for i, (prompt, n, params, stop) in enumerate(cases):
        s.submit(_req(str(i), prompt, n, ev, params=params, stop_ids=stop))
        s.step()  # staggered arrivals: each joins a running batch
    _run(s)
    return s, {k: (_ids(v), v[-1].reason) for k, v in ev.items()}


def test_reference_tokens_equal_with_and_without_decode_ahead(ck, goldens):
    cs = goldens["cases"]
    g = cs[0]["greedy_ids"]
    cases = [(cs[0]["prompt_ids"], 14, SamplingParams(), frozenset({g[5]})),   # stops at its 6th token
             (cs[1]["prompt_ids"], 11, SamplingParams(temperature=0.8, top_p=0.9, seed=7), frozenset()),
             (cs[2]["prompt_ids"], 9, SamplingParams(), frozenset())]
    _, with_ahead = _serve(ck, cases, True)
    _, without = _serve(ck, cases, False)
    assert with_ahead == without
    assert with_ahead["0"] == (g[:6], "stop")
    assert with_ahead["2"][0] == cs[2]["greedy_ids"][:9]


def test_reference_generation_checkpoint_after_a_step_queued_past_the_end(ck, goldens):
    """The generation-end checkpoint of a request that stopped while a step was queued past its stop token covers
    that token (state and pages agree): the next turn reuses it and gets the cache-off tokens."""
    c = goldens["cases"][0]
    g = c["greedy_ids"]
    first = [(c["prompt_ids"], 10, SamplingParams(), frozenset({g[4]}))]
    s, out = _serve(ck, first, True, prefix_cache_bytes=1 << 30)
    assert out["0"] == (g[:5], "stop")
    turn2 = c["prompt_ids"] + g[:5] + [7, 8, 9]
    hit = s.cache.lookup(turn2, mtp=False)
    assert hit is not None and hit.length == len(c["prompt_ids"]) + 5
    s.cache.release(hit)
    ev = {}
    s.submit(_req("t2", turn2, 8, ev))
    _run(s)
    assert ev["t2"][-1].stats.cached_tokens == len(c["prompt_ids"]) + 5
    _, off = _serve(ck, [(turn2, 8, SamplingParams(), frozenset())], False)
    assert _ids(ev["t2"]) == off["0"][0]
