"""Tool calling in ``ninferc serve --tool-call-parser``: the parsers on answers cut every way, the parameter types,
the request checks, the OpenAI client's view of whole and streamed answers with calls (an in-process app whose
scheduler replays a scripted answer: the fixture model, trained on code, never writes a call), and the served
fixture with a template that shows the model its tools."""

from __future__ import annotations

import json
import random
import shutil
import threading

import httpx
import openai
import pytest
from click.testing import CliRunner

from ninferc.cli import main
from ninferc.server.tools import (ToolCallSplitter, check_tools, history_tool_calls, parse_call, split_tool_calls,
                                  template_reads_tools)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "hours": {"type": "array"}, "where": {"type": "object"}, "ratio": {"type": ["number", "null"]}}}}}
TOOLS = [WEATHER, {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
PICK = {"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"color": {"enum": ["red", "green"]}}, "required": ["color"],
    "additionalProperties": False}}}

CODER_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
              "</parameter>\n</function>\n</tool_call>")
HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
PARIS = ("get_weather", {"city": "Paris", "days": 3})

CASES = [
    # (parser, answer, content, [(name, arguments)])
    ("qwen3_coder", "Let me look.\n\n" + CODER_CALL, "Let me look.", [PARIS]),
    ("qwen3_coder", "\n\n" + CODER_CALL + "\n", None, [PARIS]),
    ("qwen3_coder", CODER_CALL + "\n" + CODER_CALL.replace("Paris", "Oslo"), None,
     [PARIS, ("get_weather", {"city": "Oslo", "days": 3})]),
    ("qwen3_coder", "<tool_call>\n<function=now>\n</function>\n</tool_call>", None, [("now", {})]),
    ("qwen3_coder", "no call here\n", "no call here\n", []),  # no call: the text as written, whitespace too
    ("qwen3_coder", "a <tool_ b", "a <tool_ b", []),  # a marker's prefix inside the text is text
    ("qwen3_coder", "ends on <tool_", "ends on <tool_", []),
    # max_tokens before a call's header: text; after it: the call, cut (its arguments the JSON text so far)
    ("qwen3_coder", "cut " + CODER_CALL[:30], "cut " + CODER_CALL[:30], []),
    ("qwen3_coder", "cut " + CODER_CALL[:40], "cut", [("get_weather", "")]),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", None,
     [("get_weather", '{"city": "Par')]),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</par", None, [("get_weather", '{"days": ')]),
    ("qwen3_coder", CODER_CALL[:-len("</tool_call>")], None, [("get_weather", '{"city": "Paris", "days": 3}')]),
    ("qwen3_coder", "<tool_call>not a call</tool_call> then", "<tool_call>not a call</tool_call> then", []),
    ("qwen3_coder", "x\n" + CODER_CALL + "\nafter", "x\nafter", [PARIS]),  # text after a call stays content
    # after the header the block is a call: stray text between parameters and after </function> is dropped
    ("qwen3_coder", "<tool_call>\n<function=f>\nstray <b>\n<parameter=a>\n1\n</parameter>\nx</function>\nmore\n"
     "</tool_call>", None, [("f", {"a": "1"})]),
    ("qwen3_coder", "<tool_call>\n<funct x</tool_call>", "<tool_call>\n<funct x</tool_call>", []),  # no header: text
    # a tag's name runs to its '>', never past the block's end; nor past TAG_NAME_MAX characters
    ("qwen3_coder", "<tool_call>\n<function=now>\n<parameter=a</tool_call>\nok", "\nok", [("now", {})]),
    ("qwen3_coder", "<tool_call>\n<function=now>\n<parameter=a</tool_call>\n" + "<tool_call>\n<function=now>\n"
     "</function>\n</tool_call>", None, [("now", {}), ("now", {})]),
    ("qwen3_coder", "<tool_call><function=" + "f" * 257 + "></function></tool_call>",
     "<tool_call><function=" + "f" * 257 + "></function></tool_call>", []),
    ("qwen3_coder", "<tool_call><function=now><parameter=" + "k" * 257 + ">1</parameter></function></tool_call>", None,
     [("now", {})]),
    # a parameter written twice: both in the text, the last one read (as parse_call's object keeps it)
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n"
     "</function>\n</tool_call>", None, [("f", {"a": "2"})]),
    ("qwen3_coder", "<tool_call>\n<function=\nx>\n</function></tool_call>",
     "<tool_call>\n<function=\nx>\n</function></tool_call>", []),
    # a string's text as written: quotes, backslashes, tags that are not the parameter's end, newlines inside
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\n\nSay \"hi\" \\ é <b> </par x\n\n"
     "</parameter>\n</function>\n</tool_call>", None, [("get_weather", {"city": '\nSay "hi" \\ é <b> </par x\n'})]),
    # a value holding </function> before its </parameter> keeps it; one missing </parameter> ends at </function>
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\na</function>b\n</parameter>\n"
     "<parameter=days>\n3\n</function>\n</tool_call>", None, [("get_weather", {"city": "a</function>b", "days": 3})]),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</tool_call>", None,
     [("get_weather", {"city": "Oslo"})]),  # neither </parameter> nor </function>
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nnull\n</parameter>\n<parameter=ratio>"
     "\nnull\n</parameter>\n<parameter=hours>\n[1, 2]\n</parameter>\n</function>\n</tool_call>", None,
     [("get_weather", {"city": None, "ratio": None, "hours": [1, 2]})]),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nnullx\n</parameter>\n</function>\n"
     "</tool_call>", None, [("get_weather", {"city": "nullx"})]),
    ("hermes", "Sure.\n" + HERMES_CALL, "Sure.", [PARIS]),
    ("hermes", '<tool_call>{"name": "now", "arguments": "{}"}</tool_call>', None, [("now", {})]),
    ("hermes", "<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", []),
    ("hermes", '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>', []),
    ("hermes", "", "", []),
    # an answer cut inside a block that is parsed whole: the block is text, as written
    ("hermes", 'A.\n<tool_call>\n{"name": "now", "argu', 'A.\n<tool_call>\n{"name": "now", "argu', []),
    ("hermes", '<tool_call>{"name": "now", "arguments": {}}</tool_call> then <tool_call>{"na',
     ' then <tool_call>{"na', [("now", {})]),
    ("qwen3_coder", "A.\n<tool_call>\nnot a header at all", "A.\n<tool_call>\nnot a header at all", []),
]


