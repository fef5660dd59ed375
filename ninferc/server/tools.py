"""Tool calling in ``ninferc serve --tool-call-parser NAME`` (vLLM's flag and parser names): a chat request's ``tools``
are rendered into the prompt by the model's chat template, and the function calls the model writes in its answer
come back as the message's ``tool_calls`` (OpenAI's shape: ``id``, ``type: "function"``, ``function.name``,
``function.arguments`` as JSON text), whole and streamed, with ``finish_reason: "tool_calls"``.

The family writes a call as a ``<tool_call>`` ... ``</tool_call>`` block; the parsers differ in its body:

- ``qwen3_coder`` (Qwen3.5 / 3.6 / 3.8 and Qwen3-Coder checkpoints, whose templates teach this form)::

      <tool_call>
      <function=get_weather>
      <parameter=city>
      Paris
      </parameter>
      <parameter=days>
      3
      </parameter>
      </function>
      </tool_call>

  A parameter's value is the text between its tags less one leading and one trailing newline (a missing
  ``</parameter>`` ends it at the next ``<parameter=`` or at ``</function>``, as vLLM's parser reads it). ``null``
  is null whatever the type; otherwise the value stays a string where the tool's JSON schema
  (``parameters.properties[NAME].type``) says ``string`` or says nothing, and is read as JSON elsewhere (``3`` -> 3,
  ``true`` -> true, ``{"a": 1}`` -> an object; an object or array written as a Python literal, ``{'a': 1}``, is read
  as one, as vLLM reads it), kept as text when that fails or gives a value of another type than the schema's.
- ``hermes`` (Qwen2.5 / Qwen3 checkpoints): the body is one JSON object ``{"name": ..., "arguments": {...}}``.

An answer that made calls ends with ``finish_reason: "tool_calls"`` (also where ``max_tokens`` cut it after them, as
vLLM reports it). What is content: the text outside well-formed blocks. Whitespace directly before a call, and an
answer's trailing whitespace once it has made a call, are dropped (``"Let me look.\\n\\n<tool_call>..."`` -> content
``"Let me look."``); an answer whose content is then empty has ``content: null``. A block that does not parse (or one
that ``max_tokens`` cut before its ``</tool_call>``) stays in the content as the model wrote it, so nothing is lost.
While streaming, text that may be the start of ``<tool_call>`` and trailing whitespace are held back until the next text
decides them, and a call is sent whole once its block closes (two that close in one piece of text share a delta)
(:class:`ToolCallSplitter`); the streamed pieces add up to the whole answer's content and calls whatever the cuts.

The markers are matched on the decoded text: real checkpoints spell ``<tool_call>`` as one added token that
decoding keeps (it is not ``special``).

A forced call (``tool_choice`` ``"required"`` or ``{"type": "function", "function": {"name": ...}}``) needs no parser:
the answer is constrained to JSON (:func:`forced_call_schema`, :mod:`ninferc.structured`) -- the named function's
arguments object, or for ``required`` an array of ``{"name", "parameters"}`` objects (one at most with
``parallel_tool_calls`` false) -- which :class:`ForcedCallSplitter` turns into the calls, as vLLM does. Its
``finish_reason`` is OpenAI's: ``tool_calls`` for ``required``, ``stop`` for a named function.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import dataclass

from ninferc.server.reasoning import _held

CALL_START, CALL_END = "<tool_call>", "</tool_call>"

#: ``--tool-call-parser`` values (vLLM's names for these formats)
PARSERS = ("qwen3_coder", "hermes")

#: OpenAI's rule for a function's name
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")

_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
_JSON_TYPES = {"integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


@dataclass
class ToolCall:
    """One parsed call: ``name``, ``arguments`` (JSON text of an object), and its ``id`` (``call_`` + 24 hex digits,
    unique per call)."""

    name: str
    arguments: str
    id: str = ""

    def __post_init__(self):
        if not self.id:
            self.id = "call_" + uuid.uuid4().hex[:24]

    def message(self) -> dict:
        """The call as a message's ``tool_calls`` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def delta(self, index: int) -> dict:
        """The call as a streamed delta's ``tool_calls`` entry (``index``: its place among the answer's calls)."""
        return {"index": index, **self.message()}


