"""The CUDA engine on the emulated device (``tests/emulated_device.py``: CuPy stood in by host memory, every kernel
run by the CPU emulator), on the fixture artifact compiled for sm_86 with 8 SMs: the decode loop with CUDA-graph
replay, the serving backend with several requests and decode ahead, and speculative decoding with the MTP head
(draft chain, verify step of K + 1 tokens per sequence into per-token GDN state slots, acceptance, roll back)
against the goldens -- the engine's own logic, checked without a GPU. Prefill chunks are 8 tokens (the GEMV route:
the tensor-core GEMM of longer chunks uses inline PTX the emulator does not run).

Exactness: the emulator's arithmetic is the kernels' own in fp32 (host math correctly rounded), so outputs are
compared with the goldens up to each case's first near-tie (``GREEDY_MARGIN``), as the GPU tests do; the
speculative rounds' accepted counts are compared with the golden runs' over the rounds before that point.
"""

from __future__ import annotations

import json

import pytest

from ninferc.ir.tolerances import GREEDY_MARGIN
from ninferc.testing import collecting_request, event_ids, run_until_idle

pytestmark = pytest.mark.slow  # ~1-2 s per emulated decode step on 2 cores; the kernels' host compiles first

CHUNK = 8  # prefill chunk: at most GEMV_MAX_TOKENS, so no GEMM launch


def golden_len(case) -> int:
    return next((i for i, m in enumerate(case["top1_margin"]) if m < GREEDY_MARGIN), len(case["top1_margin"]))


@pytest.fixture(scope="module")
def emu_art(tmp_path_factory, tiny_dir):
    """The fixture compiled for the emulated device (sm_86, 8 SMs)."""
    from ninferc.pipeline import compile_model

    p = tmp_path_factory.mktemp("emulated") / "tiny-sm86.ninfer"
    compile_model(tiny_dir, "sm_86", p, sms=8)
    return p


@pytest.fixture(scope="module")
def gmtp(tiny_dir):
    return json.loads((tiny_dir / "goldens-mtp.json").read_text())


def test_decode_stream_equals_the_goldens(emulated_device, emu_art, goldens):
    """``Session.prefill`` in 8-token chunks, then ``decode_stream`` (the decode graph captured once and replayed,
    one step queued ahead of the id read back): the golden's greedy ids."""
    from ninferc.artifact import Artifact
    from ninferc.runtime.engine import Engine
    from ninferc.sampling import SamplingParams

    assert emulated_device.ARCH == "sm_86"
    c = goldens["cases"][1]
    n = min(10, golden_len(c))
    e = Engine(Artifact.open(emu_art), max_context=128, prefill_chunk=CHUNK)
    s = e.session()
    s.prefill(c["prompt_ids"], CHUNK)
    first = s.sample(SamplingParams())
    ids = [first] + list(s.decode_stream(SamplingParams(), n - 1))
    assert ids == c["greedy_ids"][:n]
    assert e._graphs, "the decode steps were not replayed from a captured graph"
    # step plans are built once per (mode, T, B, R): the prefill chunks reused theirs (until 2026-12-05 a plan was
    # stored under a wrong key and rebuilt on every eager step)
    assert ("prefill", CHUNK, 1, 1, False) in e._steps
    assert e.step_plan("prefill", CHUNK, 1, 1) is e._steps[("prefill", CHUNK, 1, 1, False)]
    s.close()


_serve_decodes: list[int] = []


