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
vLLM reports it). What is content: the text outside calls. Whitespace directly before a call, and an answer's trailing
whitespace once it has made a call, are dropped (``"Let me look.\\n\\n<tool_call>..."`` -> content
``"Let me look."``); an answer whose content is then empty has ``content: null``. A block that is no call stays in the
content as the model wrote it, so nothing is lost: a hermes block that does not parse, a qwen3_coder block that does
not open with ``<function=NAME>``, either cut before that is decided.

Streaming (:class:`ToolCallSplitter`): text that may be the start of ``<tool_call>`` and trailing whitespace are held
back until the next text decides them. A qwen3_coder call streams as vLLM, llama.cpp and OpenAI stream one: its first
delta entry (``index``, ``id``, ``type``, ``function.name``) comes once ``<function=NAME>`` has, and its arguments
object follows in pieces as the model writes it -- a string parameter's text as it comes, another type whole at its
end. From its header on the block is a call: text between parameters or after ``</function>`` is dropped, and an answer
that ends inside it (``max_tokens``, a stop string) leaves the call cut -- its arguments the JSON text so far, not
valid JSON, ``finish_reason`` the engine's (``length``), as OpenAI reports a call ``max_tokens`` cut. A hermes call
(a JSON object, a call only once whole) is sent whole when its block closes. The streamed pieces add up to the whole
answer's content and calls, to the byte of each call's arguments, whatever the cuts.

The markers are matched on the decoded text: real checkpoints spell ``<tool_call>`` as one added token that
decoding keeps (it is not ``special``).

