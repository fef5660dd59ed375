"""``response_format`` (``json_object``, ``json_schema``) through the openai client against a live ``ninferc serve``
(reference backend, fixture checkpoint): every answer that ends parses as JSON valid against its schema, whole and
streamed, for each of ``n`` choices and under sampling; the refusals name the field; with ``--reasoning-parser`` the
grammar starts after ``</think>``."""

from __future__ import annotations

import json

import openai
import pytest

SCHEMA = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
          "required": ["color", "n"], "additionalProperties": False}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA, "strict": True}}
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
MSGS = [{"role": "user", "content": "Pick a color and a number, as JSON."}]


def _check(value):
    assert set(value) <= {"color", "n", "tags"} and {"color", "n"} <= set(value), value
    assert value["color"] in ("red", "green", "blue") and isinstance(value["n"], int) and not isinstance(value["n"], bool)
    assert all(isinstance(t, str) for t in value.get("tags", [])) and len(value.get("tags", [])) <= 2


def test_json_object_chat_and_completions_parse(client):
    """json_object: any JSON object (its strings unbounded: on prompts where the fixture model writes a long string
    max_tokens cuts it, so these prompts are ones where it closes the object)."""
    for prompt in ("{}", "x"):
        r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompt}],
                                           max_tokens=150, temperature=0, response_format={"type": "json_object"},
                                           extra_body=NO_THINK)
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = client.completions.create(model="tiny", prompt="def f():", max_tokens=200, temperature=0.7, seed=1,
                                  extra_body={"response_format": {"type": "json_object"}})
    assert r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].text), dict)


def test_json_schema_whole_streamed_sampled_and_n_choices(client):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=200, temperature=0,
                                       response_format=JSON_SCHEMA, extra_body=NO_THINK)
    assert r.choices[0].finish_reason == "stop"
    _check(json.loads(r.choices[0].message.content))
    text = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model="tiny", messages=MSGS, max_tokens=200, temperature=0, response_format=JSON_SCHEMA, extra_body=NO_THINK,
        stream=True) if ch.choices)
    assert text == r.choices[0].message.content
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=200, temperature=1.0, seed=5, n=3,
                                       response_format=JSON_SCHEMA, extra_body=NO_THINK)
    assert len(r.choices) == 3
    for ch in r.choices:  # each choice its own grammar state
        assert ch.finish_reason == "stop"
        _check(json.loads(ch.message.content))


def test_a_constrained_answer_cut_by_max_tokens_ends_with_length(client):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=3, temperature=0,
                                       response_format=JSON_SCHEMA, extra_body=NO_THINK)
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.content.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.choices[0].message.content)


def test_without_response_format_the_same_request_is_not_json(client):
    """The check above can fail: unconstrained, the fixture model's answer to the same request is not a JSON object."""
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=60, temperature=0, extra_body=NO_THINK)
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.choices[0].message.content)


