"""Scored prompts through the server (reference backend, fixture checkpoint) with the official ``openai`` client: a
completion's ``echo`` (the prompt's text and, with ``logprobs``, its tokens' logprobs before the answer's, whole and
streamed; ``max_tokens`` 0 scores only -- how OpenAI-style evaluation harnesses score a continuation) and vLLM's
``prompt_logprobs`` (per position the prompt token's logprob and rank and the most likely ids), judged against HF
transformers' teacher-forced logits in the fixture's goldens."""

from __future__ import annotations

import pytest

from ninferc.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return Tokenizer.from_dir(tiny_dir)


def _stream(client, **kw):
    chunks = list(client.completions.create(stream=True, **kw))
    return "".join(c.choices[0].text for c in chunks if c.choices), chunks


def test_echo_and_prompt_logprobs_of_the_goldens_continuations(client, goldens, tok):
    """Each case's prompt + its first 16 greedy tokens, as token ids, echoed and scored with ``max_tokens`` 0: the
    text is the ids' text, the usage counts no completion token, and at every generated position the ids ranked 1-5
    are HF's top 5 (where their logits are apart) with log-probability gaps equal to HF's logit gaps within 2e-4."""
    for c in goldens["cases"]:
        ids = c["prompt_ids"] + c["greedy_ids"][:16]
        n = len(c["prompt_ids"])
        r = client.completions.create(model="tiny", prompt=ids, max_tokens=0, echo=True, logprobs=5,
                                      extra_body={"prompt_logprobs": 5})
        ch = r.choices[0]
        assert ch.text == tok.decode(ids) and ch.finish_reason == "length"
        assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 0
        lp = ch.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == len(ids)
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None and lp.text_offset[0] == 0
        pl = ch.model_extra["prompt_logprobs"]
        assert len(pl) == len(ids) and pl[0] is None
        for j in range(1, len(ids)):
            own = pl[j][str(ids[j])]
            assert own["logprob"] == pytest.approx(lp.token_logprobs[j], abs=1e-6)
            assert own["decoded_token"] == lp.tokens[j]
            # the 5 most likely (ranks 1-5), and the prompt's token where it is not among them (its rank beyond)
            assert len(pl[j]) == (5 if own["rank"] <= 5 else 6) == len(lp.top_logprobs[j])
            assert sorted(v["rank"] for v in pl[j].values())[:5] == [1, 2, 3, 4, 5]
        for i, golden in enumerate(c["top5"][:16]):
            entries = pl[n + i]  # the scores of the token at n + i: the logits after position n - 1 + i
            got = {int(k): v["logprob"] for k, v in entries.items()}
            g0, l0 = golden[0]
            for gid, logit in golden:
                assert gid in got, (c["prompt"], i, gid)
                assert (got[gid] - got[g0]) == pytest.approx(logit - l0, abs=2e-4)
            if c["top1_margin"][i] > 1e-3:
                assert entries[str(c["greedy_ids"][i])]["rank"] == 1


def test_echo_with_generation_whole_streamed_and_text_only(client, goldens):
    """``echo`` puts the prompt, as sent, before the answer; with ``logprobs`` the answer's entries are the plain
    request's, after the prompt's, their offsets shifted by the prompt's length; streamed, the prompt is the first
    chunk."""
    c = goldens["cases"][2]
    kw = dict(model="tiny", prompt=c["prompt"], max_tokens=8, temperature=0, logprobs=2)
    plain = client.completions.create(**kw).choices[0]
    whole = client.completions.create(echo=True, **kw).choices[0]
    assert whole.text == c["prompt"] + plain.text and whole.finish_reason == plain.finish_reason == "length"
    p = len(c["prompt_ids"])
    assert whole.logprobs.tokens[p:] == plain.logprobs.tokens
    assert whole.logprobs.token_logprobs[p:] == plain.logprobs.token_logprobs
    assert whole.logprobs.top_logprobs[p:] == plain.logprobs.top_logprobs
    assert whole.logprobs.text_offset[p:] == [o + len(c["prompt"]) for o in plain.logprobs.text_offset]
    assert whole.logprobs.token_logprobs[0] is None and all(x is not None for x in whole.logprobs.token_logprobs[1:])
    text, chunks = _stream(client, echo=True, **kw)
    assert text == whole.text and chunks[0].choices[0].text == c["prompt"]
    streamed = [ch.choices[0].logprobs for ch in chunks if ch.choices and ch.choices[0].logprobs]
    assert sum((x.tokens for x in streamed), []) == whole.logprobs.tokens
    assert sum((x.token_logprobs for x in streamed), []) == whole.logprobs.token_logprobs
    assert sum((x.text_offset for x in streamed), []) == whole.logprobs.text_offset
    # echo alone: no logprobs anywhere; with max_tokens 0 the prompt is the whole answer, streamed or not, given
    # without the engine (nothing to compute: no request log line)
    r = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=0, echo=True)
    assert r.choices[0].text == c["prompt"] and r.choices[0].logprobs is None and r.usage.completion_tokens == 0
    assert r.usage.prompt_tokens == len(c["prompt_ids"]) and r.choices[0].finish_reason == "length"
    text, chunks = _stream(client, model="tiny", prompt=[c["prompt"], "x"], max_tokens=0, echo=True,
                           stream_options={"include_usage": True})
    assert text == c["prompt"] + "x" and [ch.choices[0].finish_reason for ch in chunks if ch.choices] == \
        [None, "length", None, "length"]
    assert chunks[-1].usage.prompt_tokens == len(c["prompt_ids"]) + 1


