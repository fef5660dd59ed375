"""Incremental detokenisation with stop strings (TextOutput), and chat-template rendering against
``goldens-chat.json`` (HF transformers' apply_chat_template: the external truth)."""

from __future__ import annotations

import json

import pytest

from ninferc.chat import ChatTemplate, ChatTemplateError, chat_template_for, end_of_turn_ids
from ninferc.tokenizer import TextOutput, Tokenizer


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return Tokenizer.from_dir(tiny_dir)


def _feed(tok, ids, stop):
    out, pieces = TextOutput(tok, stop), []
    for t in ids:
        piece, stopped = out.push(t)
        pieces.append(piece)
        if stopped:
            return "".join(pieces), True, pieces
    pieces.append(out.flush())
    return "".join(pieces), False, pieces


def test_without_stop_strings_text_equals_decode(tok, goldens):
    for c in goldens["cases"]:
        text, stopped, _ = _feed(tok, c["greedy_ids"], ())
        assert not stopped and text == c["greedy_text"] == tok.decode(c["greedy_ids"])


def test_stop_string_spanning_two_tokens_is_cut_and_excluded(tok, goldens):
    ids = goldens["cases"][0]["greedy_ids"]
    full = tok.decode(ids)
    # a stop string made of the last 2 characters of token 7's text and the first 2 of token 8's
    a, b = tok.decode(ids[:8]), tok.decode(ids[:9])
    assert len(a) >= 2 and len(b) - len(a) >= 2
    stop = a[-2:] + b[len(a):len(a) + 2]
    assert full.index(stop) == len(a) - 2  # its first occurrence is the one across the boundary
    text, stopped, pieces = _feed(tok, ids, [stop])
    # pieces are only ever appended: their sum ending before the stop string means its start was held back
    assert stopped and text == full[:len(a) - 2] and len(pieces) == 9


def test_min_tokens_lets_no_stop_string_end_in_the_first_ids(tok, goldens):
    """vLLM's min_tokens: a stop string ends the text only where it ends in the text of an id after the first
    min_tokens (it may start earlier); the same stop string without min_tokens ends the text at its first match."""
    ids = goldens["cases"][0]["greedy_ids"]
    full = tok.decode(ids)
    a, b = tok.decode(ids[:8]), tok.decode(ids[:9])
    stop = a[-2:] + b[len(a):len(a) + 2]  # ends in the text of id 9 (index 8)

    def feed(min_tokens):
        out, pieces = TextOutput(tok, [stop], min_tokens=min_tokens), []
        for t in ids:
            piece, stopped = out.push(t)
            pieces.append(piece)
            if stopped:
                return "".join(pieces), True
        return "".join(pieces) + out.flush(), False

    assert feed(8) == (full[:len(a) - 2], True)   # the match ends in id 9's text: after the first 8, so it ends it
    text, stopped = feed(9)                        # within the first 9: skipped, the text goes on to a later match
    later = full.find(stop, len(b))
    assert text == (full[:later] if later >= 0 else full) and stopped == (later >= 0)
    assert text.startswith(b) and len(text) > len(b)


def test_held_back_prefix_released_when_the_match_fails(tok, goldens):
    ids = goldens["cases"][0]["greedy_ids"]
    full = tok.decode(ids)
    stop = full[5:8] + "\x00never"   # starts like the text, never completes
    text, stopped, _ = _feed(tok, ids, [stop])
    assert not stopped and text == full


def test_stop_at_the_very_start_and_several_strings(tok, goldens):
    ids = goldens["cases"][1]["greedy_ids"]
    full = tok.decode(ids)
    text, stopped, _ = _feed(tok, ids, [full[:3]])
    assert stopped and text == ""
    later, earlier = full[30:34], full[10:13]
    text, stopped, _ = _feed(tok, ids, [later, earlier])
    assert stopped and text == full[:full.index(earlier)]


def test_include_stop_keeps_the_stop_string_that_ended_the_text(tok, goldens):
    """vLLM's include_stop_str_in_output: the text ends after the stop string, the earliest-starting one of several;
    the same text streamed token by token."""
    ids = goldens["cases"][1]["greedy_ids"]
    full = tok.decode(ids)
    later, earlier = full[30:34], full[10:13]
    out, pieces = TextOutput(tok, [later, earlier], include_stop=True), []
    for t in ids:
        piece, stopped = out.push(t)
        pieces.append(piece)
        if stopped:
            break
    assert stopped and "".join(pieces) == full[:full.index(earlier) + len(earlier)]


def test_special_tokens_written_only_when_asked(tok):
    """vLLM's skip_special_tokens: false writes ``<|im_start|>`` / ``<|im_end|>`` into the text (the incremental
    decoder and the whole-text decode agree); the default leaves them out."""
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n")
    assert tok.token_str(ids[0]) == "<|im_start|>" and tok.token_id("<|im_end|>") in ids
    for skip in (True, False):
        out = TextOutput(tok, skip_special_tokens=skip)
        text = "".join(out.push(t)[0] for t in ids) + out.flush()
        assert text == tok.decode(ids, skip_special_tokens=skip)
        assert ("<|im_end|>" in text) is (not skip)


