"""``ninferc serve --reasoning-parser qwen3``: the splitter on texts cut every way, the prompt rule, and the server's
chat answers (whole and streamed) against a server without the parser."""

from __future__ import annotations

import random

import openai
import pytest
from click.testing import CliRunner

from ninferc.cli import main
from ninferc.server.reasoning import ReasoningSplitter, split_reasoning, starts_in_reasoning

CASES = [
    # (text, starts in a block, reasoning_content, content)
    ("I add them.\n</think>\n\ndef add(a, b):\n    return a + b", True, "I add them.\n",
     "\n\ndef add(a, b):\n    return a + b"),
    ("still thinking when max_tokens came", True, "still thinking when max_tokens came", None),
    ("all thought</think>", True, "all thought", None),
    ("</think>answer", True, "", "answer"),
    ("x </thin y </think> z", True, "x </thin y ", " z"),  # a marker's prefix inside the text is text
    ("def f(): pass", False, None, "def f(): pass"),
    ("\n<think>plan</think>answer", False, "plan", "answer"),  # a model that opens its own block
    ("<thinker>", False, None, "<thinker>"),
    ("<thi", False, None, "<thi"),  # ended on a marker's prefix: it was text
    ("answer <think>not a block</think>", False, None, "answer <think>not a block</think>"),
    ("", False, None, ""),
    ("", True, "", None),
]


@pytest.mark.parametrize("text,thinking,reasoning,content", CASES)
def test_split_whole_and_streamed_in_every_cut(text, thinking, reasoning, content):
    assert split_reasoning(text, thinking) == (reasoning, content)
    rng = random.Random(len(text))
    cuts = [[1] * len(text), [len(text)]] + [[rng.randint(1, 4) for _ in range(len(text))] for _ in range(20)]
    for sizes in cuts:
        sp, r, c, i = ReasoningSplitter(thinking), "", "", 0
        for n in sizes:
            a, b = sp.feed(text[i:i + n])
            r, c, i = r + a, c + b, i + n
            if i >= len(text):
                break
        a, b = sp.flush()
        assert (r + a, c + b) == (reasoning or "", content or ""), sizes


def test_split_holds_back_only_a_possible_marker():
    sp = ReasoningSplitter(True)
    assert sp.feed("abc</th") == ("abc", "")  # "</th" may start the marker
    assert sp.feed("e") == ("</the", "")  # it did not
    assert sp.feed("x</think>y") == ("x", "y")
    sp = ReasoningSplitter(False)
    assert sp.feed("  <thi") == ("", "")  # may open a block
    assert sp.feed("nk>a") == ("a", "")


def test_starts_in_reasoning_from_the_rendered_prompt():
    assert starts_in_reasoning("<|im_start|>assistant\n<think>\n")
    assert not starts_in_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # enable_thinking false
    assert not starts_in_reasoning("<|im_start|>assistant\n")
    # an earlier turn's closed block, then a new open one
    assert starts_in_reasoning("<think>a</think>b<|im_end|>\n<|im_start|>assistant\n<think>\n")


@pytest.fixture(scope="module")
def reasoning_client(start_server, tiny_dir):
    srv = start_server(tiny_dir, "--model-id", "tiny", "--reasoning-parser", "qwen3")
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_server_splits_thinking_from_the_answer(reasoning_client, client):
    """The fixture's template opens a <think> block unless ``enable_thinking`` is false; the tiny model never closes
    it within a few tokens, so its answer is all reasoning (content null), and with thinking off all content: each
    equal to the plain server's text, whole and streamed."""
    msgs = [{"role": "user", "content": "Write a function that adds two numbers."}]
    for thinking in (True, False):
        kw = dict(model="tiny", messages=msgs, max_tokens=12, temperature=0,
                  extra_body={"chat_template_kwargs": {"enable_thinking": thinking}})
        plain = client.chat.completions.create(**kw).choices[0].message.content
        assert plain and "</think>" not in plain
        m = reasoning_client.chat.completions.create(**kw).choices[0].message
        got = (getattr(m, "reasoning", None), m.content)
        assert got == ((plain, None) if thinking else (None, plain))
        assert getattr(m, "reasoning_content", None) == got[0]  # the earlier name, the same text
        chunks = list(reasoning_client.chat.completions.create(stream=True, **kw))
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
        r = "".join(getattr(d, "reasoning", None) or "" for d in deltas)
        assert r == "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
        c = "".join(d.content or "" for d in deltas)
        assert (r, c) == ((plain, "") if thinking else ("", plain))
        # include_reasoning false (vLLM's): the reasoning is dropped, whole and streamed; the content stays
        kw["extra_body"] = {**kw["extra_body"], "include_reasoning": False}
        m = reasoning_client.chat.completions.create(**kw).choices[0].message
        assert (getattr(m, "reasoning", None), getattr(m, "reasoning_content", None), m.content) == (
            None, None, None if thinking else plain)
        deltas = [ch.choices[0].delta for ch in reasoning_client.chat.completions.create(stream=True, **kw)
                  if ch.choices]
        assert not any(getattr(d, "reasoning", None) or getattr(d, "reasoning_content", None) for d in deltas)
        assert "".join(d.content or "" for d in deltas) == ("" if thinking else plain)
    # a server without the parser cannot leave the reasoning out of content
    with pytest.raises(openai.BadRequestError, match="include_reasoning: false needs a server started with"):
        client.chat.completions.create(model="tiny", messages=msgs, max_tokens=2,
                                       extra_body={"include_reasoning": False})
    # completions are not parsed
    t = reasoning_client.completions.create(model="tiny", prompt="<think>\n", max_tokens=4, temperature=0)
    assert t.choices[0].text == client.completions.create(model="tiny", prompt="<think>\n", max_tokens=4,
                                                          temperature=0).choices[0].text


def test_reasoning_parser_needs_a_template_that_thinks(tmp_path, tiny_dir):
    import shutil

    d = tmp_path / "plain"
    shutil.copytree(tiny_dir, d)
    (d / "chat_template.jinja").chmod(0o644)
    (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    r = CliRunner().invoke(main, ["serve", str(d), "--reasoning-parser", "qwen3"])
    assert r.exit_code == 2 and "never writes <think>" in r.output, r.output
    r = CliRunner().invoke(main, ["serve", str(d), "--reasoning-parser", "deepseek"])
    assert r.exit_code == 2 and "'deepseek' is not 'qwen3'" in r.output, r.output
