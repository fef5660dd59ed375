"""``ninferc serve`` on the CUDA engine (the fixture artifact for the device's arch): the openai-client checks of the
CPU tier against the GPU backend. Marked ``gpu`` (skipped without a GPU).

Exactness on the GPU: two paths through the same weights that cut the work differently -- a prompt split by the prefix
cache (restored state + the rest) or by a prefill chunk, a decode step batched with other sequences (another GEMV
token tile) -- round differently (``tests/runtime/test_engine_gpu.py::test_chunked_prefill_equals_unchunked`` bounds
the logits), so a greedy text may part from another path's at a near-tie. As the engine tests do, greedy output is
compared with the HF goldens up to the golden's first near-tie (top-1 margin < ``GREEDY_MARGIN``); where no golden
exists (a chat turn), with a cache-off server's output up to the first position where that server's own two most
likely tokens are within ``NEAR_TIE`` nats. (The CPU reference backend computes every row alike: its tests in
``test_prefix_serve.py`` and ``test_concurrency.py`` demand equal text.)
"""

from __future__ import annotations

import threading

import openai
import pytest

from ninferc.ir.tolerances import GREEDY_MARGIN

pytestmark = pytest.mark.gpu

#: log-probability gap (nats) under which the cache-off server's two most likely tokens count as a near-tie
NEAR_TIE = 0.1


def golden_len(case) -> int:
    """Tokens of the golden greedy continuation before its first near-tie."""
    return next((i for i, m in enumerate(case["top1_margin"]) if m < GREEDY_MARGIN), len(case["top1_margin"]))


@pytest.fixture(scope="module")
def tok(tiny_dir):
    from ninferc.tokenizer import Tokenizer

    return Tokenizer.from_dir(tiny_dir)


@pytest.fixture(scope="module")
def art(tmp_path_factory, tiny_dir):
    from ninferc.pipeline import compile_model
    from ninferc.runtime.kernels import device_arch, device_sm_count

    p = tmp_path_factory.mktemp("serve_gpu") / "tiny.ninfer"
    compile_model(tiny_dir, device_arch(), p, sms=device_sm_count())
    return p


@pytest.fixture(scope="module")
def gpu_server(start_server, art):
    return start_server(art, "--model-id", "tiny", "--max-concurrency", "8")


@pytest.fixture(scope="module")
def gclient(gpu_server):
    return openai.OpenAI(base_url=gpu_server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def _greedy(client, case, n, **kw):
    return client.completions.create(model="tiny", prompt=case["prompt_ids"], max_tokens=n, temperature=0,
                                     extra_body={"ignore_eos": True}, **kw)


def test_greedy_equals_the_goldens_on_the_gpu(gclient, goldens, tok):
    for c in goldens["cases"]:
        n = golden_len(c)
        r = _greedy(gclient, c, n)
        assert r.choices[0].text == tok.decode(c["greedy_ids"][:n])
        assert r.usage.completion_tokens == n


def test_eight_concurrent_streams_equal_the_goldens_on_the_gpu(gpu_server, goldens, tok):
    cases = [goldens["cases"][i] for i in (0, 1, 2, 3, 4, 2, 0, 3)]
    lengths = [golden_len(c) - k for c, k in zip(cases, (0, 0, 0, 0, 0, 7, 5, 11))]  # ends spread over the steps
    out = {}

    def go(i):
        c = openai.OpenAI(base_url=gpu_server.url + "/v1", api_key="x", max_retries=0, timeout=120)
        text = []
        for ch in c.completions.create(model="tiny", prompt=cases[i]["prompt_ids"], max_tokens=lengths[i],
                                       temperature=0, stream=True, extra_body={"ignore_eos": True}):
            if ch.choices:
                text.append(ch.choices[0].text)
        out[i] = "".join(text)

    ts = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [out[i] for i in range(8)] == [tok.decode(c["greedy_ids"][:n]) for c, n in zip(cases, lengths)]


def test_seeded_device_sampling_repeats_and_logprobs_and_penalties_answer(gclient):
    """A seeded sampled request repeats its text (drawn on the device); a greedy one asking for logprobs (drawn on the
    device, its logprobs from a copy of its logits row) and a penalised min_p one (the host sampler) answer whole."""
    kw = dict(model="tiny", prompt="class Parser:\n", max_tokens=24, temperature=0.9, top_p=0.95, seed=1234,
              extra_body={"ignore_eos": True})
    assert gclient.completions.create(**kw).choices[0].text == gclient.completions.create(**kw).choices[0].text
    r = gclient.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "def f():"}],
                                        max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) == r.usage.completion_tokens
    assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob == pytest.approx(e.logprob) for e in content)
    r = gclient.completions.create(model="tiny", prompt="def f():", max_tokens=8, temperature=0.8, seed=3,
                                   extra_body={"min_p": 0.05, "repetition_penalty": 1.2, "ignore_eos": True})
    assert r.usage.completion_tokens == 8



