"""Prefix reuse through the server: a multi-turn chat reuses turn 1's prompt and answer (``cached_tokens`` = the
checkpoint position, computed here independently), 8 concurrent requests share a system prompt, speculation
with the cache on -- every output equal to a server with ``--no-prefix-cache``."""

from __future__ import annotations

import threading

import openai
import pytest

from ninferc.chat import chat_template_for
from ninferc.checkpoint import Checkpoint
from ninferc.generate import generate
from ninferc.reference_backend import ReferenceBackend
from ninferc.sampling import SamplingParams
from ninferc.tokenizer import Tokenizer


pytestmark = pytest.mark.slow  # seconds each on 2 cores: `pytest -m "not slow"` skips them


@pytest.fixture(scope="module")
def servers(start_server, tiny_dir):
    common = ["--model-id", "tiny", "--max-concurrency", "8", "--prefill-chunk", "128"]
    on = start_server(tiny_dir, *common, env={"NINFERC_POISON_FREED": "1"})
    off = start_server(tiny_dir, *common, "--no-prefix-cache")
    # the startup lines speak of the prefix cache's budget only where there is one (a new-user trial, 2026-12-07)
    budget = "the prefix cache's budget is an upper bound"
    assert any(budget in x for x in on.lines) and not any(budget in x for x in off.lines)
    mk = lambda s: openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=300)  # noqa: E731
    return on, mk(on), mk(off)


def test_multi_turn_chat_reuses_turn_one(servers, tiny_dir):
    srv, on, off = servers
    tok = Tokenizer.from_dir(tiny_dir)
    tpl = chat_template_for(tok)
    kw = {"enable_thinking": False}
    turn1 = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "import os"}]
    r1 = on.chat.completions.create(model="tiny", messages=turn1, max_tokens=24, temperature=0,
                                    extra_body={"chat_template_kwargs": kw})
    a1 = r1.choices[0].message.content
    assert a1 == off.chat.completions.create(model="tiny", messages=turn1, max_tokens=24, temperature=0,
                                             extra_body={"chat_template_kwargs": kw}).choices[0].message.content
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    # the client sends the answer back as the assistant turn, with the empty think block the model was given
    turn2 = turn1 + [{"role": "assistant", "content": "<think>\n\n</think>\n\n" + a1},
                     {"role": "user", "content": "class Parser:"}]
    r2 = on.chat.completions.create(model="tiny", messages=turn2, max_tokens=24, temperature=0,
                                    extra_body={"chat_template_kwargs": kw})
    r2_off = off.chat.completions.create(model="tiny", messages=turn2, max_tokens=24, temperature=0,
                                         extra_body={"chat_template_kwargs": kw})
    assert r2.choices[0].message.content == r2_off.choices[0].message.content
    # expected: the deepest checkpoint of turn 1 that is a prefix of turn 2 (the end of turn 1's messages -- a chat
    # request's end-of-prompt checkpoint --, the end of its generation, or a multiple of the 128-token checkpoint
    # interval), recomputed here from the token ids
    p1 = tok.encode(tpl.render(turn1, add_generation_prompt=True, **kw))
    p2 = tok.encode(tpl.render(turn2, add_generation_prompt=True, **kw))
    ck = Checkpoint(tiny_dir, notice=None)
    gen = generate(ReferenceBackend(ck.config, ck), p1, max_new=24, params=SamplingParams(), prefill_chunk=128,
                   stop_ids=(0, 2)).ids
    seen = p1 + gen
    hist1 = len(tok.encode(tpl.render(turn1, add_generation_prompt=False, **kw)))  # the end of turn 1's messages
    ends = {hist1, len(p1) + len(gen) - 1} | set(range(128, len(p1) - 1, 128))
    want = max(c for c in ends if c <= len(p2) - 1 and seen[:c] == p2[:c])
    assert want >= len(p1)  # turn 1's prompt and some of its answer: the generation's checkpoint
    assert r2.usage.prompt_tokens_details.cached_tokens == want
    assert r2.usage.prompt_tokens == len(p2)
    line = srv.wait_for_line(rf"cached={want} ")
    assert "prompt=" + str(len(p2)) in line