def test_never_emits_a_broken_utf8_character(tok):
    s = "naïve café — ünïcödé ✓ 漢字"
    ids = tok.encode(s)
    out = TextOutput(tok)
    pieces = [out.push(t)[0] for t in ids]
    assert "".join(pieces) + out.flush() == s
    assert all("\ufffd" not in p for p in pieces)
    assert len(ids) > len([p for p in pieces if p])  # some ids completed no character on their own


def test_chat_template_reproduces_goldens_chat(tiny_dir, tok):
    cases = json.loads((tiny_dir / "goldens-chat.json").read_text())["cases"]
    tpl = chat_template_for(tok)
    assert len(cases) == 5
    for c in cases:
        text = tpl.render(c["messages"], add_generation_prompt=True, **c["chat_template_kwargs"])
        assert text == c["text"], c["name"]
        assert tok.encode(text) == c["ids"], c["name"]
    assert end_of_turn_ids(tok) == (tok.token_id("<|im_end|>"),) == (2,)


def test_chat_template_errors_and_sandbox():
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}")
    t = ChatTemplate("{{ raise_exception('only user turns') }}")
    with pytest.raises(ChatTemplateError, match="only user turns"):
        t.render([{"role": "user", "content": "x"}])
    evil = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError):
        evil.render([{"role": "user", "content": "x"}])


def test_extra_variables_never_replace_the_renderers():
    """A caller's extra variable named like one the renderer sets (``messages``, ``bos_token``, ...) is refused, not
    silently overwritten; other extras reach the template."""
    t = ChatTemplate("{{ bos_token }}{{ messages[0].content }}{{ flavour }}", bos_token="<s>")
    assert t.render([{"role": "user", "content": "x"}], flavour="!") == "<s>x!"
    with pytest.raises(TypeError, match="bos_token, eos_token: set by the renderer"):
        t.render([{"role": "user", "content": "x"}], bos_token="a", eos_token="b")
    for name in ("messages", "bos_token", "eos_token"):
        with pytest.raises(TypeError, match=name):  # messages: Python refuses a second value itself
            t.render([{"role": "user", "content": "x"}], **{name: "y"})


def test_no_template_means_none(tiny_dir):
    t = Tokenizer((tiny_dir / "tokenizer.json").read_text(), {})
    assert t.chat_template is None and chat_template_for(t) is None and end_of_turn_ids(t) == ()
    t2 = Tokenizer((tiny_dir / "tokenizer.json").read_text(),
                   {"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "y"}]})
    assert t2.chat_template == "y"


def test_synthetic_tokenizer_maps_every_id_to_one_word_and_back():
    from ninferc.errors import NinfercError
    from ninferc.tokenizer import Tokenizer

    t = Tokenizer.synthetic(248_320)  # the 27B preset's vocabulary
    assert t.vocab_size == 248_320 and t.chat_template is None
    ids = [0, 5, 4095, 248_319]
    assert t.decode(ids) == "t0 t5 t4095 t248319"
    assert t.encode(t.decode(ids)) == ids
    s = t.stream()
    assert "".join(s.step(i) for i in ids) == t.decode(ids)
    with pytest.raises(NinfercError, match="vocab_size 0"):
        Tokenizer.synthetic(0)


def test_encode_split_counts_the_tokens_of_a_prefix(tok):
    """``encode_split``: one tokenisation of the text and the number of its tokens that cover exactly the first
    ``at`` characters -- equal to encoding the prefix alone where a token boundary falls there, None inside a token."""
    text = "<|im_start|>user\nhéllo wörld 日本<|im_end|>\n<|im_start|>assistant\n"
    at = text.index("<|im_start|>assistant")
    ids, n = tok.encode_split(text, at)
    assert ids == tok.encode(text) and n is not None and ids[:n] == tok.encode(text[:at]) and n < len(ids)
    assert tok.encode_split(text, 0) == (ids, 0) and tok.encode_split(text, len(text)) == (ids, len(ids))
    assert tok.encode_split(text, at + 5)[1] is None  # inside the special token <|im_start|>
    with pytest.raises(ValueError, match="outside 0.."):
        tok.encode_split(text, len(text) + 1)


def test_encode_lets_other_threads_run_and_equals_the_tokenizers_encode(tok):
    """:meth:`Tokenizer.encode` releases the GIL (the server tokenises a prompt in a worker thread; tokenizers'
    ``encode`` held the GIL throughout and stopped the event loop with it): while a thread encodes ~1 MB of text the
    main thread wakes many times, and the ids are those of ``tokenizers``' own ``encode``."""
    import threading
    import time

    text = " ".join(f"w{i % 9973}x{i % 7}" for i in range(120_000))
    out, wakeups = {}, 0
    th = threading.Thread(target=lambda: out.setdefault("ids", tok.encode(text)))
    t0 = time.monotonic()
    th.start()
    while th.is_alive():
        time.sleep(0.005)
        wakeups += 1
    took = time.monotonic() - t0
    assert out["ids"] == tok._tok.encode(text, add_special_tokens=False).ids
    assert took < 0.1 or wakeups >= 5, (took, wakeups)