def _serve(art, prompts, n, k, *, cache_bytes: int = 0, one_by_one: bool = False, draft_lm_head: str = "bf16",
           params=None, no_logits: bool = False, spec_cut: int | None = None):
    """The prompts through the serving backend and the scheduler (greedy; ``k`` drafts per round, or None, and
    ``spec_cut`` the rounds' ``disable_by_batch_size``), at once or ``one_by_one``; with ``cache_bytes``, the prefix
    cache (checkpoints at the ends of prompts and generations, freed pages poisoned)."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.runtime.scheduler import Scheduler
    from ninferc.runtime.spec import SpecConfig

    be = CudaBatchBackend(art, max_context=128, num_slots=len(prompts), num_pages=4 * len(prompts),
                          prefill_chunk=CHUNK, spec_tokens=k or 0, cache_bytes=cache_bytes,
                          draft_lm_head=draft_lm_head)
    s = Scheduler(be, max_concurrency=len(prompts), prefill_chunk=CHUNK,
                  spec=SpecConfig("mtp", k, spec_cut) if k else None,
                  prefix_cache_bytes=cache_bytes, checkpoint_interval=0,
                  poison_freed=bool(cache_bytes))
    if no_logits:  # every round must be accepted from ids drawn on the device
        be.verify = None
    _serve_decodes.clear()
    for name in ("decode", "decode_next"):
        orig = getattr(be, name)
        setattr(be, name, lambda seqs, x, orig=orig: _serve_decodes.append(len(seqs)) or orig(seqs, x))
    _serve.verified = []  # the token lists ([last] + drafts) of every verify step, in order
    for name in ("verify_round", "verify_ids"):
        orig = getattr(be, name)
        setattr(be, name, lambda seqs, tl, *a, orig=orig: _serve.verified.append(tl) or orig(seqs, tl, *a))
    evs: dict = {}
    for i, p in enumerate(prompts):
        s.submit(collecting_request(str(i), p, n[i], evs, **({"params": params[i]} if params else {})))
        if one_by_one:
            run_until_idle(s)
    run_until_idle(s)
    _serve.graphs = [key for key in be.engine._graphs if isinstance(key, tuple) and key[0] == "model"]
    # the attention kernels of the verify steps made: (step T, family, grid z) of each
    _serve.verify_attn = {(key[1], ln.kernel.family, ln.grid[2]) for key, sp in be.engine._steps.items()
                          if key[0] == "verify" and not key[-1] for st, ln, _, _ in sp.launches
                          if ln.kernel.family.startswith("attn_")}
    _serve.mtp_modes = {key[0] for key in be.engine._steps if key[-1]}  # the MTP head's step modes
    # the head's steps per logit-row count R: their step ops (R = 0, its KV rows only, must not read the LM head)
    _serve.mtp_ops = {}
    for key, sp in be.engine._steps.items():
        if key[-1] and key[0] in ("decode", "prefill", "verify"):
            _serve.mtp_ops.setdefault(key[3], set()).update(st.op for st, _, _, _ in sp.launches)
    _serve.one_read_rounds = be.stats.get("one_read_rounds", 0)
    _serve.decode_batches = _serve_decodes  # sequences per plain decode step (decode and decode_next)
    be.close()
    return [(event_ids(evs[str(i)]), evs[str(i)][-1]) for i in range(len(prompts))]


def test_serving_backend_batches_three_requests(emulated_device, emu_art, goldens):
    """Three requests at once through ``CudaBatchBackend`` (batched decode graphs of B = 3, 2, 1 as they finish;
    the GPU sampler's ids read back one step behind): each equals its golden."""
    cases = goldens["cases"][:3]
    n = [min(m, golden_len(c)) for c, m in zip(cases, (9, 5, 7))]
    out = _serve(emu_art, [c["prompt_ids"] for c in cases], n, None)
    for c, m, (ids, fin) in zip(cases, n, out):
        assert ids == c["greedy_ids"][:m] and fin.reason == "length"


@pytest.mark.parametrize("k, which", [(3, (0,)), (2, (1, 2))])
def test_mtp_speculation_reproduces_the_golden_runs(emulated_device, emu_art, goldens, gmtp, k, which):
    """``--spec mtp`` on the CUDA backend: the draft chain, the verify step
    of K + 1 tokens per sequence (two sequences in one verify step at K = 2), acceptance and roll back give the
    golden greedy ids, and every round before the golden's first near-tie accepts as many drafts as the golden
    run's round."""
    cases = [gmtp["cases"][i] for i in which]
    n = [min(12, golden_len(goldens["cases"][i])) for i in which]
    out = _serve(emu_art, [c["prompt_ids"] for c in cases], n, k)
    for c, m, (ids, fin) in zip(cases, n, out):
        assert ids == c["greedy_ids"][:m]
        run = c["spec"][f"k{k}"]
        st = fin.stats.spec
        assert st.rounds >= 2 and st.accepted == sum(st.per_round) and len(st.per_round) == st.rounds
        # the rounds whose verified tokens all lie before the near-tie (the last round is cut by max_tokens)
        full = [r for r in range(st.rounds - 1) if run["round_positions"][r] + k + 1 <= len(c["prompt_ids"]) + m]
        assert full and st.per_round[:len(full)] == run["accepted_per_round"][:len(full)]
    # the verify steps and the head's draft steps were replayed from captured graphs
    assert any(key[1] == "verify" and key[-1] is False for key in _serve.graphs)
    # a verify step's attention: one split-KV row per token (attn_decode grid z = T), no attn_prefill
    fams = {f for _, f, _ in _serve.verify_attn}
    assert fams == {"attn_prep", "attn_decode", "attn_combine"}
    assert all(z == t for t, f, z in _serve.verify_attn if f == "attn_decode")
    # the head's rows: the prompt's in its prefill mode, a round's in its verify mode; its drafts in decode mode
    assert {"prefill", "verify", "decode"} <= _serve.mtp_modes
    # ... the prompt's and a round's rows (R = 0) without the LM head, which only the drafts (R = B) read
    assert "mtp.lm_head" not in _serve.mtp_ops[0] and "mtp.L0.mlp.down" in _serve.mtp_ops[0]
    assert all("mtp.lm_head" in ops for r, ops in _serve.mtp_ops.items() if r)
    # the rounds decided acceptance and drafted the next round on the device, one host read each (verify_round;
    # the first round's drafts came from draft()), but where a row's next draft count was cut by its token budget
    rounds = max(fin.stats.spec.rounds for _, fin in out)
    assert rounds - k - 1 <= _serve.one_read_rounds <= rounds and _serve.one_read_rounds >= 1
    assert any(key[1] == "decode" and key[-1] is True for key in _serve.graphs)


@pytest.mark.parametrize("k", [None, 2])
def test_prefix_reuse_on_the_cuda_backend(emulated_device, emu_art, goldens, k):
    """A conversation's second turn (the first turn's prompt and answer, and more) restores the checkpoint the first
    turn left -- KV pages shared, GDN state (and with MTP the head's pending hidden row) copied back on the device --
    and continues with the golden's ids; the third request, the first prompt again, restores the checkpoint one
    token before its end (a prompt's last token is always computed, for its logits)."""
    c = goldens["cases"][2]  # 16 prompt tokens, 48 golden ids before a near-tie
    P, g = c["prompt_ids"], c["greedy_ids"]  # noqa: N806
    prompts = [P, P + g[:20], P]
    out = _serve(emu_art, prompts, [6, 5, 3], k, cache_bytes=64 << 20, one_by_one=True)
    assert [ids for ids, _ in out] == [g[:6], g[20:25], g[:3]]
    cached = [fin.stats.cached_tokens for _, fin in out]
    assert cached[0] == 0 and cached[1] >= len(P) and cached[2] == len(P) - 1, cached


@pytest.mark.parametrize("greedy", [True, False])
def test_non_finite_logits_give_no_token(emulated_device, emu_art, goldens, greedy):
    """The final norm's weight made NaN after the 3rd token: ``generate`` (the sampler inside the replayed decode
    graph) ends with NonFiniteLogits -- the GPU sampler's -1 for a row whose maximum is not finite -- instead of
    an id, greedy and sampled."""

    from ninferc.artifact import Artifact
    from ninferc.generate import generate
    from ninferc.runtime.engine import Engine
    from ninferc.sampling import NonFiniteLogits, SamplingParams

    e = Engine(Artifact.open(emu_art), max_context=128, prefill_chunk=CHUNK)
    params = SamplingParams() if greedy else SamplingParams(temperature=0.8, seed=3)
    from ninferc.testing import nan_final_norm_after

    on_token, seen = nan_final_norm_after(e, 3)

    with pytest.raises(NonFiniteLogits, match="non-finite logits"):
        generate(e.session(), goldens["cases"][0]["prompt_ids"], max_new=12, params=params, prefill_chunk=CHUNK,
                 on_token=on_token)
    assert 3 <= len(seen) <= 5 and all(t >= 0 for t in seen)


def test_bench_multi_token_and_spec_rounds(emulated_device, emu_art):
    """``ninferc bench``'s multi-token steps (the prefill and the verify programs captured as graphs, with the
    per-family profile) and speculative rounds at a forced acceptance run on the CUDA engine: every figure is
    there and the forced acceptance is reached (acceptance 1.0 here: no draft is corrupted)."""
    from ninferc.artifact import Artifact
    from ninferc.bench import multi_token_steps, spec_rounds
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.runtime.engine import Engine

    e = Engine(Artifact.open(emu_art), max_context=128, prefill_chunk=CHUNK, spec_tokens=3, max_logit_rows=4)
    s = e.session()
    s.prefill(list(range(5, 25)), CHUNK)
    rows = multi_token_steps(e, s, (4,), reps=1, profile=True)
    assert [r["tokens"] for r in rows] == [1, 4]
    assert rows[1]["verify_median_step_ms"] > 0 and rows[1]["median_step_ms"] > 0
    assert "gdn_recurrent" in rows[1]["verify_profile"] and "gdn_chunk" in rows[1]["profile"]
    s.close()
    be = CudaBatchBackend(emu_art, max_context=128, num_slots=1, num_pages=4, prefill_chunk=CHUNK, spec_tokens=3)
    r = spec_rounds(be, prompt_tokens=8, rounds=2, accept_rate=1.0, chunk=CHUNK, log=lambda m: None)
    be.close()
    assert r["accept_rate"] == 1.0 and r["tokens_per_round"] == 4.0
    assert all(r[k] > 0 for k in ("plain_step_ms", "draft_step_ms", "verify_step_ms", "round_ms", "tok_s"))
    # the same rounds with one host read each (verify_round): the same acceptance
    assert r["one_read_tokens_per_round"] == 4.0 and r["one_read_round_ms"] > 0 and r["one_read_speedup"] > 0
    # all drafts kept: the speed at the asked profile is the measured one
    assert r["schedule_tokens_per_round"] == 4.0 and r["profile_tok_s"] == pytest.approx(r["tok_s"])
    assert r["one_read_profile_tok_s"] == pytest.approx(r["one_read_tok_s"])
    from ninferc.cmd_bench import spec_line

    line = spec_line(r)  # the report line of `ninferc bench --spec mtp`
    assert "at the asked profile (1.00, 4.00 tokens per round)" in line and "measured acceptance 1.00" in line


def test_draft_lm_head_w4_on_the_cuda_backend(emulated_device, emu_art, goldens):
    """``--draft-lm-head w4`` on the CUDA backend: the model's bf16 head quantised at load into the MTP program's own
    head (its w4 GEMV compiled at load, a term of the memory plan); the output stays the golden's (the verify step
    keeps the full head), and the drafts are the reference backend's with the same narrower head."""
    from ninferc.artifact import Artifact
    from ninferc.reference_backend import ReferenceBatchBackend
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.runtime.engine import Engine
    from ninferc.runtime.paged_kv import Sequence

    c = goldens["cases"][3]
    n = min(12, golden_len(c))
    (ids, fin), = _serve(emu_art, [c["prompt_ids"]], [n], 2, draft_lm_head="w4")
    assert ids == c["greedy_ids"][:n] and fin.stats.spec.rounds >= 2

    art = Artifact.open(emu_art)
    be = CudaBatchBackend(art, max_context=128, num_slots=1, num_pages=4, prefill_chunk=CHUNK, spec_tokens=2,
                          draft_lm_head="w4")
    e = be.engine
    head = e.mtp_graph.params[Engine.DRAFT_HEAD]
    assert head.dtype == "w4" and e.memory.terms["draft_lm_head"] == head.nbytes > 0
    ref = ReferenceBatchBackend(art.config, art.weights(), graph=art.graph(), mtp_graph=art.mtp_graph(), num_pages=4,
                                page_size=art.header["compile"]["page_size"], num_slots=1, max_context=128,
                                draft_lm_head="w4")
    S = c["prompt_ids"] + c["greedy_ids"]  # noqa: N806
    for b in (be, ref):
        seq = Sequence(slot=0, pages=[0, 1])
        seq.mtp = True
        for c0 in range(0, len(c["prompt_ids"]), CHUNK):
            b.prefill(seq, S[c0:min(len(c["prompt_ids"]), c0 + CHUNK)])
        b.drafted = b.draft([seq], [S[len(c["prompt_ids"])]], [2])[0]
    assert be.drafted == ref.drafted
    lm = [k for step, _, k, _ in e.step_plan("decode", 1, 1, 1, mtp=True).launches if "lm_head" in step.name]
    assert lm and all("w4" in k.name and k.launches for k in lm), [(k.name, k.launches) for k in lm]
    be.close()


def test_cli_run_spec_on_the_cuda_backend(emulated_device, emu_art, goldens):
    """``ninferc run ART --spec mtp --draft-tokens 2 --draft-lm-head w8`` end to end on the CUDA backend (the
    command's artifact opening, the serving scheduler, stats on stderr): the golden text."""
    from click.testing import CliRunner

    from ninferc.artifact import Artifact
    from ninferc.cli import main

    c = goldens["cases"][0]
    n = min(8, golden_len(c))
    r = CliRunner().invoke(main, ["run", str(emu_art), "--prompt", c["prompt"], "--max-new", str(n), "--spec", "mtp",
                                  "--draft-tokens", "2", "--draft-lm-head", "w8", "--prefill-chunk", str(CHUNK),
                                  "--max-context", "128"])
    assert r.exit_code == 0, r.output
    want = Artifact.open(emu_art).tokenizer().decode(c["greedy_ids"][:n])
    assert r.stdout.rstrip("\n") == want, (repr(r.stdout), repr(want))
    assert "tokens per round" in r.stderr, r.stderr


def test_sampled_speculation_draws_on_the_device(emulated_device, emu_art, goldens):
    """A greedy and a sampled (temperature, top-k, top-p, seed) request speculating in the same rounds: every verify
    row's token is drawn on the device (``verify_ids``: the sampler over all rows, each with its request's
    parameters and counter; no logits read back -- ``verify`` is removed here), the greedy request keeps its golden
    ids, and the sampled one repeats itself exactly with the same seed."""
    from ninferc.sampling import SamplingParams

    cases = goldens["cases"][:2]
    n = [min(8, golden_len(cases[0])), 8]
    params = [SamplingParams(), SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=7)]
    runs = [_serve(emu_art, [c["prompt_ids"] for c in cases], n, 2, params=params, no_logits=True)
            for _ in range(2)]
    (g_ids, g_fin), (s_ids, s_fin) = runs[0]
    assert g_ids == cases[0]["greedy_ids"][:n[0]] and g_fin.stats.spec.rounds >= 2
    assert len(s_ids) == 8 and s_fin.stats.spec.rounds >= 2 and runs[1][1][0] == s_ids


