"""Prefix reuse on the reference backend: hits at, just below and just above checkpoints and page boundaries, a
prefix diverging mid-page, eviction at every request, speculation, shared pages held once -- every output equal to
the same request with the cache off, over KV pages poisoned the moment they are freed."""

from __future__ import annotations

import pytest

from ninferc.checkpoint import Checkpoint
from ninferc.reference_backend import ReferenceBatchBackend
from ninferc.runtime.prefix_cache import page_hashes, prefix_key
from ninferc.runtime.scheduler import GenerationRequest, Scheduler, TokenEvent
from ninferc.runtime.spec import SpecConfig

PS = 32  # page size


@pytest.fixture(scope="module")
def ck(tiny_dir):
    return Checkpoint(tiny_dir, notice=None)


@pytest.fixture(scope="module")
def base(goldens_long):
    return goldens_long["prompt_ids"][:200]


def _sched(ck, *, cache=True, budget=1 << 30, interval=64, spec=None, slots=2, pages=256):
    be = ReferenceBatchBackend(ck.config, ck, num_pages=pages, page_size=PS, num_slots=slots, max_context=1024)
    be.poison(pages=range(pages), slots=range(slots))
    return Scheduler(be, max_concurrency=slots, prefill_chunk=96, prefix_cache_bytes=budget if cache else None,
                     checkpoint_interval=interval if cache else 0, poison_freed=True,
                     spec=None if spec is None else SpecConfig(draft_tokens=spec))


def _one(s, prompt, n=10):
    ev = []
    s.submit(GenerationRequest(f"r{s.iterations}", list(prompt), n, sink=ev.append))
    while not s.idle:
        s.step()
    return [t for e in ev if isinstance(e, TokenEvent) for t in e.ids], ev[-1].stats.cached_tokens


def test_hashes_name_the_whole_prefix():
    a = list(range(100))
    b = list(range(100))
    b[3] = 999
    ha, hb = page_hashes(a, PS), page_hashes(b, PS)
    assert len(ha) == 3 and all(x != y for x, y in zip(ha, hb))  # a change in page 0 changes every later hash
    assert prefix_key(a, 70, PS) == prefix_key(a + [5], 70, PS) != prefix_key(a, 71, PS)


def test_hits_around_checkpoints_and_page_boundaries_equal_cache_off(ck, base):
    on = _sched(ck)
    off = _sched(ck, cache=False)
    first, cached = _one(on, base)
    assert cached == 0 and first == _one(off, base)[0]
    gen_end = base + first[:-1]   # the end-of-generation checkpoint holds the prompt and all but the last token
    other = [7, 8, 9, 10, 11, 12]
    cases = {
        "at an interval checkpoint and page boundary (128)": (base[:128] + other, 128),
        "one below it": (base[:127] + other, 64),
        "one above it": (base[:129] + other, 128),
        "diverging mid-page (150)": (base[:150] + other, 128),
        "the whole prompt again (its checkpoint one token short of the end)": (base, 199),
        "the next turn: prompt, answer and more": (gen_end + [first[-1]] + other, len(gen_end)),
        "prompt + 1 token (the first prompt's checkpoint, not page-aligned)": (base + [first[0]], 199),
    }
    for name, (prompt, want) in cases.items():
        got, cached = _one(on, prompt)
        assert cached == want, name
        assert got == _one(off, prompt)[0], name
    st = on.cache.stats
    assert st.hits == len(cases) and st.hit_tokens == sum(w for _, w in cases.values())


def test_a_requested_checkpoint_serves_a_prompt_that_diverges_after_it(ck, base):
    """``checkpoint_at`` (the server's end of a chat's messages): a prefill chunk ends there and the sequence is
    checkpointed, so a prompt diverging after it reuses it -- between interval checkpoints and off page boundaries --
    instead of one token short of the prompt's end (a split costs a forward pass); positions outside 1..len - 2 (and
    one on an interval multiple, checkpointed once) change nothing."""
    on, off = _sched(ck), _sched(ck, cache=False)
    ev = []
    on.submit(GenerationRequest("h", list(base[:150]), 4, sink=ev.append, checkpoint_at=(0, 64, 101, 149, 400)))
    while not on.idle:
        on.step()
    assert on.cache.stats.by_reason == {"interval": 2, "history": 1, "generation": 1}
    other = [7, 8, 9, 10, 11, 12]
    for prompt, want in ((base[:101] + other, 101), (base[:120] + other, 101), (base[:100] + other, 64),
                         (base[:150], 128)):  # the same prompt again: no end-of-prompt checkpoint
        got, cached = _one(on, prompt)
        assert cached == want and got == _one(off, prompt)[0]
    assert [t for e in ev if isinstance(e, TokenEvent) for t in e.ids] == _one(off, base[:150], 4)[0]
    # asked positions not past the request's cache hit are ignored: the end-of-prompt checkpoint is taken instead
    ev, prompts = [], on.cache.stats.by_reason.get("prompt", 0)
    on.submit(GenerationRequest("h2", list(base[:140]), 2, sink=ev.append, checkpoint_at=(64, 101)))
    while not on.idle:
        on.step()
    assert ev[-1].stats.cached_tokens == 128 and on.cache.stats.by_reason["prompt"] == prompts + 1
    assert _one(on, base[:140])[1] == 139


