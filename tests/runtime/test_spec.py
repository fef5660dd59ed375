"""Speculative decoding with the MTP head on the reference backend, against ``goldens-mtp.json`` (an independent
float32 PyTorch implementation: the external truth) and against plain decoding (lossless)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ninferc.checkpoint import Checkpoint
from ninferc.errors import NinfercError
from ninferc.ir.tolerances import REFERENCE_LOGITS
from ninferc.reference_backend import ReferenceBatchBackend
from ninferc.runtime.paged_kv import Sequence
from ninferc.runtime.scheduler import GenerationRequest, Scheduler, TokenEvent
from ninferc.runtime.spec import SpecConfig, SpecStats, accept_drafts
from ninferc.sampling import HostSampler, SamplingParams, filtered_probs


@pytest.fixture(scope="module")
def ck(tiny_dir):
    return Checkpoint(tiny_dir, notice=None)


@pytest.fixture(scope="module")
def gmtp(tiny_dir):
    return json.loads((tiny_dir / "goldens-mtp.json").read_text())


def _backend(ck, **kw):
    kw = {"num_pages": 64, "page_size": 32, "num_slots": 4, "max_context": 512, **kw}
    return ReferenceBatchBackend(ck.config, ck, **kw)


def _generate(be, prompt, n, *, k=None, chunk=1024, params=None, stop_ids=frozenset(), requests=1):
    s = Scheduler(be, max_concurrency=min(requests, be.num_slots), prefill_chunk=chunk,
                  spec=None if k is None else SpecConfig(draft_tokens=k))
    evs = {}
    for r in range(requests):
        s.submit(GenerationRequest(str(r), list(prompt), n, params=params or SamplingParams(), stop_ids=stop_ids,
                                   sink=lambda ev, r=r: evs.setdefault(r, []).append(ev)))
    while not s.idle:
        s.step()
    out = []
    for r in range(requests):
        ids = [t for e in evs[r] if isinstance(e, TokenEvent) for t in e.ids]
        out.append((ids, evs[r][-1]))
    return out if requests > 1 else out[0]


def test_draft_logits_reproduce_goldens_at_every_position(ck, gmtp):
    """Teacher-forced: with the MTP cache holding rows 0..t of S, drafts 1-3 (chained) match the goldens' top-5."""
    be = _backend(ck)
    worst = 0.0
    for c in gmtp["cases"]:
        S = c["prompt_ids"] + c["greedy_ids"]
        n = len(c["prompt_ids"])
        seq = Sequence(slot=0, pages=list(range(4)), mtp=True)
        be.prefill(seq, S[:n])
        for p in c["positions"]:
            t = p["t"]
            assert seq.length == t + 1
            d, rows = be.draft([seq], [S[t + 1]], [3], return_logits=True)
            for j in range(3):
                top5 = p[f"draft{j + 1}_top5"]
                got = rows[0][j][[tok for tok, _ in top5]]
                REFERENCE_LOGITS.check(got, [v for _, v in top5], f"case {c['prompt'][:12]!r} t={t} draft {j + 1}")
                worst = max(worst, float(np.abs(got - np.array([v for _, v in top5])).max()))
                if p[f"draft{j + 1}_margin"] > 1e-3:
                    assert d[0][j] == p["draft_ids"][j], (t, j)
            if t + 2 < len(S):
                be.verify([seq], [[S[t + 1]]])  # teacher forcing: append the true next token (a round of 0 drafts)
                be.accept([seq], [0])
    assert worst < 2e-4


@pytest.mark.parametrize("k", [1, 2, 3])
def test_speculative_greedy_runs_equal_the_goldens(ck, gmtp, k):
    be = _backend(ck)
    for c in gmtp["cases"]:
        g = c["spec"][f"k{k}"]
        ids, fin = _generate(be, c["prompt_ids"], len(c["greedy_ids"]), k=k)
        assert ids == g["output_ids"] == c["greedy_ids"]
        st = fin.stats.spec
        assert st.rounds == g["rounds"] and st.per_round == g["accepted_per_round"]
        assert st.accepted == sum(g["accepted_per_round"]) and st.drafted == k * g["rounds"]
        assert st.delivered == len(ids) - 1  # the first token is the prefill's
    s = gmtp["summary_golden_cases"][f"k{k}"]
    assert s["rounds"] == sum(c["spec"][f"k{k}"]["rounds"] for c in gmtp["cases"])