def parameter_schemas(tools: list[dict] | None) -> dict[str, dict]:
    """{function name: its ``parameters.properties`` (name -> JSON schema)} of a request's validated ``tools``."""
    out = {}
    for t in tools or ():
        fn = t.get("function") or {}
        params = fn.get("parameters") or {}
        props = params.get("properties") if isinstance(params, dict) else None
        out[fn.get("name")] = props if isinstance(props, dict) else {}
    return out


def _typed(value: str, schema) -> object:
    """A qwen3_coder parameter's text as the type its JSON schema names (module docstring)."""
    if value.strip().lower() == "null":
        return None
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):  # ["integer", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), None)
    if kind in (None, "string"):
        return value
    text = value.strip()
    if kind == "boolean":
        text = text.lower()
    try:
        got = json.loads(text)
    except ValueError:
        if kind not in ("object", "array"):
            return value
        try:  # a Python literal (single quotes, True / None): literal_eval reads literals only, never runs code
            got = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    want = _JSON_TYPES.get(kind)
    if got is None or want is None:
        return got
    if isinstance(got, bool) and kind != "boolean":  # json's true is a Python int
        return value
    return got if isinstance(got, want) else value


def parse_call(parser: str, body: str, schemas: dict[str, dict]) -> ToolCall | None:
    """The :class:`ToolCall` written as ``body`` (the text between ``<tool_call>`` and ``</tool_call>``) in the
    ``parser``'s format, or None when it does not parse. ``schemas``: :func:`parameter_schemas` of the request."""
    if parser == "hermes":
        try:
            obj = json.loads(body)
        except ValueError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            return None
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models write the arguments as JSON text
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))
    m = _FUNCTION.fullmatch(body)
    if not m:
        return None
    name, inner = m.group(1).strip(), m.group(2)
    props = schemas.get(name, {})
    args, pos = {}, 0
    for p in _PARAMETER.finditer(inner):
        if inner[pos:p.start()].strip():  # text between parameters: not this format
            return None
        value = p.group(2)
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        key = p.group(1).strip()
        args[key] = _typed(value, props.get(key))
        pos = p.end()
    if inner[pos:].strip() or not name:
        return None
    return ToolCall(name, json.dumps(args, ensure_ascii=False))


class ToolCallSplitter:
    """Splits one answer's content, given in pieces, into content text and tool calls (module docstring).

    ``feed(text)`` returns ``(content, calls)``: the content text that is decided and the calls whose blocks closed
    (either may be empty); ``flush()`` at the end returns what was held back. ``calls`` (the attribute) holds every
    call so far.

    Args:
        parser: one of :data:`PARSERS`.
        tools: the request's validated ``tools`` (for qwen3_coder's parameter types).
        parallel: the request's ``parallel_tool_calls``; false keeps the first call and drops later ones.
    """

    def __init__(self, parser: str, tools: list[dict] | None = None, parallel: bool = True):
        if parser not in PARSERS:
            raise ValueError(f"tool-call parser {parser!r} is not one of {', '.join(PARSERS)}")
        self.parser, self.parallel = parser, parallel
        self._schemas = parameter_schemas(tools)
        self._buf, self._ws, self._in_call = "", "", False
        self._seen = 0  # inside a block: how much of the buffer is known to hold no </tool_call> (a long block is
        # searched once, not once per piece)
        self.calls: list[ToolCall] = []

    def _text(self, s: str) -> str:
        """Content text ``s`` after any held whitespace; its own trailing whitespace is held back."""
        s = self._ws + s
        body = s.rstrip()
        self._ws = s[len(body):]
        return body

    def feed(self, text: str) -> tuple[str, list[ToolCall]]:
        self._buf += text
        out: list[str] = []
        new: list[ToolCall] = []
        while True:
            if self._in_call:
                end = self._buf.find(CALL_END, self._seen)
                if end < 0:
                    self._seen = max(0, len(self._buf) - len(CALL_END) + 1)
                    return "".join(out), new
                self._seen = 0
                body, self._buf, self._in_call = self._buf[:end], self._buf[end + len(CALL_END):], False
                call = parse_call(self.parser, body, self._schemas)
                if call is None:  # not a call after all: the block is text
                    out.append(self._text(CALL_START + body + CALL_END))
                else:
                    self._ws = ""  # the whitespace before a call is dropped
                    if self.parallel or not self.calls:
                        self.calls.append(call)
                        new.append(call)
                continue
            start = self._buf.find(CALL_START)
            if start >= 0:
                out.append(self._text(self._buf[:start]))
                self._buf, self._in_call = self._buf[start + len(CALL_START):], True
                continue
            keep = _held(self._buf, CALL_START)
            out.append(self._text(self._buf[:len(self._buf) - keep]))
            self._buf = self._buf[len(self._buf) - keep:]
            return "".join(out), new

    def flush(self) -> tuple[str, list[ToolCall]]:
        pending = (CALL_START if self._in_call else "") + self._buf  # an unclosed block, or a marker's prefix
        s = self._ws + pending
        self._buf, self._ws, self._in_call, self._seen = "", "", False, 0
        if self.calls and not s.strip():
            s = ""
        return s, []


