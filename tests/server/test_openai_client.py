"""The official ``openai`` client against a live ``ninferc serve`` (reference backend, fixture checkpoint):
chat and completions, streaming and not, usage, finish reasons, stop strings and ids, seeds, logprobs."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

from ninferc.cli import main


def _run_cli(tiny_dir, prompt, n, *extra):
    r = CliRunner().invoke(main, ["run", str(tiny_dir), "--prompt", prompt, "--max-new", str(n), *extra])
    assert r.exit_code == 0, r.output
    return r.stdout[:-1]  # run ends its text with a newline


def _stream_text(stream):
    chunks = list(stream)
    text = "".join((c.choices[0].delta.content or "") if c.choices and hasattr(c.choices[0], "delta")
                   else (c.choices[0].text if c.choices else "") for c in chunks)
    return text, chunks


def test_completions_greedy_equals_ninferc_run(client, tiny_server, tiny_dir, goldens):
    import httpx

    # the server is shared by the session's tests: empty its prefix cache so that nothing an earlier test sent is hit
    assert httpx.post(tiny_server.url + "/reset_prefix_cache").json() == {"status": "ok"}
    for c in goldens["cases"][:3]:
        prompt = c["prompt"]
        r = client.completions.create(model="tiny", prompt=prompt, max_tokens=48, temperature=0)
        assert r.choices[0].text == _run_cli(tiny_dir, prompt, 48) == c["greedy_text"]
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens == len(c["prompt_ids"]) and r.usage.completion_tokens == 48
        assert r.usage.total_tokens == len(c["prompt_ids"]) + 48
        assert r.usage.prompt_tokens_details.cached_tokens == 0


def test_completions_streaming_text_and_usage_chunk(client, goldens):
    c = goldens["cases"][1]
    stream = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=20, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    text, chunks = _stream_text(stream)
    from ninferc.tokenizer import Tokenizer  # noqa: F401
    assert text == c["greedy_text"][:len(text)] and len(text) > 10
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert chunks[-1].usage.prompt_tokens == len(c["prompt_ids"])
    # without include_usage there is no usage chunk
    _, chunks = _stream_text(client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=3,
                                                       temperature=0, stream=True))
    assert all(ch.usage is None for ch in chunks)


def test_continuous_usage_stats_put_the_usage_so_far_on_every_chunk(client, goldens):
    """vLLM's ``stream_options.continuous_usage_stats``: each chunk carries the usage so far, the completion tokens
    never decreasing and reaching the final count (it was accepted and ignored until 2026-12-06)."""
    c = goldens["cases"][1]
    for chat in (False, True):
        kw = dict(model="tiny", max_tokens=12, temperature=0, stream=True,
                  stream_options={"include_usage": True, "continuous_usage_stats": True})
        stream = (client.chat.completions.create(messages=[{"role": "user", "content": c["prompt"]}], **kw) if chat
                  else client.completions.create(prompt=c["prompt"], **kw))
        _, chunks = _stream_text(stream)
        used = [ch.usage for ch in chunks]
        assert all(u is not None for u in used) and len(used) >= 3
        done = [u.completion_tokens for u in used]
        assert done == sorted(done) and done[-1] == 12 and (done[0] == 0) == chat  # chat's role chunk comes first
        assert {u.prompt_tokens for u in used} == {used[-1].prompt_tokens}
        assert all(u.total_tokens == u.prompt_tokens + u.completion_tokens for u in used)
        assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens_details.cached_tokens is not None


def test_completions_with_token_ids_prompt(client, goldens):
    c = goldens["cases"][3]
    r = client.completions.create(model="tiny", prompt=c["prompt_ids"], max_tokens=16, temperature=0)
    assert r.choices[0].text == c["greedy_text"][:len(r.choices[0].text)]
    assert r.usage.prompt_tokens == len(c["prompt_ids"])


def test_chat_prompt_ids_equal_goldens_chat_and_greedy_equals_run_chat(client, tiny_dir):
    cases = json.loads((tiny_dir / "goldens-chat.json").read_text())["cases"]
    for c in cases:
        r = client.chat.completions.create(model="tiny", messages=c["messages"], max_tokens=12, temperature=0,
                                           extra_body={"chat_template_kwargs": c["chat_template_kwargs"]})
        # the same ids given as a raw completion prompt give the same text: the server rendered exactly the golden ids
        raw = client.completions.create(model="tiny", prompt=c["ids"], max_tokens=12, temperature=0,
                                        extra_body={"stop_token_ids": [2]})
        assert r.usage.prompt_tokens == len(c["ids"])
        assert r.choices[0].message.content == raw.choices[0].text
        assert r.choices[0].message.role == "assistant"
    one = cases[0]
    assert one["messages"][0]["role"] == "user" and one["chat_template_kwargs"] == {}
    r = client.chat.completions.create(model="tiny", messages=one["messages"], max_tokens=12, temperature=0)
    assert r.choices[0].message.content == _run_cli(tiny_dir, one["messages"][0]["content"], 12, "--chat")


def test_chat_streaming_role_chunk_deltas_finish_and_usage(client):
    msgs = [{"role": "user", "content": "import os"}]
    whole = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=15, temperature=0)
    stream = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=15, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    text, chunks = _stream_text(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert text == whole.choices[0].message.content
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_stop_string_spanning_two_tokens_is_trimmed(client, goldens):
    from ninferc.tokenizer import Tokenizer

    c = goldens["cases"][0]
    full = c["greedy_text"]
    tok_text = [len(Tokenizer.decode(_tok(), c["greedy_ids"][:i])) for i in range(1, 12)]
    a = tok_text[7]  # characters of the first 8 tokens
    stop = full[a - 2:a + 2]
    assert full.index(stop) == a - 2
    r = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=48, temperature=0, stop=[stop])
    assert r.choices[0].text == full[:a - 2] and r.choices[0].finish_reason == "stop"
    text, chunks = _stream_text(client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=48,
                                                          temperature=0, stop=stop, stream=True))
    assert text == full[:a - 2]
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"


_TOK = {}


def _tok():
    if "t" not in _TOK:
        from ninferc.testing import models_dir
        from ninferc.tokenizer import Tokenizer

        _TOK["t"] = Tokenizer.from_dir(models_dir() / "qwen35-tiny-code")
    return _TOK["t"]


def test_stop_token_ids_end_with_stop(client, goldens):
    c = goldens["cases"][2]
    ids = c["greedy_ids"]
    k = 5
    r = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=48, temperature=0,
                                  extra_body={"stop_token_ids": [ids[k]]})
    first = ids.index(ids[k])
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == first + 1  # the stop id is generated (counted) but not shown
    assert r.choices[0].text == _tok().decode(ids[:first])


def test_seeded_sampling_same_text_alone_and_beside_others(client):
    kw = dict(model="tiny", prompt="class Parser:\n", max_tokens=24, temperature=0.9, top_p=0.95, seed=1234)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    assert a == b
    out = {}

    def other(i):
        out[i] = client.completions.create(model="tiny", prompt=f"x = {i}\n", max_tokens=24, temperature=1.0,
                                           seed=i).choices[0].text

    def ours():
        out["ours"] = client.completions.create(**kw).choices[0].text

    ts = [threading.Thread(target=other, args=(i,)) for i in range(3)] + [threading.Thread(target=ours)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out["ours"] == a
    c = client.completions.create(**{**kw, "seed": 99}).choices[0].text
    assert c != a  # another seed draws another text (24 tokens at temperature 0.9)


def test_top_k_minus_one_is_no_limit_as_in_vllm(client):
    """``top_k: -1`` (vLLM's "no limit", which its clients send) samples as 0 does; a limit of 2 samples otherwise."""
    kw = dict(model="tiny", prompt="def main(", max_tokens=24, temperature=1.5, seed=77)
    texts = {k: client.completions.create(**kw, extra_body={"top_k": k}).choices[0].text for k in (0, -1, 2)}
    assert texts[-1] == texts[0] and texts[2] != texts[0], texts


def test_logprobs_chat_and_completions(client):
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "def f():"}],
                                       max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for e in content:
        assert len(e.top_logprobs) == 3 and e.logprob <= 0
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob)  # greedy: the sampled token is the top one
    r = client.completions.create(model="tiny", prompt="def f():", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert "".join(lp.tokens) == r.choices[0].text and lp.text_offset[0] == 0
    # the legacy API's top_logprobs always hold the sampled token (up to logprobs + 1 entries): with logprobs=0 it
    # alone, and for a sampled token outside the top 1 both
    for n, temp in ((0, 0), (1, 1.5)):
        r = client.completions.create(model="tiny", prompt="def f():", max_tokens=12, temperature=temp, seed=5,
                                      logprobs=n)
        lp = r.choices[0].logprobs
        for t, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            assert top[t] == pytest.approx(v) and 1 <= len(top) <= n + 1
        if temp:
            assert any(len(top) == 2 for top in lp.top_logprobs)  # a token drawn below the most likely one


def test_legacy_top_logprobs_keep_the_sampled_tokens_own_logprob(tiny_dir):
    """Keyed by text, tokens that are pieces of one multibyte character share the key "\ufffd": the sampled
    token's own logprob wins it, whether the token is in the top list or not (no server needed: the formatter)."""
    from types import SimpleNamespace

    from ninferc.sampling import Sampled
    from ninferc.server.app import _Formatter
    from ninferc.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(tiny_dir)
    a, b, c = tok.encode("\U0001F600")[:3]  # byte pieces of one emoji: each decodes to "\ufffd"
    assert tok.decode([a]) == tok.decode([b]) == "\ufffd"
    f = _Formatter(SimpleNamespace(tokenizer=tok), None, SimpleNamespace(request_id="x", logprobs=2), chat=False)
    x, y = tok.encode("x")[0], tok.encode("y")[0]
    out = f._logprobs([Sampled(a, -0.5, [(a, -0.5), (b, -1.2)]), Sampled(c, -3.0, [(a, -0.1), (b, -0.9)]),
                       Sampled(x, -0.2, [(x, -0.2), (y, -2.0)])])
    assert out["token_logprobs"] == [-0.5, -3.0, -0.2]
    assert [top["\ufffd"] for top in out["top_logprobs"][:2]] == [-0.5, -3.0]
    assert out["top_logprobs"][2] == {"x": -0.2, "y": -2.0}


def test_models_lists_the_model(client):
    import openai

    ms = client.models.list()
    assert [m.id for m in ms.data] == ["tiny"]
    # models.retrieve (GET /v1/models/NAME; a 404 until 2026-12-06): the same card, another name a 404
    m = client.models.retrieve("tiny")
    assert m.id == "tiny" and m.model_dump() == ms.data[0].model_dump()
    with pytest.raises(openai.NotFoundError, match="model 'gpt-9' does not exist"):
        client.models.retrieve("gpt-9")


def test_tokenize_and_detokenize(tiny_server, client, goldens, tiny_dir):
    """vLLM's ``/tokenize`` (text, or chat messages rendered as a chat request renders them) and ``/detokenize``."""
    import httpx

    c = goldens["cases"][0]
    r = httpx.post(tiny_server.url + "/tokenize", json={"model": "tiny", "prompt": c["prompt"]}).json()
    assert r == {"count": len(c["prompt_ids"]), "max_model_len": 4096, "tokens": c["prompt_ids"], "token_strs": None}
    r = httpx.post(tiny_server.url + "/tokenize", json={"prompt": c["prompt"], "return_token_strs": True}).json()
    assert len(r["token_strs"]) == r["count"] and all(isinstance(t, str) and t for t in r["token_strs"])
    back = httpx.post(tiny_server.url + "/detokenize", json={"model": "tiny", "tokens": c["greedy_ids"]}).json()
    assert back == {"prompt": c["greedy_text"]}
    r = httpx.post(tiny_server.url + "/tokenize", json={"prompt": c["prompt"], "add_special_tokens": True}).json()
    assert r["tokens"] == c["prompt_ids"]  # this family's tokenizer adds no special tokens of its own
    chat = json.loads((tiny_dir / "goldens-chat.json").read_text())["cases"][0]
    r = httpx.post(tiny_server.url + "/tokenize", json={"messages": chat["messages"],
                                                        "chat_template_kwargs": chat["chat_template_kwargs"]}).json()
    assert r["tokens"] == chat["ids"]
    # /detokenize writes special tokens out, as vLLM's does: the rendered chat prompt reads back whole
    back = httpx.post(tiny_server.url + "/detokenize", json={"tokens": chat["ids"]}).json()["prompt"]
    assert back == chat["text"] and "<|im_start|>" in back, back
    assert r["count"] == client.chat.completions.create(model="tiny", messages=chat["messages"], max_tokens=1,
                                                        temperature=0).usage.prompt_tokens
    bad = [({"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "/tokenize", "give exactly one of"),
           ({}, "/tokenize", "give exactly one of"),
           ({"prompt": "x", "add_generation_prompt": False}, "/tokenize", "apply to messages"),
           ({"model": "gpt-9", "prompt": "x"}, "/tokenize", "does not exist"),
           ({"tokens": [1, 99999]}, "/detokenize", "tokens[1] = 99999 is not a token id"),
           ({"tokens": "abc"}, "/detokenize", "tokens")]
    for body, path, frag in bad:
        r = httpx.post(tiny_server.url + path, json=body)
        assert 400 <= r.status_code < 500 and frag in r.json()["error"]["message"], (body, r.text)


def test_bookkeeping_fields_and_nulls_change_nothing(client, tiny_server, goldens):
    """OpenAI's bookkeeping fields (user, safety_identifier, metadata, prompt_cache_key, store false, service_tier
    auto / default, modalities text, parallel_tool_calls without tools) and nulls where OpenAI's schema allows them
    (n, stream, logprobs, echo, ...) are accepted and change nothing: the same greedy text as the plain request, on
    both endpoints (a new-user trial, 2026-12-07: each was a 400, which breaks clients that always send them)."""
    import httpx

    c = goldens["cases"][0]
    plain = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=12, temperature=0)
    body = {"model": "tiny", "prompt": c["prompt"], "max_tokens": 12, "temperature": 0, "n": None, "stream": None,
            "logprobs": None, "echo": None, "ignore_eos": None, "min_tokens": None, "skip_special_tokens": None,
            "include_stop_str_in_output": None, "user": "u1", "safety_identifier": "s1", "metadata": {"k": "v"},
            "prompt_cache_key": "conv-1", "store": False, "service_tier": "auto"}
    r = httpx.post(tiny_server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == plain.choices[0].text and r.json()["usage"]["completion_tokens"] == 12
    msgs = [{"role": "user", "content": "def f():"}]
    kw = {"enable_thinking": False}
    plain = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0,
                                           extra_body={"chat_template_kwargs": kw})
    body = {"model": "tiny", "messages": msgs, "max_tokens": 12, "temperature": 0, "chat_template_kwargs": kw,
            "n": None, "stream": None, "logprobs": None, "echo": False, "add_generation_prompt": None,
            "include_reasoning": None, "min_tokens": 0, "parallel_tool_calls": False, "modalities": ["text"],
            "store": None, "service_tier": "default", "metadata": {}, "user": "u1"}
    r = httpx.post(tiny_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == plain.choices[0].message.content


def test_include_stop_str_in_output_keeps_the_stop_string(client, goldens):
    """vLLM's include_stop_str_in_output: the text ends after the stop string (which spans two tokens here), whole
    and streamed; finish_reason stop."""
    c = goldens["cases"][0]
    full = c["greedy_text"]
    a = len(_tok().decode(c["greedy_ids"][:8]))
    stop = full[a - 2:a + 2]
    extra = {"include_stop_str_in_output": True}
    r = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=48, temperature=0, stop=[stop],
                                  extra_body=extra)
    assert r.choices[0].text == full[:a + 2] and r.choices[0].finish_reason == "stop"
    text, chunks = _stream_text(client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=48,
                                                          temperature=0, stop=stop, stream=True, extra_body=extra))
    assert text == full[:a + 2]


def test_add_generation_prompt_false_renders_no_assistant_header(client, tiny_server):
    """Chat's add_generation_prompt (vLLM's; default true): false renders the messages alone, as /tokenize does --
    the prompt is the tokens of the template's output without ``<|im_start|>assistant ...``."""
    import httpx

    msgs = [{"role": "user", "content": "def f():"}]
    counts = {}
    for agp in (True, False):
        t = httpx.post(tiny_server.url + "/tokenize", json={"messages": msgs, "add_generation_prompt": agp}).json()
        r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=2, temperature=0,
                                           extra_body={"add_generation_prompt": agp})
        assert r.usage.prompt_tokens == t["count"]
        counts[agp] = t["count"]
    assert counts[False] < counts[True]