A forced call (``tool_choice`` ``"required"`` or ``{"type": "function", "function": {"name": ...}}``) needs no parser:
the answer is constrained to JSON (:func:`forced_call_schema`, :mod:`ninferc.structured`) -- the named function's
arguments object, or for ``required`` an array of ``{"name", "parameters"}`` objects (one at most with
``parallel_tool_calls`` false) -- which :class:`ForcedCallSplitter` turns into the calls as they come, as vLLM
does, their arguments the JSON the model wrote. Its ``finish_reason`` is OpenAI's: ``tool_calls`` for ``required``,
``stop`` for a named function (``length`` where ``max_tokens`` cut a call's arguments).
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
    #: false while its block is open, and for good where the answer ended inside it (``max_tokens``, a stop string):
    #: its arguments are then the JSON text written so far, cut
    complete: bool = True

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


def _no_constant(name: str):
    """json.loads' hook for ``NaN``, ``Infinity`` and ``-Infinity``: refused (they are not JSON)."""
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """json.loads' hook for a number with a fraction or exponent: refused where it overflows to infinity
    (``1e999``), which JSON cannot write back."""
    x = float(text)
    if x in (float("inf"), float("-inf")):
        raise ValueError(f"{text} overflows a double")
    return x


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
        got = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        if kind not in ("object", "array"):
            return value
        try:  # a Python literal (single quotes, True / None): literal_eval reads literals only, never runs code
            got = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return value
        try:  # only what JSON can write: no bytes, tuples as keys, sets, inf or nan
            json.dumps(got, allow_nan=False)
        except (ValueError, TypeError, RecursionError):
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
    if len(name) > TAG_NAME_MAX:
        return None
    props = schemas.get(name, {})
    args, pos = {}, 0
    for p in _PARAMETER.finditer(inner):
        if inner[pos:p.start()].strip():  # text between parameters: not this format
            return None
        value = p.group(2)
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        key = p.group(1).strip()
        if len(key) > TAG_NAME_MAX:
            return None
        args[key] = _typed(value, props.get(key))
        pos = p.end()
    if inner[pos:].strip() or not name:
        return None
    return ToolCall(name, json.dumps(args, ensure_ascii=False))


class _CallStream:
    """What the splitters share: ``calls`` (every call so far) and the streamed ``tool_calls`` entries of the current
    feed -- a call's first entry at :meth:`_start`, its arguments' later pieces merged per call (:meth:`_emit`)."""

    def __init__(self):
        self._calls: list[ToolCall] = []
        self._pieces: dict[int, list[str]] = {}  # arguments pieces not yet joined into their call (:attr:`calls`)
        self._deltas: list[dict] = []

    @property
    def calls(self) -> list[ToolCall]:
        """Every call so far, each one's ``arguments`` whole: the pieces :meth:`_emit` took are joined here, once,
        so that a call's arguments streamed in n pieces cost O(n) (a ``+=`` per piece on the call's string copied it
        each time: 4.4 s of a 400 KB argument fed 4 characters at a time, 2026-12-07)."""
        for i, parts in self._pieces.items():
            self._calls[i].arguments += "".join(parts)
        self._pieces.clear()
        return self._calls

    def _start(self, call: ToolCall) -> int:
        """``call`` (its ``arguments`` those it starts with) added and announced; returns its index."""
        self._calls.append(call)
        self._deltas.append(call.delta(len(self._calls) - 1))
        return len(self._calls) - 1

    def _emit(self, index: int | None, piece: str) -> None:
        """``piece`` of call ``index``'s arguments, added to it and to this feed's entries (None: a call dropped)."""
        if index is None or not piece:
            return
        self._pieces.setdefault(index, []).append(piece)
        last = self._deltas[-1] if self._deltas else None
        if last is not None and last["index"] == index:
            last["function"]["arguments"] += piece
        else:
            self._deltas.append({"index": index, "function": {"arguments": piece}})

    def _taken(self) -> list[dict]:
        """This feed's entries, handed over (the next feed starts none)."""
        deltas, self._deltas = self._deltas, []
        return deltas


class ToolCallSplitter(_CallStream):
    """Splits one answer's content, given in pieces, into content text and tool calls (module docstring).

    ``feed(text)`` returns ``(content, deltas)``: the content text that is decided and the streamed deltas' ``tool_calls``
    entries that are (either may be empty; at most one entry per call and feed): a call's first entry carries its
    ``index`` (its place among the answer's calls), ``id``, ``type`` and ``function.name`` with the ``arguments`` so far,
    later ones ``index`` and ``function.arguments``, the next piece of the JSON text. ``flush()`` at the end returns what
    was held back in the same form. ``calls`` (the attribute) holds every call so far (:class:`ToolCall`, its
    ``arguments`` the pieces joined), whole or not.

    qwen3_coder calls stream as the model writes them: a call is made once its header, ``<function=NAME>``, has come,
    and its arguments object grows a parameter at a time -- a string's text as it comes (held back: one trailing newline,
    and text that may be the start of a closing tag), other types whole at their ``</parameter>``. From its header on
    the block is a call, whatever follows: text between parameters or after ``</function>`` is dropped, and an answer
    that ends inside the block leaves the call cut (``complete`` false; its arguments the JSON text so far); a parameter
    written twice is in the text twice (JSON readers keep the last, as :func:`parse_call`'s object does). A block
    that never reaches a header is text. Every character is looked at a bounded number of times, however the text is
    cut (a long string value, a long run of blanks, many calls). hermes calls, a JSON object that is a call only once whole, are sent
    whole when their block closes.

    Args:
        parser: one of :data:`PARSERS`.
        tools: the request's validated ``tools`` (for qwen3_coder's parameter types).
        parallel: the request's ``parallel_tool_calls``; false keeps the first call and drops later ones.
    """

    def __init__(self, parser: str, tools: list[dict] | None = None, parallel: bool = True):
        if parser not in PARSERS:
            raise ValueError(f"tool-call parser {parser!r} is not one of {', '.join(PARSERS)}")
        super().__init__()
        self.parser, self.parallel = parser, parallel
        self._schemas = parameter_schemas(tools)
        self._buf, self._ws, self._in_call = "", "", False
        # inside a block parsed whole: its text so far in pieces (joined once, at its </tool_call>: a += per piece
        # copied it, quadratic in its length -- 17 s for a 1.6 MB hermes call, 2026-12-07) and their last characters,
        # where the marker may have begun
        self._body: list[str] = []
        self._tail = ""
        self._coder: _CoderCall | None = None  # the qwen3_coder call being streamed (after its header)
        self._whole = False  # inside a block that is parsed whole at its </tool_call> (hermes; no qwen3_coder header)
        self._lead = 0  # before a qwen3_coder header: the whitespace the buffer is known to start with

    def _text(self, s: str) -> str:
        """Content text ``s`` after any held whitespace; its own trailing whitespace is held back (a run of it added
        to the held, not searched again)."""
        body = s.rstrip()
        if not body:
            self._ws += s
            return ""
        out, self._ws = self._ws + body, s[len(body):]
        return out

    def _keep(self, call: ToolCall) -> int | None:
        """A new call (``complete`` as given): kept and announced (its index), or None where ``parallel`` false drops
        it; the whitespace before it is dropped."""
        self._ws = ""
        return self._start(call) if self.parallel or not self._calls else None

    def _out(self, content: str) -> tuple[str, list[dict]]:
        return content, self._taken()

    def feed(self, text: str) -> tuple[str, list[dict]]:
        if self._body:  # inside a whole block: only the seam with the new text is searched for its end
            seam = self._tail + text
            if CALL_END not in seam:
                self._body.append(text)
                self._tail = seam[-(len(CALL_END) - 1):]
                return self._out("")
            self._buf, self._body, self._tail = "".join(self._body) + text, [], ""
        else:
            self._buf += text
        out: list[str] = []
        while True:
            if self._in_call and self._coder is not None:
                rest = self._coder.feed(self._buf)
                if rest is None:  # the block goes on
                    self._buf = ""
                    return self._out("".join(out))
                self._buf, self._in_call, self._coder = rest, False, None
                continue
            if self._in_call and not self._whole:  # qwen3_coder, before its header
                got, self._lead = _coder_header(self._buf, self._lead)
                if got is None:
                    return self._out("".join(out))
                self._lead = 0
                if got is False:
                    self._whole = True
                else:
                    name, used = got
                    index = self._keep(ToolCall(name, "", complete=False))
                    self._coder = _CoderCall(index, self, self._schemas.get(name, {}))
                    self._buf = self._buf[used:]
                continue
            if self._in_call:
                end = self._buf.find(CALL_END)
                if end < 0:
                    self._body, self._tail, self._buf = [self._buf], self._buf[-(len(CALL_END) - 1):], ""
                    return self._out("".join(out))
                body, self._buf, self._in_call, self._whole = self._buf[:end], self._buf[end + len(CALL_END):], \
                    False, False
                call = parse_call(self.parser, body, self._schemas)
                if call is None:  # not a call after all: the block is text
                    out.append(self._text(CALL_START + body + CALL_END))
                else:
                    self._keep(call)
                continue
            start = self._buf.find(CALL_START)
            if start >= 0:
                out.append(self._text(self._buf[:start]))
                self._buf, self._in_call = self._buf[start + len(CALL_START):], True
                self._whole = self.parser != "qwen3_coder"
                continue
            keep = _held(self._buf, CALL_START)
            out.append(self._text(self._buf[:len(self._buf) - keep]))
            self._buf = self._buf[len(self._buf) - keep:]
            return self._out("".join(out))

    def flush(self) -> tuple[str, list[dict]]:
        if self._in_call and self._coder is not None:  # the answer ended inside a call: it stays cut
            self._coder.cut()
            pending = ""
        else:  # an unclosed block with no call header, or a marker's prefix
            pending = (CALL_START if self._in_call else "") + "".join(self._body) + self._buf
        s = self._ws + pending
        self._buf, self._ws, self._in_call, self._coder, self._whole = "", "", False, None, False
        self._body, self._tail = [], ""
        if self._calls and not s.strip():
            s = ""
        return self._out(s)


_FUNCTION_TAG, _PARAMETER_TAG, _PARAMETER_END, _FUNCTION_END = "<function=", "<parameter=", "</parameter>", "</function>"

#: the longest function or parameter name a qwen3_coder tag may carry (characters): a longer one is no tag (a stream
#: would otherwise hold it back without end), for :func:`parse_call` too
TAG_NAME_MAX = 256
_TAG_NAME = re.compile(r"[^>\n]*")


def _tag(s: str, tag: str):
    """The name of a ``<tag=NAME>`` opening ``s`` (``tag`` = ``<function=`` or ``<parameter=``): ``(name, length)``,
    False where ``s`` does not open with one (no ``>`` within :data:`TAG_NAME_MAX` characters, a newline or a
    ``</tool_call>`` in it, a blank name), None while undecided."""
    if len(s) < len(tag):
        return None if tag.startswith(s) else False
    if not s.startswith(tag):
        return False
    m = _TAG_NAME.match(s, len(tag), len(tag) + TAG_NAME_MAX + 1)
    end = m.end()
    if end == len(s):
        return None
    if end - len(tag) > TAG_NAME_MAX or s[end] != ">" or s.find(CALL_END, 0, end + 1) >= 0:
        return False
    name = m.group(0).strip()
    return (name, end + 1) if name else False


def _coder_header(buf: str, lead: int = 0):
    """A qwen3_coder block's start (the text after ``<tool_call>``) -> ``(got, lead)``: ``got`` is ``(name, length)``
    where it opens with ``<function=NAME>`` (whitespace before it allowed; ``length``: the header's characters), False
    where it cannot (the block is then parsed whole, as text unless it parses), None while undecided; ``lead``: the
    whitespace ``buf`` is known to start with (pass it back with the next, longer ``buf``: each character is looked at
    once)."""
    rest = buf[lead:]
    s = rest.lstrip()
    lead += len(rest) - len(s)
    got = _tag(s, _FUNCTION_TAG)
    closed = buf.find(CALL_END, lead)  # the block's end, before which the header must come
    if got is None:
        return (None if closed < 0 else False), lead
    return got if not got else (got[0], lead + got[1]), lead


def _is_string(schema) -> bool:
    """Whether a qwen3_coder parameter of this JSON schema stays text (:func:`_typed`: type ``string`` or none)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind in (None, "string")


class _CoderCall:
    """The body of one qwen3_coder call after its ``<function=NAME>`` header, given in pieces: the arguments object's
    JSON text, passed to ``sp._emit(index, piece)`` as it is decided (:class:`ToolCallSplitter`'s rules; ``index``
    None: a call ``parallel`` false drops). ``feed(buf)``
    returns None while the block goes on (``buf`` used up, any undecided tail kept here), else the text after its
    ``</tool_call>``."""

    def __init__(self, index: int | None, sp: _CallStream, props: dict):
        self.index, self.sp, self.props = index, sp, props
        self.tail = ""  # text held back: a tag's possible start, a value's possible last newline
        self.key = None  # the open parameter's name
        self.keys = 0  # parameters written so far
        self.after = False  # past </function>
        self.string = self.opened = self.lead = False
        self.value = ""  # the open value's text not yet written (a non-string value, or a string that may be null)
        self.core, self.gap = "", False  # a string that may be null: its letters so far, a blank after them
        self.scanned = 0  # inside a value: the start of ``tail`` known to hold no value end (each text searched once)

    def _put(self, piece: str) -> None:
        self.sp._emit(self.index, piece)

    def _close_object(self) -> None:
        self._put("}" if self.keys else "{}")
        self.after = True

    def _value_text(self, piece: str) -> None:
        """More text of the open value (its one leading newline dropped; a string's text written once it cannot be the
        value ``null``)."""
        if self.lead and piece:
            piece, self.lead = (piece[1:] if piece.startswith("\n") else piece), False
        self.value += piece
        if not self.string:
            return
        if not self.opened:
            if self._maybe_null(piece):
                return
            self._put('"')
            self.opened = True
        self._put(json.dumps(self.value, ensure_ascii=False)[1:-1])
        self.value = ""

    def _maybe_null(self, piece: str) -> bool:
        """Whether the open string value, ``piece`` added, may still be ``null`` (blanks around it; any case): each
        character is looked at once (``core``: its letters so far, ``gap``: a blank after them)."""
        for ch in piece:
            if ch.isspace():
                self.gap = self.gap or bool(self.core)
            elif self.gap or not "null".startswith((self.core + ch).lower()):
                return False
            else:
                self.core += ch
        return True

    def _end_value(self, piece: str) -> None:
        """The open value's last text (its one trailing newline dropped) and its end."""
        if self.lead and piece.startswith("\n"):
            piece = piece[1:]
        self.lead = False
        text = self.value + piece
        text = text[:-1] if text.endswith("\n") else text
        if self.opened:
            self._put(json.dumps(text, ensure_ascii=False)[1:-1] + '"')
        else:
            self._put(json.dumps(_typed(text, self.props.get(self.key)), ensure_ascii=False))
        self.key, self.value, self.opened = None, "", False

    def feed(self, buf: str) -> str | None:
        b = self.tail + buf
        self.tail = ""
        while True:
            if self.after:  # only </tool_call> matters now
                end = b.find(CALL_END)
                if end < 0:
                    self.tail = b[len(b) - _held(b, CALL_END):]
                    return None
                return self._finish(b[end + len(CALL_END):])
            if self.key is not None:
                b = self._in_value(b)
                if b is None:
                    return None
                continue
            s = b.lstrip()
            if s.startswith(_PARAMETER_TAG):
                got = _tag(s, _PARAMETER_TAG)
                if got is None:
                    self.tail = s
                    return None
                if got is False:  # not a parameter tag: stray text
                    b = s[1:]
                    continue
                key, used = got
                self._put(("{" if not self.keys else ", ") + json.dumps(key, ensure_ascii=False) + ": ")
                self.keys += 1
                self.key, self.value, self.opened, self.lead = key, "", False, True
                self.string, self.core, self.gap, self.scanned = _is_string(self.props.get(key)), "", False, 0
                b = s[used:]
                continue
            if s.startswith(_FUNCTION_END):
                self._close_object()
                b = s[len(_FUNCTION_END):]
                continue
            if s.startswith(CALL_END):
                self._close_object()
                return self._finish(s[len(CALL_END):])
            if not s or any(t.startswith(s) for t in (_PARAMETER_TAG, _FUNCTION_END, CALL_END)):
                self.tail = s
                return None
            nxt = s.find("<", 1)  # stray text between parameters: dropped
            b = s[nxt:] if nxt > 0 else ""

    def _in_value(self, b: str) -> str | None:
        """Text ``b`` inside the open value: the rest after the value's end, or None with the value's undecided tail
        kept. The value ends at ``</parameter>``, or without it at the next ``<parameter=``, or at ``</tool_call>``
        (less a ``</function>`` before it)."""
        from_ = max(0, self.scanned - len(_PARAMETER_END) + 1)
        ends = [(i, t) for t, i in ((t, b.find(t, from_)) for t in (_PARAMETER_END, _PARAMETER_TAG, CALL_END))
                if i >= 0]
        if ends:
            i, t = min(ends)
            if t == _PARAMETER_END:
                self._end_value(b[:i])
                return b[i + len(t):]
            if t == _PARAMETER_TAG:
                self._end_value(b[:i])
                return b[i:]
            f = b.rfind(_FUNCTION_END, 0, i)
            self._end_value(b[:f if f >= 0 else i])
            return b[f:] if f >= 0 else b[i:]
        cut = len(b) - max(_held(b, t) for t in (_PARAMETER_END, _PARAMETER_TAG, CALL_END, _FUNCTION_END))
        f = b.find(_FUNCTION_END)
        if 0 <= f < cut:  # perhaps the function's end (a missing </parameter>): decided by what follows
            cut = f
        if cut and b[cut - 1] == "\n":  # perhaps the value's last newline
            cut -= 1
        self._value_text(b[:cut])
        self.tail = b[cut:]
        self.scanned = len(self.tail)
        return None

    def _finish(self, rest: str) -> str:
        if self.index is not None:
            self.sp._calls[self.index].complete = True
        return rest

    def cut(self) -> None:
        """The answer ended inside the block: the call stays incomplete, its arguments what was decided (a held tail --
        a possible tag, a value's possible last newline or ``null`` -- is not written)."""
        self.tail = ""


def split_tool_calls(parser: str, text: str, tools: list[dict] | None = None, parallel: bool = True
                     ) -> tuple[str | None, list[ToolCall]]:
    """A whole answer's content ``text`` -> (content, calls); content is None where calls were made and no other
    text is left."""
    return split_with(ToolCallSplitter(parser, tools, parallel), text)


def split_with(sp, text: str) -> tuple[str | None, list[ToolCall]]:
    """A whole answer's content ``text`` through a fresh splitter ``sp`` (:class:`ToolCallSplitter` or
    :class:`ForcedCallSplitter`) -> (content, calls); content is None where calls were made and no other text is
    left."""
    a, _ = sp.feed(text)
    b, _ = sp.flush()
    content, calls = a + b, list(sp.calls)
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


class ForcedCallSplitter(_CallStream):
    """The answer of a forced call (module docstring), given in pieces, as :class:`ToolCallSplitter` gives them:
    ``feed`` -> ``(content, deltas)``, ``flush`` at the end, ``calls`` every call.

    Calls stream as vLLM streams them, their arguments the JSON the model wrote (blanks after a value left out, held
    back until later text decides them). A named function's answer *is* its arguments object: the call's first entry
    (``index`` 0, ``id``, ``type``, ``function.name``) comes with the answer's first text, then the rest in pieces.
    ``required``'s answer is an array of ``{"name", "parameters"}`` objects: each call's first entry comes once its
    ``"name"`` string is whole (with its ``parameters`` text so far, where the model wrote that first), then its
    ``parameters`` value's text in pieces. A call is ``complete`` once its JSON is (the named answer parses as an
    object; a ``required`` item's object closed); one ``max_tokens`` cut stays a call, cut (its arguments not valid
    JSON). An answer in which no call began (no named answer's text, no item's ``name``) is content at ``flush``, as
    written.

    Args:
        name: the named function, or None for ``required``.
    """

    def __init__(self, name: str | None):
        super().__init__()
        self.name = name
        self._buf = ""  # named: blanks before the object or after its text so far; required: the whole answer
        self._items = _RequiredItems(self) if name is None else None

    def feed(self, text: str) -> tuple[str, list[dict]]:
        if self._items is not None:
            if not self._calls:  # kept for flush while no call began
                self._buf += text
            self._items.feed(text)
        elif not self._calls:
            if text.strip():  # the object begins: the call starts with it (blanks before it left out)
                self._start(ToolCall(self.name, "", complete=False))
                self._buf = ""
                self._named(text.lstrip())
            else:
                self._buf += text
        else:
            self._named(text)
        return "", self._taken()

    def _named(self, text: str) -> None:
        """More of a named call's arguments: sent, less trailing blanks, which wait for text after them (a run of
        blanks is added to those held, not searched again)."""
        body = text.rstrip()
        if not body:
            self._buf += text
            return
        out, self._buf = self._buf + body, text[len(body):]
        self._emit(0, out)

    def flush(self) -> tuple[str, list[dict]]:
        text, self._buf = self._buf, ""
        if not self._calls:  # no call began: the answer as written
            return text, []
        if self._items is None:
            try:
                self.calls[0].complete = isinstance(json.loads(self.calls[0].arguments), dict)
            except ValueError:
                pass
        return "", []


class _RequiredItems:
    """``tool_choice: "required"``'s answer, ``[{"name": ..., "parameters": {...}}, ...]``, read as it comes (a JSON
    lexer over its characters, each looked at once) for :class:`ForcedCallSplitter`: an item's ``name`` string starts
    its call; its ``parameters`` value's text (from its first character to the item's next ``,`` or ``}``, blanks
    after it left out) is the call's arguments, sent as it comes once the call has started (held until then); the
    item's closing ``}`` completes it."""

    def __init__(self, sp: ForcedCallSplitter):
        self.sp = sp
        self.depth = 0  # open containers
        self.in_str = self.esc = False
        self.key = None  # the item's key whose value comes (depth 2)
        self.expect = "key"  # at depth 2: "key", "colon", "value", "after"
        self.token: list[str] | None = None  # a depth-2 string being read (a key, or the name's value)
        self.capture = False  # inside the parameters value
        self.held = ""  # captured text not yet sent (before the call's start, or blanks that may end the value)
        self.call: int | None = None  # the item's call index
        self.seen = False  # the item's parameters value has begun

    def _send(self, piece: str) -> None:
        """Captured text: sent where the call has started, its trailing blanks held back until more comes (a run of
        blanks is added to the held ones, not searched again)."""
        self.seen = self.seen or bool(piece)
        body = piece.rstrip()
        if self.call is None or not body:
            self.held += piece
            return
        out, self.held = self.held + body, piece[len(body):]
        self.sp._emit(self.call, out)

    def _end_value(self) -> None:
        if self.capture:
            self.capture = False
            if self.call is not None:
                self.held = ""  # the blanks after the value
            else:
                self.held = self.held.rstrip()
        self.key, self.expect = None, "key"

    def feed(self, text: str) -> None:
        cap: list[str] = []
        for ch in text:
            if (self.depth == 2 and self.expect == "value" and self.key == "parameters" and not self.in_str
                    and not ch.isspace()):  # the parameters value begins, whatever its kind
                self.capture, self.expect = True, "after"
            if self.capture and not (self.depth == 2 and not self.in_str and ch in ",}"):
                cap.append(ch)
            if self.in_str:
                if self.token is not None:
                    self.token.append(ch)
                if self.esc:
                    self.esc = False
                elif ch == "\\":
                    self.esc = True
                elif ch == '"':
                    self.in_str = False
                    if self.token is not None:
                        raw = "".join(self.token)
                        try:
                            value = json.loads('"' + raw)
                        except ValueError:  # an escape JSON does not know (no grammar allows it): as written
                            value = raw[:-1]
                        self._string_done(value)
                continue
            if ch == '"':
                self.in_str = True
                if self.depth == 2 and self.expect in ("key", "value") and not self.capture:
                    self.token = []
                else:
                    self.token = None
                continue
            if ch in "[{":
                self.depth += 1
                if self.depth == 2 and ch == "{":  # an item begins
                    self.call, self.held, self.key, self.expect, self.seen = None, "", None, "key", False
                continue
            if ch in "]}":
                if self.depth == 2 and ch == "}":
                    self._flush_cap(cap)
                    self._end_value()
                    if self.call is not None and self.seen:  # an item without parameters stays cut
                        self.sp._calls[self.call].complete = True
                self.depth = max(0, self.depth - 1)
                continue
            if self.depth != 2:
                continue
            if ch == ":" and self.expect == "colon":
                self.expect = "value"
            elif ch == ",":
                self._flush_cap(cap)
                self._end_value()
            elif not ch.isspace() and self.expect == "value":
                self.expect = "after"  # another key's scalar value: skipped
        self._flush_cap(cap)

    def _flush_cap(self, cap: list[str]) -> None:
        if cap:
            self._send("".join(cap))
            cap.clear()

    def _string_done(self, value: str) -> None:
        """A depth-2 string ended: a key (its value comes) or the name's value (the call starts)."""
        self.token = None
        if self.expect == "key":
            self.key, self.expect = value, "colon"
        elif self.expect == "value":
            if self.key == "name" and self.call is None:
                self.call = self.sp._start(ToolCall(value, "", complete=False))
                out, self.held = self.held, ""  # the parameters text written before the name (no blanks after it)
                self.sp._emit(self.call, out)
            self.expect = "after"


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