def test_tokens_per_round_counts_what_a_request_took(ck, gmtp):
    """A round cut short by ``max_tokens`` counts the tokens it delivered in ``tokens_per_round`` ((gen - 1) /
    rounds, what the per-request log reports), while ``accepted`` and ``per_round`` keep the verifier's decisions (the
    goldens' rounds)."""
    be = _backend(ck)
    c = gmtp["cases"][0]
    g = c["spec"]["k3"]
    cut = 0
    for n in range(4, 13):
        ids, fin = _generate(be, c["prompt_ids"], n, k=3)
        st = fin.stats.spec
        assert ids == c["greedy_ids"][:n] and st.per_round == g["accepted_per_round"][:st.rounds]
        assert st.delivered == n - 1 and st.tokens_per_round == pytest.approx((n - 1) / st.rounds)
        cut += st.accepted + st.rounds > n - 1  # the last round yielded more than the request took
    assert cut >= 3
    with pytest.raises(ValueError, match="yields 1..3 tokens, not 4"):
        SpecStats().add(3, 2, 4)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [64, 1024])
def test_lossless_greedy_all_cases_k1_to_5(ck, gmtp, chunk):
    be = _backend(ck, num_slots=5)
    for c in gmtp["cases"]:
        plain, _ = _generate(be, c["prompt_ids"], 48, chunk=chunk)
        for k in range(1, 6):
            ids, _ = _generate(be, c["prompt_ids"], 48, k=k, chunk=chunk)
            assert ids == plain, (c["prompt"], k)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [64, 1024])
def test_lossless_on_the_long_prompt(ck, goldens_long, chunk):
    be = _backend(ck, num_pages=128, max_context=3200, num_slots=5)
    prompt, n = goldens_long["prompt_ids"], len(goldens_long["greedy_ids"])
    plain, _ = _generate(be, prompt, n, chunk=chunk)
    assert plain == goldens_long["greedy_ids"]
    for k in range(1, 6):
        ids, fin = _generate(be, prompt, n, k=k, chunk=chunk)
        assert ids == plain, k
        assert fin.stats.spec.rounds < n


def test_edge_cases_of_a_round(ck, gmtp):
    be = _backend(ck)
    per_round = [m for c in gmtp["cases"] for m in c["spec"]["k3"]["accepted_per_round"]]
    assert 3 in per_round and 0 in per_round  # rounds with every draft kept (+ bonus) and with the first rejected:
    # both reproduced by test_speculative_greedy_runs_equal_the_goldens
    c = gmtp["cases"][2]
    greedy, rounds = c["greedy_ids"], c["spec"]["k3"]["accepted_per_round"]
    # EOS inside the accepted drafts: pick the middle draft of a round that accepted >= 2, first of its kind
    pos, at = 1, None
    for m in rounds:
        if m >= 2 and greedy.index(greedy[pos + 1]) == pos + 1:
            at = pos + 1
            break
        pos += m + 1
    assert at is not None
    eos = greedy[at]
    ids, fin = _generate(be, c["prompt_ids"], 48, k=3, stop_ids=frozenset({eos}))
    assert ids == greedy[:at + 1] and fin.reason == "stop"
    # max_tokens reached inside a round: nothing past it
    for n in (2, 5, 7):
        ids, fin = _generate(be, c["prompt_ids"], n, k=3)
        assert ids == greedy[:n] and fin.reason == "length" and fin.stats.generated == n