def test_continue_final_message_continues_the_assistant_text(client, tiny_server):
    """vLLM's continue_final_message (with add_generation_prompt false): the prompt ends where the last message, an
    assistant's, ends -- no end-of-turn after it -- so the answer continues it, as a completion of that text does."""
    import httpx

    msgs = [{"role": "user", "content": "Write add."}, {"role": "assistant", "content": "def add(a, b):"}]
    body = {"messages": msgs, "add_generation_prompt": False, "continue_final_message": True}
    t = httpx.post(tiny_server.url + "/tokenize", json=body).json()
    text = httpx.post(tiny_server.url + "/detokenize", json={"tokens": t["tokens"]}).json()["prompt"]
    assert text == "<|im_start|>user\nWrite add.<|im_end|>\n<|im_start|>assistant\ndef add(a, b):"
    extra = {"add_generation_prompt": False, "continue_final_message": True}
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0, extra_body=extra)
    assert r.usage.prompt_tokens == t["count"]
    c = client.completions.create(model="tiny", prompt=t["tokens"], max_tokens=12, temperature=0)
    assert r.choices[0].message.content == c.choices[0].text and c.choices[0].text
    for bad, param, frag in [
            ({"continue_final_message": True}, "continue_final_message", "send add_generation_prompt: false"),
            ({**extra, "messages": msgs[:1]}, "messages.0", "the last message (messages[0]) is a 'user' one"),
            ({**extra, "messages": msgs[:1] + [{"role": "assistant", "content": ""}]}, "messages.1",
             "is an empty one")]:
        kw = {"model": "tiny", "messages": msgs, "max_tokens": 2, **bad}
        r = httpx.post(tiny_server.url + "/v1/chat/completions", json=kw)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        assert frag in r.json()["error"]["message"], r.text


