"""Speculative decoding with the MTP head on the CUDA engine (the fixture artifact compiled for the device): the
drafts against ``goldens-mtp.json`` (teacher-forced, where the golden's margin is clear), speculative greedy output
against the goldens and against plain output, acceptance against the goldens' speculative runs, several sequences
with different draft counts in one round, and the server with ``--spec mtp``. Marked ``gpu``.

Exactness: the verify step (K + 1 tokens, the GEMV's multi-token tiles or the GEMM) rounds differently from a
one-token decode step, and the head reads the model's bf16 hidden row where the golden implementation used fp32, so
outputs are compared up to the golden's first near-tie (``GREEDY_MARGIN``) and drafts where the golden's draft margin
is at least ``DRAFT_MARGIN``; acceptance over all cases within ``ACCEPT_TOL`` of the goldens'. They first passed on
an H100 on 2026-12-05 (bench/NOTES.md run 193); the ``NINFERC_CUDA_MTP=1`` gate the CUDA path had until then is gone.
"""

from __future__ import annotations

import json

import pytest

from ninferc.ir.tolerances import GREEDY_MARGIN

pytestmark = pytest.mark.gpu

#: logit gap under which a golden draft counts as a near-tie (the head reads bf16 hidden rows)
DRAFT_MARGIN = 0.25
#: largest difference of the overall acceptance rate from the goldens' speculative runs over the same positions (the
#: runs here stop at each golden's first near-tie; the drafts' own near-ties may part)
ACCEPT_TOL = 0.05


def golden_len(case) -> int:
    return next((i for i, m in enumerate(case["top1_margin"]) if m < GREEDY_MARGIN), len(case["top1_margin"]))


@pytest.fixture(scope="module")
def gmtp(tiny_dir):
    return json.loads((tiny_dir / "goldens-mtp.json").read_text())


@pytest.fixture(scope="module")
def art(tmp_path_factory, tiny_dir):
    from ninferc.pipeline import compile_model
    from ninferc.runtime.kernels import device_arch, device_sm_count

    p = tmp_path_factory.mktemp("spec_gpu") / "tiny.ninfer"
    compile_model(tiny_dir, device_arch(), p, sms=device_sm_count())
    return p


@pytest.fixture
def backend(art):
    from ninferc.runtime.cuda_backend import CudaBatchBackend

    made = []

    def make(k, slots=4):
        be = CudaBatchBackend(art, max_context=512, num_slots=slots, num_pages=slots * 8, prefill_chunk=64,
                              spec_tokens=k)
        made.append(be)
        return be

    yield make
    for be in made:
        be.close()


def _run(be, prompts, n, k, cut=None):
    from ninferc.runtime.scheduler import GenerationRequest, Scheduler, TokenEvent
    from ninferc.runtime.spec import SpecConfig
    from ninferc.sampling import SamplingParams

    s = Scheduler(be, max_concurrency=be.num_slots, prefill_chunk=64, spec=None if k is None else SpecConfig("mtp", k, cut))
    evs = {}
    for i, p in enumerate(prompts):
        s.submit(GenerationRequest(str(i), list(p), n[i] if isinstance(n, list) else n, params=SamplingParams(),
                                   sink=lambda ev, i=i: evs.setdefault(i, []).append(ev)))
    while not s.idle:
        s.step()
    return [([t for e in evs[i] if isinstance(e, TokenEvent) for t in e.ids], evs[i][-1])
            for i in range(len(prompts))]


def test_drafts_equal_the_goldens_where_clear(backend, gmtp):
    """Teacher-forced: the prompt and golden tokens up to position t prefilled, the draft chain from the token at
    t + 1 gives the golden's drafts 1..3 (each compared where the golden's margin for it is clear)."""
    from ninferc.runtime.paged_kv import Sequence

    be = backend(3, slots=1)
    checked = 0
    for c in gmtp["cases"]:
        S = c["prompt_ids"] + c["greedy_ids"]
        n = len(c["prompt_ids"])
        for pos in c["positions"][::6]:
            t = pos["t"]
            seq = Sequence(slot=0, pages=list(range(8)))
            seq.mtp = True
            for c0 in range(0, t + 1, 64):  # the backend's prefill chunk
                be.prefill(seq, S[c0:min(t + 1, c0 + 64)])
            d = be.draft([seq], [S[t + 1]], [3])[0]
            for j in range(3):
                if pos[f"draft{j + 1}_margin"] < DRAFT_MARGIN:
                    break  # a later draft chains on this one
                assert d[j] == pos["draft_ids"][j], (c["prompt"][:30], t, j, d, pos["draft_ids"])
                checked += 1
            assert t >= n - 1
    assert checked >= 20


@pytest.mark.parametrize("k", [1, 3])
def test_speculative_greedy_equals_the_goldens_and_plain(backend, goldens, gmtp, k):
    cases = gmtp["cases"]
    n = [golden_len(g) for g in goldens["cases"]]
    spec = _run(backend(k, slots=5), [c["prompt_ids"] for c in cases], n, k)
    plain = _run(backend(0, slots=5), [c["prompt_ids"] for c in cases], n, None)
    drafted = accepted = 0
    for i, c in enumerate(cases):
        ids, fin = spec[i]
        assert ids == c["greedy_ids"][:n[i]] == plain[i][0]
        drafted += fin.stats.spec.drafted
        accepted += fin.stats.spec.accepted
    # the golden runs' acceptance over their rounds that verify only positions this run reaches (drafts_per_round:
    # each round's draft ids): on the CPU reference backend 47 / 76 against the goldens' 47 / 79 at K = 1, 64 / 177
    # against 63 / 174 at K = 3
    acc = drafts = 0
    for c, m in zip(cases, n):
        r = c["spec"][f"k{k}"]
        for pos, a, d in zip(r["round_positions"], r["accepted_per_round"], r["drafts_per_round"]):
            if pos + k + 1 <= len(c["prompt_ids"]) + m:
                acc, drafts = acc + a, drafts + len(d)
    assert abs(accepted / drafted - acc / drafts) <= ACCEPT_TOL


