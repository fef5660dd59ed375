"""Scoring a prompt (``GenerationRequest.prompt_logprobs``: vLLM's ``prompt_logprobs``, a completion's ``echo`` with
``logprobs``): the scheduler's chunks and events over a recording fake backend, and the reference backend's scores
against the fixture's goldens (HF transformers' teacher-forced logits: the external truth)."""

from __future__ import annotations

import numpy as np
import pytest

from ninferc.checkpoint import Checkpoint
from ninferc.reference_backend import ReferenceBatchBackend
from ninferc.runtime.paged_kv import Sequence
from ninferc.runtime.scheduler import (EngineFailed, ErrorEvent, FinishEvent, GenerationRequest, PromptEvent,
                                       Scheduler, ServingError, TokenEvent)
from ninferc.sampling import NonFiniteLogits, SamplingParams, log_softmax, score_rows
from ninferc.testing import FAKE_VOCAB as V
from ninferc.testing import FakeBackend
from ninferc.testing import collecting_request as _req
from ninferc.testing import run_until_idle as _run


def _fake_row(t):
    x = np.zeros(V, np.float32)
    x[(t + 1) % V] = 5.0
    return x


def test_score_rows_matches_log_softmax_rank_and_top():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 50)).astype(np.float32)
    x[2, 7] = x[2, 9] = 4.0  # a tie for the top: the lower id first
    got = score_rows(x, [5, 0, 9], 3)
    assert len(got) == 3  # row 3 has no target
    for i, sc in enumerate(got):
        lp = log_softmax(x[i])
        assert sc.token == [5, 0, 9][i]
        assert sc.logprob == pytest.approx(lp[sc.token], abs=1e-5)
        assert sc.rank == 1 + int((x[i] > x[i, sc.token]).sum())
        order = sorted(range(50), key=lambda j: (-x[i, j], j))[:3]
        assert [j for j, _ in sc.top] == order
        assert [v for _, v in sc.top] == pytest.approx([lp[j] for j in order], abs=1e-5)
    assert got[2].top[:2] == [(7, pytest.approx(got[2].top[0][1])), (9, pytest.approx(got[2].top[0][1]))]
    assert got[2].rank == 1  # id 9 ties id 7 for the top: tied logits share a rank (1 + the strictly larger)
    y = np.zeros((1, 40), np.float32)
    y[0, [31, 7, 20, 3]] = [2.0, 1.0, 1.0, 1.0]  # three ids tie for places 2-4: top 2 takes the lowest of them
    assert [i for i, _ in score_rows(y, [0], 2)[0].top] == [31, 3]
    assert [i for i, _ in score_rows(y, [0], 3)[0].top] == [31, 3, 7]
    assert score_rows(x, [], 5) == []
    x[1, 3] = np.nan
    with pytest.raises(NonFiniteLogits, match="scored position 1"):
        score_rows(x, [5, 0], 2)


def test_scored_prompt_is_chunked_and_delivered_before_the_tokens():
    be = FakeBackend(num_pages=16, page_size=16)
    s = Scheduler(be, max_concurrency=2, prefill_chunk=64)
    ev = {}
    prompt = [3, 4, 9, 10, 11, 2, 30, 31, 0, 1]
    s.submit(_req("a", prompt, 3, ev, prompt_logprobs=2))
    _run(s)
    assert [c for c in be.calls if c[0].startswith("prefill")] == [("prefill_scored", 0, 4)] * 2 + \
        [("prefill_scored", 0, 2)]  # at most max_scored_tokens (4) a chunk
    kinds = [type(e) for e in ev["a"]]
    assert kinds[0] is PromptEvent and kinds[-1] is FinishEvent and TokenEvent in kinds
    scores = ev["a"][0].scores
    assert [sc.token for sc in scores] == prompt[1:]
    for prev, sc in zip(prompt, scores):
        lp = log_softmax(_fake_row(prev))
        assert sc.logprob == pytest.approx(lp[sc.token], abs=1e-5)
        assert sc.rank == (1 if sc.token == (prev + 1) % V else 2)
        assert sc.top[0] == ((prev + 1) % V, pytest.approx(lp[(prev + 1) % V], abs=1e-5)) and len(sc.top) == 2
    assert [t for e in ev["a"] if isinstance(e, TokenEvent) for t in e.ids] == [2, 3, 4]  # generation unchanged


