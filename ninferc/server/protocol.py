"""Request models of the OpenAI API subset ``ninferc serve`` implements (pydantic), and the error shape.

Field semantics follow OpenAI's API reference; the extensions vLLM accepts (``top_k``, ``min_p``,
``repetition_penalty``, ``stop_token_ids``, ``ignore_eos``, ``chat_template_kwargs``, ``skip_special_tokens``,
``include_stop_str_in_output``, ``min_tokens``, ``prompt_logprobs``, chat's ``add_generation_prompt`` and
``continue_final_message``) are accepted too, and so are OpenAI's ``logit_bias``, ``response_format`` (``json_object``,
``json_schema``: :mod:`ninferc.structured`) and the completions' ``echo``.
OpenAI's bookkeeping fields that do not change what is generated (``user``, ``safety_identifier``, ``metadata``,
``prompt_cache_key``, ``store`` false, ``service_tier`` auto / default, ``modalities`` text, ``parallel_tool_calls``
without tools) are accepted and have no effect; a null where OpenAI's schema allows one means the field's default.
``tools`` (``tool_choice`` auto) need a server started with ``--tool-call-parser`` (:mod:`ninferc.server.tools`); with
``tool_choice`` none they are left out; ``required`` or a named function force a call (constrained decoding). A field that OpenAI or vLLM defines but ninferc does not implement is refused
with a 400 that names it (``n`` > 16, other ``response_format`` types,
chat's ``echo``, ``best_of`` > 1, ``suffix``, ``store`` true, ...), and so is any field
that is not part of the API: nothing is silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError, model_validator

#: most stop strings one request may give
MAX_STOP_STRINGS = 16
#: most choices (``n``) one request may ask for: each is a request of the scheduler's, admitted together or not at all
MAX_CHOICES = 16
#: most stop token ids one request may give
MAX_STOP_TOKEN_IDS = 64

Number = Union[StrictInt, float]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Strict):
    """``stream_options``: ``include_usage`` adds a final chunk with the usage (and ``choices`` empty)."""

    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False


class TextPart(_Strict):
    """A text part of a message's content list."""

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """One message. Keys besides ``role`` / ``content`` / ``name`` are passed to the chat template as they are
    (templates may read them: an assistant turn's ``tool_calls``, with their arguments parsed from JSON, and a tool
    message's ``tool_call_id``)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextPart], None] = None
    name: str | None = None


#: fields whose null stands for their default (OpenAI's schema marks them nullable; clients generated from it send
#: ``"n": null``, which vLLM's models accept)
NULL_MEANS_DEFAULT = ("n", "stream", "logprobs", "echo", "ignore_eos", "include_reasoning", "skip_special_tokens",
                      "include_stop_str_in_output", "add_generation_prompt", "min_tokens",
                      "continue_final_message")


class _Sampling(_Strict):
    """Fields shared by chat and completions requests."""

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data):
        """A null in a field of :data:`NULL_MEANS_DEFAULT` is left out (the field takes its default)."""
        if isinstance(data, dict) and any(data.get(k, 0) is None for k in NULL_MEANS_DEFAULT):
            data = {k: v for k, v in data.items() if not (k in NULL_MEANS_DEFAULT and v is None)}
        return data

    model: str
    max_tokens: StrictInt | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    top_k: StrictInt | None = None
    min_p: Number | None = None
    seed: StrictInt | None = None
    stop: Union[str, list[str], None] = None
    stop_token_ids: list[StrictInt] | None = None
    presence_penalty: Number | None = None
    frequency_penalty: Number | None = None
    repetition_penalty: Number | None = None
    ignore_eos: StrictBool = False
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: StrictInt = 1
    # vLLM's output options: special tokens (``<|im_end|>``, ...) written into the text; the stop string that ended
    # the text kept at its end
    skip_special_tokens: StrictBool = True
    include_stop_str_in_output: StrictBool = False
    # OpenAI's bookkeeping: no effect on what is generated (nothing is stored; the prefix cache needs no key)
    user: str | None = None
    safety_identifier: str | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    store: StrictBool | None = None
    service_tier: str | None = None
    # OpenAI's: token id (a string of digits) -> bias in [-100, 100] added to that token's logit before sampling
    logit_bias: dict[str, Union[StrictInt, StrictFloat]] | None = None
    # vLLM's: the stop ids (EOS, end of turn, stop_token_ids) and stop strings cannot end the text before this many
    # tokens were generated
    min_tokens: StrictInt = 0
    # OpenAI's: {"type": "text" | "json_object" | "json_schema", ...} (ninferc.structured)
    response_format: dict[str, Any] | None = None
    # vLLM's: score the prompt -- every position after the first gets its token's log-probability, its rank and
    # this many alternatives (0..20)
    prompt_logprobs: StrictInt | None = None


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = None
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    include_reasoning: StrictBool = True
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: StrictBool | None = None
    modalities: list[str] | None = None
    echo: StrictBool = False


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: ``prompt`` is text, a list of texts, token ids, or a list of token-id lists (several
    prompts: choice k x n + i is prompt k's choice i); ``max_tokens`` defaults to 16 (OpenAI's default)."""

    prompt: Union[str, list[str], list[StrictInt], list[list[StrictInt]]]
    logprobs: StrictInt | None = None
    echo: StrictBool = False
    best_of: StrictInt | None = None
    suffix: str | None = None


