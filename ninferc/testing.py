"""Test support shared by the test tiers: where the fixture checkpoints live."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ninferc.sampling import rows_on_device

REPO = Path(__file__).resolve().parents[1]


def models_dir() -> Path:
    """The folder holding the fixture checkpoints (``qwen35-tiny-code``): ``$NINFERC_MODELS`` when set, else the
    repository's own copy, ``tests/fixtures`` (byte-identical to the shared fixture; ``tests/test_fixture_copy.py``
    checks it where ``../shared/models`` is present).

    Raises:
        FileNotFoundError: the folder lacks ``qwen35-tiny-code/config.json`` (tests then fail rather than skip: the
            goldens are the external truth and a silent skip could never fail).
    """
    env = os.environ.get("NINFERC_MODELS")
    d = Path(env) if env else REPO / "tests" / "fixtures"
    if not (d / "qwen35-tiny-code" / "config.json").is_file():
        raise FileNotFoundError(f"fixture checkpoint not found: {d / 'qwen35-tiny-code'} has no config.json "
                                f"({'$NINFERC_MODELS' if env else 'the repository copy under tests/fixtures'})")
    return d


#: vocabulary of :class:`FakeBackend`
def _arch_skus() -> dict[str, str]:
    from ninferc.targets.arch import ARCHS

    chosen = {"sm_86": "rtx3090", "sm_89": "l20", "sm_90": "h200", "sm_120a": "rtx5090"}
    missing = [a for a in ARCHS if a not in chosen]
    if missing:
        raise KeyError(f"ninferc.testing.ARCH_SKUS: no test SKU for {missing}")
    return {a: chosen[a] for a in ARCHS}


#: the SKU each target is planned for in the tests and the plan goldens (tests/golden/<arch>/), one per arch of
#: :data:`ninferc.targets.arch.ARCHS` in its order: a new arch fails here until it is given one
ARCH_SKUS: dict[str, str] = _arch_skus()

FAKE_VOCAB = 32


class FakeBackend:
    """A batched backend (:mod:`ninferc.runtime.backend`) for tests of the serving policy: no model, logits whose
    argmax is (last token + 1) % :data:`FAKE_VOCAB` (NaN rows after the ids in ``nan_for``); records every call in
    ``calls``. With ``ahead=True`` it also offers the scheduler's decode ahead the way the CUDA backend does: a
    greedy row is "drawn on the device" (:meth:`sample_async` queues, ``result()`` reads and records it later), and
    :meth:`decode_next` feeds the drawn ids before they are read."""

    name = "fake"

    def __init__(self, num_pages=64, page_size=16, num_slots=4, max_context=256, nan_for=(), ahead=False):
        self.num_pages, self.page_size, self.num_slots, self.max_context = num_pages, page_size, num_slots, max_context
        self.vocab_size = FAKE_VOCAB
        self.calls = []
        self.nan_for = set(nan_for)
        if ahead:
            self.samples_on_device = lambda rows: all(s.params.greedy for s, _ in rows) and rows_on_device(rows)
            self.sample_async = self._sample_async
            self.decode_next = self._decode_next

    def _sample_async(self, logits, rows):
        self.calls.append(("sample_async", len(rows)))
        fake = self

        class Pending:
            ids = [int(np.argmax(x)) if np.isfinite(x).all() else 0 for x in logits]

            def result(self):
                if not hasattr(self, "got"):
                    fake.calls.append(("result", len(rows)))
                    self.got = fake.sample(logits, rows)
                return self.got

        return Pending()

    def _decode_next(self, seqs, pending):
        self.calls.append(("decode_next", tuple(s.slot for s in seqs)))
        return self._step(seqs, pending.ids)

    def _row(self, t):
        x = np.zeros(FAKE_VOCAB, np.float32)
        x[(t + 1) % FAKE_VOCAB] = 5.0
        if t in self.nan_for:
            x[:] = np.nan
        return x

    def prefill(self, seq, ids):
        assert len(seq.pages) * self.page_size >= seq.length + len(ids)
        self.calls.append(("prefill", seq.slot, len(ids)))
        seq.length += len(ids)
        return self._row(ids[-1])[None]

    #: most tokens of one scored prefill chunk
    max_scored_tokens = 4

    def prefill_scored(self, seq, ids, targets, top_n):
        from ninferc.sampling import score_rows

        assert len(seq.pages) * self.page_size >= seq.length + len(ids)
        assert len(ids) <= self.max_scored_tokens and len(targets) <= len(ids)
        self.calls.append(("prefill_scored", seq.slot, len(ids)))
        seq.length += len(ids)
        return self._row(ids[-1])[None], score_rows(np.stack([self._row(t) for t in ids]), targets, top_n)

    def decode(self, seqs, tokens):
        self.calls.append(("decode", tuple(s.slot for s in seqs)))
        return self._step(seqs, tokens)

    def _step(self, seqs, tokens):
        for s in seqs:
            assert len(s.pages) * self.page_size >= s.length + 1, "a decode step past the sequence's pages"
            s.length += 1
        return np.stack([self._row(t) for t in tokens])

    def sample(self, logits, rows):
        from ninferc.reference_backend import ReferenceBatchBackend

        return ReferenceBatchBackend.sample(self, logits, rows)

    def close(self):
        pass


def collecting_request(rid: str, prompt, n: int, events: dict, **kw):
    """A :class:`~ninferc.runtime.scheduler.GenerationRequest` of ``n`` tokens whose events are appended to
    ``events[rid]`` (the scheduler tests' sink); ``kw`` as the request's fields."""
    from ninferc.runtime.scheduler import GenerationRequest

    return GenerationRequest(rid, list(prompt), n, sink=lambda ev: events.setdefault(rid, []).append(ev), **kw)


def run_until_idle(scheduler, limit: int = 10_000) -> None:
    """Step ``scheduler`` until it is idle.

    Raises:
        AssertionError: still busy after ``limit`` iterations."""
    for _ in range(limit):
        scheduler.step()
        if scheduler.idle:
            return
    raise AssertionError(f"scheduler did not go idle in {limit} iterations")


def event_ids(events) -> list[int]:
    """The token ids of a request's :class:`~ninferc.runtime.scheduler.TokenEvent` s, in order."""
    from ninferc.runtime.scheduler import TokenEvent

    return [t for e in events if isinstance(e, TokenEvent) for t in e.ids]


def nan_final_norm_after(engine, n: int):
    """An ``on_token`` callback for :func:`ninferc.generate.generate` on a CUDA ``engine``
    (:class:`~ninferc.runtime.engine.Engine`) that, at the ``n``-th token, fills the final norm's weight (the
    AddRMSNorm whose output the LM head reads) with NaN on the engine stream, so every later step's logits are NaN.
    Returns ``(on_token, seen)``: ``seen`` collects the ids handed to the callback."""
    g = engine.graph
    lm_inputs = {o.inputs[0] for o in g.ops() if o.kind == "LMHead"}
    name = next(op.params["weight"] for op in g.ops() if op.kind == "AddRMSNorm" and op.outputs[-1] in lm_inputs)
    seen: list[int] = []

    def on_token(tok):
        seen.append(tok)
        if len(seen) == n:
            with engine.stream:
                engine.params[name][:] = np.float32(np.nan)

    return on_token, seen


def check_device_adjusted_rows(be, prompts: list, golden_ids: list[int], steps: int = 5, chunk: int = 8,
                               spec_tokens: int = 0) -> dict:
    """The CUDA backend's device-side sampling adjustments (:meth:`~ninferc.runtime.cuda_backend.CudaBatchBackend.
    _adjust`) against the host sampler, on a built backend ``be`` (3 GDN slots or more; emulated or real GPU; with
    ``spec_tokens`` K, built with them and served with ``--spec mtp``-style rounds of K drafts): three requests share
    their steps -- (a) greedy with all three penalties, a logit bias and ``min_tokens`` (the stop ids held back: id 2,
    standing for EOS), (b) sampled with min_p and a presence penalty, (c) plain greedy on ``prompts[2]``, whose ids
    must be ``golden_ids[:steps]``. Every adjusted row's logits are snapshotted before and after the adjustment and
    checked: the penalties, bias and held stop ids bit-exact against :meth:`HostSampler.adjust
    <ninferc.sampling.HostSampler.adjust>` given the history the row's request had by then (its emitted tokens, and
    for a verify row the drafts before it), min_p's kept set equal to :func:`~ninferc.sampling.filtered_probs`'
    support, and (a)'s decode-step tokens the argmax of the host-adjusted rows. All rows drawn on the device
    (``host_rows`` 0): plain, with decode ahead (``decode_next`` called); with K, every round accepted from the drawn
    ids (``verify`` never asked for logits). First, that the backend's warm-up (:meth:`~ninferc.runtime.cuda_backend.
    CudaBatchBackend.warm_adjustments`) built the token-history arrays and left them empty.

    Returns:
        the backend's stats after the run. Raises AssertionError on the first difference.
    """
    from collections import Counter

    from ninferc.runtime.scheduler import Scheduler
    from ninferc.runtime.spec import SpecConfig
    from ninferc.sampling import HostSampler, SamplingParams, filtered_probs

    eos = 2
    pa = SamplingParams(presence_penalty=1.5, frequency_penalty=0.5, repetition_penalty=1.3, min_tokens=3,
                        logit_bias=((5, 4.0), (7, -100.0)))
    pb = SamplingParams(temperature=0.8, min_p=0.2, presence_penalty=1.5, seed=3)
    snaps: list = []  # (sampler, tokens of its record, extra tokens, is a decode row, raw row, adjusted row)
    ahead: list = []
    # the construction's warm-up (CudaBatchBackend.warm_adjustments) built the history arrays and left nothing in them
    assert be._hist_counts is not None and be.stats["adjusted_rows"] == 0
    assert all(o is None for o in be._hist_owner)
    assert not np.asarray(be._hist_counts.get()).any() and not np.asarray(be._hist_prompt.get()).any()
    adjust, decode_next = be._adjust, be.decode_next

    def spy(todo, counted):
        e = be.engine
        who = [(i, s, s.draws + be._unread.get(id(s), 0), list(ex)) for i, s, _, ex in todo]
        raw = {i: np.array(e.logits[i].get()) for i, _, _, _ in who}
        adjust(todo, counted)
        snaps.extend((s, n, ex, counted, raw[i], np.array(e.logits[i].get())) for i, s, n, ex in who)

    def counted_next(seqs, pending):
        ahead.append(len(seqs))
        return decode_next(seqs, pending)

    be._adjust, be.decode_next = spy, counted_next
    if spec_tokens:
        be.verify = None  # every round must be accepted from ids drawn on the device
    s = Scheduler(be, max_concurrency=3, prefill_chunk=chunk,
                  spec=SpecConfig("mtp", spec_tokens) if spec_tokens else None)
    evs: dict = {}
    s.submit(collecting_request("a", prompts[0], steps, evs, params=pa, stop_ids=frozenset({eos})))
    s.submit(collecting_request("b", prompts[1], steps, evs, params=pb))
    s.submit(collecting_request("c", prompts[2], steps, evs))
    run_until_idle(s)
    out = {rid: event_ids(evs[rid]) for rid in "abc"}
    assert out["c"] == list(golden_ids[:steps]), (out["c"], golden_ids[:steps])
    assert be.stats["host_rows"] == 0 and be.stats["adjusted_rows"] == len(snaps) > 0
    assert s.snapshot().sampler_rows == {k: be.stats[k] for k in ("device_rows", "host_rows", "adjusted_rows",
                                                                  "logprob_rows")}  # what /metrics reads
    if spec_tokens:
        assert all(fin.stats.spec.rounds >= 1 for fin in (evs["a"][-1], evs["b"][-1])), "no speculative rounds"
        assert any(ex for _, _, ex, _, _, _ in snaps), "no verify row had drafts before it"
    else:
        assert ahead and max(ahead) >= 2, ahead  # the adjusted rows' steps went ahead (with a row beside them)
    owner = {"a": (pa, prompts[0]), "b": (pb, prompts[1])}
    seen = Counter()
    for sampler, n, extra, is_decode, raw, adjusted in snaps:
        rid = "a" if sampler.params == pa else "b"
        p, prompt = owner[rid]
        host = HostSampler(p, prompt, [eos] if rid == "a" else ())
        for t in out[rid][:n] + extra:
            host.observe(t)
        want = host.adjust(raw)
        if p.min_p:
            keep = filtered_probs(want, SamplingParams(temperature=p.temperature, min_p=p.min_p)) > 0
            assert np.array_equal(np.isfinite(adjusted), keep & np.isfinite(want)), (rid, n, extra)
            assert np.array_equal(adjusted[keep], want[keep]), (rid, n, extra)
        else:
            assert np.array_equal(adjusted, want), (rid, n, extra, np.flatnonzero(adjusted != want)[:8])
            if is_decode and n < len(out[rid]):
                assert out[rid][n] == int(np.argmax(want)), (rid, n)
        seen[rid] += 1
    assert seen["a"] >= 3 and seen["b"] >= 1 and len(out["a"]) >= 3, (seen, out)
    return dict(be.stats)


def check_mixed_speculative_round(make_backend, a_prompt: list, b_prompt: list, b_golden: list, *, a_tokens: int,
                                  b_tokens: int, k: int, chunk: int) -> dict:
    """A speculative round mixing a request accepted from ids drawn on the device with one accepted from its logits,
    on CUDA backends ``make_backend()`` builds (emulated or real GPU; 2 GDN slots or more, ``k`` drafts per round):
    (a) seeded sampling on ``a_prompt`` (``a_tokens`` tokens), alone and then beside (b) greedy on ``b_prompt`` asking
    for 2 logprobs (``b_tokens`` tokens). Checked: a's text the same in both runs (its draws keep their Philox
    counters whoever shares its rounds), b's ids ``b_golden[:b_tokens]`` with their logprobs, the rounds mixed
    (``verify_mixed`` called, b's rows among ``host_rows``).

    Returns:
        the second run's backend stats. Raises AssertionError on the first difference.
    """
    from ninferc.runtime.scheduler import Scheduler
    from ninferc.runtime.spec import SpecConfig
    from ninferc.sampling import SamplingParams

    seeded = SamplingParams(temperature=0.9, top_p=0.95, seed=77)

    def run(with_b: bool):
        be = make_backend()
        mixed: list = []
        orig = be.verify_mixed
        be.verify_mixed = lambda *a: mixed.append(1) or orig(*a)
        try:
            s = Scheduler(be, max_concurrency=2, prefill_chunk=chunk, spec=SpecConfig("mtp", k))
            evs: dict = {}
            s.submit(collecting_request("a", a_prompt, a_tokens, evs, params=seeded))
            if with_b:
                s.submit(collecting_request("b", b_prompt, b_tokens, evs, logprobs=2))
            run_until_idle(s)
            return evs, dict(be.stats), mixed
        finally:
            be.close()

    alone, _, _ = run(False)
    both, stats, mixed = run(True)
    assert event_ids(both["a"]) == event_ids(alone["a"])
    assert event_ids(both["b"]) == list(b_golden[:b_tokens])
    assert all(x.logprob is not None and len(x.top) == 2 for ev in both["b"] if hasattr(ev, "sampled")
               for x in ev.sampled)
    assert mixed and stats["host_rows"] > 0
    return stats


def check_plain_steps_keep_mtp_rows(be, prompt: list, golden: list, *, chunk: int, steps: int = 4) -> None:
    """A speculating sequence's plain decode steps (those of a ``--spec-disable-by-batch-size`` server past its cut)
    leave the MTP head where one-token verify steps and ``accept()`` leave it, on a CUDA backend ``be`` (emulated or
    real GPU; 2 GDN slots, ``spec_tokens`` >= 2): two sequences prefill ``prompt`` in ``chunk``-token pieces, then
    take ``golden[:steps]`` one by plain ``decode``, the other by ``verify`` + ``accept(0)``. Checked: their pending
    hidden rows (bf16, compared as fp32) agree up to the two programs' rounding (2 % of the row's largest value) and
    are not zero, the next 2 drafts after ``golden[steps]`` are the same, and a decode step mixing a speculating and a
    plain sequence is refused. Raises AssertionError on the first difference."""
    import pytest

    from ninferc.errors import NinfercError
    from ninferc.runtime.backend import KVPools

    pools = KVPools(be.num_pages, be.page_size, be.num_slots)
    plain, verified = (pools.open_shared([], pools.pages_for(len(prompt) + steps + 3)) for _ in range(2))
    for x in (plain, verified):
        x.mtp = True
        for i in range(0, len(prompt), chunk):
            be.prefill(x, prompt[i:i + chunk])
    for t in golden[:steps]:
        be.decode([plain], [t])
        be.verify([verified], [[t]])
        be.accept([verified], [0])
    assert plain.length == verified.length == len(prompt) + steps
    e = be.engine

    def pending(x):
        return (e.host(e.mtp_src[x.slot]).astype(np.uint32) << 16).view(np.float32)

    a, b = pending(plain), pending(verified)
    assert np.abs(a).max() > 0 and np.allclose(a, b, rtol=2e-2, atol=2e-2 * np.abs(b).max())
    assert be.draft([plain], [golden[steps]], [2]) == be.draft([verified], [golden[steps]], [2])
    verified.mtp = False
    with pytest.raises(NinfercError, match="speculating and plain sequences together"):
        be.decode([plain, verified], [golden[steps]] * 2)