def test_max_tokens_zero_scores_the_prompt_and_generates_nothing():
    be = FakeBackend(num_pages=16, page_size=16, num_slots=2)
    s = Scheduler(be, max_concurrency=2)
    ev = {}
    s.submit(_req("a", [5, 6, 7], 0, ev, prompt_logprobs=0))
    _run(s)
    assert [type(e) for e in ev["a"]] == [PromptEvent, FinishEvent]
    fin = ev["a"][-1]
    assert fin.reason == "length" and fin.stats.generated == 0 and fin.stats.first_token is None
    assert fin.stats.scored == 2 and fin.stats.prefill_s is not None and fin.stats.prefill_tok_s is not None
    assert [sc.top for sc in ev["a"][0].scores] == [[], []]
    assert not any(c[0] in ("decode", "sample_async") for c in be.calls)
    assert s.pools.pages.free == 16 and s.pools.slots.free == 2


def test_refusals_max_tokens_zero_without_scoring_and_a_backend_that_cannot_score():
    s = Scheduler(FakeBackend(), max_concurrency=2)
    with pytest.raises(ServingError, match="max_tokens must be at least 1, found 0") as e:
        s.submit(_req("a", [1, 2], 0, {}))
    assert e.value.param == "max_tokens"
    with pytest.raises(ServingError, match=r"at least 0 \(0: score the prompt only\), found -1"):
        s.submit(_req("b", [1, 2], -1, {}, prompt_logprobs=1))

    class Plain(FakeBackend):
        def __getattribute__(self, name):
            if name == "prefill_scored":
                raise AttributeError(name)
            return super().__getattribute__(name)

    s = Scheduler(Plain(), max_concurrency=2)
    with pytest.raises(ServingError, match="fake backend cannot score a prompt") as e:
        s.submit(_req("c", [1, 2], 1, {}, prompt_logprobs=1))
    assert e.value.param == "prompt_logprobs"
    assert not s.inflight


def test_a_non_finite_prompt_row_ends_the_request_with_an_engine_error():
    be = FakeBackend(num_pages=16, page_size=16, num_slots=2, nan_for={9})
    s = Scheduler(be, max_concurrency=2)
    ev = {}
    s.submit(_req("a", [1, 2, 3, 4, 5, 9, 6], 4, ev, prompt_logprobs=1))
    s.submit(_req("b", [1, 2], 3, ev))
    _run(s)
    assert [type(e) for e in ev["a"]] == [ErrorEvent]
    assert isinstance(ev["a"][0].error, EngineFailed) and "non-finite" in str(ev["a"][0].error)
    assert isinstance(ev["b"][-1], FinishEvent) and ev["b"][-1].stats.generated == 3  # the other request goes on
    assert s.pools.pages.free == 16 and s.pools.slots.free == 2


# -- the reference backend against HF transformers' logits ------------------------------------------------------
@pytest.fixture(scope="module")
def ck(tiny_dir):
    return Checkpoint(tiny_dir, notice=None)


def _gap_error(top: list, golden: list) -> float:
    """Worst difference between the log-probability gaps to the top token in ``top`` (id, logprob) and the logit gaps
    in ``golden`` (id, logit) over the golden's ids (each must be among ``top``)."""
    m = dict(top)
    missing = [i for i, _ in golden if i not in m]
    assert not missing, f"golden top ids {missing} are not among the scored top {sorted(m)}"
    g0, l0 = golden[0]
    return max(abs((m[i] - m[g0]) - (lg - l0)) for i, lg in golden)


def _score(be, ids, chunk):
    seq = Sequence(slot=0, pages=list(range(be.num_pages)))
    out = []
    for s in range(0, len(ids), chunk):
        _, sc = be.prefill_scored(seq, ids[s:s + chunk], ids[s + 1:s + chunk + 1], 8)
        out += sc
    assert seq.length == len(ids) and len(out) == len(ids) - 1
    return out


def test_reference_scores_match_the_goldens_teacher_forced_logits(ck, goldens):
    """Every case's prompt + greedy continuation scored in chunks of 16: at each generated position the top-5 ids of
    HF's logits are among the scored top-8 and the gaps agree to 2e-4 (the goldens' README: an fp32 reference agrees
    to ~1e-4)."""
    be = ReferenceBatchBackend(ck.config, ck, num_pages=8, page_size=16, num_slots=1, max_context=128)
    be.poison(pages=range(8), slots=[0])
    worst = 0.0
    for case in goldens["cases"]:
        ids = case["prompt_ids"] + case["greedy_ids"]
        scores = _score(be, ids, be.max_scored_tokens)
        n = len(case["prompt_ids"])
        for i, golden in enumerate(case["top5"][:-1]):
            worst = max(worst, _gap_error(scores[n - 1 + i].top, golden))
            if case["top1_margin"][i] > 1e-3:
                assert scores[n - 1 + i].rank == 1  # the greedy token is the argmax where it is decided
    assert worst < 2e-4