def test_steps_past_the_batch_cut_are_plain_and_keep_the_heads_rows(backend, goldens):
    """``--spec-disable-by-batch-size 2`` with the five golden prompts: steps of three or more decoding requests are
    plain decode steps (decode ahead), rounds of two or fewer draft; every output is its golden's prefix, and drafting
    after the plain steps is accepted. Then :func:`ninferc.testing.check_plain_steps_keep_mtp_rows` (plain steps against
    one-token verify steps + accept())."""
    from ninferc.testing import check_plain_steps_keep_mtp_rows

    cases = goldens["cases"]
    n = [min(golden_len(c), 40) for c in cases]
    out = _run(backend(3, slots=5), [c["prompt_ids"] for c in cases], n, 3, cut=2)
    for c, m, (ids, _) in zip(cases, n, out):
        assert ids == c["greedy_ids"][:m]
    stats = [fin.stats for _, fin in out]
    assert any(st.decode_steps > st.spec.rounds for st in stats) and sum(st.spec.accepted for st in stats) >= 1
    c = cases[0]
    check_plain_steps_keep_mtp_rows(backend(2, slots=2), c["prompt_ids"], c["greedy_ids"], chunk=64)


def test_rounds_with_different_draft_counts_and_the_context_end(backend, goldens):
    """Three sequences sharing rounds: one near its reservation's end (fewer drafts, then none), the others with the
    full K -- outputs equal each one's golden prefix."""
    cases = goldens["cases"][:3]
    n = [min(golden_len(c), m) for c, m in zip(cases, (40, 7, 25))]
    out = _run(backend(3, slots=3), [c["prompt_ids"] for c in cases], n, 3)
    for c, m, (ids, _) in zip(cases, n, out):
        assert ids == c["greedy_ids"][:m]


def test_serve_with_spec_mtp(start_server, art, goldens, tiny_dir):
    """``ninferc serve --spec mtp`` on the CUDA backend: a greedy completion equals the golden prefix, and the
    request's log line carries the speculation stats."""
    import openai

    srv = start_server(art, "--model-id", "tiny", "--spec", "mtp", "--draft-tokens", "3")
    cl = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    c = goldens["cases"][0]
    m = golden_len(c)
    r = cl.completions.create(model="tiny", prompt=c["prompt_ids"], max_tokens=m, temperature=0,
                              extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == m
    line = srv.wait_request_lines(1)[-1]
    assert "spec=mtp" in line and "tok/round" in line
    # rows accepted on the host from the verify step's logits (logit_bias, response_format): a banned token never
    # comes, and a json_schema answer parses
    from ninferc.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(tiny_dir)
    banned = c["greedy_ids"][1]
    r = cl.completions.create(model="tiny", prompt=c["prompt_ids"], max_tokens=m, temperature=0,
                              logit_bias={str(banned): -100}, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == m
    assert not r.choices[0].text.startswith(tok.decode(c["greedy_ids"][:2]))
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green"]}}, "required": ["color"],
              "additionalProperties": False}
    r = cl.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "config"}], max_tokens=300,
                                   temperature=0, response_format={"type": "json_schema", "json_schema": {
                                       "name": "c", "schema": schema}},
                                   extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].finish_reason == "stop" and json.loads(r.choices[0].message.content)["color"] in ("red", "green")
    # a scored prompt (echo with logprobs): the scored prefill computes the head's rows too, so the answer after it is
    # the golden prefix again and the drafts are accepted as after a plain prefill
    before = len(srv.request_lines())
    r = cl.completions.create(model="tiny", prompt=c["prompt_ids"], max_tokens=m, temperature=0, echo=True, logprobs=1,
                              extra_body={"ignore_eos": True})
    assert r.choices[0].text == tok.decode(c["prompt_ids"]) + tok.decode(c["greedy_ids"][:m])
    assert r.choices[0].logprobs.token_logprobs[0] is None and len(r.choices[0].logprobs.tokens) == len(c["prompt_ids"]) + m
    scored_line = srv.wait_request_lines(1, after=before)[-1]
    assert "spec=mtp" in scored_line and scored_line.split("spec=mtp")[1] == line.split("spec=mtp")[1]


def test_spec_rounds_at_a_forced_acceptance(backend):
    """``ninferc bench --spec mtp``'s rounds on the fixture: drafts forced onto a recorded greedy continuation reach
    the asked acceptance (a near-tie between the verify and the plain step may part them: a margin), and every
    timing is there."""
    from ninferc.bench import spec_rounds

    be = backend(3, slots=1)
    r = spec_rounds(be, prompt_tokens=40, rounds=24, accept_rate=0.76, chunk=64, log=lambda m: None)
    assert abs(r["accept_rate"] - 0.76) <= 0.1 and 3.0 <= r["tokens_per_round"] <= 3.6
    assert all(r[k] > 0 for k in ("plain_step_ms", "draft_step_ms", "verify_step_ms", "round_ms", "tok_s"))