def _calls(calls):
    """(name, arguments parsed) of each call; a cut call's arguments as the text they are."""
    return [(c.name, json.loads(c.arguments) if c.complete else c.arguments) for c in calls]


def _assembled(entries):
    """A client's reading of streamed ``tool_calls`` entries: [(id, name, arguments text)] by index (OpenAI's rule: a
    call's first entry names it, later ones append to its arguments)."""
    calls = {}
    for e in entries:
        if e["index"] not in calls:
            assert set(e) == {"index", "id", "type", "function"} and e["type"] == "function", e
            calls[e["index"]] = [e["id"], e["function"]["name"], e["function"]["arguments"]]
        else:
            assert set(e) == {"index", "function"} and set(e["function"]) == {"arguments"}, e
            calls[e["index"]][2] += e["function"]["arguments"]
    assert sorted(calls) == list(range(len(calls)))
    return [tuple(calls[i]) for i in range(len(calls))]


@pytest.mark.parametrize("parser,text,content,calls", CASES)
def test_split_whole_and_streamed_in_every_cut(parser, text, content, calls):
    got_content, got_calls = split_tool_calls(parser, text, TOOLS)
    assert (got_content, _calls(got_calls)) == (content, calls)
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in got_calls)
    assert len({c.id for c in got_calls}) == len(got_calls)
    whole = [(c.name, c.arguments) for c in got_calls]
    rng = random.Random(len(text))
    cuts = [[1] * len(text), [len(text)]] + [[rng.randint(1, 6) for _ in range(len(text))] for _ in range(20)]
    for sizes in cuts:
        sp, c, made, i = ToolCallSplitter(parser, TOOLS), "", [], 0
        for n in sizes:
            a, new = sp.feed(text[i:i + n])
            assert len({e["index"] for e in new}) == len(new)  # one entry per call and delta
            c, made, i = c + a, made + new, i + n
            # at any point a call's arguments are what its entries carried so far (pieces join when calls is read)
            assert [(x.name, x.arguments) for x in sp.calls] == [(n, args) for _, n, args in _assembled(made)]
            if i >= len(text):
                break
        a, new = sp.flush()
        c, made = c + a, made + new
        # the stream adds up to the whole answer's content and calls, to the byte of each call's arguments
        assert (c, [(n, args) for _, n, args in _assembled(made)]) == (content or "", whole), sizes
        assert [(cid, c.name, c.arguments) for cid, c in zip((e[0] for e in _assembled(made)), sp.calls)] == \
            _assembled(made)