def split_tool_calls(parser: str, text: str, tools: list[dict] | None = None, parallel: bool = True
                     ) -> tuple[str | None, list[ToolCall]]:
    """A whole answer's content ``text`` -> (content, calls); content is None where calls were made and no other
    text is left."""
    return split_with(ToolCallSplitter(parser, tools, parallel), text)


def split_with(sp, text: str) -> tuple[str | None, list[ToolCall]]:
    """A whole answer's content ``text`` through a fresh splitter ``sp`` (:class:`ToolCallSplitter` or
    :class:`ForcedCallSplitter`) -> (content, calls); content is None where calls were made and no other text is
    left."""
    a, calls = sp.feed(text)
    b, more = sp.flush()
    content, calls = a + b, calls + more
    return (None if calls and not content else content), calls


def forced_call_schema(tools: list[dict], name: str | None, parallel: bool = True) -> dict:
    """The JSON schema a forced call's answer is constrained to: the named function's ``parameters`` (an object
    where it gives none), or for ``name`` None (``tool_choice: "required"``) a non-empty array -- one item at most
    without ``parallel`` -- of ``{"name": <a tool's name>, "parameters": <its parameters>}`` (vLLM's form).

    Raises:
        ValueError: ``(message, param)``: ``name`` is not one of ``tools``."""
    params = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools}
    if name is not None:
        if name not in params:
            raise ValueError(f"tool_choice names function {name!r}, which is not among the request's tools "
                             f"({', '.join(params)})", "tool_choice")
        return params[name]
    item = {"anyOf": [{"type": "object", "properties": {"name": {"const": n}, "parameters": p},
                       "required": ["name", "parameters"], "additionalProperties": False} for n, p in params.items()]}
    return {"type": "array", "minItems": 1, **({} if parallel else {"maxItems": 1}), "items": item}


class ForcedCallSplitter:
    """The answer of a forced call (module docstring), given in pieces: ``feed`` holds everything back (a JSON value is
    a call only once whole); ``flush`` at the end returns ``("", calls)`` when the text parses as the constrained JSON,
    else ``(text, [])`` (an answer ``max_tokens`` cut stays content, as the model wrote it). ``calls``: the calls.
    Arguments are re-serialised (``json.dumps``), so the grammar's free whitespace does not reach them.

    Args:
        name: the named function, or None for ``required``.
    """

    def __init__(self, name: str | None):
        self.name = name
        self._buf = ""
        self.calls: list[ToolCall] = []

    def feed(self, text: str) -> tuple[str, list[ToolCall]]:
        self._buf += text
        return "", []

    def flush(self) -> tuple[str, list[ToolCall]]:
        text, self._buf = self._buf, ""
        try:
            value = json.loads(text)
        except ValueError:
            return text, []
        if self.name is not None:
            calls = [ToolCall(self.name, json.dumps(value, ensure_ascii=False))] if isinstance(value, dict) else []
        elif isinstance(value, list) and all(isinstance(v, dict) and isinstance(v.get("name"), str)
                                             and isinstance(v.get("parameters"), dict) for v in value):
            calls = [ToolCall(v["name"], json.dumps(v["parameters"], ensure_ascii=False)) for v in value]
        else:
            calls = []
        if not calls:
            return text, []
        self.calls.extend(calls)
        return "", calls