def test_rounds_with_no_draft_then_full_rounds_keep_the_state_right(ck, goldens):
    """Backend level: rounds drafting 0, 3, 1, 0, 2 tokens, each verified and accepted, across KV page boundaries
    (page size 8), give exactly the plain greedy continuation."""
    be = _backend(ck, page_size=8, num_pages=64)
    c = goldens["cases"][0]
    want = c["greedy_ids"]
    seq = Sequence(slot=1, pages=list(range(20)), mtp=True)
    last = int(np.argmax(be.prefill(seq, c["prompt_ids"])[-1]))
    out = [last]
    for k in [0, 3, 1, 0, 2, 3, 0, 1]:
        d = be.draft([seq], [last], [k])[0]
        lg = be.verify([seq], [[last] + d])[0]
        toks = accept_drafts(HostSampler(SamplingParams()), lg, d)
        be.accept([seq], [len(toks) - 1])
        out += [s.token for s in toks]
        last = out[-1]
        assert seq.length == len(c["prompt_ids"]) + len(out) - 1
    assert out == want[:len(out)] and len(out) > 10


def test_a_round_at_the_context_limit_drafts_less(ck, goldens):
    c = goldens["cases"][1]
    n_prompt = len(c["prompt_ids"])
    ctx = n_prompt + 9  # prompt + 9 tokens: the last rounds' drafts are cut to the room left
    be = _backend(ck, max_context=ctx, page_size=8, num_pages=8)
    ids, fin = _generate(be, c["prompt_ids"], 9, k=4)
    assert ids == c["greedy_ids"][:9] and fin.reason == "length"
    assert fin.stats.spec.drafted < 4 * fin.stats.spec.rounds


@pytest.mark.slow  # seconds on 2 cores: the quick loop (-m "not slow") stays under 2 minutes
@pytest.mark.parametrize("rule", ["logits", "ids"])
def test_speculative_sampling_matches_plain_sampling_distribution(rule):
    """A 4-token Markov model; 3 tokens after the prompt, drafted by a poor deterministic proposer. The empirical
    distribution of the 64 continuations under speculative sampling equals the model's within a chi-square bound --
    accepted from the rows' logits (:func:`accept_drafts`) or from one independent draw per row (:func:`accept_ids`,
    what the GPU does for a request without penalties, min_p or logprobs)."""
    from ninferc.runtime.spec import accept_ids

    rng = np.random.default_rng(0)
    V = 4  # noqa: N806
    logit_table = rng.normal(scale=1.5, size=(V, V)).astype(np.float32)
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=0)
    p = np.array([filtered_probs(logit_table[a], params) for a in range(V)])
    want = np.zeros((V, V, V))
    x0 = 2
    for a in range(V):
        for b in range(V):
            for c in range(V):
                want[a, b, c] = p[x0, a] * p[a, b] * p[b, c]
    counts = np.zeros_like(want)
    N = 20000  # noqa: N806
    for i in range(N):
        s = HostSampler(SamplingParams(temperature=0.9, top_p=0.95, seed=i + 1))
        out, last = [], x0
        while len(out) < 3:
            drafts = [(last + 1 + j) % V for j in range(2)]  # a proposer unrelated to the model
            ctx = [last] + drafts
            if rule == "logits":
                toks = accept_drafts(s, logit_table[ctx], drafts)
            else:  # one draw per row, from the row's filtered distribution (the device sampler's job)
                toks = accept_ids(s, [s(logit_table[t]) for t in ctx], drafts)
            out += [t.token for t in toks]
            last = out[-1]
        counts[tuple(out[:3])] += 1
    keep = want > 0
    exp = N * want[keep]
    chi2 = float(((counts[keep] - exp) ** 2 / exp).sum())
    assert counts[~keep].sum() == 0
    assert chi2 < 105.0, chi2  # 99.9th percentile of chi-square with 63 degrees of freedom is 103.4