class TokenizeRequest(_Strict):
    """``POST /tokenize`` (vLLM's and llama-server's): the token ids of ``prompt`` (text), or of chat ``messages``
    rendered by the model's template (``add_generation_prompt``, default true, ``chat_template_kwargs``, and ``tools``
    -- left out with ``tool_choice`` none -- as a chat request's); ``add_special_tokens`` (vLLM's; default true for ``prompt``, false for ``messages``) lets the
    tokenizer add its own special tokens, which for this family's tokenizers are none; ``return_token_strs`` adds each
    id's vocabulary string. ``model`` may be left out."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    add_special_tokens: StrictBool | None = None
    return_token_strs: StrictBool = False


class DetokenizeRequest(_Strict):
    """``POST /detokenize``: the text of ``tokens``, special tokens written out (vLLM's: a tokenised chat prompt reads
    back whole), unlike a completion's text."""

    model: str | None = None
    tokens: list[StrictInt]


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | int | None = None) -> dict:
    """The OpenAI error shape ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


#: names pydantic puts in an error's location for the member of a union it tried (not field names)
_UNION_MEMBERS = {"str", "int", "float", "bool", "none", "dict", "list"}


def _is_member(x) -> bool:
    return isinstance(x, str) and (x in _UNION_MEMBERS or "[" in x or x[:1].isupper() or x.startswith("function-"))


def describe_validation_error(exc: ValidationError) -> tuple[str, str | None]:
    """(message, param) for the first problem of a pydantic validation error, in words a client can act on: the
    field's dotted path (list indices included, pydantic's union-member names left out), what it expects and what
    was found."""
    errors = exc.errors()
    e = errors[0]
    path = []
    for x in e.get("loc", ()):
        if _is_member(x):
            break
        path.append(str(x))
    deeper = [err for err in errors if len(err.get("loc", ())) > len(path) + 1]
    if deeper:  # the value had the right shape but something inside it did not fit: report that
        e = max(deeper, key=lambda err: len(err["loc"]))
        path = [str(x) for x in e["loc"] if not _is_member(x)]
        errors = [e]
    param = ".".join(path) or None
    if e.get("type") == "extra_forbidden":
        return (f"unsupported field {param!r}: ninferc does not implement it (see the README's server section for "
                "the fields it accepts)", param)
    if e.get("type") == "missing":
        return f"required field {param!r} is missing", param
    if e.get("type") in ("too_short", "too_long"):  # a list's length (strings' own types are string_too_*)
        ctx = e.get("ctx") or {}
        bound = (f"at least {ctx.get('min_length')}" if e["type"] == "too_short"
                 else f"at most {ctx.get('max_length')}")
        return f"{param} must hold {bound} item(s), found {ctx.get('actual_length')}", param
    got = e.get("input")
    shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
    members = [x for err in errors for x in err.get("loc", ())[len(path):len(path) + 1] if _is_member(x)]
    if len(members) > 1:  # a union: say which shapes are accepted
        wanted = " or ".join(dict.fromkeys("a number" if m in ("int", "float") else
                                           ("a string" if m == "str" else m) for m in members))
        return f"{param}: expected {wanted} (found {shown[:80]})", param
    return f"{param}: {e.get('msg', 'invalid value')} (found {shown[:80]})", param