def test_qwen3_coder_arguments_stream_as_they_are_written():
    """A string parameter's text reaches the client while the model writes it (vLLM, llama.cpp and OpenAI stream a
    call's arguments); only a possible last newline and a possible closing tag wait."""
    sp = ToolCallSplitter("qwen3_coder", TOOLS)
    assert sp.feed("Writing.\n<tool_call>\n<function=get_wea") == ("Writing.", [])
    _, new = sp.feed("ther>\n<parameter=city>\nSan")
    assert [(e["function"]["name"], e["function"]["arguments"]) for e in new] == [("get_weather", '{"city": "San')]
    assert sp.feed(" Francisco\n") == ("", [{"index": 0, "function": {"arguments": " Francisco"}}])
    assert sp.feed("</para") == ("", [])
    assert sp.feed("meter>\n<parameter=days>\n1") == ("", [{"index": 0, "function": {"arguments": '", "days": '}}])
    assert sp.feed("0\n</parameter>\n</function>") == ("", [{"index": 0, "function": {"arguments": "10}"}}])
    assert not sp.calls[0].complete
    assert sp.feed("\n</tool_call>") == ("", []) and sp.calls[0].complete
    assert sp.flush() == ("", [])
    assert json.loads(sp.calls[0].arguments) == {"city": "San Francisco", "days": 10}


def test_streaming_holds_back_only_a_possible_marker_and_trailing_whitespace():
    sp = ToolCallSplitter("qwen3_coder", TOOLS)
    assert sp.feed("Let me look.\n<tool") == ("Let me look.", [])  # "\n<tool" may start a call
    assert sp.feed("box> no") == ("\n<toolbox> no", [])  # it did not
    assert sp.feed("\n\n" + CODER_CALL[:20]) == ("", [])
    content, new = sp.feed(CODER_CALL[20:])
    assert content == "" and [(n, json.loads(a)) for _, n, a in _assembled(new)] == [PARIS] and len(new) == 1
    assert sp.flush() == ("", [])
    # without the tools' schemas every parameter is a string
    assert _calls(split_tool_calls("qwen3_coder", CODER_CALL)[1]) == [("get_weather", {"city": "Paris", "days": "3"})]


def test_qwen3_coder_parameter_without_its_closing_tag():
    """vLLM's parser ends a parameter missing ``</parameter>`` at the next parameter or at ``</function>``."""
    body = "\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n3\n</function>\n"
    call = parse_call("qwen3_coder", body, {"get_weather": WEATHER["function"]["parameters"]["properties"]})
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3}


def test_parallel_tool_calls_false_keeps_the_first_call():
    content, calls = split_tool_calls("qwen3_coder", CODER_CALL + CODER_CALL.replace("Paris", "Oslo"), TOOLS,
                                      parallel=False)
    assert content is None and _calls(calls) == [PARIS]


@pytest.mark.parametrize("name,value,typed", [
    ("city", "  Paris ", "  Paris "),  # a string: as written, less the newline after its tag and before the next
    ("city", "\nline 1\nline 2\n", "\nline 1\nline 2\n"),
    ("city", "3", "3"),
    ("days", "3", 3),
    ("days", "three", "three"),  # not the schema's type: the text
    ("days", "true", "true"),  # JSON's true is not an integer
    ("metric", "True", True),
    ("hours", "[1, 2]", [1, 2]),
    ("where", '{"lat": 48.9}', {"lat": 48.9}),
    ("ratio", "0.5", 0.5),
    ("ratio", "null", None),
    ("city", "null", None),  # null is null whatever the type (vLLM's reading)
    ("where", "{'a': 1, 'b': None}", {"a": 1, "b": None}),  # a Python literal where an object is wanted
    ("hours", "(1, 2)", "(1, 2)"),  # a literal of another type than the schema's: the text
    ("where", "__import__('os')", "__import__('os')"),  # never evaluated: literals only
    ("unknown", "42", "42"),  # a parameter the schema does not name: a string
    # what JSON cannot write stays text: NaN, an overflow to infinity, bytes, tuple keys, nesting past recursion
    ("ratio", "NaN", "NaN"),
    ("ratio", "1e999", "1e999"),
    ("hours", "[1e999]", "[1e999]"),
    ("hours", "[b'x']", "[b'x']"),
    ("where", "{(1, 2): 3}", "{(1, 2): 3}"),
    ("hours", "[" * 100_000, "[" * 100_000),
])
def test_qwen3_coder_parameter_types_follow_the_schema(name, value, typed):
    body = f"\n<function=get_weather>\n<parameter={name}>\n{value}\n</parameter>\n</function>\n"
    call = parse_call("qwen3_coder", body, {"get_weather": WEATHER["function"]["parameters"]["properties"]})
    assert json.loads(call.arguments) == {name: typed}