def test_a_scored_prompt_through_the_serving_backend(emulated_device, emu_art, goldens):
    """``prefill_scored`` on the CUDA backend (every row's logits, scored on the device, the last row moved to row 0
    for the first token), driven by the scheduler in 8-token chunks: HF's top-5 logit gaps at the golden positions
    within twice ENGINE_LOGITS, and the greedy answer after the scored prompt the golden's."""
    from ninferc.ir.tolerances import ENGINE_LOGITS
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.runtime.scheduler import PromptEvent, Scheduler

    c = goldens["cases"][3]
    k = min(6, golden_len(c) - 3)
    ids = c["prompt_ids"] + c["greedy_ids"][:k]
    be = CudaBatchBackend(emu_art, max_context=128, num_slots=1, num_pages=4, prefill_chunk=CHUNK)
    assert be.max_scored_tokens >= 32  # the engine's logit rows, raised for scoring (SCORED_CHUNK)
    s = Scheduler(be, max_concurrency=1, prefill_chunk=CHUNK)
    evs: dict = {}
    s.submit(collecting_request("a", ids, 3, evs, prompt_logprobs=5))
    run_until_idle(s)
    ev = evs["a"]
    assert isinstance(ev[0], PromptEvent) and event_ids(ev) == c["greedy_ids"][k:k + 3]
    scores = ev[0].scores
    assert [x.token for x in scores] == ids[1:]
    n = len(c["prompt_ids"])
    for i in range(k):
        got = dict(scores[n - 1 + i].top)
        (g0, l0) = c["top5"][i][0]
        assert g0 in got and scores[n - 1 + i].rank == 1
        for gid, logit in c["top5"][i]:
            if gid in got:
                assert abs((got[gid] - got[g0]) - (logit - l0)) < 2 * ENGINE_LOGITS.atol
    be.close()