def test_n_choices_whole_and_streamed(client, tiny_server):
    """n > 1: choice i is the request's own draw with seed + i (the same as n = 1 with that seed), greedy choices are
    equal, the prompt counts once in the usage and the choices' tokens add up; streamed, each choice's chunks add up
    to its whole text and every choice ends with its own finish chunk."""
    kw = dict(model="tiny", prompt="def fib(n):", max_tokens=10, temperature=1.0, seed=7)
    r = client.completions.create(n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    alone = [client.completions.create(**{**kw, "seed": 7 + i}) for i in range(3)]
    assert [c.text for c in r.choices] == [a.choices[0].text for a in alone]
    assert len({c.text for c in r.choices}) > 1  # three draws, not one
    assert r.usage.prompt_tokens == alone[0].usage.prompt_tokens
    assert r.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone)
    texts, finish, usage = {}, {}, None
    for ch in client.completions.create(n=3, stream=True, stream_options={"include_usage": True}, **kw):
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                assert c.index not in finish
                finish[c.index] = c.finish_reason
        usage = ch.usage or usage
    assert [texts[i] for i in range(3)] == [c.text for c in r.choices]
    assert finish == {i: c.finish_reason for i, c in enumerate(r.choices)}
    assert usage.completion_tokens == r.usage.completion_tokens
    # chat, greedy: equal choices, whole and streamed
    msgs = [{"role": "user", "content": "def add(a, b):"}]
    g = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, temperature=0, n=2)
    assert [c.index for c in g.choices] == [0, 1] and g.choices[0].message.content == g.choices[1].message.content
    roles, content = {}, {}
    for ch in client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, temperature=0, n=2,
                                             stream=True):
        for c in ch.choices:
            roles[c.index] = roles.get(c.index) or c.delta.role
            content[c.index] = content.get(c.index, "") + (c.delta.content or "")
    assert roles == {0: "assistant", 1: "assistant"}
    assert content == {0: g.choices[0].message.content, 1: g.choices[0].message.content}
    lines = tiny_server.wait_request_lines(0)
    assert any(f"[req {g.id.removeprefix('chatcmpl-')}-1]" in ln for ln in lines)  # choice 1 logged as ID-1