def test_spec_refused_without_an_mtp_head(tiny_dir, ck):
    from ninferc.testing import FakeBackend

    with pytest.raises(NinfercError, match="has no MTP head"):
        Scheduler(FakeBackend(), spec=SpecConfig(draft_tokens=2))
    with pytest.raises(NinfercError, match="--draft-tokens must be an integer in 1..5"):
        SpecConfig(draft_tokens=6)
    with pytest.raises(NinfercError, match="not supported"):
        SpecConfig(method="eagle")
    for bad in (0, -1, True, 2.0):
        with pytest.raises(NinfercError, match=f"--spec-disable-by-batch-size must be an integer >= 1, found {bad!r}"):
            SpecConfig(disable_by_batch_size=bad)


def test_rounds_past_the_batch_cut_draft_nothing_and_stay_lossless(ck, gmtp):
    """``disable_by_batch_size`` 2 with three requests: every step of three sequences is a plain decode step (no
    draft, no verify), rounds of two or fewer draft, and each request's ids are its golden greedy run -- the MTP head's
    rows kept through the plain steps, so the drafts after them are the head's (at least one accepted)."""
    be = _backend(ck)
    calls, decodes, verifies = [], [], []
    draft, decode, verify_ids = be.draft, be.decode, be.verify_ids

    def recorded(seqs, last, ks, **kw):
        calls.append((len(seqs), list(ks)))
        return draft(seqs, last, ks, **kw)

    be.draft = recorded
    be.decode = lambda seqs, toks: decodes.append(len(seqs)) or decode(seqs, toks)
    be.verify_ids = lambda seqs, tl, sp: verifies.append(len(seqs)) or verify_ids(seqs, tl, sp)  # greedy rounds
    cases = [gmtp["cases"][i] for i in (0, 1, 2)]
    n = [16, 40, 48]
    s = Scheduler(be, max_concurrency=3, prefill_chunk=1024, spec=SpecConfig(draft_tokens=2, disable_by_batch_size=2))
    evs = {}
    for r, (c, m) in enumerate(zip(cases, n)):
        s.submit(GenerationRequest(str(r), list(c["prompt_ids"]), m, params=SamplingParams(),
                                   sink=lambda ev, r=r: evs.setdefault(r, []).append(ev)))
    while not s.idle:
        s.step()
    for r, (c, m) in enumerate(zip(cases, n)):
        assert [t for e in evs[r] if isinstance(e, TokenEvent) for t in e.ids] == c["greedy_ids"][:m]
    assert 3 in decodes and verifies and 3 not in verifies and all(b <= 2 for b, _ in calls)
    assert any(k > 0 for b, ks in calls if b <= 2 for k in ks)
    # the longest request: steps without drafts (not rounds of its speculative stats), then rounds with
    st = evs[2][-1].stats
    assert 1 <= st.spec.rounds < st.decode_steps and st.spec.drafted == 2 * st.spec.rounds and st.spec.accepted >= 1
    assert st.spec.delivered < n[2] - 1


def test_stats_describe():
    st = SpecStats()
    st.add(3, 3)
    st.add(3, 0)
    assert st.tokens_per_round == 2.5 and st.acceptance == 0.5 and st.accepted_at == [1, 1, 1]
    assert st.describe() == "mtp 2.50 tok/round, 50 % accepted"
    # a request that ended with the prefill's token: no round to rate (the log said "0.00 tok/round, 0 % accepted"
    # while its record said null), a count per draft position all the same (it was [], 2026-12-06)
    none = SpecStats(draft_tokens=3)
    assert none.describe() == "mtp no rounds" and none.accepted_at == [0, 0, 0]
    assert none.tokens_per_round is None and none.acceptance is None
    none.add(3, 1)
    assert none.accepted_at == [1, 0, 0] and none.describe() == "mtp 2.00 tok/round, 33 % accepted"


def _int8_kv_backend(ck, **kw):
    """The reference backend over the compiled graph with an int8 KV cache (and the checkpoint's MTP head)."""
    from collections import ChainMap

    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.ir.weights import GraphWeights

    g = run_pipeline(build_graph(ck.config, lm_rows="last"), kv_dtype="int8")
    kw = {"num_pages": 64, "page_size": 32, "num_slots": 4, "max_context": 512, **kw}
    return ReferenceBatchBackend(ck.config, ChainMap(GraphWeights(g, ck), ck), graph=g, **kw)