def test_a_seeded_device_row_draws_the_same_beside_a_host_row(emulated_device, emu_art, goldens):
    """A seeded sampled request (drawn on the device) sharing its steps with a request that needs the host sampler
    (a grammar; here one that allows every token): the device row is still drawn on the device -- its text is the
    one it gets alone -- and only the host row's logits are copied (``host_rows``). Until 2026-12-07 such a step drew
    every row on the host, so a seeded request's text depended on who shared its steps."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.runtime.scheduler import Scheduler
    from ninferc.sampling import SamplingParams

    class AnyToken:  # a grammar state that allows every token (HostSampler: no mask)
        def allowed(self):
            return None

        def advance(self, token):
            pass

    seeded = SamplingParams(temperature=0.9, top_p=0.95, seed=77)
    a_prompt, b_case = goldens["cases"][0]["prompt_ids"][:8], goldens["cases"][2]
    n = 5

    def run(with_b: bool):
        be = CudaBatchBackend(emu_art, max_context=128, num_slots=2, num_pages=8, prefill_chunk=CHUNK)
        s = Scheduler(be, max_concurrency=2, prefill_chunk=CHUNK)
        evs: dict = {}
        s.submit(collecting_request("a", a_prompt, n, evs, params=seeded))
        if with_b:
            s.submit(collecting_request("b", b_case["prompt_ids"][:8], n, evs, logprobs=2,
                                        constraint=AnyToken()))
        run_until_idle(s)
        stats = dict(be.stats)
        be.close()
        return evs, stats

    alone, _ = run(False)
    both, stats = run(True)
    assert event_ids(both["a"]) == event_ids(alone["a"])
    assert both["b"][-1].stats.steps_shared > 0  # they did share steps
    assert all(x.logprob is not None for ev in both["b"] if hasattr(ev, "sampled") for x in ev.sampled)
    assert stats["host_rows"] == n  # b's rows only (its first token from its prefill, then 4 shared steps)


def test_logprobs_rows_are_drawn_on_the_device_with_decode_ahead(emulated_device, emu_art, goldens):
    """A greedy request asking for logprobs beside a seeded sampled one: both rows are drawn on the device and the
    steps go ahead (``decode_next``); the logprobs row's logits are copied before the draw (``logprob_rows``, no
    ``host_rows``) and its logprobs are exactly :func:`~ninferc.sampling.raw_logprobs` of the logits the step wrote
    for that row (snapshotted here when each sample was queued), its text the golden's, and HF's top-5 logit gaps
    within twice ENGINE_LOGITS. Until 2026-12-07 such a row took the host sampler and its steps no decode ahead."""
    import numpy as np

    from ninferc.ir.tolerances import ENGINE_LOGITS
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.runtime.scheduler import Scheduler
    from ninferc.sampling import SamplingParams, raw_logprobs

    c, a_prompt = goldens["cases"][1], goldens["cases"][0]["prompt_ids"][:8]
    n = min(5, golden_len(c))
    be = CudaBatchBackend(emu_art, max_context=128, num_slots=2, num_pages=8, prefill_chunk=CHUNK)
    snaps, ahead = [], []
    queue, decode_next = be._queue_sample, be.decode_next

    def snapshot(B, rows):  # noqa: N803
        snaps.extend(np.array(be.engine.logits[i].get()) for i, r in enumerate(rows) if r is not None and r[1])
        return queue(B, rows)

    def counted(seqs, pending):
        ahead.append(len(seqs))
        return decode_next(seqs, pending)

    be._queue_sample, be.decode_next = snapshot, counted
    s = Scheduler(be, max_concurrency=2, prefill_chunk=CHUNK)
    evs: dict = {}
    s.submit(collecting_request("a", a_prompt, n + 2, evs, params=SamplingParams(temperature=0.9, seed=5)))
    s.submit(collecting_request("b", c["prompt_ids"], n, evs, logprobs=3))
    run_until_idle(s)
    stats = dict(be.stats)
    be.close()
    got = [x for ev in evs["b"] if hasattr(ev, "sampled") for x in ev.sampled]
    assert [x.token for x in got] == c["greedy_ids"][:n]
    assert stats["host_rows"] == 0 and stats["logprob_rows"] == n and 2 in ahead
    assert len(snaps) == n
    for x, row in zip(got, snaps):
        assert (x.logprob, x.top) == raw_logprobs(row, x.token, 3)
        assert x.top[0][0] == x.token and len(x.top) == 3
    for i, x in enumerate(got):
        mine = dict(x.top)
        (g0, l0) = c["top5"][i][0]
        assert g0 == x.token
        for gid, logit in c["top5"][i][:3]:
            if gid in mine:
                assert abs((mine[gid] - mine[g0]) - (logit - l0)) < 2 * ENGINE_LOGITS.atol


@pytest.mark.parametrize("k", [0, 2])
def test_penalties_bias_min_p_and_min_tokens_apply_on_the_device(emulated_device, emu_art, goldens, k):
    """Penalised, biased, min_p and min_tokens rows are drawn on the device (no host rows, decode ahead kept): their
    adjusted logits bit-exact against the host sampler's, min_p's set its, a greedy penalised request the argmax of
    the host-adjusted rows, and a plain request beside them its golden (:func:`ninferc.testing.
    check_device_adjusted_rows`); with K = 2 drafts per round, the verify rows too (the drafts before each row
    counted), every round accepted from the ids drawn on the device. Until 2026-12-07 such rows took the host sampler:
    their steps no decode ahead, their rounds the verify rows' logits copied to the host."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.testing import check_device_adjusted_rows

    cases = goldens["cases"]
    c = cases[1]
    n = min(5, golden_len(c))
    be = CudaBatchBackend(emu_art, max_context=128, num_slots=3, num_pages=12, prefill_chunk=CHUNK, spec_tokens=k)
    try:
        stats = check_device_adjusted_rows(be, [cases[0]["prompt_ids"][:8], cases[2]["prompt_ids"][:8],
                                                c["prompt_ids"]], c["greedy_ids"], steps=n, chunk=CHUNK,
                                           spec_tokens=k)
    finally:
        be.close()
    assert stats["logprob_rows"] == 0