def test_logit_bias_bans_and_forces_tokens_and_logprobs_stay_raw(client, goldens):
    """OpenAI's logit_bias through the openai client: -100 on greedy's first token makes the text start otherwise,
    +100 on one token makes greedy emit only it; the logprobs reported are the model's own (unbiased)."""
    c = goldens["cases"][0]
    ids = c["greedy_ids"]
    banned = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=4, temperature=0,
                                       logit_bias={str(ids[0]): -100}, logprobs=1)
    lp = banned.choices[0].logprobs
    assert lp.tokens[0] != _tok().decode([ids[0]])
    assert lp.top_logprobs[0] and _tok().decode([ids[0]]) in lp.top_logprobs[0]  # still the model's top-1
    x = 42
    forced = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=5, temperature=0.8, seed=1,
                                       logit_bias={str(x): 100}, logprobs=0)
    assert forced.choices[0].text == _tok().decode([x] * 5)
    # raw: unbiased, token 42 is unlikely at first (the model then learns to copy it: -10.3, -7.5, -4.0, -0.3, -0.1)
    assert forced.choices[0].logprobs.token_logprobs[0] < -5
    msgs = [{"role": "user", "content": "def f():"}]
    chat = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0,
                                          logit_bias={str(x): 100}, extra_body={"chat_template_kwargs":
                                                                                {"enable_thinking": False}})
    assert chat.choices[0].message.content == _tok().decode([x] * 3)