def check_tools(tools: list) -> list[dict]:
    """A request's ``tools``, checked: each ``{"type": "function", "function": {"name", "description"?,
    "parameters"?}}`` with OpenAI's name rule (:data:`NAME_RE`), names unique, ``parameters`` a JSON schema of an
    object (its ``type``, where given, ``object``). Raises ValueError ``(message, param)`` naming the first bad entry."""
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            raise ValueError(f"tools[{i}]: only {{'type': 'function', 'function': {{...}}}} tools are supported "
                             f"(found {json.dumps(t)[:80]})", f"tools.{i}")
        fn = t.get("function")
        if not isinstance(fn, dict):
            raise ValueError(f"tools[{i}].function is missing or not an object", f"tools.{i}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise ValueError(f"tools[{i}].function.name must be 1-64 letters, digits, '_' or '-' "
                             f"(found {name!r})", f"tools.{i}.function.name")
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema of an object (arguments are "
                             f"named), found {json.dumps(params)[:80]}", f"tools.{i}.function.parameters")
        if any(o["function"]["name"] == name for o in out):
            raise ValueError(f"tools[{i}]: a function named {name!r} is given twice", f"tools.{i}.function.name")
        out.append(t)
    return out


def history_tool_calls(messages: list[dict]) -> None:
    """Past assistant turns' ``tool_calls`` made ready for a chat template, in place: each checked (``function`` with
    a ``name`` and ``arguments``) and its ``arguments`` JSON text parsed into an object, as the family's templates
    iterate ``arguments | items`` (vLLM does the same). Raises ValueError ``(message, param)`` naming a bad one, or a
    message's legacy ``function_call``."""
    for i, m in enumerate(messages):
        if m.get("function_call") is not None:  # OpenAI's deprecated single call: a template would drop it unseen
            raise ValueError(f"messages[{i}].function_call (OpenAI's deprecated form) is not supported; send the call "
                             "as tool_calls", f"messages.{i}.function_call")
        calls = m.get("tool_calls")
        if not calls:
            continue
        if m.get("role") != "assistant":
            raise ValueError(f"messages[{i}]: tool_calls belong to an assistant message (role is {m.get('role')!r})",
                             f"messages.{i}.tool_calls")
        if not isinstance(calls, list):
            raise ValueError(f"messages[{i}].tool_calls must be a list", f"messages.{i}.tool_calls")
        for j, c in enumerate(calls):
            where = f"messages[{i}].tool_calls[{j}]"
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ValueError(f"{where}.function.name is missing", f"messages.{i}.tool_calls.{j}.function")
            args = fn.get("arguments", "{}")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError as exc:
                    raise ValueError(f"{where}.function.arguments is not JSON ({exc})",
                                     f"messages.{i}.tool_calls.{j}.function.arguments") from None
            if not isinstance(args, dict):
                raise ValueError(f"{where}.function.arguments must be a JSON object",
                                 f"messages.{i}.tool_calls.{j}.function.arguments")
            calls[j] = {**c, "function": {**fn, "arguments": args}}


def template_reads_tools(source: str) -> bool:
    """Whether a chat template's source reads the ``tools`` variable (jinja2's parse of it; a template that does not
    would never show the model a request's tools)."""
    from jinja2 import Environment, meta

    try:
        return "tools" in meta.find_undeclared_variables(Environment(extensions=["jinja2.ext.loopcontrols"]).parse(
            source))
    except Exception:  # noqa: BLE001 -- a template jinja cannot parse is refused where it is compiled
        return False