def test_chat_prompt_logprobs_score_the_rendered_prompt(client, goldens):
    """A chat request's ``prompt_logprobs`` (vLLM's place: the response's) covers the rendered prompt's tokens, with
    the answer as usual; 0 alternatives lists each position's own token only."""
    msgs = [{"role": "user", "content": "Write a function that adds two numbers."}]
    kw = dict(model="tiny", messages=msgs, max_tokens=6, temperature=0,
              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    plain = client.chat.completions.create(**kw)
    r = client.chat.completions.create(**{**kw, "extra_body": {**kw["extra_body"], "prompt_logprobs": 0}})
    assert r.choices[0].message.content == plain.choices[0].message.content
    pl = r.model_extra["prompt_logprobs"]
    assert len(pl) == r.usage.prompt_tokens and pl[0] is None
    assert all(len(x) == 1 and next(iter(x.values()))["rank"] >= 1 for x in pl[1:])
    assert "prompt_logprobs" not in (plain.model_extra or {})


def test_a_scored_request_logs_its_scored_positions_and_prefill_rate(client, tiny_server):
    """The log line of a scored prompt says how many positions it scored; with ``max_tokens`` 0 its prefill rate is
    the prompt over admission to the end (there is no first token), so the line still gives a speed."""
    before = len(tiny_server.request_lines())
    client.completions.create(model="tiny", prompt=list(range(40, 90)), max_tokens=0, extra_body={"prompt_logprobs": 1})
    line = tiny_server.wait_request_lines(1, after=before)[-1]
    assert " gen=0 " in line and " ttft=- " in line and " scored=49" in line
    assert "prefill=-" not in line and "tok/s decode=-" in line


def test_several_prompts_in_one_completions_request(client, goldens, tok):
    """OpenAI's list of prompts (texts or token-id lists): choice k x n + i is prompt k's choice i, each the same as the
    prompt sent alone, the usage counting each prompt once; streamed, the choices' chunks carry their index; echo and
    a scored prompt per prompt."""
    cases = goldens["cases"][:3]
    r = client.completions.create(model="tiny", prompt=[c["prompt"] for c in cases], max_tokens=6, temperature=0, n=2)
    assert [ch.index for ch in r.choices] == list(range(6))
    for k, c in enumerate(cases):
        alone = client.completions.create(model="tiny", prompt=c["prompt"], max_tokens=6, temperature=0)
        assert r.choices[2 * k].text == r.choices[2 * k + 1].text == alone.choices[0].text
    assert r.usage.prompt_tokens == sum(len(c["prompt_ids"]) for c in cases)
    assert r.usage.completion_tokens == 36 and r.usage.total_tokens == r.usage.prompt_tokens + 36
    chunks = list(client.completions.create(model="tiny", prompt=[c["prompt"] for c in cases], max_tokens=6,
                                            temperature=0, stream=True, stream_options={"include_usage": True}))
    texts = {}
    for ch in chunks:
        for x in ch.choices:
            texts[x.index] = texts.get(x.index, "") + x.text
    assert texts == {k: r.choices[2 * k].text for k in range(3)}
    assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens
    ids = [c["prompt_ids"] + c["greedy_ids"][:4] for c in cases]
    r = client.completions.create(model="tiny", prompt=ids, max_tokens=0, echo=True, logprobs=1)
    for ch, x in zip(r.choices, ids):
        assert ch.text == tok.decode(x) and len(ch.logprobs.token_logprobs) == len(x)
        assert ch.logprobs.token_logprobs[0] is None
    assert r.usage.prompt_tokens == sum(map(len, ids)) and r.usage.completion_tokens == 0


def _check_offsets(text: str, tokens: list[str], offsets: list[int]) -> None:
    """Offsets never decrease, and each token whose text is whole (not a piece of a multi-byte character) is found at
    its offset in ``text``."""
    assert offsets == sorted(offsets) and offsets[0] >= 0 and offsets[-1] <= len(text)
    for t, o in zip(tokens, offsets):
        if "\ufffd" not in t and not t.startswith("<|"):
            assert text[o:o + len(t)] == t, (t, o, text[o:o + len(t) + 5])


def test_echo_offsets_index_the_text_across_multibyte_characters_and_special_tokens(client, tok):
    """``text_offset`` are character positions in the returned text, for the echoed prompt and the answer alike: a
    character split over byte tokens (its pieces each read "\ufffd") advances the offset once, whole; token-id prompts
    echo their special tokens written out, as ``tokens`` lists them (a new-user trial, 2026-12-07: the offsets counted
    each piece and went backwards, and the echo dropped the special tokens)."""
    text = "naïve café 日本語 🙂 done"
    r = client.completions.create(model="tiny", prompt=text, max_tokens=6, temperature=0, echo=True, logprobs=1)
    ch = r.choices[0]
    _check_offsets(ch.text, ch.logprobs.tokens, ch.logprobs.text_offset)
    p = len(tok.encode(text))
    assert ch.logprobs.text_offset[p] == len(text)  # the answer's first token starts where the prompt ends
    ids = tok.encode("<|im_start|>user\nhi é<|im_end|>\n")
    r = client.completions.create(model="tiny", prompt=ids, max_tokens=3, temperature=0, echo=True, logprobs=1)
    ch = r.choices[0]
    assert ch.text.startswith("<|im_start|>user\nhi é<|im_end|>\n") and ch.logprobs.tokens[0] == "<|im_start|>"
    _check_offsets(ch.text, ch.logprobs.tokens, ch.logprobs.text_offset)
    # the same offsets streamed
    chunks = list(client.completions.create(model="tiny", prompt=text, max_tokens=6, temperature=0, echo=True,
                                            logprobs=1, stream=True))
    offs = [o for c in chunks if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
    assert offs == client.completions.create(model="tiny", prompt=text, max_tokens=6, temperature=0, echo=True,
                                             logprobs=1).choices[0].logprobs.text_offset