@pytest.mark.parametrize("thinking", [False, True])
def test_next_turns_reuse_the_conversation_before_the_answer(servers, tiny_dir, thinking):
    """What a chat client sends back is the answer's text, which the template renders as a past turn -- without the
    empty think block (thinking off) or the reasoning (on) that the model saw -- so the end-of-prompt and
    end-of-generation checkpoints are not prefixes of the next turn. The checkpoint where turn N's messages end
    (before ``<|im_start|>assistant``) is: turn 2 reuses turn 1's messages, turn 3 turn 2's."""
    _, on, off = servers
    tok = Tokenizer.from_dir(tiny_dir)
    tpl = chat_template_for(tok)
    kw = {"enable_thinking": thinking}
    sysmsg = {"role": "system", "content": f"You answer in Python ({'thinking' if thinking else 'direct'})."}
    msgs = [sysmsg, {"role": "user", "content": "def parse(text):"}]
    for turn, question in enumerate(["class Stack:", "import json"]):
        r = on.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0,
                                       extra_body={"chat_template_kwargs": kw})
        assert r.choices[0].message.content == off.chat.completions.create(
            model="tiny", messages=msgs, max_tokens=12, temperature=0,
            extra_body={"chat_template_kwargs": kw}).choices[0].message.content
        hist = len(tok.encode(tpl.render(msgs, add_generation_prompt=False, **kw)))
        # the answer as a client keeps it: text without reasoning (a fixed one here: the fixture's 12 tokens of
        # thinking can start with "<think>" again and so match the generation's checkpoint by chance)
        msgs = msgs + [{"role": "assistant", "content": f"def f{turn}():\n    return {turn}"},
                       {"role": "user", "content": question}]
        nxt = on.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, temperature=0,
                                         extra_body={"chat_template_kwargs": kw})
        assert nxt.usage.prompt_tokens_details.cached_tokens == hist, (turn, hist)
        assert nxt.choices[0].message.content == off.chat.completions.create(
            model="tiny", messages=msgs, max_tokens=4, temperature=0,
            extra_body={"chat_template_kwargs": kw}).choices[0].message.content


def test_eight_requests_share_a_system_prompt(servers):
    srv, on, off = servers
    system = "You are a careful Python programmer. " * 20
    msgs = lambda i: [{"role": "system", "content": system}, {"role": "user", "content": f"def f{i}(x):"}]  # noqa
    on.chat.completions.create(model="tiny", messages=msgs(99), max_tokens=2, temperature=0)
    m0 = srv.metrics()
    out, cached = {}, {}

    def go(i):
        r = on.chat.completions.create(model="tiny", messages=msgs(i), max_tokens=16, temperature=0)
        out[i], cached[i] = r.choices[0].message.content, r.usage.prompt_tokens_details.cached_tokens

    ts = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(8):
        assert out[i] == off.chat.completions.create(model="tiny", messages=msgs(i), max_tokens=16,
                                                     temperature=0).choices[0].message.content
        assert cached[i] >= 128
    m = srv.metrics()
    assert m["ninferc:prefix_cache_hits_total"] - m0["ninferc:prefix_cache_hits_total"] == 8
    assert m["ninferc:prefix_cache_hit_tokens_total"] - m0["ninferc:prefix_cache_hit_tokens_total"] == \
        sum(cached.values())


def test_speculation_with_the_prefix_cache_equals_plain(start_server, tiny_dir, servers, goldens):
    _, _, off = servers
    spec = start_server(tiny_dir, "--model-id", "tiny", "--spec", "mtp", "--draft-tokens", "3",
                        "--prefill-chunk", "128", env={"NINFERC_POISON_FREED": "1"})
    sc = openai.OpenAI(base_url=spec.url + "/v1", api_key="x", max_retries=0, timeout=300)
    base = goldens["cases"][0]["prompt"] * 30  # ~300 tokens: checkpoints at 128 and 256 too
    first = sc.completions.create(model="tiny", prompt=base, max_tokens=20, temperature=0).choices[0].text
    for prompt in (base, base + first, base + first + "\n\nclass A:", base[:len(base) // 2] + "x = 1\n"):
        r = sc.completions.create(model="tiny", prompt=prompt, max_tokens=20, temperature=0)
        assert r.choices[0].text == off.completions.create(model="tiny", prompt=prompt, max_tokens=20,
                                                           temperature=0).choices[0].text
        assert r.usage.prompt_tokens_details.cached_tokens > 0


def test_the_same_prompt_again_reuses_all_but_its_last_token(servers):
    _, on, off = servers
    prompt = "import sys\n\ndef main(argv):\n    "
    a = on.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0)
    b = on.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0)
    assert b.usage.prompt_tokens_details.cached_tokens == b.usage.prompt_tokens - 1
    assert a.choices[0].text == b.choices[0].text == off.completions.create(
        model="tiny", prompt=prompt, max_tokens=8, temperature=0).choices[0].text


def test_reset_prefix_cache_restores_idle(servers):
    import time

    import httpx

    srv, on, _ = servers
    on.completions.create(model="tiny", prompt="def g():\n" * 40, max_tokens=4, temperature=0)
    assert srv.metrics()["ninferc:prefix_cache_pages"] > 0
    assert httpx.post(srv.url + "/reset_prefix_cache").json() == {"status": "ok"}
    for _ in range(100):
        m = srv.metrics()
        if m["ninferc:prefix_cache_checkpoints"] == 0:
            break
        time.sleep(0.02)
    assert m["ninferc:prefix_cache_pages"] == 0 and m["ninferc:kv_pages_free"] == m["ninferc:kv_pages_total"]