def test_request_checks():
    assert check_tools(TOOLS) == TOOLS
    for bad, param in [([{"type": "retrieval"}], "tools.0"), ([{"type": "function"}], "tools.0.function"),
                       ([{"type": "function", "function": {"name": "a b"}}], "tools.0.function.name"),
                       ([WEATHER, {"type": "function", "function": {"name": "f", "parameters": []}}],
                        "tools.1.function.parameters")]:
        with pytest.raises(ValueError) as e:
            check_tools(bad)
        assert e.value.args[1] == param
    msgs = [{"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                  "function": {"name": "now", "arguments": '{"tz": "UTC"}'}}]}]
    history_tool_calls(msgs)
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"tz": "UTC"}  # parsed for the template
    for bad, param in [([{"role": "user", "tool_calls": [{}]}], "messages.0.tool_calls"),
                       ([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}],
                        "messages.0.tool_calls.0.function"),
                       ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}],
                        "messages.0.tool_calls.0.function.arguments"),
                       ([{"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}],
                        "messages.0.function_call")]:
        with pytest.raises(ValueError) as e:
            history_tool_calls(bad)
        assert e.value.args[1] == param
    assert template_reads_tools("{% if tools %}{{ tools | tojson }}{% endif %}")
    assert not template_reads_tools("{% for m in messages %}{{ m.content }}{% endfor %}")


# -- the OpenAI client against the app, whose scheduler replays a scripted answer ---------------------------------

class _ScriptedScheduler:
    """Answers every request with ``script`` (text pieces, one event each) and ``reason``, as the engine thread
    would: the events go through the request's sink."""

    cache = None
    max_concurrency, max_pending = 4, 16  # the room a request's choices are checked against

    def __init__(self):
        self.script, self.reason, self.prompts, self.gens = [], "stop", [], []

    def check(self, n_prompt, max_tokens, prompt_param="prompt"):
        return max_tokens or 64

    def has(self, rid):
        return False

    def cancel(self, rid):
        pass

    def submit_group(self, gens):
        for g in gens:
            self.submit(g)

    def submit(self, gen):
        from ninferc.runtime.scheduler import FinishEvent, RequestStats, TokenEvent

        self.prompts.append(gen.prompt_ids)
        self.gens.append(gen)
        script, reason = list(self.script), self.reason

        def emit():
            for piece in script:
                gen.sink(TokenEvent(ids=[0], text=piece, sampled=[]))
            gen.sink(FinishEvent(reason, "", RequestStats(gen.request_id, len(gen.prompt_ids),
                                                          generated=len(script), finish_reason=reason)))

        threading.Thread(target=emit, daemon=True).start()


class _Backend:
    vocab_size = 4096  # the fixture's (the grammar compiler of a forced call needs it)


class _Engine:
    backend = _Backend()
    state = "ready"

    def __init__(self):
        self.scheduler = _ScriptedScheduler()


TOOL_TEMPLATE = """{%- if tools -%}
{{- '<|im_start|>system\\n<tools>' -}}
{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\\n</tools><|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'tool' -%}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' -}}
{%- elif message.role == 'assistant' and message.tool_calls -%}
{{- '<|im_start|>assistant\\n' + (message.content or '') -}}
{%- for tc in message.tool_calls -%}
{{- '\\n<tool_call>\\n<function=' + tc.function.name + '>\\n' -}}
{%- for k, v in tc.function.arguments | items -%}
{{- '<parameter=' + k + '>\\n' + (v if v is string else v | tojson) + '\\n</parameter>\\n' -}}
{%- endfor -%}
{{- '</function>\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}
{%- else -%}{{- '<think>\\n' -}}{%- endif -%}
{%- endif -%}
"""


@pytest.fixture(scope="module")
def scripted(tiny_dir):
    """(the openai client, the scripted scheduler) of an in-process app with ``--tool-call-parser qwen3_coder`` and
    ``--reasoning-parser qwen3``."""
    from fastapi.testclient import TestClient

    from ninferc.chat import ChatTemplate
    from ninferc.server.app import ServerState, create_app
    from ninferc.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(tiny_dir)
    state = ServerState(engine=_Engine(), tokenizer=tok, chat=ChatTemplate(TOOL_TEMPLATE), model_id="tiny",
                        max_context=4096, reasoning_parser="qwen3", tool_parser="qwen3_coder", eos_ids=(0,),
                        chat_stop_ids=(2,))
    http = TestClient(create_app(state))
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", max_retries=0, http_client=http)
    return client, state.engine.scheduler, tok


ASK = [{"role": "user", "content": "Weather in Paris for 3 days?"}]


def _stream(client, **kw):
    """A streamed answer put together as a client does: (reasoning, content, calls by index, finish_reason)."""
    reasoning, content, calls, finish = "", "", {}, None
    for ch in client.chat.completions.create(stream=True, **kw):
        d = ch.choices[0].delta
        reasoning += getattr(d, "reasoning", None) or ""
        content += d.content or ""
        for tc in d.tool_calls or []:
            calls.setdefault(tc.index, {"id": tc.id, "name": tc.function.name, "arguments": ""})
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    return reasoning, content, [calls[i] for i in sorted(calls)], finish


def test_client_reads_calls_whole_and_streamed(scripted):
    client, sched, tok = scripted
    answer = "I should look it up.\n</think>\n\nLet me check.\n\n" + CODER_CALL + "\n" + \
        CODER_CALL.replace("Paris", "Oslo")
    rng = random.Random(5)
    cuts, i = [], 0
    while i < len(answer):
        n = rng.randint(1, 7)
        cuts.append(answer[i:i + n])
        i += n
    sched.script = cuts
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    m, choice = r.choices[0].message, r.choices[0]
    assert choice.finish_reason == "tool_calls"
    # the content starts after </think> (its newlines are the reasoning parser's to keep) and ends before the call
    assert (getattr(m, "reasoning", None), m.content) == ("I should look it up.\n", "\n\nLet me check.")
    assert [(c.type, c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [
        ("function", "get_weather", {"city": "Paris", "days": 3}),
        ("function", "get_weather", {"city": "Oslo", "days": 3})]
    assert len({c.id for c in m.tool_calls}) == 2
    # the prompt showed the model its tools
    prompt = tok.decode(sched.prompts[-1], False)
    assert prompt.startswith("<|im_start|>system\n<tools>\n" + json.dumps(WEATHER, ensure_ascii=False))
    reasoning, content, calls, finish = _stream(client, model="tiny", messages=ASK, tools=TOOLS)
    assert (reasoning, content, finish) == ("I should look it up.\n", "\n\nLet me check.", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (tc.function.name, tc.function.arguments) for tc in m.tool_calls]
    # the arguments came in pieces as the script wrote them (a chunk per piece at most), not one per call
    pieces = [tc.function.arguments for ch in client.chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS, stream=True) if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    assert len(pieces) >= 8 and "".join(pieces) == "".join(tc.function.arguments for tc in m.tool_calls)
    # the official client's stream helper puts them together too, with its argument-delta events
    with client.chat.completions.stream(model="tiny", messages=ASK, tools=TOOLS) as st:
        events = [ev.type for ev in st]
        final = st.get_final_completion()
    assert [(c.function.name, c.function.arguments) for c in final.choices[0].message.tool_calls] == [
        (tc.function.name, tc.function.arguments) for tc in m.tool_calls]
    assert events.count("tool_calls.function.arguments.delta") >= 8 and \
        events.count("tool_calls.function.arguments.done") == 2
    assert all(c["id"].startswith("call_") for c in calls)


def test_no_call_cut_call_and_tool_choice_none(scripted):
    client, sched, tok = scripted
    sched.script = ["</think>", "Paris is ", "sunny.\n"]
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    assert (r.choices[0].message.content, r.choices[0].message.tool_calls, r.choices[0].finish_reason) == (
        "Paris is sunny.\n", None, "stop")
    # max_tokens inside a call after its header: the call stands, cut (its arguments the JSON text so far), and the
    # reason is length (OpenAI's), streamed or not
    sched.script, sched.reason = ["</think>", "Checking.\n" + CODER_CALL[:62]], "length"
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    m = r.choices[0].message
    assert (m.content, [(c.function.name, c.function.arguments) for c in m.tool_calls], r.choices[0].finish_reason) \
        == ("Checking.", [("get_weather", '{"city": "Paris')], "length")
    _, content, calls, finish = _stream(client, model="tiny", messages=ASK, tools=TOOLS)
    assert (content, [(c["name"], c["arguments"]) for c in calls], finish) == (
        "Checking.", [("get_weather", '{"city": "Paris')], "length")
    # max_tokens after a call: the call stands and the reason is tool_calls (vLLM's); inside the next one before its
    # header, its text is content
    sched.script, sched.reason = ["</think>", CODER_CALL, "\n" + CODER_CALL[:30]], "length"
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    assert (r.choices[0].message.content, len(r.choices[0].message.tool_calls), r.choices[0].finish_reason) == (
        "\n" + CODER_CALL[:30], 1, "tool_calls")  # the newline before a block that is no call is text
    _, content, calls, finish = _stream(client, model="tiny", messages=ASK, tools=TOOLS)
    assert (content, [(c["name"], json.loads(c["arguments"])) for c in calls], finish) == (
        "\n" + CODER_CALL[:30], [PARIS], "tool_calls")
    # max_tokens inside the only call: the call's text is content, the reason is length
    sched.script, sched.reason = ["</think>", CODER_CALL[:30]], "length"
    for stream in (False, True):
        if stream:
            _, content, calls, finish = _stream(client, model="tiny", messages=ASK, tools=TOOLS)
        else:
            r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
            content, calls, finish = r.choices[0].message.content, r.choices[0].message.tool_calls, \
                r.choices[0].finish_reason
        assert (content, calls or [], finish) == (CODER_CALL[:30], [], "length")
    # tool_choice none: no tools in the prompt, and a call the model writes anyway is text
    sched.script, sched.reason = ["</think>", CODER_CALL], "stop"
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="none")
    assert (r.choices[0].message.content, r.choices[0].message.tool_calls) == (CODER_CALL, None)
    assert "<tools>" not in tok.decode(sched.prompts[-1], False)


def test_a_conversation_with_past_calls_and_their_results(scripted):
    client, sched, tok = scripted
    sched.script = ["</think>", "It is sunny."]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = client.chat.completions.create(model="tiny", messages=history, tools=TOOLS)
    assert r.choices[0].message.content == "It is sunny."
    prompt = tok.decode(sched.prompts[-1], False)
    assert ("<|im_start|>assistant\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n"
            "<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n") in prompt


def test_forced_calls_named_and_required_whole_streamed_and_cut(scripted):
    """tool_choice a named function or "required": the answer is constrained JSON (the request carries a grammar
    state) that becomes the calls, their arguments as written, streamed as they come (vLLM's); finish_reason stop for
    a named call, tool_calls for required (OpenAI's); a call max_tokens cut stays a call, cut, with length; an answer
    cut before any call began stays content."""
    client, sched, _ = scripted
    named = {"type": "function", "function": {"name": "get_weather"}}
    sched.script = ["ok</thi", "nk>\n\n{", '"city"', ':  "Par', 'is",\n  "days": 3', "}\n"]  # thinking, then JSON
    written = '{"city":  "Paris",\n  "days": 3}'
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice=named)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "stop" and m.content is None
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_weather", written)]
    assert sched.gens[-1].constraint is not None
    reasoning, content, calls, finish = _stream(client, model="tiny", messages=ASK, tools=TOOLS, tool_choice=named)
    assert (reasoning, content, finish) == ("ok", "", "stop")
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", written)]
    pieces = [tc.function.arguments for ch in client.chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS, tool_choice=named, stream=True)
        if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    assert pieces == ["{", "\"city\"", ":  \"Par", "is\",\n  \"days\": 3", "}"]  # the call with "{", then as scripted
    sched.script = ['</think>[{"name": "now", "parameters": {}},',
                    ' {"name": "get_weather", "parameters": {"city": ', '"Oslo"}}]']
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required")
    assert r.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls] == [
        ("now", "{}"), ("get_weather", '{"city": "Oslo"}')]
    _, _, calls, finish = _stream(client, model="tiny", messages=ASK, tools=TOOLS, tool_choice="required")
    assert finish == "tool_calls" and [(c["name"], c["arguments"]) for c in calls] == [
        ("now", "{}"), ("get_weather", '{"city": "Oslo"}')]
    entries = [tc for ch in client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS,
                                                            tool_choice="required", stream=True)
               if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    assert [(e.index, e.function.name, e.function.arguments) for e in entries] == [
        (0, "now", "{}"), (1, "get_weather", '{"city":'), (1, None, ' "Oslo"}')]  # as the model wrote them
    sched.script, sched.reason = ['</think>{"city": "Par'], "length"
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice=named)
    m = r.choices[0].message
    assert (r.choices[0].finish_reason, m.content, [(c.function.name, c.function.arguments) for c in m.tool_calls]) \
        == ("length", None, [("get_weather", '{"city": "Par')])
    _, content, calls, finish = _stream(client, model="tiny", messages=ASK, tools=TOOLS, tool_choice=named)
    assert (finish, content, [(c["name"], c["arguments"]) for c in calls]) == (
        "length", "", [("get_weather", '{"city": "Par')])
    # required, cut inside its second call: the first whole, the second cut; cut before any name: content
    sched.script = ['</think>[{"name": "now", "parameters": {}}, {"name": "get_weather", "parameters": {"ci']
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required")
    m = r.choices[0].message
    assert (r.choices[0].finish_reason, m.content, [(c.function.name, c.function.arguments) for c in m.tool_calls]) \
        == ("length", None, [("now", "{}"), ("get_weather", '{"ci')])
    sched.script = ['</think>[{"parameters": {"city": "Oslo"}, "na']
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required")
    assert (r.choices[0].finish_reason, r.choices[0].message.content, r.choices[0].message.tool_calls) == (
        "length", '[{"parameters": {"city": "Oslo"}, "na', None)
    sched.reason = "stop"