@pytest.mark.slow  # seconds on 2 cores: the quick loop (-m "not slow") stays under 2 minutes
@pytest.mark.parametrize("chunk", [64, 1024])
def test_lossless_with_an_int8_kv_cache(ck, gmtp, chunk):
    be = _int8_kv_backend(ck)
    assert be.has_mtp
    for c in gmtp["cases"][:3]:
        plain, _ = _generate(be, c["prompt_ids"], 32, chunk=chunk)
        for k in (1, 3, 5):
            ids, _ = _generate(be, c["prompt_ids"], 32, k=k, chunk=chunk)
            assert ids == plain, (c["prompt"], k)


@pytest.fixture(scope="module")
def mtp_artifacts(tmp_path_factory, tiny_dir):
    from ninferc.pipeline import compile_model

    d = tmp_path_factory.mktemp("mtp_art")
    out = {}
    for w in ("bf16", "w4"):
        out[w] = d / f"tiny_{w}.ninfer"
        compile_model(tiny_dir, "sm_90", out[w], sku="h200", weights=w)
    return out


def _artifact_backend(path, **kw):
    from ninferc.artifact import Artifact

    art = Artifact.open(path)
    kw = {"num_pages": 64, "page_size": 64, "num_slots": 2, "max_context": 512, **kw}
    return ReferenceBatchBackend(art.config, art.weights(), graph=art.graph(), mtp_graph=art.mtp_graph(), **kw)


def test_artifacts_carry_the_mtp_head(mtp_artifacts, gmtp):
    """compile stores the head (class mtp follows the recipe): from the bf16 artifact the reference backend
    reproduces a golden speculative run; from the w4 one speculation stays lossless against its own plain run."""
    from ninferc.artifact import Artifact

    art = Artifact.open(mtp_artifacts["w4"])
    names = set(art.tensor_names())
    # the head's graph went through the model's passes: its q / k / v and gate / up matrices are stored fused
    assert {"mtp.fc", "mtp.fc.scales", "mtp.L0.attn.q_k_v", "mtp.L0.mlp.gate_up", "mtp.norm"} <= names
    assert {op.kind for op in art.mtp_graph().ops()} >= {"GatedAttentionBlock", "AddRMSNorm", "Concat"}
    assert art.mtp_graph().params["mtp.fc"].dtype == "w4" and art.mtp_graph().params["lm_head"].dtype == "w8"
    be = _artifact_backend(mtp_artifacts["bf16"])
    c = gmtp["cases"][0]
    ids, fin = _generate(be, c["prompt_ids"], 48, k=3)
    assert ids == c["greedy_ids"] and fin.stats.spec.per_round == c["spec"]["k3"]["accepted_per_round"]
    be4 = _artifact_backend(mtp_artifacts["w4"], draft_lm_head="w4")
    for c in gmtp["cases"][:2]:
        assert _generate(be4, c["prompt_ids"], 32, k=2)[0] == _generate(be4, c["prompt_ids"], 32)[0]