def _gap_errors(entries: dict, golden: list) -> list[float]:
    """|our log-probability gap - HF's logit gap| to the golden's top token for each golden id scored (vLLM's
    ``prompt_logprobs`` entries of one position)."""
    got = {int(k): v["logprob"] for k, v in entries.items()}
    g0, l0 = golden[0]
    return [abs((got[i] - got[g0]) - (lg - l0)) for i, lg in golden if i in got]


def test_scored_prompts_on_the_gpu_match_the_goldens_and_the_decode_logprobs(gclient, goldens, goldens_long, tok):
    """Scored prompts through the CUDA engine (chunks of 32 rows, scored on the device): each case's prompt + 16 greedy
    tokens and the 3,000-token prompt + its continuation with ``max_tokens`` 0 -- HF's top 3 among the scored top 8 at
    every golden position, gaps within twice ENGINE_LOGITS (a gap is two logits), the greedy token ranked first where
    its margin is clear; and the scores of a greedy answer's tokens equal that answer's own decode logprobs within
    twice ENGINE_REORDER (prefill rows against decode steps)."""
    from ninferc.ir.tolerances import ENGINE_LOGITS, ENGINE_REORDER

    worst = 0.0
    for c in goldens["cases"]:
        ids = c["prompt_ids"] + c["greedy_ids"][:16]
        n = len(c["prompt_ids"])
        r = gclient.completions.create(model="tiny", prompt=ids, max_tokens=0, echo=True, logprobs=1,
                                       extra_body={"prompt_logprobs": 8})
        pl = r.choices[0].model_extra["prompt_logprobs"]
        assert len(pl) == len(ids) and pl[0] is None and r.usage.completion_tokens == 0
        assert r.choices[0].logprobs.token_logprobs[1:] == [pl[j][str(ids[j])]["logprob"] for j in range(1, len(ids))]
        for i, golden in enumerate(c["top5"][:16]):
            assert all(str(g) in pl[n + i] for g, _ in golden[:3]), (c["prompt"], i)
            worst = max(worst, *_gap_errors(pl[n + i], golden))
            if c["top1_margin"][i] > 2 * ENGINE_LOGITS.atol:
                assert pl[n + i][str(c["greedy_ids"][i])]["rank"] == 1
        k = min(golden_len(c), 16)  # the greedy answer is the golden's this far
        plain = gclient.completions.create(model="tiny", prompt=c["prompt_ids"], max_tokens=k, temperature=0,
                                           logprobs=1, extra_body={"ignore_eos": True}).choices[0]
        assert plain.text == tok.decode(c["greedy_ids"][:k])
        scored = [pl[n + i][str(c["greedy_ids"][i])]["logprob"] for i in range(k)]
        assert scored == pytest.approx(plain.logprobs.token_logprobs, abs=2 * ENGINE_REORDER.atol)
    L = goldens_long
    ids = L["prompt_ids"] + L["greedy_ids"]
    r = gclient.completions.create(model="tiny", prompt=ids, max_tokens=0, extra_body={"prompt_logprobs": 8})
    pl = r.choices[0].model_extra["prompt_logprobs"]
    n = len(L["prompt_ids"])
    golden_at = [(int(p) + 1, top) for p, top in L["prompt_top5_at"].items()] + \
        [(n + i, top) for i, top in enumerate(L["top5"][:-1])]
    for j, golden in golden_at:
        assert all(str(g) in pl[j] for g, _ in golden[:3]), j
        worst = max(worst, *_gap_errors(pl[j], golden))
    assert worst < 2 * ENGINE_LOGITS.atol