def test_required_calls_stream_from_their_json_in_every_cut():
    """tool_choice required's answer, read as it comes: every item a call, named once its "name" string is whole
    (parameters written first are held until then), its arguments the parameters value's text as written -- JSON
    equal to the item's -- whatever the key order, blanks, escapes, nesting, and the cuts."""
    from ninferc.server.tools import ForcedCallSplitter, split_with

    rng = random.Random(7)
    for trial in range(60):
        items = [{"name": rng.choice(["now", "get_weather", 'q"\\x\u00e9']),
                  "parameters": rng.choice([{}, {"city": 'O"slo\\ }{,]['}, {"a": [1, {"b": None}], "c": -2.5e3},
                                            {"s": "x" * rng.randint(0, 30), "t": True}])} for _ in range(rng.randint(1, 3))]
        if trial % 2:
            items = [dict(reversed(list(it.items()))) for it in items]  # parameters before name
        text = json.dumps(items, indent=rng.choice([None, 1, 2]), separators=rng.choice([None, (",", ":")]),
                          ensure_ascii=rng.random() < 0.5)
        content, calls = split_with(ForcedCallSplitter(None), text)
        assert content is None and [(c.name, json.loads(c.arguments), c.complete) for c in calls] == [
            (it["name"], it["parameters"], True) for it in items]
        assert all(c.arguments == c.arguments.strip() for c in calls)  # the blanks around a value left out
        for _ in range(5):
            sp, made, i = ForcedCallSplitter(None), [], 0
            while i < len(text):
                n = rng.randint(1, 7)
                made += sp.feed(text[i:i + n])[1]
                i += n
                if i % 3 == 0:  # a read mid-stream joins the pieces so far; later pieces still add up
                    assert [(x.name, x.arguments) for x in sp.calls] == [(n, a) for _, n, a in _assembled(made)]
            made += sp.flush()[1]
            assert [(n, a) for _, n, a in _assembled(made)] == [(c.name, c.arguments) for c in calls], text