def test_min_tokens_holds_stop_ids_and_stop_strings_back(client, goldens):
    """vLLM's min_tokens: a stop id greedy would emit at position p is held back while fewer than min_tokens tokens
    were generated (greedy takes the next best there), and a stop string ending in the first min_tokens tokens'
    text does not end the text."""
    c = goldens["cases"][2]
    ids = c["greedy_ids"]
    first = ids.index(ids[5])
    plain = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=48, temperature=0,
                                      extra_body={"stop_token_ids": [ids[5]]})
    assert plain.usage.completion_tokens == first + 1
    held = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=first + 3, temperature=0,
                                     logprobs=0, extra_body={"stop_token_ids": [ids[5]], "min_tokens": first + 3})
    assert held.choices[0].finish_reason == "length" and held.usage.completion_tokens == first + 3
    assert held.choices[0].text.startswith(_tok().decode(ids[:first]))
    assert held.choices[0].logprobs.tokens[first] != _tok().decode([ids[first]])
    c = goldens["cases"][0]
    full = c["greedy_text"]
    a = len(_tok().decode(c["greedy_ids"][:8]))
    stop = full[a - 2:a + 2]  # ends in the text of token 9
    r = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=12, temperature=0, stop=[stop],
                                  extra_body={"min_tokens": 9})
    twelve = _tok().decode(c["greedy_ids"][:12])
    later = twelve.find(stop, a + 2)
    assert r.choices[0].text == (twelve[:later] if later >= 0 else twelve)
    assert r.choices[0].finish_reason == ("stop" if later >= 0 else "length")