@pytest.mark.parametrize("body,param,needle", [
    ({"response_format": {"type": "regex"}}, "response_format.type", "response_format type 'regex' is not supported"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "needs a json_schema object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
     "response_format.json_schema.name", "name is required"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frob"}}}},
     "response_format.json_schema.schema", "the schema cannot be enforced: Invalid type: frob"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema", "schema is required"),
    ({"response_format": {"type": "json_object", "schema": {}}}, "response_format", "takes no other key"),
    ({"response_format": {"type": "json_object"}, "min_tokens": 4}, "min_tokens", "cannot be combined"),
    ({"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos", "cannot be combined"),
    ({"response_format": {}}, "response_format.type", "response_format.type is required"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": SCHEMA}}},
     "response_format.json_schema.name", "1-64 letters, digits"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": True}}},
     "response_format.json_schema.schema", "a JSON schema object (found true)"),
    ({"logit_bias": {"7": True}}, "logit_bias.7", ""),
    ({"logit_bias": {" 7": 1}}, "logit_bias", "key ' 7' is not a token id"),
])
def test_bad_response_formats_are_400s_naming_the_field(client, body, param, needle):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x", max_tokens=4, extra_body=body)
    err = e.value.body
    assert err["param"] == param and needle in err["message"], err
    assert client.completions.create(model="tiny", prompt="x", max_tokens=2).usage.completion_tokens == 2


def test_with_the_reasoning_parser_the_thinking_is_free_and_the_answer_constrained(start_server, tiny_dir):
    """--reasoning-parser qwen3 and thinking on (the template opens <think>): the grammar waits for </think>, so the
    thinking is the model's own text (the fixture model never closes the block in 12 tokens: all reasoning, content
    null, as without response_format); thinking off: the answer is the JSON. (The grammar's start after </think> is
    tested on the constraint itself, tests/ninferc/test_structured.py.)"""
    srv = start_server(tiny_dir, "--model-id", "tiny", "--reasoning-parser", "qwen3")
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    free = c.chat.completions.create(model="tiny", messages=MSGS, max_tokens=12, temperature=0)
    r = c.chat.completions.create(model="tiny", messages=MSGS, max_tokens=12, temperature=0,
                                  response_format=JSON_SCHEMA)
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.content is None
    assert r.choices[0].message.model_extra["reasoning"] == free.choices[0].message.model_extra["reasoning"]
    assert not r.choices[0].message.model_extra["reasoning"].lstrip().startswith("{")
    r = c.chat.completions.create(model="tiny", messages=MSGS, max_tokens=200, temperature=0,
                                  response_format=JSON_SCHEMA, extra_body=NO_THINK)
    assert r.choices[0].finish_reason == "stop"
    _check(json.loads(r.choices[0].message.content))


def test_a_schema_the_grammar_cannot_follow_is_a_400_before_or_while_generating(client):
    """A $ref cycle with no way out admits no value: a 400 before any token. A property whose schema is itself (no
    base case) fails after '{"a":' -- the request ends with a 400 grammar_error (an error event when streaming), its
    message one short line, and the server goes on."""
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x", max_tokens=20, extra_body={"response_format": {
            "type": "json_schema", "json_schema": {"name": "loop", "schema": {"anyOf": [{"$ref": "#"}]}}}})
    assert e.value.body["param"] == "response_format.json_schema.schema"
    assert "admits no JSON value" in e.value.body["message"] and len(e.value.body["message"]) < 500
    selfish = {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "selfish", "schema": selfish}}
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x", max_tokens=40, temperature=0,
                                  extra_body={"response_format": fmt})
    assert e.value.body["code"] == "grammar_error" and e.value.body["param"] == "response_format"
    assert e.value.body["message"].startswith("structured output:") and len(e.value.body["message"]) < 500
    assert client.completions.create(model="tiny", prompt="x", max_tokens=2).usage.completion_tokens == 2


def test_objects_are_closed_and_whitespace_is_one_break_and_indentation(client):
    """An object schema with properties and no additionalProperties takes no other key (pydantic's schemas leave it
    out); between JSON tokens at most one line break."""
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green"]}}}  # nothing required
    r = client.completions.create(model="tiny", prompt="def f():", max_tokens=200, temperature=1.0, seed=3, n=4,
                                  extra_body={"response_format": {"type": "json_schema",
                                                                  "json_schema": {"name": "c", "schema": schema}}})
    for ch in r.choices:
        assert "\n\n" not in ch.text and "\n \n" not in ch.text
        if ch.finish_reason == "stop":
            assert set(json.loads(ch.text)) <= {"color"}
    assert any(ch.finish_reason == "stop" for ch in r.choices)


def test_the_openai_clients_parse_helper_with_a_pydantic_model(client):
    """The README's example: ``client.chat.completions.parse(response_format=PydanticModel)`` (the client sends the
    model's JSON schema, strict) gets a parsed object."""
    from typing import Literal

    from pydantic import BaseModel

    class Pick(BaseModel):
        color: Literal["red", "green", "blue"]
        count: int

    r = client.chat.completions.parse(model="tiny", messages=[{"role": "user", "content": "Pick a color and a count."}],
                                      response_format=Pick, max_tokens=200, temperature=0, extra_body=NO_THINK)
    assert r.choices[0].finish_reason == "stop" and isinstance(r.choices[0].message.parsed, Pick)