def test_logit_bias_and_min_tokens_on_the_gpu(gclient, goldens, tok):
    """logit_bias and min_tokens take the host sampler on the CUDA engine's logits: -100 on greedy's first token moves
    it, +100 forces one token; a sampled request with min_tokens moves to the GPU sampler once it is reached, and its
    seed still repeats its text; beside it, a plain request keeps the goldens."""
    c = goldens["cases"][0]
    ids = c["greedy_ids"]
    r = _greedy(gclient, c, 3, logit_bias={str(ids[0]): -100})
    assert not r.choices[0].text.startswith(tok.decode(ids[:1]))
    assert _greedy(gclient, c, 4, logit_bias={"42": 100}).choices[0].text == tok.decode([42] * 4)
    kw = dict(model="tiny", prompt="class Parser:\n", max_tokens=16, temperature=0.9, seed=99,
              extra_body={"min_tokens": 6, "stop_token_ids": [198, 271]})
    a = gclient.completions.create(**kw)
    assert a.usage.completion_tokens >= 6 and a.choices[0].text == gclient.completions.create(**kw).choices[0].text
    n = golden_len(c)
    assert _greedy(gclient, c, n).choices[0].text == tok.decode(ids[:n])


def test_response_format_on_the_gpu(gclient):
    """A json_schema answer on the CUDA engine (the host sampler masks its rows): greedy parses and fits the schema;
    3 sampled choices each keep to it (parse where they end)."""
    import json

    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green"]}, "n": {"type": "integer"}},
              "required": ["color", "n"], "additionalProperties": False}
    kw = dict(model="tiny", messages=[{"role": "user", "content": "config"}], max_tokens=300,
              response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    r = gclient.chat.completions.create(temperature=0, **kw)
    v = json.loads(r.choices[0].message.content)
    assert r.choices[0].finish_reason == "stop" and set(v) == {"color", "n"} and v["color"] in ("red", "green")
    r = gclient.chat.completions.create(temperature=0.8, seed=2, n=3, **kw)
    for ch in r.choices:  # each choice its own grammar state; a sampled one may run to max_tokens inside the value
        assert ch.message.content.startswith("{")
        if ch.finish_reason == "stop":
            v = json.loads(ch.message.content)
            assert set(v) == {"color", "n"} and v["color"] in ("red", "green")


# -- prefix reuse on the CUDA engine ---------------------------------------------------------------------------

from test_prefix_serve import test_reset_prefix_cache_restores_idle  # noqa: E402

__all__ = ["test_reset_prefix_cache_restores_idle"]


@pytest.fixture(scope="module")
def servers(start_server, art):
    common = ["--model-id", "tiny", "--max-concurrency", "8", "--prefill-chunk", "128"]
    on = start_server(art, *common)
    off = start_server(art, *common, "--no-prefix-cache")
    mk = lambda s: openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=300)  # noqa: E731
    return on, mk(on), mk(off)


def test_the_same_prompt_again_reuses_all_but_its_last_token_on_the_gpu(servers, goldens, tok):
    _, on, _ = servers
    c = goldens["cases"][2]  # no near-tie in its 48 golden tokens
    n = golden_len(c)
    a, b = _greedy(on, c, n), _greedy(on, c, n)
    assert b.usage.prompt_tokens_details.cached_tokens == b.usage.prompt_tokens - 1
    assert a.choices[0].text == b.choices[0].text == tok.decode(c["greedy_ids"][:n])


