"""The grammar compiler and a sequence's constraint (ninferc.structured, llguidance underneath) on the fixture's
tokenizer: the masks, the end ids, the start after ``</think>``, and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ninferc.sampling import HostSampler, SampleError, SamplingParams
from ninferc.structured import GrammarCompiler, StructuredOutputError
from ninferc.tokenizer import Tokenizer

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return Tokenizer.from_dir(tiny_dir)


@pytest.fixture(scope="module")
def comp(tok):
    return GrammarCompiler(tok.to_json(), 4096, (0, 2))  # the fixture's EOS and <|im_end|>


def _walk(tok, comp, grammar, stop_ids=(0, 2), logits=None, after=None):
    """Greedy over random logits under the constraint until an end id: the text and the end id."""
    c = comp.constraint(grammar, stop_ids=stop_ids, after=after)
    s = HostSampler(SamplingParams(), constraint=c)
    rng = np.random.default_rng(0)
    out = []
    for _ in range(64):
        t = s.sample(rng.normal(size=4096).astype(np.float32) if logits is None else logits).token
        if t in stop_ids:
            return tok.decode(out), t, c
        out.append(t)
    raise AssertionError(f"no end id in 64 tokens: {tok.decode(out)!r}")


def test_a_schema_walk_gives_valid_json_and_ends_with_an_allowed_end_id(tok, comp):
    g = comp.grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}})
    text, end, c = _walk(tok, comp, g)
    assert json.loads(text) in ({"ok": True}, {"ok": False}) and c.done
    # a completion's stop ids hold only EOS: the end of turn (2) is never allowed, so the walk ends with 0
    text, end, _ = _walk(tok, comp, g, stop_ids=(0,))
    assert end == 0 and json.loads(text)["ok"] in (True, False)


def test_the_mask_allows_only_the_grammar_and_greedy_never_leaves_it(tok, comp):
    g = comp.grammar({"type": "json_object"})
    c = comp.constraint(g)
    m = c.allowed()
    assert m.dtype == bool and m.shape == (4096,)
    assert sorted(tok.decode([i]) for i in np.flatnonzero(m)) == ["{", "{}"]  # an object's first token
    x = np.zeros(4096, np.float32)
    x[np.flatnonzero(~m)[:10]] = 50.0  # the model prefers ten tokens the grammar forbids: greedy takes none of them
    s = HostSampler(SamplingParams(), constraint=c)
    assert m[s.sample(x).token] and not s.device_ok


def test_the_constraint_starts_after_the_text_think_end(tok, comp):
    """With ``after``, nothing is masked until the generated text holds ``</think>`` (five tokens in the fixture's
    tokenizer), then the grammar applies from the next token."""
    g = comp.grammar({"type": "json_object"})
    c = comp.constraint(g, after=("</think>", tok.stream(skip_special_tokens=False)))
    ids = tok.encode("plan it</think>")
    assert len(ids) > 2
    for t in ids[:-1]:
        assert c.allowed() is None
        c.advance(t)
    assert c.allowed() is None
    c.advance(ids[-1])
    m = c.allowed()
    assert m is not None and not m[tok.encode("x")[0]]


def test_a_forbidden_token_puts_the_constraint_in_error_and_the_row_fails(tok, comp):
    c = comp.constraint(comp.grammar({"type": "json_object"}))
    c.advance(tok.encode("x")[0])  # not '{': llguidance's error state
    s = HostSampler(SamplingParams(), constraint=c)
    with pytest.raises(SampleError, match="structured output"):
        s.sample(np.zeros(4096, np.float32))


@pytest.mark.parametrize("fmt,param,needle", [
    ({"type": "grammar"}, "response_format.type", "type 'grammar' is not supported"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": {"a": {"type": "frob"}}}}},
     "response_format.json_schema.schema", "cannot be enforced"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "extra": 1}},
     "response_format.json_schema", "unknown keys ['extra']"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": "yes"}},
     "response_format.json_schema.strict", "must be a boolean"),
    ({"type": "text", "x": 1}, "response_format", "takes no other key"),
])
def test_bad_formats_name_the_field(comp, fmt, param, needle):
    with pytest.raises(StructuredOutputError) as e:
        comp.grammar(fmt)
    assert e.value.param == param and needle in str(e.value)


def test_text_and_none_are_no_constraint(comp):
    assert comp.grammar(None) is None and comp.grammar({"type": "text"}) is None


def test_closed_objects_close_every_object_schema_that_lists_properties():
    from ninferc.structured import closed_objects

    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}},
                                               "c": {"type": "array", "items": {"properties": {"d": {}}}},
                                               "e": {"type": "object", "additionalProperties": True,
                                                     "properties": {"f": {}}}},
              "$defs": {"P": {"properties": {"x": {}}}}, "anyOf": [{"properties": {"y": {}}}, {"type": "string"}]}
    out = closed_objects(schema)
    assert out["additionalProperties"] is False and out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["c"]["items"]["additionalProperties"] is False
    assert out["properties"]["e"]["additionalProperties"] is True  # said explicitly: kept
    assert out["$defs"]["P"]["additionalProperties"] is False and out["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in out["anyOf"][1] and "additionalProperties" not in schema  # a copy
    assert closed_objects({"type": "object"}) == {"type": "object"}  # json_object stays open


def test_a_schema_with_no_value_is_refused_with_a_short_message(comp):
    with pytest.raises(StructuredOutputError, match="admits no JSON value") as e:
        comp.grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}})
    assert len(str(e.value)) < 500