def test_rounds_accept_from_drawn_ids_like_from_logits(ck, gmtp):
    """A greedy round is accepted from the verify rows' argmax ids (``verify_ids``: on the GPU one read of K + 1 ids
    instead of K + 1 logits rows) exactly as from the logits: the same tokens and the same rounds. Plainly sampled
    requests take the ids too; a penalised, min_p or logprobs request takes the logits."""
    from ninferc.runtime.spec import accept_ids, ids_suffice
    from ninferc.sampling import HostSampler, NonFiniteLogits

    class LogitsOnly:
        def __init__(self, be):
            self._be = be

        def __getattr__(self, name):
            if name == "verify_ids":
                raise AttributeError(name)
            return getattr(self._be, name)

    calls = []
    be = _backend(ck)
    orig = be.verify_ids
    be.verify_ids = lambda *a: calls.append(1) or orig(*a)
    for c in gmtp["cases"][:3]:
        ids, fin = _generate(be, c["prompt_ids"], 40, k=3)
        ref_ids, ref_fin = _generate(LogitsOnly(_backend(ck)), c["prompt_ids"], 40, k=3)
        assert ids == ref_ids == c["greedy_ids"][:40]
        assert fin.stats.spec.per_round == ref_fin.stats.spec.per_round
    assert calls
    assert ids_suffice(HostSampler(SamplingParams(temperature=0.7, top_p=0.9, top_k=20)), None)
    assert not ids_suffice(HostSampler(SamplingParams(temperature=0.7, min_p=0.1)), None)
    assert not ids_suffice(HostSampler(SamplingParams(frequency_penalty=0.5)), None)

    class Adjusts:  # a backend that adjusts verify rows on the device (the CUDA backend)
        adjusts_verify_rows = True

    assert ids_suffice(HostSampler(SamplingParams(frequency_penalty=0.5)), None, Adjusts())
    assert ids_suffice(HostSampler(SamplingParams(temperature=0.7, min_p=0.1)), None, Adjusts())
    assert not ids_suffice(HostSampler(SamplingParams(frequency_penalty=0.5)), 2, Adjusts())
    assert not ids_suffice(HostSampler(SamplingParams(), constraint=object()), None, Adjusts())
    assert not ids_suffice(HostSampler(SamplingParams()), 2)
    s = HostSampler(SamplingParams())
    assert [t.token for t in accept_ids(s, [5, 6, 9, 4], [5, 6, 7])] == [5, 6, 9]
    assert [t.token for t in accept_ids(s, [5, 6, 7, 4], [5, 6, 7])] == [5, 6, 7, 4]
    assert s.draws == 7  # every emitted token counted (the device counter of the next round starts there)
    with pytest.raises(NonFiniteLogits):
        accept_ids(s, [5, -1, 7, 4], [5, 6, 7])


def test_a_round_mixing_drawn_ids_and_logits_keeps_the_seeded_text(ck, gmtp):
    """A seeded sampling request (accepted from drawn ids) sharing its rounds with a greedy request asking for
    logprobs (accepted from its logits): the rounds are mixed (``verify_mixed``), the seeded request's text is the one
    it gets alone and the logprobs request's the golden's, with its logprobs. Until 2026-12-07 such a round went whole
    to the logits path, so a seeded text depended on its round-mates."""
    from ninferc.runtime.scheduler import TokenEvent

    seeded = SamplingParams(temperature=0.8, top_p=0.95, seed=11)
    c0, c1 = gmtp["cases"][0], gmtp["cases"][1]
    alone, _ = _generate(_backend(ck), c0["prompt_ids"], 24, k=3, params=seeded)
    be = _backend(ck)
    calls = []
    orig = be.verify_mixed
    be.verify_mixed = lambda *a: calls.append([x is None for x in a[2]]) or orig(*a)
    s = Scheduler(be, max_concurrency=2, prefill_chunk=1024, spec=SpecConfig(draft_tokens=3))
    evs: dict = {}
    s.submit(GenerationRequest("a", list(c0["prompt_ids"]), 24, params=seeded,
                               sink=lambda ev: evs.setdefault("a", []).append(ev)))
    s.submit(GenerationRequest("b", list(c1["prompt_ids"]), 24, logprobs=2,
                               sink=lambda ev: evs.setdefault("b", []).append(ev)))
    while not s.idle:
        s.step()
    ids = {r: [t for e in evs[r] if isinstance(e, TokenEvent) for t in e.ids] for r in "ab"}
    assert ids["a"] == alone
    assert ids["b"] == c1["greedy_ids"][:24]
    assert all(x.logprob is not None and len(x.top) == 2 for e in evs["b"] if isinstance(e, TokenEvent)
               for x in e.sampled)
    assert [False, True] in calls  # b's rows came back as logits, a's as ids, in one verify step