@pytest.mark.parametrize("text,calls", [
    ('[{"name": "f"}]', [("f", "", False)]),  # no parameters: the call stays cut
    ('[{"name": "a\\x", "parameters": {}}]', [("a\\x", "{}", True)]),  # an escape JSON does not know: as written
    ('[{"parameters": {"k": 1}, "name": "f"}, {"name": "g", "parameters": 2}]', [("f", '{"k": 1}', True),
                                                                                ("g", "2", True)]),
])
def test_required_answers_no_grammar_allows(text, calls):
    """What a grammar would not let through is read without an error (a stream must not fail mid-answer)."""
    from ninferc.server.tools import ForcedCallSplitter, split_with

    _, got = split_with(ForcedCallSplitter(None), text)
    assert [(c.name, c.arguments, c.complete) for c in got] == calls


def test_forced_call_schemas():
    from ninferc.server.tools import forced_call_schema

    assert forced_call_schema(TOOLS, "get_weather") == WEATHER["function"]["parameters"]
    assert forced_call_schema(TOOLS, "now") == {"type": "object"}
    req = forced_call_schema(TOOLS, None)
    assert req["minItems"] == 1 and "maxItems" not in req
    assert [a["properties"]["name"] for a in req["items"]["anyOf"]] == [{"const": "get_weather"}, {"const": "now"}]
    assert forced_call_schema(TOOLS, None, parallel=False)["maxItems"] == 1
    with pytest.raises(ValueError, match="'later', which is not among the request's tools"):
        forced_call_schema(TOOLS, "later")