@pytest.mark.slow
def test_reference_scores_a_long_prompt_against_its_goldens(ck, goldens_long):
    """The 3,000-token prompt and its continuation (190 chunks of 16, many KV pages): HF's top-5 at the golden's
    prompt positions and at every generated position."""
    be = ReferenceBatchBackend(ck.config, ck, num_pages=100, page_size=32, num_slots=1, max_context=3072)
    ids = goldens_long["prompt_ids"] + goldens_long["greedy_ids"]
    scores = _score(be, ids, be.max_scored_tokens)
    n = len(goldens_long["prompt_ids"])
    worst = max(_gap_error(scores[int(p)].top, top) for p, top in goldens_long["prompt_top5_at"].items())
    worst = max(worst, max(_gap_error(scores[n - 1 + i].top, top) for i, top in enumerate(goldens_long["top5"][:-1])))
    assert worst < 2e-4


def test_scored_request_through_the_scheduler_equals_its_own_decode_logprobs(ck):
    """A greedy request's logprobs (decode steps, sampled on the host) and the same tokens scored as a prompt (a
    second request, after the first filled the prefix cache, which the scored one must not use) agree."""
    be = ReferenceBatchBackend(ck.config, ck, num_pages=32, page_size=16, num_slots=2, max_context=256)
    s = Scheduler(be, max_concurrency=2, prefill_chunk=64, prefix_cache_bytes=1 << 28, checkpoint_interval=16)
    prompt = [ord(c) % 200 + 10 for c in "def fibonacci(n):\n    if n < 2:\n"]
    ev = []
    s.submit(GenerationRequest("a", prompt, 12, params=SamplingParams(temperature=0.0), logprobs=3, sink=ev.append))
    _run(s)
    toks = [x for e in ev if isinstance(e, TokenEvent) for x in e.sampled]
    ev2 = []
    s.submit(GenerationRequest("b", prompt + [x.token for x in toks], 0, prompt_logprobs=3, sink=ev2.append))
    _run(s)
    assert [type(e) for e in ev2] == [PromptEvent, FinishEvent] and ev2[-1].stats.cached_tokens == 0
    scored = ev2[0].scores[len(prompt) - 1:]
    assert [sc.token for sc in scored] == [x.token for x in toks]
    for x, sc in zip(toks, scored):
        assert sc.logprob == pytest.approx(x.logprob, abs=2e-4)
        assert [i for i, _ in sc.top] == [i for i, _ in x.top]


def test_a_scored_prompt_on_a_speculating_scheduler_scores_and_generates_as_plain(ck, goldens):
    """With ``--spec mtp`` a scored prefill also computes the MTP head's rows of its chunk: the scores and the greedy
    continuation after them equal the plain scheduler's, and the drafts are accepted as after an unscored prefill
    (the head's rows are the same)."""
    from ninferc.runtime.spec import SpecConfig

    prompt = goldens["cases"][0]["prompt_ids"] + goldens["cases"][0]["greedy_ids"][:30]
    out = []
    for spec, scored in ((None, 2), (SpecConfig(draft_tokens=3), 2), (SpecConfig(draft_tokens=3), None)):
        be = ReferenceBatchBackend(ck.config, ck, num_pages=16, page_size=16, num_slots=1, max_context=256)
        s = Scheduler(be, max_concurrency=1, spec=spec)
        ev = []
        s.submit(GenerationRequest("a", prompt, 12, params=SamplingParams(temperature=0.0), prompt_logprobs=scored,
                                   sink=ev.append))
        _run(s)
        assert isinstance(ev[0], PromptEvent) == (scored is not None) and isinstance(ev[-1], FinishEvent)
        out.append((ev[0].scores if scored else None, [t for e in ev if isinstance(e, TokenEvent) for t in e.ids],
                    ev[-1].stats.spec))
    (plain, plain_ids, _), (spec_scores, spec_ids, st), (_, unscored_ids, st_unscored) = out
    assert spec_ids == plain_ids == unscored_ids == goldens["cases"][0]["greedy_ids"][30:42]
    assert st.accepted > 0 and st.per_round == st_unscored.per_round
    assert [(x.token, x.rank, [i for i, _ in x.top]) for x in spec_scores] == \
        [(x.token, x.rank, [i for i, _ in x.top]) for x in plain]
    assert [x.logprob for x in spec_scores] == pytest.approx([x.logprob for x in plain], abs=1e-5)