def test_eviction_at_every_request_keeps_outputs_and_never_frees_pages_in_use(ck, base):
    on = _sched(ck)
    one = on.backend.state_nbytes(type("S", (), {"slot": 0, "mtp": False})())
    tiny = _sched(ck, budget=one + one // 2, interval=64)  # room for one checkpoint: every insert evicts
    off = _sched(ck, cache=False)
    prompts = [base[:120], base[:150] + [1, 2], base[:90], base[:200], base[:64] + [3] * 40]
    for p in prompts:
        assert _one(tiny, p)[0] == _one(off, p)[0]
    assert tiny.cache.checkpoints == 1 and tiny.cache.stats.evicted >= len(prompts)


def test_pool_accounting_and_clear(ck, base):
    s = _sched(ck)
    idle = s.pools.pages.free
    for p in (base, base[:100] + [4, 5], base[:40]):
        _one(s, p)
    assert s.pools.pages.free == idle - s.cache.pages_held() < idle
    assert s.cache.pages_held() == s.cache.pages_only_cached()
    # the counts follow any change of holders (memoised on the pool's version): a sequence sharing a cached page
    # makes it no longer the cache's alone, giving it back makes it so again
    held, page = s.cache.pages_held(), next(iter(s.cache._lru.values())).pages[0]
    s.pools.pages.share([page])
    assert s.cache.page_counts() == (held, held - 1)
    s.pools.pages.give([page])
    assert s.cache.page_counts() == (held, held)
    s.clear_cache()
    s.step()
    assert s.cache.checkpoints == 0 and s.pools.pages.free == idle


@pytest.mark.parametrize("k", [1, 3])
def test_with_speculation_outputs_equal_cache_off(ck, base, k):
    on = _sched(ck, spec=k)
    off = _sched(ck, cache=False)
    first, _ = _one(on, base, 16)
    assert first == _one(off, base, 16)[0]
    for prompt in (base[:128] + [5, 6, 7], base[:160] + [9], base + first[:-1] + [first[-1], 11, 12], base):
        got, cached = _one(on, prompt, 16)
        assert cached > 0
        assert got == _one(off, prompt, 16)[0]


def test_concurrent_requests_share_a_system_prompt_once(ck, base):
    s = _sched(ck, slots=8, pages=256, interval=64)
    off = _sched(ck, cache=False, slots=8)
    system = base[:192]
    _one(s, system + [1])  # the first request leaves checkpoints of the system prompt
    idle_before = s.pools.pages.free
    evs = {}
    tails = [[10 + i, 20 + i, 30 + i] for i in range(8)]
    for i, t in enumerate(tails):
        s.submit(GenerationRequest(f"c{i}", system + t, 12, sink=lambda ev, i=i: evs.setdefault(i, []).append(ev)))
    s.step()  # all 8 admitted this iteration
    seqs = [a.seq for a in s.running]
    assert len(seqs) == 8
    shared = seqs[0].pages[:192 // PS]
    for q in seqs[1:]:
        assert q.pages[:len(shared)] == shared  # the system prompt's 6 full pages are held once
    used = idle_before - s.pools.pages.free
    assert used < 8 * (-(-(192 + 3 + 12) // PS))  # far fewer pages than 8 private copies
    while not s.idle:
        s.step()
    for i, t in enumerate(tails):
        got = [x for e in evs[i] if isinstance(e, TokenEvent) for x in e.ids]
        assert evs[i][-1].stats.cached_tokens == 192
        assert got == _one(off, system + t, 12)[0]


def test_with_an_int8_kv_cache_outputs_equal_cache_off(ck, base):
    from collections import ChainMap

    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.ir.weights import GraphWeights

    g = run_pipeline(build_graph(ck.config, lm_rows="last"), kv_dtype="int8")
    w = ChainMap(GraphWeights(g, ck), ck)

    def sched(cache):
        be = ReferenceBatchBackend(ck.config, w, graph=g, num_pages=128, page_size=PS, num_slots=2, max_context=1024)
        return Scheduler(be, max_concurrency=2, prefill_chunk=96, prefix_cache_bytes=(1 << 30) if cache else None,
                         checkpoint_interval=64 if cache else 0, poison_freed=True)

    on, off = sched(True), sched(False)
    first, _ = _one(on, base)
    assert first == _one(off, base)[0]
    for prompt in (base[:128] + [5, 6], base[:170] + [1], base + first[:-1] + [first[-1], 9]):
        got, cached = _one(on, prompt)
        assert cached > 0 and got == _one(off, prompt)[0]