@pytest.mark.parametrize("kw,param,frag", [
    ({"tool_choice": {"type": "function", "function": {"name": "later"}}}, "tool_choice",
     "names function 'later', which is not among the request's tools (get_weather, now)"),
    ({"tool_choice": {"type": "function", "name": "now"}}, "tool_choice", "a named function is"),
    ({"tool_choice": {"type": "function", "function": {"name": "now"}}, "response_format": {"type": "json_object"}},
     "response_format", "response_format and tools cannot be combined"),
    ({"tool_choice": "required", "extra_body": {"min_tokens": 3}}, "min_tokens", "cannot be combined with tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice", '"sometimes" is not one of none, auto, required'),
    ({"tools": [PICK, PICK]}, "tools.1.function.name", "a function named 'pick' is given twice"),
    ({"tools": [{"type": "function", "function": {"name": "g", "parameters": {"type": "string"}}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tools.0.function.parameters",
     "must be a JSON schema of an object"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools.0.function.name",
     "must be 1-64 letters"),
])
def test_tool_requests_ninferc_refuses(scripted, kw, param, frag):
    client, _, _ = scripted
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=ASK, **{"tools": TOOLS, **kw})
    err = e.value.body
    assert err["param"] == param and frag in err["message"], err
    assert client.chat.completions.create(model="tiny", messages=ASK).choices[0].finish_reason  # still serving


def test_a_past_call_whose_arguments_are_not_json_is_a_400(scripted):
    client, _, _ = scripted
    bad = ASK + [{"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{oops"}}]}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=bad, tools=TOOLS)
    assert e.value.body["param"] == "messages.1.tool_calls.0.function.arguments"
    assert "messages[1].tool_calls[0].function.arguments is not JSON" in e.value.body["message"]


