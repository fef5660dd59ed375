"""Structured output: OpenAI's ``response_format`` (``json_object``, ``json_schema``) as a token mask per step.

The grammar engine is llguidance (the library vLLM's ``--structured-outputs-config backend=guidance`` and llama.cpp's
``LLAMA_LLGUIDANCE`` build use): it compiles a JSON schema against the model's tokenizer and, for each position,
says which token ids may come next. Here each request's :class:`TokenConstraint` gives that set to the request's
:class:`~ninferc.sampling.HostSampler`, which sets every other logit to -inf before the bias, penalties and sampling
(vLLM applies its grammar bitmask first too), and advances with every token the request takes. A constrained request
samples on the host from the step's logits, as a penalised one does; speculative rounds accept its drafts on the
host, row by row, each row masked for the tokens accepted before it.

Semantics (OpenAI's API reference for ``response_format``):

* ``{"type": "text"}``: no constraint.
* ``{"type": "json_object"}``: the output is one JSON object (the schema ``{"type": "object"}``).
* ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ..., "description": ...}}``: the
  output is a JSON value valid against ``schema`` (llguidance's JSON-schema subset: types, properties, required,
  additionalProperties, enum, const, anyOf / oneOf, $ref / $defs, items, min / max lengths and values, patterns,
  formats it knows). A schema llguidance cannot compile -- an unknown type, a keyword it does not implement -- is
  refused with its message, not loosened.

Between JSON tokens the answer may put one space, or one line break and an indentation (:data:`JSON_OPTIONS`). An
object schema that lists ``properties`` without ``additionalProperties`` takes no other keys (:func:`closed_objects`,
OpenAI's strict mode, vLLM's default); ``strict`` itself changes nothing. A schema that admits no value (a ``$ref``
cycle with no way out) is refused before any token; one the engine fails to follow later (its limits: a row of more
than 2,000 items, for instance) ends the request with a 400 (:class:`~ninferc.runtime.scheduler.GrammarFailed`, an
error event when streaming). After the value the only tokens allowed are the end ids the compiler was given (the model's EOS and the chat template's end of turn), so a
constrained answer ends with ``finish_reason`` ``stop`` unless ``max_tokens`` cuts it (then its JSON is incomplete,
as vLLM's and OpenAI's are).

Where the generation starts inside a ``<think>`` block and the server splits reasoning (``--reasoning-parser``), the
constraint starts after the token that completes the text ``</think>`` (one added token in the family's tokenizers,
several in the fixture's), so the reasoning is free and the answer is the JSON (vLLM's behaviour with a reasoning
parser).
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

import numpy as np

from ninferc.errors import NinfercError

#: OpenAI's rule for a json_schema's ``name`` (as for a function's)
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


#: llguidance's JSON options: between JSON tokens one space, or one line break and up to 16 spaces or tabs of
#: indentation (pretty-printed JSON to 8 levels at 2 spaces, 4 at 4), or nothing -- where llguidance's default allows
#: any run of whitespace: a model unsure of what comes next may fill ``max_tokens`` with it inside the value (the
#: fixture model did, 2026-12-07, also with runs bounded at 20 characters: objects of ~40 tokens took 117-395; vLLM's
#: ``disable_any_whitespace`` answers the same failure by allowing none)
JSON_OPTIONS = {"whitespace_pattern": r"(?:\r?\n[ \t]{0,16}| ?)"}

#: keys of a JSON schema whose values are schemas, and those whose values are lists / maps of schemas (what
#: :func:`closed_objects` walks)
_SUB = ("items", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames", "additionalProperties",
        "unevaluatedProperties", "unevaluatedItems")
_SUB_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUB_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def closed_objects(schema):
    """A copy of ``schema`` where every object schema that lists ``properties`` and says nothing of
    ``additionalProperties`` has ``additionalProperties: false``: the keys it names and no others, as OpenAI's strict
    mode requires and vLLM's default backend (xgrammar, strict mode) assumes. JSON Schema's own default allows any
    other key, which a model then invents (a new-user trial, 2026-12-07: pydantic's schemas, which leave it out, got
    extra keys). A schema that says ``additionalProperties`` keeps what it says."""
    if isinstance(schema, list):
        return [closed_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in _SUB and isinstance(v, dict):
            out[k] = closed_objects(v)
        elif k in _SUB_LISTS and isinstance(v, list):
            out[k] = [closed_objects(s) for s in v]
        elif k in _SUB_MAPS and isinstance(v, dict):
            out[k] = {name: closed_objects(s) for name, s in v.items()}
        else:
            out[k] = v
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _short(message: str, limit: int = 300) -> str:
    """The first line of an llguidance message, at most ``limit`` characters (its errors can dump the whole grammar
    and parser state: 26 KB for a 2,001-item enum)."""
    line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    return line if len(line) <= limit else line[:limit] + " ..."


class StructuredOutputError(NinfercError):
    """A ``response_format`` that cannot be honoured: ``param`` is the request field to name in the 400."""

    def __init__(self, message: str, param: str = "response_format"):
        super().__init__(message)
        self.param = param


class GrammarCompiler:
    """Compiles ``response_format`` values for one model's tokenizer (built once per server: the llguidance tokenizer
    takes ~20 ms for a 4k vocabulary, ~1 s for the family's 248k).

    Args:
        tokenizer_json: the model's ``tokenizer.json`` text (HF tokenizers' serialisation).
        vocab_size: the model's logit row width V (>= the tokenizer's vocabulary; ids past the tokenizer's are never
            allowed).
        end_ids: ids that may end a constrained answer (EOS, the end of turn); at least one.

    Raises:
        NinfercError: no end id. ImportError: llguidance is not installed (a dependency of the project).
    """

    def __init__(self, tokenizer_json: str, vocab_size: int, end_ids: Sequence[int]):
        import llguidance

        ends = sorted({int(t) for t in end_ids})
        if not ends:
            raise NinfercError("structured output needs at least one end id (EOS) to end a constrained answer")
        self._llg = llguidance
        self.vocab_size = int(vocab_size)
        self.end_ids = tuple(ends)
        self._tok = llguidance.LLTokenizer(tokenizer_json, n_vocab=self.vocab_size, eos_token=list(ends))

    def grammar(self, response_format: dict[str, Any] | None) -> str | None:
        """The llguidance grammar of a request's ``response_format`` (module docstring), or None for none / text.

        Raises:
            StructuredOutputError: a malformed value or a schema llguidance refuses (message and field named)."""
        if response_format is None:
            return None
        kind = response_format.get("type")
        if kind is None:
            raise StructuredOutputError("response_format.type is required (text, json_object or json_schema)",
                                        "response_format.type")
        if kind == "text":
            if set(response_format) != {"type"}:
                raise StructuredOutputError(f"response_format text takes no other key, found "
                                            f"{sorted(set(response_format) - {'type'})}")
            return None
        if kind == "json_object":
            if set(response_format) != {"type"}:
                raise StructuredOutputError(f"response_format json_object takes no other key, found "
                                            f"{sorted(set(response_format) - {'type'})}")
            schema: Any = {"type": "object"}
            param = "response_format"
        elif kind == "json_schema":
            js = response_format.get("json_schema")
            if set(response_format) != {"type", "json_schema"} or not isinstance(js, dict):
                raise StructuredOutputError("response_format json_schema needs a json_schema object "
                                            "({\"name\": ..., \"schema\": {...}}) and no other key",
                                            "response_format.json_schema")
            extra = set(js) - {"name", "schema", "strict", "description"}
            if extra:
                raise StructuredOutputError(f"response_format.json_schema: unknown keys {sorted(extra)} (name, schema, "
                                            "strict, description)", "response_format.json_schema")
            if not isinstance(js.get("name"), str) or not _NAME.fullmatch(js["name"]):
                raise StructuredOutputError("response_format.json_schema.name is required: 1-64 letters, digits, '_' "
                                            f"or '-' (OpenAI's rule; found {str(js.get('name'))[:80]!r})",
                                            "response_format.json_schema.name")
            if "strict" in js and not isinstance(js["strict"], (bool, type(None))):
                raise StructuredOutputError("response_format.json_schema.strict must be a boolean",
                                            "response_format.json_schema.strict")
            schema = js.get("schema")
            param = "response_format.json_schema.schema"
            if not isinstance(schema, dict):
                raise StructuredOutputError("response_format.json_schema.schema is required: a JSON schema object "
                                            f"(found {json.dumps(schema)[:80]})", param)
            schema = closed_objects(schema)
        else:
            raise StructuredOutputError(f"response_format type {kind!r} is not supported (text, json_object, "
                                        "json_schema)", "response_format.type")
        try:
            grammar = self._llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=JSON_OPTIONS)
        except (ValueError, TypeError) as exc:
            raise StructuredOutputError(f"{param}: {exc}", param) from None
        is_error, messages = self._llg.LLMatcher.validate_grammar_with_warnings(grammar, self._tok)
        if is_error:
            raise StructuredOutputError(f"{param}: the schema cannot be enforced: {_short(messages[0])}", param)
        m = self._llg.LLMatcher(self._tok, grammar, log_level=0)
        m.compute_bitmask()  # the first step: a schema that admits no value fails here (llguidance: no extension)
        if m.is_error():
            raise StructuredOutputError(f"{param}: the schema admits no JSON value (a $ref cycle with no way out?): "
                                        f"{_short(m.get_error())}", param)
        return grammar

    def constraint(self, grammar: str, *, after: tuple[str, object] | None = None,
                   stop_ids: Sequence[int] | None = None) -> "TokenConstraint":
        """A fresh :class:`TokenConstraint` for one sequence.

        Args:
            grammar: from :meth:`grammar`.
            after: None (constrain from the first token), or ``(marker, decoder)``: start after the token whose text
                completes ``marker`` (``"</think>"``), the generated ids read through ``decoder`` (a
                :class:`~ninferc.tokenizer.StreamDecoder` that writes special tokens).
            stop_ids: the request's stop ids; the compiler's end ids not among them are never allowed (a completion
                ends with EOS, not the chat template's end of turn). None: all end ids allowed."""
        banned = () if stop_ids is None else tuple(t for t in self.end_ids if t not in set(stop_ids))
        return TokenConstraint(self._llg.LLMatcher(self._tok, grammar, log_level=0), self.vocab_size,
                               after=after, banned=banned)


class TokenConstraint:
    """One sequence's grammar state: which ids may come next (:meth:`allowed`), advanced by :meth:`advance` with each
    token taken. Not thread-safe (the engine thread owns it). Made by :meth:`GrammarCompiler.constraint`.

    Args:
        matcher: a fresh ``llguidance.LLMatcher`` of the grammar.
        vocab_size: V, the logit row width (the mask's length; ids past the grammar's tokenizer are never allowed).
        after: None, or ``(marker, decoder)``: nothing is masked until the generated text holds ``marker``.
        banned: end ids never allowed (another end than the request's own).

    Raises:
        StructuredOutputError: the matcher is already in error (llguidance's message, shortened).
    """

    def __init__(self, matcher, vocab_size: int, *, after: tuple[str, object] | None = None,
                 banned: Sequence[int] = ()):
        self._m = matcher
        self.vocab_size = vocab_size
        self._after = after
        self._seen = ""
        self.active = after is None
        self._banned = np.array(banned, np.int64)
        self._mask: np.ndarray | None = None
        if matcher.is_error():
            raise StructuredOutputError(f"response_format: {_short(matcher.get_error())}")

    def allowed(self) -> np.ndarray | None:
        """bool [vocab_size]: the ids that may come next; None while the constraint has not started (``after``).

        Raises:
            NinfercError: the grammar state is an error (a token it did not allow was taken), naming llguidance's
                message."""
        if not self.active:
            return None
        if self._mask is None:
            if self._m.is_error():
                raise NinfercError(f"structured output: {_short(self._m.get_error())}")
            bits = np.frombuffer(self._m.compute_bitmask(), np.uint8)
            if self._m.is_error():  # no way on (llguidance then allows only the end ids: an incomplete value)
                raise NinfercError(f"structured output: the schema cannot be followed from here: "
                                   f"{_short(self._m.get_error())}")
            mask = np.unpackbits(bits, bitorder="little")[:self.vocab_size].astype(bool)
            if mask.shape[0] < self.vocab_size:
                mask = np.concatenate([mask, np.zeros(self.vocab_size - mask.shape[0], bool)])
            mask[self._banned] = False
            self._mask = mask
        return self._mask

    def advance(self, token: int) -> None:
        """Take ``token`` (the id the sequence generated). A token the grammar does not allow puts it in its error
        state, which :meth:`allowed` reports."""
        if not self.active:
            marker, decoder = self._after
            self._seen = (self._seen + decoder.step(int(token)))[-(len(marker) + 64):]
            self.active = marker in self._seen
            return
        self._mask = None
        if not self._m.is_stopped():
            self._m.consume_token(int(token))

    @property
    def done(self) -> bool:
        """Whether the grammar has ended (an end id was taken after a complete value)."""
        return self.active and self._m.is_stopped()