def test_a_long_prompt_extending_a_cached_one_on_the_gpu(servers, goldens_long, tok):
    """The 3,000-token golden prompt after its first 2,100 tokens were served: 2,099 cached (the first request's
    end-of-prompt checkpoint; 128-token interval checkpoints below it), 8 streams at once, each the golden text."""
    srv, on, _ = servers
    ids, n = goldens_long["prompt_ids"], golden_len(goldens_long)
    on.completions.create(model="tiny", prompt=ids[:2100], max_tokens=1, temperature=0)
    out, cached = {}, {}

    def go(i):
        r = on.completions.create(model="tiny", prompt=ids, max_tokens=n, temperature=0,
                                  extra_body={"ignore_eos": True})
        out[i], cached[i] = r.choices[0].text, r.usage.prompt_tokens_details.cached_tokens

    ts = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(out[i] == tok.decode(goldens_long["greedy_ids"][:n]) for i in range(8)), out
    assert all(cached[i] >= 2099 for i in range(8)), cached


def _equal_up_to_a_near_tie(on_resp, off_resp):
    """The two chat answers' tokens are equal, or part where the cache-off answer's two most likely tokens are
    within NEAR_TIE and the cache-on answer took the other one of them."""
    a = [e.token for e in on_resp.choices[0].logprobs.content]
    b = off_resp.choices[0].logprobs.content
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y.token), None)
    if i is None:
        assert len(a) == len(b) or on_resp.choices[0].finish_reason == off_resp.choices[0].finish_reason == "length"
        return
    top = b[i].top_logprobs
    assert top[0].logprob - top[1].logprob < NEAR_TIE and a[i] in (top[0].token, top[1].token), \
        f"answers part at token {i} ({a[i]!r} vs {b[i].token!r}) where the cache-off answer's top two are " \
        f"{[(t.token, t.logprob) for t in top]}"


def test_multi_turn_chat_on_the_gpu_reuses_turn_one(servers, tiny_dir, tok):
    from ninferc.chat import chat_template_for

    srv, on, off = servers
    kw = {"enable_thinking": False}
    base = "You write Python. " * 12  # > 128 tokens: a checkpoint at the interval too
    turn1 = [{"role": "system", "content": base}, {"role": "user", "content": "import os"}]
    ask = lambda c, m: c.chat.completions.create(model="tiny", messages=m, max_tokens=24, temperature=0,  # noqa
                                                 logprobs=True, top_logprobs=2,
                                                 extra_body={"chat_template_kwargs": kw})
    r1 = ask(on, turn1)
    _equal_up_to_a_near_tie(r1, ask(off, turn1))
    a1 = r1.choices[0].message.content
    turn2 = turn1 + [{"role": "assistant", "content": "<think>\n\n</think>\n\n" + a1},
                     {"role": "user", "content": "class Parser:"}]
    n0 = len(srv.request_lines())
    r2 = ask(on, turn2)
    _equal_up_to_a_near_tie(r2, ask(off, turn2))
    tpl = chat_template_for(tok)
    hist1 = len(tok.encode(tpl.render(turn1, add_generation_prompt=False, **kw)))  # turn 1's end of messages
    assert hist1 <= r2.usage.prompt_tokens_details.cached_tokens < r2.usage.prompt_tokens
    assert f"cached={r2.usage.prompt_tokens_details.cached_tokens} " in srv.wait_request_lines(1, after=n0)[0]
    # turn 3 with the answer as most clients keep it (no think block): the template renders it otherwise than the
    # model saw it, so the deepest checkpoint of turn 2 that is a prefix is the end of its messages or, past it, a
    # multiple of the 128-token interval inside the common prefix
    turn3 = turn2 + [{"role": "assistant", "content": r2.choices[0].message.content},
                     {"role": "user", "content": "def main():"}]
    r3 = ask(on, turn3)
    _equal_up_to_a_near_tie(r3, ask(off, turn3))
    p2, p3 = (tok.encode(tpl.render(m, add_generation_prompt=True, **kw)) for m in (turn2, turn3))
    common = next((i for i, (x, y) in enumerate(zip(p2, p3)) if x != y), min(len(p2), len(p3)))
    hist2 = len(tok.encode(tpl.render(turn2, add_generation_prompt=False, **kw)))
    want = max([hist2] + [c for c in range(128, len(p2) - 1, 128) if c <= common])
    assert r3.usage.prompt_tokens_details.cached_tokens == want