# -- the served fixture --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tool_dir(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("tools") / "tiny-tools"
    shutil.copytree(tiny_dir, d)
    (d / "chat_template.jinja").chmod(0o644)
    (d / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    return d


def test_serve_refuses_a_parser_it_cannot_use(tiny_dir, tool_dir):
    r = CliRunner().invoke(main, ["serve", str(tiny_dir), "--tool-call-parser", "qwen3_coder"])
    assert r.exit_code == 2 and "chat template never reads tools" in r.output, r.output
    r = CliRunner().invoke(main, ["serve", str(tool_dir), "--enable-auto-tool-choice"])
    assert r.exit_code == 2 and "--enable-auto-tool-choice needs --tool-call-parser" in r.output, r.output
    r = CliRunner().invoke(main, ["serve", str(tool_dir), "--tool-call-parser", "mistral"])
    assert r.exit_code == 2 and "'mistral' is not one of 'qwen3_coder', 'hermes'" in r.output, r.output


def test_served_fixture_shows_tools_and_answers_without_calls(start_server, tool_dir):
    """vLLM's command line works as it is; the fixture model answers with text (it was never taught to call), which
    comes back as content with finish_reason stop, the same as with no tools offered but for the longer prompt."""
    srv = start_server(tool_dir, "--model-id", "tiny", "--tool-call-parser", "qwen3_coder",
                       "--enable-auto-tool-choice")
    assert any("tool-call parser qwen3_coder" in ln for ln in srv.lines)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    kw = dict(model="tiny", messages=ASK, max_tokens=8, temperature=0)
    with_tools = client.chat.completions.create(tools=TOOLS, **kw)
    plain = client.chat.completions.create(**kw)
    assert with_tools.choices[0].message.tool_calls is None and with_tools.choices[0].finish_reason == "length"
    assert with_tools.choices[0].message.content
    counted = httpx.post(srv.url + "/tokenize", json={"model": "tiny", "messages": ASK, "tools": TOOLS}).json()
    assert with_tools.usage.prompt_tokens == counted["count"] > plain.usage.prompt_tokens
    shown = httpx.post(srv.url + "/detokenize", json={"tokens": counted["tokens"]}).json()["prompt"]
    assert json.dumps(WEATHER, ensure_ascii=False) in shown
    r = httpx.post(srv.url + "/tokenize", json={"prompt": "x", "tools": TOOLS})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    # tool_choice none: /tokenize renders the prompt the chat request gets, without the tools
    none = httpx.post(srv.url + "/tokenize", json={"model": "tiny", "messages": ASK, "tools": TOOLS,
                                                   "tool_choice": "none"}).json()
    assert none["count"] == plain.usage.prompt_tokens
    assert client.chat.completions.create(tools=TOOLS, tool_choice="none", **kw).usage.prompt_tokens == none["count"]



def test_served_fixture_makes_forced_calls_without_a_parser(start_server, tool_dir):
    """A forced call needs no --tool-call-parser: the fixture model (never taught to call) is constrained to the
    call's JSON, which comes back as tool_calls whose arguments fit the tool's schema, named and required."""
    srv = start_server(tool_dir, "--model-id", "tiny")
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    kw = dict(model="tiny", messages=ASK, max_tokens=300, temperature=0, tools=[PICK, TOOLS[1]],
              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    r = client.chat.completions.create(tool_choice={"type": "function", "function": {"name": "pick"}}, **kw)
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop" and call.function.name == "pick"
    assert json.loads(call.function.arguments)["color"] in ("red", "green")
    r = client.chat.completions.create(tool_choice="required", parallel_tool_calls=False, **kw)
    assert r.choices[0].finish_reason == "tool_calls" and len(r.choices[0].message.tool_calls) == 1
    assert r.choices[0].message.tool_calls[0].function.name in ("pick", "now")
    with pytest.raises(openai.BadRequestError) as e:  # auto still needs the parser
        client.chat.completions.create(tools=[PICK], **{k: v for k, v in kw.items() if k != "tools"})
    assert e.value.body["param"] == "tools"


def test_a_forced_call_needs_a_template_that_shows_the_tools(client):
    """The fixture's own template never reads tools: a forced call would make the model call a function it was never
    shown, so it is a 400 naming tool_choice."""
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=ASK, tools=[PICK], tool_choice="required", max_tokens=4)
    assert e.value.body["param"] == "tool_choice" and "never shows tools" in e.value.body["message"]