def test_a_mixed_speculative_round_on_the_cuda_backend(emulated_device, emu_art, goldens):
    """``--spec mtp`` (K = 2) with a seeded sampling request (accepted from ids drawn on the device) sharing its
    rounds with a greedy request asking for logprobs (accepted from its logits): the rounds are mixed
    (``verify_mixed``: only the logprobs request's rows leave the device, ``host_rows``), the seeded request's text is
    the one it gets alone (its draws keep their Philox counters) and the greedy one's its golden, with logprobs
    (:func:`ninferc.testing.check_mixed_speculative_round`)."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.testing import check_mixed_speculative_round

    c = goldens["cases"][1]
    n = min(6, golden_len(c))
    check_mixed_speculative_round(
        lambda: CudaBatchBackend(emu_art, max_context=128, num_slots=2, num_pages=8, prefill_chunk=CHUNK,
                                 spec_tokens=2),
        goldens["cases"][0]["prompt_ids"][:8], c["prompt_ids"], c["greedy_ids"], a_tokens=n, b_tokens=n, k=2,
        chunk=CHUNK)


def test_bench_forced_acceptance_decides_each_round(emulated_device, emu_art, goldens):
    """``bench/serve_forced_accept.py`` (the served tok/s at a forced acceptance profile, for synthetic weights whose
    drafts are never accepted): at 0.5 of K = 2 drafts every full round accepts exactly one -- where the trained head
    alone accepts 2 in most of case 2's rounds and 0 in most of case 3's (goldens-mtp.json) -- through the device's
    one-read rounds (``verify_round``, whose acceptance the scheduler checks against the host's rule) and the
    rounds whose ids are read back (``verify_ids``); every round the scheduler counted is one the probe forced."""
    import sys
    from collections import Counter
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import serve_forced_accept as probe

    undo = probe.force_acceptance(0.5, seed=1)
    try:
        cases = [goldens["cases"][i] for i in (2, 3)]
        out = _serve(emu_art, [c["prompt_ids"] for c in cases], [7, 7], 2)
    finally:
        undo()
    per_round = [m for _, fin in out for m in fin.stats.spec.per_round]
    forced = [km for step in undo.counts for km in step]
    assert all(fin.stats.spec.rounds >= 2 for _, fin in out)
    assert Counter(per_round) == Counter(m for _, m in forced)
    assert {m for k, m in forced if k == 2} == {1} and sum(k == 2 for k, _ in forced) >= 4
    assert _serve.one_read_rounds >= 1
    with pytest.raises(Exception, match="accept-rate must be in"):
        probe.force_acceptance(1.5)
    assert probe.forced_ids([5, 7, 9, 11], 1, 100) == [7, 10] and probe.forced_ids([5, 7, 99], 2, 100) == [7, 99]
    assert probe.forced_ids([5, 99], 0, 100) == [0]


def test_rounds_past_the_batch_cut_on_the_cuda_backend(emulated_device, emu_art, goldens, tiny_dir):
    """``--spec-disable-by-batch-size`` on the CUDA backend. N = 2, three requests: the rounds of two decide
    acceptance and draft the next round on the device (``verify_round``); while three decode, the steps are plain
    decode steps and the drafts already made are dropped; when the third ends, drafting resumes; each request's ids
    are its golden's. N = 1, two requests: the plain steps of two (decode ahead: ``decode_next``) keep the MTP head's
    rows, so the rounds of the request left alone accept what the same schedule accepts on the reference backend,
    whose head computes its rows from the hidden states it kept."""
    from ninferc.checkpoint import Checkpoint
    from ninferc.reference_backend import ReferenceBatchBackend
    from ninferc.runtime.scheduler import GenerationRequest, Scheduler
    from ninferc.runtime.spec import SpecConfig
    from ninferc.sampling import SamplingParams

    cases = goldens["cases"][:3]
    n = [min(m, golden_len(c)) for c, m in zip(cases, (12, 12, 3))]
    out = _serve(emu_art, [c["prompt_ids"] for c in cases], n, 2, spec_cut=2)
    for c, m, (ids, fin) in zip(cases, n, out):
        assert ids == c["greedy_ids"][:m] and fin.reason == "length"
    assert _serve.one_read_rounds >= 1
    assert out[2][1].stats.spec.drafted == 0  # the third request decoded only in steps of three
    assert 3 in _serve.decode_batches and max(_serve.decode_batches) == 3  # ... plain ones

    cases, n = cases[:2], [min(12, golden_len(cases[0])), 4]
    out = _serve(emu_art, [c["prompt_ids"] for c in cases], n, 2, spec_cut=1)
    assert _serve.decode_batches.count(2) >= 2  # plain steps of two, the later ones queued ahead
    ck = Checkpoint(tiny_dir, notice=None)
    be = ReferenceBatchBackend(ck.config, ck, num_pages=8, page_size=32, num_slots=2, max_context=128)
    verified = []
    verify_ids = be.verify_ids
    be.verify_ids = lambda seqs, tl, sp: verified.append(tl) or verify_ids(seqs, tl, sp)
    s = Scheduler(be, max_concurrency=2, prefill_chunk=CHUNK, spec=SpecConfig("mtp", 2, 1))
    evs: dict = {}
    for i, c in enumerate(cases):
        s.submit(GenerationRequest(str(i), list(c["prompt_ids"]), n[i], params=SamplingParams(),
                                   sink=lambda ev, i=i: evs.setdefault(i, []).append(ev)))
    while not s.idle:
        s.step()
    for i, (c, (ids, fin)) in enumerate(zip(cases, out)):
        assert ids == c["greedy_ids"][:n[i]]
        ref = evs[i][-1].stats
        assert (fin.stats.decode_steps, fin.stats.spec.per_round) == (ref.decode_steps, ref.spec.per_round)
    # the drafts themselves, round by round (those after the plain steps come from the head's rows they kept)
    assert _serve.verified == verified
    st = out[0][1].stats
    assert st.spec.rounds >= 2 and st.decode_steps > st.spec.rounds and st.spec.accepted >= 1


def test_plain_decode_steps_keep_the_mtp_heads_rows(emulated_device, emu_art, goldens):
    """A speculating sequence's plain decode steps keep the MTP head's rows as verify steps + accept() do
    (:func:`ninferc.testing.check_plain_steps_keep_mtp_rows`)."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.testing import check_plain_steps_keep_mtp_rows

    c = goldens["cases"][0]
    be = CudaBatchBackend(emu_art, max_context=128, num_slots=2, num_pages=8, prefill_chunk=CHUNK, spec_tokens=2)
    try:
        check_plain_steps_keep_mtp_rows(be, c["prompt_ids"], c["greedy_ids"], chunk=CHUNK)
    finally:
        be.close()
