"""The HTTP face of ``ninferc serve`` (DESIGN.md §6b, layer 1): FastAPI routes in the OpenAI shapes, chat-template
rendering, SSE streaming, metrics. It never touches the backend: requests go to the engine thread through the
scheduler's thread-safe ``submit`` / ``cancel``, and come back as events on an asyncio queue.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models`` (and ``/v1/models/NAME``),
``POST /tokenize`` and ``/detokenize`` (vLLM's), ``GET /health``, ``GET /metrics``, ``GET /version`` (vLLM's),
``POST /reset_prefix_cache`` (drop
the prefix cache's checkpoints; vLLM's name). Every response carries ``x-request-id`` (the client's, when it sent
one). Errors use the OpenAI shape ``{"error": {"message", "type", "param", "code"}}`` and never carry a traceback.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import ValidationError

from ninferc.errors import NinfercError
from ninferc.runtime.scheduler import (Draining, ErrorEvent, FinishEvent, GenerationRequest, PromptEvent,
                                       ServingError, TokenEvent)
from ninferc.sampling import MAX_TOP_LOGPROBS, SamplingParams
from ninferc.server.protocol import (MAX_CHOICES, MAX_STOP_STRINGS, MAX_STOP_TOKEN_IDS, ChatCompletionRequest, CompletionRequest,
                                     DetokenizeRequest, TokenizeRequest, describe_validation_error, error_body)
from ninferc.server.reasoning import THINK_END, ReasoningSplitter, split_reasoning, starts_in_reasoning
from ninferc.server.tools import (ForcedCallSplitter, ToolCallSplitter, check_tools, forced_call_schema,
                                  history_tool_calls, split_with, template_reads_tools)
from ninferc.structured import GrammarCompiler, StructuredOutputError
from ninferc.tokenizer import TextOutput

#: request bodies above this many bytes get 413 (a 136 KB prompt is far below; 16 MiB is ~4 M tokens of text)
MAX_BODY_BYTES = 16 << 20
#: ``Retry-After`` seconds sent with a 429
RETRY_AFTER_S = 1


class HTTPError(Exception):
    """An error response: status, OpenAI error type, message, param, code."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.type, self.param, self.code, self.headers = status, type_, param, code, headers or {}

    @classmethod
    def of(cls, exc: ServingError) -> "HTTPError":
        headers = {"Retry-After": str(RETRY_AFTER_S)} if exc.status == 429 else None
        return cls(exc.status, str(exc), exc.type, getattr(exc, "param", None), exc.code, headers)

    def response(self) -> JSONResponse:
        return JSONResponse(error_body(str(self), self.type, self.param, self.code), status_code=self.status,
                            headers=self.headers)


@dataclass
class ServerState:
    """What the routes need.

    Attributes:
        engine: the :class:`~ninferc.runtime.engine_loop.EngineLoop`.
        tokenizer: the model's :class:`~ninferc.tokenizer.Tokenizer`.
        chat: the :class:`~ninferc.chat.ChatTemplate`, or None (chat requests then get a 400).
        model_id: the name clients pass as ``model``.
        max_context: tokens one request may hold (prompt + generated).
        eos_ids: ids that end a generation (config / generation_config); ``chat_stop_ids`` adds the template's
            end-of-turn id for chat requests.
        defaults: sampling defaults from ``generation_config.json`` (``temperature``, ``top_p``, ``top_k``), else
            OpenAI's (temperature 1, top_p 1).
        metrics: the :class:`~ninferc.server.metrics.ServerMetrics`.
        api_key: required as ``Authorization: Bearer`` on ``/v1/*``, ``/tokenize``, ``/detokenize`` and
            ``/reset_prefix_cache`` when set (``/health``, ``/metrics`` and ``/version`` stay open).
        reasoning_parser: ``qwen3``: chat answers' ``<think>`` blocks go to ``reasoning`` and ``reasoning_content``
            (:mod:`ninferc.server.reasoning`); None: all text is ``content``.
        tool_parser: ``qwen3_coder`` or ``hermes``: chat requests may carry ``tools`` (``tool_choice`` auto), and the
            calls in an answer go to ``tool_calls`` (:mod:`ninferc.server.tools`); None: a request with tools gets a
            400.
    """

    engine: object
    tokenizer: object
    chat: object
    model_id: str
    max_context: int
    eos_ids: tuple = ()
    chat_stop_ids: tuple = ()
    defaults: dict = field(default_factory=dict)
    metrics: object = None
    api_key: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    created: int = field(default_factory=lambda: int(time.time()))
    reasoning_parser: str | None = None
    tool_parser: str | None = None
    draining: bool = False
    grammar_compiler: object = None


def create_app(state: ServerState):
    """The ASGI application over ``state`` (routes in the module docstring): the FastAPI app inside the request-id
    middleware."""
    app = FastAPI(title="ninferc", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.ninferc = state

    def respond(err: HTTPError):
        if state.metrics is not None:
            state.metrics.http_errors.labels(str(err.status)).inc()
        return err.response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):  # never a traceback to the client
        return respond(HTTPError(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error"))

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError):
        return respond(exc)

    @app.exception_handler(404)
    async def _not_found(request: Request, exc):
        return respond(HTTPError(404, f"no route {request.method} {request.url.path}", code="not_found"))

    @app.exception_handler(405)
    async def _bad_method(request: Request, exc):
        return respond(HTTPError(405, f"{request.method} is not allowed on {request.url.path}",
                                 code="method_not_allowed"))

    @app.get("/health")
    async def health():
        eng = state.engine
        if eng.state == "ready" and not state.draining:
            return {"status": "ok"}
        status = "draining" if state.draining and eng.state == "ready" else eng.state
        body = {"status": status}
        if eng.error:
            body["error"] = eng.error
        return JSONResponse(body, status_code=503)

    @app.get("/version")
    async def version():
        """ninferc's version (vLLM's route; no key needed, as /health)."""
        from ninferc import __version__

        return {"version": __version__}

    @app.get("/metrics")
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return PlainTextResponse(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache(request: Request):
        """Drop every prefix-cache checkpoint (vLLM's route name); the engine does it at its next iteration."""
        _auth(state, request)
        sched = state.engine.scheduler
        if sched is None:
            raise HTTPError(503, f"the engine is not ready ({state.engine.state})", "service_unavailable",
                            code="not_ready")
        if sched.cache is None:
            raise HTTPError(400, "the prefix cache is off (--no-prefix-cache)", code="no_prefix_cache")
        sched.clear_cache()
        return {"status": "ok"}

    def model_card() -> dict:
        return {"id": state.model_id, "object": "model", "created": state.created, "owned_by": "ninferc",
                "max_model_len": state.max_context}

    @app.get("/v1/models")
    async def models(request: Request):
        _auth(state, request)
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model:path}")
    async def model(request: Request, model: str):  # the openai client's models.retrieve(NAME)
        _auth(state, request)
        _check_model(state, model)
        return model_card()

    @app.post("/tokenize")
    async def tokenize(request: Request):  # vLLM's and llama-server's: count a prompt's tokens before sending it
        _auth(state, request)
        req = _parse(TokenizeRequest, await _read_json(request, state.max_body_bytes))
        if req.model is not None:
            _check_model(state, req.model)
        if (req.prompt is None) == (req.messages is None):
            raise HTTPError(400, "give exactly one of prompt (text) or messages (a chat, rendered by the model's "
                                 "template)", param="prompt" if req.prompt is None else "messages")
        if req.messages is not None:
            if not req.messages:
                raise HTTPError(400, "messages is empty", param="messages")
            try:
                tools = check_tools(req.tools) if req.tools and req.tool_choice != "none" else None
            except ValueError as exc:
                raise HTTPError(400, exc.args[0], param=exc.args[1]) from None
            _, text = await _off_loop(_render_chat, state, req.messages, req.chat_template_kwargs or {},
                                      req.add_generation_prompt, tools, req.continue_final_message)
        else:
            for name in ("chat_template_kwargs", "add_generation_prompt", "continue_final_message", "tools",
                         "tool_choice"):
                if name in req.model_fields_set:
                    raise HTTPError(400, "chat_template_kwargs, add_generation_prompt, continue_final_message, tools "
                                         "and tool_choice apply to messages", param=name)
            text = req.prompt
        special = req.add_special_tokens if req.add_special_tokens is not None else req.messages is None
        ids = await _off_loop(state.tokenizer.encode, text, special)
        return {"count": len(ids), "max_model_len": state.max_context, "tokens": ids,
                "token_strs": [state.tokenizer.token_str(t) for t in ids] if req.return_token_strs else None}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        _auth(state, request)
        req = _parse(DetokenizeRequest, await _read_json(request, state.max_body_bytes))
        if req.model is not None:
            _check_model(state, req.model)
        _check_token_ids(req.tokens, state.tokenizer.vocab_size, "tokens")
        return {"prompt": await _off_loop(state.tokenizer.decode, req.tokens, False)}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        _auth(state, request)
        req = _parse(ChatCompletionRequest, await _read_json(request, state.max_body_bytes))
        _check_model(state, req.model)
        _refuse_unsupported(req)
        if req.top_logprobs is not None and not req.logprobs:
            raise HTTPError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        if req.top_logprobs is not None and not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
            raise HTTPError(400, f"top_logprobs must be in 0..{MAX_TOP_LOGPROBS}, found {req.top_logprobs}",
                            param="top_logprobs")
        if not req.include_reasoning and not state.reasoning_parser:
            raise HTTPError(400, "include_reasoning: false needs a server started with --reasoning-parser (without "
                                 "one the reasoning is part of content)", param="include_reasoning")
        _check_group(state, 1, req.n)
        tool_use = _tool_use(state, req)
        tools = tool_use.tools if tool_use else None
        grammar = await _off_loop(_grammar, state, req, tool_use)
        messages, text = await _off_loop(_render_chat, state, req.messages, req.chat_template_kwargs or {},
                                         req.add_generation_prompt, tools, req.continue_final_message)
        ids, history_end = await _off_loop(_encode_chat, state, messages, req.chat_template_kwargs or {}, text, tools)
        if req.max_tokens is not None and req.max_completion_tokens is not None \
                and req.max_tokens != req.max_completion_tokens:
            raise HTTPError(400, f"max_tokens ({req.max_tokens}) and max_completion_tokens "
                                 f"({req.max_completion_tokens}) disagree; give one", param="max_tokens")
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
        thinking = starts_in_reasoning(text) if state.reasoning_parser else None
        gens = [_generation(state, request, req, ids, max_tokens, logprobs, chat=True, index=i,
                            checkpoint_at=() if history_end is None else (history_end,), grammar=grammar,
                            grammar_after_thinking=bool(thinking), prompt_logprobs=req.prompt_logprobs)
                for i in range(req.n)]
        return await _serve(state, request, gens, req, chat=True, thinking=thinking, tool_use=tool_use)

    @app.post("/v1/completions")
    async def completions(request: Request):
        _auth(state, request)
        req = _parse(CompletionRequest, await _read_json(request, state.max_body_bytes))
        _check_model(state, req.model)
        _refuse_unsupported(req)
        if req.best_of not in (None, 1):
            raise HTTPError(400, f"best_of {req.best_of} is not supported (only 1)", param="best_of")
        if req.suffix:
            raise HTTPError(400, "suffix is not supported", param="suffix")
        if req.logprobs is not None and not 0 <= req.logprobs <= MAX_TOP_LOGPROBS:
            raise HTTPError(400, f"logprobs must be in 0..{MAX_TOP_LOGPROBS}, found {req.logprobs}", param="logprobs")
        prompts = _prompts(req.prompt)
        if len(prompts) > 1 and req.stream_options is not None and req.stream_options.continuous_usage_stats:
            raise HTTPError(400, "stream_options.continuous_usage_stats is not supported with several prompts",
                            param="stream_options.continuous_usage_stats")
        _check_group(state, len(prompts), req.n)
        id_lists = await _off_loop(lambda: [_prompt_ids(state, p, "prompt" if len(prompts) == 1 else f"prompt.{k}")
                                            for k, p in enumerate(prompts)])
        grammar = await _off_loop(_grammar, state, req)
        max_tokens = 16 if req.max_tokens is None else req.max_tokens
        # the prompt is scored for prompt_logprobs, and for echo with logprobs (the echoed tokens' logprobs), with
        # the alternatives either asks for
        scored = req.prompt_logprobs
        if req.echo and req.logprobs is not None:
            scored = max(scored or 0, req.logprobs)
        if scored is not None and req.n > 1:
            raise HTTPError(400, f"{'prompt_logprobs' if req.prompt_logprobs is not None else 'echo with logprobs'} "
                                 f"is not supported with n > 1 (found n = {req.n}): ask for the choices in requests of "
                                 "their own (every choice's prompt scores would be the same)", param="n")
        for k, ids in enumerate(id_lists):
            if not ids:
                raise HTTPError(400, "the prompt is empty after tokenisation; give at least one token",
                                param="prompt" if len(prompts) == 1 else f"prompt.{k}")
        echoes = [_echo_text(state, p, ids) for p, ids in zip(prompts, id_lists) for _ in range(req.n)] \
            if req.echo else None
        echo_only = req.echo and max_tokens == 0 and scored is None  # the prompts are the whole answer
        # choice k * n + i: prompt k's choice i (OpenAI's and vLLM's order)
        gens = [_generation(state, request, req, ids, max_tokens, req.logprobs, chat=False, index=k * req.n + i,
                            grammar=grammar, prompt_logprobs=0 if echo_only else scored)
                for k, ids in enumerate(id_lists) for i in range(req.n)]
        if echo_only:
            return _echo_only(state, req, gens, echoes, per_prompt=req.n)
        return await _serve(state, request, gens, req, chat=False, echo=echoes, per_prompt=req.n)

    return _RequestId(app)


class _RequestId:
    """ASGI middleware: every HTTP request gets an id (the client's ``x-request-id`` when it is printable and at most
    128 characters, else a new one) in ``scope["state"]["request_id"]``, and every response carries it in
    ``x-request-id``. (A pure ASGI wrapper, so the routes still see the client's ``http.disconnect``.)"""

    def __init__(self, app):
        self.app = app
        self.state = app.state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = None
        for k, v in scope.get("headers", ()):
            if k == b"x-request-id":
                rid = v.decode("latin-1")
        if not rid or len(rid) > 128 or not rid.isprintable():
            rid = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(msg):
            if msg["type"] == "http.response.start":
                msg = dict(msg)
                msg["headers"] = [*msg.get("headers", []), (b"x-request-id", rid.encode("latin-1"))]
            await send(msg)

        await self.app(scope, receive, send_with_id)


# ------------------------------------------------------------------------------------------------------------------
# request handling
# ------------------------------------------------------------------------------------------------------------------
def _auth(state: ServerState, request: Request) -> None:
    if state.api_key is None:
        return
    got = request.headers.get("authorization", "")
    scheme, _, token = got.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), state.api_key.encode()):
        raise HTTPError(401, "missing or wrong API key: send 'Authorization: Bearer <key>' (--api-key / "
                             "NINFERC_API_KEY)", code="invalid_api_key")


async def _read_json(request: Request, limit: int) -> object:
    clen = request.headers.get("content-length")
    if clen is not None and clen.isdigit() and int(clen) > limit:
        raise HTTPError(413, f"request body of {int(clen)} bytes is over the limit of {limit} bytes",
                        code="request_too_large")
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise HTTPError(413, f"request body is over the limit of {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    body = b"".join(chunks)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPError(400, f"request body is not valid UTF-8 (byte {exc.start})", code="invalid_body") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HTTPError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # json's decoder recurses per nesting level
        raise HTTPError(400, "request body is nested too deeply to parse (Python's recursion limit, "
                             f"{sys.getrecursionlimit()} levels)", code="invalid_json") from None
    if _SURROGATE_ESCAPE.search(text) is None:  # no \uD800-\uDFFF escape: no string to walk the body for
        return obj
    try:
        bad = _lone_surrogate(obj)
    except RecursionError:
        raise HTTPError(400, "request body is nested too deeply to check (Python's recursion limit, "
                             f"{sys.getrecursionlimit()} levels)", code="invalid_json") from None
    if bad is not None:
        path, at = bad
        raise HTTPError(400, f"{path or 'the request body'} holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape "
                             f"without its pair) at character {at}: text must be valid Unicode",
                        param=path or None, code="invalid_body")
    return obj


#: a JSON escape of a UTF-16 surrogate (paired or not): only a body holding one can decode to a lone surrogate
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(obj, path: str = "") -> tuple[str, int] | None:
    """(dotted path, character index) of the first string in a parsed JSON value -- keys and values -- holding a
    lone UTF-16 surrogate, else None. JSON's ``\\uD800``-``\\uDFFF`` escapes decode to such characters when unpaired
    (RFC 8259 section 8.2 allows them; Python's ``json`` keeps them), and no tokenizer or UTF-8 encoder takes them."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            return path, exc.start
        return None
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = f"{path}.{k}" if path else str(k)
            found = _lone_surrogate(k, sub) or _lone_surrogate(v, sub)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found = _lone_surrogate(v, f"{path}.{i}" if path else str(i))
            if found is not None:
                return found
    return None


def _parse(model, obj):
    if not isinstance(obj, dict):
        raise HTTPError(400, f"request body must be a JSON object, found {type(obj).__name__}", code="invalid_body")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        msg, param = describe_validation_error(exc)
        raise HTTPError(400, msg, param=param) from None


def _check_model(state: ServerState, name: str) -> None:
    if name != state.model_id:
        raise HTTPError(404, f"model {name!r} does not exist; this server serves {state.model_id!r}", param="model",
                        code="model_not_found")


def _refuse_unsupported(req) -> None:
    if not 1 <= req.n <= MAX_CHOICES:
        raise HTTPError(400, f"n must be in 1..{MAX_CHOICES}, found {req.n}", param="n")
    if req.n > 1 and req.stream_options is not None and req.stream_options.continuous_usage_stats:
        raise HTTPError(400, "stream_options.continuous_usage_stats is not supported with n > 1",
                        param="stream_options.continuous_usage_stats")
    if req.stream_options is not None and not req.stream:  # as vLLM answers it
        raise HTTPError(400, "stream_options applies only with stream: true", param="stream_options")
    if req.stream_options is not None and req.stream_options.continuous_usage_stats and not \
            req.stream_options.include_usage:  # vLLM ignores it there; a setting that does nothing is refused
        raise HTTPError(400, "stream_options.continuous_usage_stats applies with stream_options.include_usage: true",
                        param="stream_options.continuous_usage_stats")
    if req.store:
        raise HTTPError(400, "store: true is not supported: ninferc keeps no completions", param="store")
    if req.service_tier not in (None, "auto", "default"):
        raise HTTPError(400, f"service_tier {req.service_tier!r} is not supported (auto or default: one tier)",
                        param="service_tier")
    if getattr(req, "modalities", None) not in (None, ["text"]):
        raise HTTPError(400, f"modalities {req.modalities!r} are not supported (text only)", param="modalities")
    if getattr(req, "echo", False) and hasattr(req, "messages"):
        raise HTTPError(400, "echo is not supported on chat completions (vLLM's chat echo repeats the last message, "
                             "which ninferc does not); a completions request echoes its prompt", param="echo")
    if req.prompt_logprobs is not None:
        if not 0 <= req.prompt_logprobs <= MAX_TOP_LOGPROBS:
            raise HTTPError(400, f"prompt_logprobs must be in 0..{MAX_TOP_LOGPROBS} (alternatives per prompt position "
                                 f"besides its own token), found {req.prompt_logprobs}", param="prompt_logprobs")
        if req.stream:  # vLLM's rule too: the scores come with the whole response
            raise HTTPError(400, "prompt_logprobs is not available with stream: true", param="prompt_logprobs")
        if req.n > 1:
            raise HTTPError(400, f"prompt_logprobs is not supported with n > 1 (found n = {req.n}): ask for the "
                                 "choices in requests of their own (every choice's prompt scores would be the same)",
                            param="n")


def _echo_text(state: ServerState, prompt, ids: list[int]) -> str:
    """The text a completion's ``echo`` puts before the answer: the prompt as sent, or for token ids their text with
    special tokens written out (as ``/detokenize`` writes them, and as the echoed ``logprobs.tokens`` list them)."""
    return prompt if isinstance(prompt, str) else state.tokenizer.decode(ids, skip_special_tokens=False)


def _prompts(prompt) -> list:
    """A completions request's prompts, each text or token ids: ``prompt`` is one text, a list of texts, token ids or
    a list of token-id lists (OpenAI's four shapes)."""
    if isinstance(prompt, str):
        return [prompt]
    if prompt and isinstance(prompt[0], (str, list)):
        return list(prompt)
    return [prompt]


def _check_group(state: ServerState, prompts: int, n: int) -> None:
    """400 where a request's choices (``prompts`` x ``n``, each a request of the scheduler's, admitted together) are
    more than the server ever holds at once (``--max-concurrency`` + ``--max-pending``): it could only ever get 429."""
    sched = state.engine.scheduler
    if sched is None:
        return
    room = sched.max_concurrency + sched.max_pending
    if prompts * n > room:
        what = f"{prompts} prompts x n = {n}" if prompts > 1 else f"n = {n}"
        raise HTTPError(400, f"{what} make {prompts * n} requests, more than this server holds at once ({room}: "
                             f"--max-concurrency {sched.max_concurrency} + --max-pending {sched.max_pending}); send "
                             "fewer per request", param="prompt" if prompts > 1 else "n")


async def _off_loop(fn, *args):
    """``fn(*args)`` run in a worker thread and awaited: a chat template's rendering and a prompt's tokenisation (or a
    detokenisation) take time in proportion to the request -- 8 MB of prompt text tokenises in ~13 s -- and on the
    event loop they stopped every other request's stream and ``/health`` meanwhile (a new-user trial, 2026-12-07).
    The tokenizer releases the GIL while it works (:meth:`ninferc.tokenizer.Tokenizer.encode`); a template renders in
    Python, whose threads take turns. Exceptions (HTTPError among them) are raised here."""
    return await asyncio.to_thread(fn, *args)


def _prompt_ids(state: ServerState, prompt, field: str = "prompt") -> list[int]:
    """The token ids of one prompt (text, or token ids checked against the vocabulary; ``field`` names it in a 400)."""
    if isinstance(prompt, str):
        return state.tokenizer.encode(prompt)
    _check_token_ids(prompt, state.engine.backend.vocab_size if state.engine.backend is not None else None, field)
    return list(prompt)


def _check_token_ids(ids: list[int], vocab: int | None, field: str) -> None:
    """HTTPError 400 naming the first of ``ids`` outside 0..vocab - 1 (``vocab`` None: only negatives), its index and
    the range, ``param`` ``field.INDEX``."""
    for i, t in enumerate(ids):
        if t < 0 or (vocab is not None and t >= vocab):
            limit = f"0..{vocab - 1}" if vocab is not None else ">= 0"
            raise HTTPError(400, f"{field}[{i}] = {t} is not a token id ({limit})", param=f"{field}.{i}")


#: chat_template_kwargs the family's templates test with ``is true`` / ``is false``: anything but a boolean would
#: silently take the default
TEMPLATE_BOOLEANS = ("enable_thinking",)


def _render_chat(state: ServerState, messages, kwargs: dict, add_generation_prompt: bool = True,
                 tools: list[dict] | None = None, continue_final: bool = False) -> tuple[list[dict], str]:
    """(the messages as dicts, the rendered prompt text) of a request's validated ``messages`` (pydantic models) with
    its ``chat_template_kwargs`` and the ``tools`` to show the model (None: none). Past assistant turns'
    ``tool_calls`` reach the template with their arguments parsed (:func:`ninferc.server.tools.history_tool_calls`).
    ``continue_final`` (vLLM's ``continue_final_message``): the answer continues the last message, an assistant's,
    so the text ends where that message's text does (HF's ``apply_chat_template(continue_final_message=True)``: cut
    after the last occurrence of the message's text, its end-of-turn left out).
    HTTPError 400: a kwarg the renderer sets or a switch of the wrong type, no chat template, a malformed past tool
    call, a template that raises (its message), or a ``continue_final`` whose conditions do not hold (the generation
    prompt asked for too, a last message that is not an assistant's with text, a template that does not write it
    as given)."""
    _check_template_kwargs(kwargs)
    if state.chat is None:
        raise HTTPError(400, "this model has no chat template (neither chat_template.jinja nor a chat_template in "
                             "tokenizer_config.json); use /v1/completions with a prompt", param="messages",
                        code="no_chat_template")
    from ninferc.chat import ChatTemplateError

    dicts = [m.model_dump(exclude_none=True) for m in messages]
    try:
        history_tool_calls(dicts)
    except ValueError as exc:
        raise HTTPError(400, exc.args[0], param=exc.args[1]) from None
    final = _final_text(dicts, add_generation_prompt) if continue_final else None
    try:
        text = state.chat.render(dicts, add_generation_prompt=add_generation_prompt, tools=tools, **kwargs)
    except ChatTemplateError as exc:
        raise HTTPError(400, str(exc), param="messages") from None
    except TypeError as exc:
        raise HTTPError(400, f"chat_template_kwargs: {exc}", param="chat_template_kwargs") from None
    if final is not None:
        end = text.rfind(final)
        if end < 0:
            raise HTTPError(400, "continue_final_message: the chat template does not write the last message's text as "
                                 "given, so there is no end of it to continue from", param=f"messages.{len(dicts) - 1}")
        text = text[:end + len(final)]
    return dicts, text


def _final_text(dicts: list[dict], add_generation_prompt: bool) -> str:
    """The text of the last message, which ``continue_final_message`` continues; HTTPError 400 where it cannot."""
    if add_generation_prompt:
        raise HTTPError(400, "continue_final_message continues the last message, and add_generation_prompt (default "
                             "true) starts a new one: send add_generation_prompt: false with it",
                        param="continue_final_message")
    last, i = dicts[-1], len(dicts) - 1
    content = last.get("content")
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or ())
    if last.get("role") != "assistant" or not text:
        what = "an empty one" if last.get("role") == "assistant" else f"a {last.get('role')!r} one"
        raise HTTPError(400, f"continue_final_message continues an assistant's text, and the last message "
                             f"(messages[{i}]) is {what}", param=f"messages.{i}")
    return text


@dataclass
class ToolUse:
    """A chat request's tool calling: the ``tools`` its prompt shows the model, the parser of the answer's calls
    (``--tool-call-parser``; None for a forced call) and ``parallel_tool_calls``; ``forced``: ``tool_choice``
    ``"required"`` or a named function's name (the answer is constrained to the call's JSON,
    :func:`~ninferc.server.tools.forced_call_schema`), None for ``auto``."""

    tools: list[dict]
    parser: str | None
    parallel: bool = True
    forced: str | None = None

    def splitter(self):
        """A fresh splitter of one answer's content into text and calls."""
        if self.forced is not None:
            return ForcedCallSplitter(None if self.forced == "required" else self.forced)
        return ToolCallSplitter(self.parser, self.tools, self.parallel)

    def schema(self) -> dict | None:
        """The JSON schema a forced call's answer is constrained to (None for ``auto``)."""
        if self.forced is None:
            return None
        return forced_call_schema(self.tools, None if self.forced == "required" else self.forced, self.parallel)


def _tool_use(state: ServerState, req) -> ToolUse | None:
    """The :class:`ToolUse` of a chat request, or None where it offers no tools or ``tool_choice`` is ``"none"`` (the
    tools are then left out of the prompt: the model is not to call any). ``"required"`` or a named function force a
    call (constrained decoding; no parser needed). HTTPError 400: ``tool_choice`` without tools or malformed, a
    function it names that the tools lack, a malformed tool, or ``auto`` tools on a server started without
    ``--tool-call-parser``."""
    choice = req.tool_choice
    if not req.tools:
        if choice not in (None, "none"):
            raise HTTPError(400, f"tool_choice {json.dumps(choice)[:80]} needs tools", param="tool_choice")
        return None
    if choice == "none":
        return None
    forced = None
    if choice == "required":
        forced = "required"
    elif isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
                or set(choice) != {"type", "function"} or set(fn) != {"name"}:
            raise HTTPError(400, f"tool_choice {json.dumps(choice)[:120]}: a named function is "
                                 "{\"type\": \"function\", \"function\": {\"name\": ...}}", param="tool_choice")
        forced = fn["name"]
    elif choice not in (None, "auto"):
        raise HTTPError(400, f"tool_choice {json.dumps(choice)[:80]} is not one of none, auto, required or a named "
                             "function", param="tool_choice")
    if forced is not None and (state.chat is None or not template_reads_tools(state.chat.source)):
        raise HTTPError(400, f"tool_choice {json.dumps(choice)[:80]}: this model's chat template never shows tools to "
                             "the model, so it could not know the function it is made to call", param="tool_choice")
    if forced is None and state.tool_parser is None:
        raise HTTPError(400, "tools need a server started with --tool-call-parser (qwen3_coder for Qwen3.5 / 3.6 / "
                             "3.8 checkpoints, hermes for Qwen3's); this one cannot read the calls in an answer",
                        param="tools")
    try:
        tools = check_tools(req.tools)
    except ValueError as exc:
        raise HTTPError(400, exc.args[0], param=exc.args[1]) from None
    parallel = True if req.parallel_tool_calls is None else req.parallel_tool_calls
    use = ToolUse(tools, state.tool_parser, parallel, forced)
    try:
        use.schema()  # a named function the tools lack
    except ValueError as exc:
        raise HTTPError(400, exc.args[0], param=exc.args[1]) from None
    return use


def _check_template_kwargs(kwargs: dict) -> None:
    """400 for a ``chat_template_kwargs`` entry that would be ignored or misread: a variable the renderer sets itself
    (:data:`ninferc.chat.RENDERER_VARIABLES`; checked here too so that a model without a template says so as well), or
    a value of a switch in :data:`TEMPLATE_BOOLEANS` other than true, false or null (null: the template's default)."""
    from ninferc.chat import RENDERER_VARIABLES

    for k in RENDERER_VARIABLES:
        if k in kwargs:
            raise HTTPError(400, f"chat_template_kwargs.{k}: the server sets {k!r} itself",
                            param="chat_template_kwargs")
    for k in TEMPLATE_BOOLEANS:
        if kwargs.get(k) is not None and not isinstance(kwargs[k], bool):  # null: the template's default
            raise HTTPError(400, f"chat_template_kwargs.{k} must be true or false, found {kwargs[k]!r}",
                            param="chat_template_kwargs")


def _encode_chat(state: ServerState, messages: list[dict], kwargs: dict, text: str, tools: list[dict] | None = None
                 ) -> tuple[list[int], int | None]:
    """The token ids of a rendered chat prompt ``text``, and where its messages end and the generation prompt
    (``<|im_start|>assistant ...``) begins -- the position of the prefix checkpoint a conversation's next turn can
    reuse: that turn's prompt repeats these messages, then the answer as the template renders a past turn (its
    reasoning dropped, or the thinking switch's empty block omitted), which need not equal what was generated. None
    when the prefix cache is off, the template without the generation prompt is not a prefix of ``text``, or no
    token boundary falls there. ``tools``: those the prompt shows (:func:`_render_chat`'s)."""
    sched = state.engine.scheduler
    if sched is None or sched.cache is None:
        return state.tokenizer.encode(text), None
    from ninferc.chat import ChatTemplateError

    try:
        hist = state.chat.render(messages, add_generation_prompt=False, tools=tools, **kwargs)
    except (ChatTemplateError, TypeError):
        hist = ""
    if not hist or len(hist) >= len(text) or not text.startswith(hist):
        return state.tokenizer.encode(text), None
    return state.tokenizer.encode_split(text, len(hist))


def _generation(state: ServerState, request: Request, req, ids: list[int], max_tokens, logprobs, *,
                chat: bool, checkpoint_at: tuple[int, ...] = (), index: int = 0, grammar: str | None = None,
                grammar_after_thinking: bool = False, prompt_logprobs: int | None = None) -> GenerationRequest:
    """The scheduler request of a validated API request (sampling parameters checked; 400 naming the field;
    ``checkpoint_at``: :class:`GenerationRequest`'s). ``index``: which of the request's ``n`` choices (its request
    id gets ``-INDEX`` and its seed, where the request gives one, ``seed + INDEX`` mod 2**64, so each choice is a
    draw of its own and a request reproduces its choices). ``grammar``: the request's compiled ``response_format``
    (:func:`_grammar`), each choice constrained by a state of its own; with ``grammar_after_thinking`` (the prompt
    opened a ``<think>`` block and the server splits reasoning) from the token that closes the block on (vLLM's rule:
    the reasoning is free, the answer constrained). ``prompt_logprobs``: None, or score the prompt with this many
    alternatives per position (:attr:`GenerationRequest.prompt_logprobs`; ``max_tokens`` may then be 0)."""
    d = state.defaults
    temperature = req.temperature if req.temperature is not None else d.get("temperature", 1.0)
    seed = (req.seed + index) % 2**64 if req.seed is not None else secrets.randbits(63)
    top_k = req.top_k if req.top_k is not None else int(d.get("top_k", 0))
    vocab = state.engine.backend.vocab_size if state.engine.backend is not None else None
    logit_bias = _logit_bias(req.logit_bias, vocab)
    if top_k < -1:
        raise HTTPError(400, f"top_k must be a count of tokens >= 1, or 0 or -1 for no limit, found {top_k}",
                        param="top_k")
    try:
        params = SamplingParams(
            temperature=float(temperature),
            top_k=max(top_k, 0),  # -1: vLLM's "no limit", which its clients send
            top_p=float(req.top_p if req.top_p is not None else d.get("top_p", 1.0)),
            min_p=float(req.min_p if req.min_p is not None else 0.0),
            seed=seed,
            presence_penalty=float(req.presence_penalty or 0.0),
            frequency_penalty=float(req.frequency_penalty or 0.0),
            repetition_penalty=float(req.repetition_penalty if req.repetition_penalty is not None else 1.0),
            logit_bias=logit_bias, min_tokens=req.min_tokens)
    except NinfercError as exc:
        msg = str(exc)
        raise HTTPError(400, msg, param=msg.split(" ", 1)[0].split("[")[0].rstrip(":")) from None
    if vocab is not None and params.top_k > vocab:
        raise HTTPError(400, f"top_k {params.top_k} is more than the vocabulary ({vocab} tokens); 0 = no limit",
                        param="top_k")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stop) > MAX_STOP_STRINGS:
        raise HTTPError(400, f"stop: {len(stop)} strings, at most {MAX_STOP_STRINGS}", param="stop")
    for i, s in enumerate(stop):
        if not s:
            raise HTTPError(400, "stop holds an empty string, which no text can end with; leave it out",
                            param="stop" if isinstance(req.stop, str) else f"stop.{i}")
    stop_ids = list(req.stop_token_ids or [])
    if len(stop_ids) > MAX_STOP_TOKEN_IDS:
        raise HTTPError(400, f"stop_token_ids: {len(stop_ids)} ids, at most {MAX_STOP_TOKEN_IDS}",
                        param="stop_token_ids")
    for t in stop_ids:
        if t < 0 or (vocab is not None and t >= vocab):
            raise HTTPError(400, f"stop_token_ids: {t} is not a token id", param="stop_token_ids")
    if not req.ignore_eos:
        stop_ids += list(state.eos_ids) + (list(state.chat_stop_ids) if chat else [])
    req_max = max_tokens
    if max_tokens is not None and max_tokens < (0 if prompt_logprobs is not None else 1):
        scoring = " (0 only with echo or prompt_logprobs)" if not max_tokens else ""
        raise HTTPError(400, f"max_tokens must be at least 1{scoring}, found {max_tokens}", param="max_tokens")
    sched = state.engine.scheduler
    if sched is None:
        raise HTTPError(503, f"the engine is not ready ({state.engine.state})", "service_unavailable",
                        code="not_ready")
    try:
        max_tokens = sched.check(len(ids), max_tokens, prompt_param="messages" if chat else "prompt")
    except ServingError as exc:
        raise HTTPError.of(exc) from None
    if req.min_tokens > max_tokens:  # vLLM's rule; also where max_tokens is what the context leaves
        raise HTTPError(400, f"min_tokens ({req.min_tokens}) is more than max_tokens ({max_tokens}"
                        f"{'' if req_max is not None else ': what the context leaves after the prompt'})",
                        param="min_tokens")
    rid = request.state.request_id + (f"-{index}" if index else "")
    if sched.has(rid):  # a client reusing an x-request-id while the first is in flight: keep ids unique
        rid = f"{rid}-{uuid.uuid4().hex[:8]}"
    output = TextOutput(state.tokenizer, stop, include_stop=req.include_stop_str_in_output,
                        skip_special_tokens=req.skip_special_tokens, min_tokens=req.min_tokens)
    after = (THINK_END, state.tokenizer.stream(skip_special_tokens=False)) if grammar_after_thinking else None
    constraint = None if grammar is None else _compiler(state).constraint(grammar, after=after, stop_ids=stop_ids)
    return GenerationRequest(request_id=rid, prompt_ids=ids, max_tokens=max_tokens,
                             params=params, stop_ids=frozenset(stop_ids), logprobs=logprobs,
                             output=output, checkpoint_at=checkpoint_at, constraint=constraint,
                             prompt_logprobs=prompt_logprobs,
                             labels={"endpoint": "chat.completions" if chat else "completions",
                                     "stream": bool(req.stream)})


_COMPILER_LOCK = threading.Lock()


def _compiler(state: ServerState) -> GrammarCompiler:
    """The server's :class:`~ninferc.structured.GrammarCompiler`, built on first use (the model's vocabulary width is
    known once the engine has loaded; the end ids are the EOS ids and the chat template's end of turn)."""
    with _COMPILER_LOCK:
        if state.grammar_compiler is None:
            be = state.engine.backend
            if be is None:
                raise HTTPError(503, f"the engine is not ready ({state.engine.state})", "service_unavailable",
                                code="not_ready")
            ends = tuple(state.eos_ids) + tuple(state.chat_stop_ids)
            if not ends:
                raise HTTPError(400, "this model names no EOS id, so a constrained answer (response_format, a forced "
                                     "tool call) could never end", param="response_format")
            state.grammar_compiler = GrammarCompiler(state.tokenizer.to_json(), be.vocab_size, ends)
        return state.grammar_compiler


def _grammar(state: ServerState, req, tool_use: ToolUse | None = None) -> str | None:
    """The compiled ``response_format`` of a request (:meth:`~ninferc.structured.GrammarCompiler.grammar`), or of
    its forced tool call (:meth:`ToolUse.schema`), or None. HTTPError 400: a malformed format or a schema that cannot
    be enforced, and the combinations a grammar cannot honour (tools with a ``response_format`` -- the answer cannot
    be both --, ``min_tokens`` -- the value may end before --, ``ignore_eos`` -- nothing would end the answer)."""
    if tool_use is not None and req.response_format not in (None, {"type": "text"}):
        raise HTTPError(400, "response_format and tools cannot be combined: a constrained answer cannot hold a "
                             "tool call; give one (or tool_choice: none)", param="response_format")
    schema = tool_use.schema() if tool_use is not None else None
    if schema is not None:
        fmt, what = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}, "tool_choice"
    elif req.response_format in (None, {"type": "text"}):
        return None
    else:
        fmt, what = req.response_format, None
    name = what or "response_format"
    if req.min_tokens:
        raise HTTPError(400, f"min_tokens cannot be combined with {name}: the value may be complete before "
                             "min_tokens tokens", param="min_tokens")
    if req.ignore_eos:
        raise HTTPError(400, f"ignore_eos cannot be combined with {name}: a constrained answer ends with EOS",
                        param="ignore_eos")
    try:
        return _compiler(state).grammar(fmt)
    except StructuredOutputError as exc:
        if what:  # a tool's parameters schema the compiler refused
            raise HTTPError(400, f"tool_choice {tool_use.forced!r}: the tools' parameters cannot be enforced: "
                                 f"{str(exc).split(': ', 1)[-1]}", param="tools") from None
        raise HTTPError(400, str(exc), param=exc.param) from None


def _logit_bias(bias: dict | None, vocab: int | None) -> tuple:
    """``logit_bias`` of a request as :class:`~ninferc.sampling.SamplingParams` takes it: ``((id, bias), ...)`` in
    id order. Keys are token ids written as decimal strings (OpenAI's JSON), each below ``vocab``; the values'
    range is checked by ``SamplingParams`` (:data:`~ninferc.sampling.LOGIT_BIAS_RANGE`).

    Raises:
        HTTPError: 400 naming the key that is not a token id, or is one the vocabulary lacks."""
    out = {}
    for key, value in (bias or {}).items():
        k = key
        if not (k.isdigit() and k.isascii()):
            raise HTTPError(400, f"logit_bias: key {key!r} is not a token id (a string of digits, e.g. \"151645\")",
                            param="logit_bias")
        tok = int(k)
        if vocab is not None and tok >= vocab:
            raise HTTPError(400, f"logit_bias: token id {tok} is past the vocabulary ({vocab} tokens)",
                            param="logit_bias")
        if tok in out:
            raise HTTPError(400, f"logit_bias: token id {tok} is given twice ({key!r})", param="logit_bias")
        out[tok] = value
    return tuple(sorted(out.items()))


def _client_gone() -> JSONResponse:
    """What a handler returns when its client has gone (nobody reads it; nginx's "client closed request" status)."""
    return JSONResponse(error_body("client disconnected", code="client_disconnected"), status_code=499)


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (an ``http.disconnect`` message)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


async def _next_or_disconnect(q: asyncio.Queue, watch: asyncio.Task):
    """The next engine event, or None when the client disconnected first."""
    get = asyncio.ensure_future(q.get())
    done, _ = await asyncio.wait({get, watch}, return_when=asyncio.FIRST_COMPLETED)
    if get in done:
        return get.result()
    get.cancel()
    return None


async def _serve(state: ServerState, request: Request, gens: list[GenerationRequest], req, *, chat: bool,
                 thinking: bool | None = None, tool_use: ToolUse | None = None, echo: list[str] | None = None,
                 per_prompt: int | None = None):
    """Submit the request's choices (``gens[i]`` choice ``i``; one unless ``n`` > 1 or several prompts) and answer.
    ``thinking``: with a reasoning parser, whether the answer starts inside a ``<think>`` block (None: no parser);
    ``tool_use``: the request's tool calling (None: none); ``echo``: per choice, a completion's echoed prompt text
    (None: no echo); ``per_prompt``: choices per prompt (``n``; default all of them: one prompt), whose prompt the
    usage counts once.

    All choices are submitted or none (:meth:`~ninferc.runtime.scheduler.Scheduler.submit_group`: a group over the
    room left is a 429). The whole response lists the choices in order, the prompt counted once in the usage and the
    choices' tokens summed. A stream starts with the first event of any choice (an error before it is the answer,
    with its status, not an error inside a 200 stream), sends every choice's role chunk, then the choices' chunks as
    their tokens come, each choice's finish chunk last, and ends after the last choice's; a choice ended by an error
    mid-stream sends the error and ends the stream. The client leaving cancels every choice within one iteration."""
    if state.draining:
        raise HTTPError.of(Draining("the server is shutting down and admits no new requests"))
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()

    def sink_of(i):
        def sink(ev):
            try:
                loop.call_soon_threadsafe(q.put_nowait, (i, ev))
            except RuntimeError:  # the event loop has closed (shutdown): nobody is listening any more
                pass
        return sink

    for i, g in enumerate(gens):
        g.sink = sink_of(i)
    sched = state.engine.scheduler
    try:
        sched.submit_group(gens)
    except ServingError as exc:
        raise HTTPError.of(exc) from None
    fmts = [_Formatter(state, req, g, chat, thinking, tool_use, index=i, echo=None if echo is None else echo[i])
            for i, g in enumerate(gens)]
    for f in fmts[1:]:  # one response: choice 0's id and time
        f.id, f.created = fmts[0].id, fmts[0].created
    ended = [False] * len(gens)  # the engine has ended the choice (its finish or error event arrived)
    watch = asyncio.ensure_future(_disconnected(request))

    def cancel_rest():
        for i, g in enumerate(gens):
            if not ended[i]:
                sched.cancel(g.request_id)

    def usage(finishes: list) -> dict:
        return _usage(fmts, finishes, per_prompt)

    handed_over = False  # the streaming generator owns the request from then on
    try:
        if not req.stream:
            finishes = [None] * len(gens)
            while not all(ended):
                got = await _next_or_disconnect(q, watch)
                if got is None:
                    return _client_gone()
                i, ev = got
                if isinstance(ev, TokenEvent):
                    fmts[i].add(ev)
                elif isinstance(ev, PromptEvent):
                    fmts[i].prompt_scores = ev.scores
                elif isinstance(ev, ErrorEvent):
                    ended[i] = True
                    raise HTTPError.of(ev.error)
                elif isinstance(ev, FinishEvent):
                    ended[i], finishes[i] = True, ev
            whole = [f.response(ev) for f, ev in zip(fmts, finishes)]
            return {**whole[0], "choices": [w["choices"][0] for w in whole], "usage": usage(finishes)}
        first = await _next_or_disconnect(q, watch)  # the stream starts with it (the request was admitted)
        if first is None:
            return _client_gone()
        if isinstance(first[1], ErrorEvent):
            ended[first[0]] = True
            raise HTTPError.of(first[1].error)
        handed_over = True
    finally:
        if not handed_over:
            cancel_rest()  # the client left, an error answered, or this handler failed
            watch.cancel()
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    fmts[0].continuous_usage = include_usage and req.stream_options.continuous_usage_stats  # n = 1 only

    async def events():
        finishes = [None] * len(gens)
        try:
            if chat:
                for f in fmts:
                    yield f.sse(f.role_chunk())
            got = first
            while True:
                i, ev = got
                if isinstance(ev, PromptEvent):
                    fmts[i].prompt_scores = ev.scores
                elif fmts[i].echo_pending and isinstance(ev, (TokenEvent, FinishEvent)):  # the echoed prompt first
                    yield fmts[i].sse(fmts[i].echo_chunk())
                if isinstance(ev, TokenEvent):
                    chunk = fmts[i].delta_chunk(ev)
                    if chunk is not None:
                        yield fmts[i].sse(chunk)
                elif isinstance(ev, FinishEvent):
                    ended[i], finishes[i] = True, ev
                    yield fmts[i].sse(fmts[i].finish_chunk(ev))
                    if all(ended):
                        if include_usage:
                            yield fmts[0].sse(fmts[0].usage_chunk(usage(finishes)))
                        yield b"data: [DONE]\n\n"
                        return
                elif isinstance(ev, ErrorEvent):
                    ended[i] = True
                    yield fmts[i].sse(error_body(str(ev.error), ev.error.type, None, ev.error.code))
                    yield b"data: [DONE]\n\n"
                    return
                got = await _next_or_disconnect(q, watch)
                if got is None:
                    return
        finally:
            cancel_rest()
            watch.cancel()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _usage(fmts: list, finishes: list, per_prompt: int | None) -> dict:
    """The usage of a request's choices (their formatters and finish events, ``per_prompt`` choices per prompt, default
    all: one prompt): each prompt counted once, the choices' generated tokens summed."""
    u = [f.usage(ev) for f, ev in zip(fmts, finishes)]
    firsts = u[::per_prompt or len(u)]
    prompt = sum(x["prompt_tokens"] for x in firsts)
    done = sum(x["completion_tokens"] for x in u)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done,
            "prompt_tokens_details": {"cached_tokens": sum(x["prompt_tokens_details"]["cached_tokens"] for x in firsts)}}


def _echo_only(state: ServerState, req, gens: list[GenerationRequest], echoes: list[str], per_prompt: int):
    """A completion that echoes its prompts with ``max_tokens`` 0 and no logprobs: the prompts are the whole answer,
    so it is answered here (validated as any request, nothing for the engine to compute: no log line), whole or
    streamed (each choice's echo chunk, then its finish chunk)."""
    from ninferc.runtime.scheduler import RequestStats

    fmts = [_Formatter(state, req, g, False, index=i, echo=e) for i, (g, e) in enumerate(zip(gens, echoes))]
    for f in fmts[1:]:
        f.id, f.created = fmts[0].id, fmts[0].created
    finishes = [FinishEvent("length", "", RequestStats(g.request_id, len(g.prompt_ids), finish_reason="length"))
                for g in gens]
    if not req.stream:
        whole = [f.response(ev) for f, ev in zip(fmts, finishes)]
        return {**whole[0], "choices": [w["choices"][0] for w in whole], "usage": _usage(fmts, finishes, per_prompt)}

    def events():
        for f, ev in zip(fmts, finishes):
            yield f.sse(f.echo_chunk())
            yield f.sse(f.finish_chunk(ev))
        if req.stream_options and req.stream_options.include_usage:
            yield fmts[0].sse(fmts[0].usage_chunk(_usage(fmts, finishes, per_prompt)))
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class _Formatter:
    """Builds the OpenAI response objects of one request (chat or completions, whole or streamed)."""

    def __init__(self, state: ServerState, req, gen: GenerationRequest, chat: bool, thinking: bool | None = None,
                 tool_use: ToolUse | None = None, index: int = 0, echo: str | None = None):
        self.state, self.req, self.gen, self.chat = state, req, gen, chat
        #: the choice's index among the request's ``n``
        self.index = index
        #: the request's tool calling (chat only), and the stream's splitter of the content into text and calls
        self.tool_use = tool_use if chat else None
        self.tool_splitter = self.tool_use.splitter() if self.tool_use else None
        #: with a reasoning parser (chat only): whether the answer starts inside a <think> block; the stream's splitter
        self.thinking = thinking if chat else None
        self.splitter = ReasoningSplitter(thinking) if self.thinking is not None else None
        #: the request's ``include_reasoning`` (vLLM's): false drops the reasoning from the answer
        self.include_reasoning = bool(getattr(req, "include_reasoning", True))
        self.id = ("chatcmpl-" if chat else "cmpl-") + gen.request_id
        self.created = int(time.time())
        self.text: list[str] = []
        self.sampled: list = []
        #: streaming with ``stream_options.continuous_usage_stats`` (vLLM's extension): every chunk carries the usage
        #: so far (``completion_tokens`` counts the tokens generated, shown or held back)
        self.continuous_usage = False
        self.generated = 0
        #: a completion's echoed prompt text (the answer's text starts with it); streamed, it is the first chunk
        self.echo = echo
        self.echo_pending = echo is not None
        if echo is not None:
            self.text.append(echo)
        #: the scored prompt (PromptScore per position 1 .. n - 1) of a request with prompt_logprobs
        self.prompt_scores: list | None = None
        #: the generated tokens' text offsets so far (:meth:`_offsets`)
        self._gen_decoder = None
        self._gen_pos = 0

    def add(self, ev: TokenEvent) -> None:
        self.text.append(ev.text)
        self.sampled.extend(ev.sampled)

    # -- pieces ---------------------------------------------------------------------------------------------
    def _token_str(self, t: int) -> str:
        """The text of one token (a special token, e.g. a stop id, as its literal string)."""
        return self.state.tokenizer.decode([t]) or self.state.tokenizer.token_str(t)

    def _offsets(self, ids) -> list[int]:
        """The character offsets in the answer's text where the generated tokens ``ids`` (the next ones, in order:
        each token is fed once) begin: an incremental detokeniser's running length, after the echoed prompt, so
        tokens inside one multi-byte character share its offset and the offsets never decrease."""
        if self._gen_decoder is None:
            self._gen_decoder = self.state.tokenizer.stream(
                skip_special_tokens=getattr(self.req, "skip_special_tokens", True))
            self._gen_pos = len(self.echo or "")
        out = []
        for t in ids:
            out.append(self._gen_pos)
            self._gen_pos += len(self._gen_decoder.step(t))
        return out

    def _logprobs(self, sampled: list):
        if self.gen.logprobs is None:
            return None
        if self.chat:
            content = []
            for s in sampled:
                tok = self._token_str(s.token)
                content.append({"token": tok, "logprob": s.logprob, "bytes": list(tok.encode()),
                                "top_logprobs": [{"token": self._token_str(i), "logprob": lp,
                                                  "bytes": list(self._token_str(i).encode())} for i, lp in s.top]})
            return {"content": content}
        toks = [self._token_str(s.token) for s in sampled]
        offs = self._offsets([s.token for s in sampled])
        # the legacy API's top_logprobs always hold the sampled token too (up to logprobs + 1 entries); keyed by
        # text, so tokens of the same text (pieces of one multibyte character all read "\ufffd") share an entry,
        # which the sampled token's own logprob wins
        tops = []
        for t, s in zip(toks, sampled):
            d = {self._token_str(i): lp for i, lp in s.top}
            d[t] = s.logprob
            tops.append(d)
        return {"tokens": toks, "token_logprobs": [s.logprob for s in sampled], "top_logprobs": tops,
                "text_offset": offs}

    def usage(self, ev: FinishEvent) -> dict:
        st = ev.stats
        return {"prompt_tokens": st.prompt_tokens, "completion_tokens": st.generated,
                "total_tokens": st.prompt_tokens + st.generated,
                "prompt_tokens_details": {"cached_tokens": st.cached_tokens}}

    # -- whole response -------------------------------------------------------------------------------------
    def response(self, ev: FinishEvent) -> dict:
        text = "".join(self.text) + ev.text
        if self.chat:
            message = {"role": "assistant", "content": text}
            if self.thinking is not None:
                reasoning, message["content"] = split_reasoning(text, self.thinking)
                message.update(self._reasoning(reasoning if self.include_reasoning else None))
            calls = []
            if self.tool_use and message["content"] is not None:
                message["content"], calls = split_with(self.tool_use.splitter(), message["content"])
                if calls:
                    message["tool_calls"] = [c.message() for c in calls]
            choice = {"index": self.index, "message": message, "logprobs": self._logprobs(self.sampled),
                      "finish_reason": self._finish_reason(ev, calls)}
            obj = "chat.completion"
        else:
            choice = {"index": self.index, "text": text, "logprobs": self._completion_logprobs(),
                      "finish_reason": ev.reason}
            if self.req.prompt_logprobs is not None:
                choice["prompt_logprobs"] = self._prompt_logprobs()
            obj = "text_completion"
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.state.model_id,
               "choices": [choice], "usage": self.usage(ev)}
        if self.chat and self.req.prompt_logprobs is not None:  # vLLM's place for a chat's: the response's
            out["prompt_logprobs"] = self._prompt_logprobs()
        return out

    # -- the scored prompt ----------------------------------------------------------------------------------
    def _prompt_logprobs(self) -> list:
        """vLLM's ``prompt_logprobs``: per prompt position None (the first) or ``{token id (text): {"logprob",
        "rank", "decoded_token"}}`` for the prompt's token and the ``prompt_logprobs`` most likely ones."""
        k = self.req.prompt_logprobs
        out: list = [None]
        for sc in self.prompt_scores or []:
            d = {str(sc.token): {"logprob": sc.logprob, "rank": sc.rank, "decoded_token": self._token_str(sc.token)}}
            for r, (i, lp) in enumerate(sc.top[:k], start=1):
                d.setdefault(str(i), {"logprob": lp, "rank": r, "decoded_token": self._token_str(i)})
            out.append(d)
        return out

    def _echo_logprobs(self) -> dict:
        """The echoed prompt's part of a completion's ``logprobs`` (OpenAI's legacy shape): its tokens, None for the
        first token's logprob and alternatives (nothing precedes it), then each token's logprob and the ``logprobs``
        most likely alternatives (the token's own entry included), offsets from the text's start."""
        k = self.gen.logprobs or 0
        ids = self.gen.prompt_ids
        toks = [self._token_str(t) for t in ids]
        dec = self.state.tokenizer.stream(skip_special_tokens=False)  # the echo writes special tokens out
        offs, o = [], 0
        for t in ids:
            offs.append(o)
            o += len(dec.step(t))
        lps: list = [None]
        tops: list = [None]
        for tok, sc in zip(toks[1:], self.prompt_scores or []):
            d = {self._token_str(i): lp for i, lp in sc.top[:k]}
            d[tok] = sc.logprob
            lps.append(sc.logprob)
            tops.append(d)
        return {"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}

    def _completion_logprobs(self):
        """A whole completion's ``logprobs``: its answer's tokens, after the echoed prompt's where it echoes."""
        if self.gen.logprobs is None:
            return None
        gen = self._logprobs(self.sampled)
        if self.echo is None:
            return gen
        head = self._echo_logprobs()
        return {key: head[key] + gen[key] for key in head}

    def echo_chunk(self) -> dict:
        """The stream's first chunk of a completion that echoes its prompt: the prompt's text (and its logprobs)."""
        self.echo_pending = False
        lp = self._echo_logprobs() if self.gen.logprobs is not None else None
        return self._chunk({"index": self.index, "text": self.echo, "logprobs": lp, "finish_reason": None})

    # -- streaming ------------------------------------------------------------------------------------------
    @staticmethod
    def sse(obj) -> bytes:
        return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"

    def _chunk(self, choice: dict | None, **extra) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.state.model_id,
               "choices": [] if choice is None else [choice]}
        if self.continuous_usage:
            p = len(self.gen.prompt_ids)
            out["usage"] = {"prompt_tokens": p, "completion_tokens": self.generated, "total_tokens": p + self.generated}
        out.update(extra)
        return out

    def role_chunk(self) -> dict:
        return self._chunk({"index": self.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                            "finish_reason": None})

    def delta_chunk(self, ev: TokenEvent) -> dict | None:
        self.generated += len(ev.ids)
        if not ev.text and self.gen.logprobs is None:
            return None  # nothing to show yet (an unfinished character, a held-back stop-string prefix, a stop id)
        self.text.append(ev.text)
        lp = self._logprobs(ev.sampled)
        if self.chat:
            delta = self._delta(*self._split(ev.text))
            if not delta and lp is None:
                return None  # all of it held back (a marker's possible start)
            return self._chunk({"index": self.index, "delta": delta or {"content": ""}, "logprobs": lp,
                                "finish_reason": None})
        return self._chunk({"index": self.index, "text": ev.text, "logprobs": lp, "finish_reason": None})

    def finish_chunk(self, ev: FinishEvent) -> dict:
        self.generated = ev.stats.generated
        if self.chat:
            delta = self._delta(*self._split(ev.text, last=True))
            return self._chunk({"index": self.index, "delta": delta, "logprobs": None,
                                "finish_reason": self._finish_reason(ev, self.tool_splitter.calls
                                                                     if self.tool_splitter else [])})
        return self._chunk({"index": self.index, "text": ev.text, "logprobs": None, "finish_reason": ev.reason})

    def _split(self, text: str, last: bool = False) -> tuple[str, str, list]:
        """A streamed chat answer's new ``text`` through the reasoning parser's splitter, then its content through the
        tool-call splitter (each where the request has one): ``(reasoning, content, calls)`` decided so far;
        ``last``: the answer's end, what the splitters held back flushed."""
        reasoning, content = self.splitter.feed(text) if self.splitter else ("", text)
        if last and self.splitter:
            r, c = self.splitter.flush()
            reasoning, content = reasoning + r, content + c
        calls = []
        if self.tool_splitter:
            content, calls = self.tool_splitter.feed(content)
            if last:
                held, more = self.tool_splitter.flush()
                content, calls = content + held, calls + more
        return reasoning, content, calls

    @staticmethod
    def _reasoning(text: str | None) -> dict:
        """The reasoning's fields: vLLM's ``reasoning`` (its name since vLLM PR 27752, 2025-10) and
        ``reasoning_content`` (the earlier name, DeepSeek's, which many clients still read), the same text."""
        return {"reasoning": text, "reasoning_content": text}

    def _delta(self, reasoning: str, content: str, calls: list = ()) -> dict:
        """A chat delta of the split text's pieces: the reasoning (both names; left out with ``include_reasoning``
        false), ``content`` and the ``tool_calls`` entries the splitter decided (a call's start, or the next piece
        of its arguments; :class:`~ninferc.server.tools.ToolCallSplitter`), each where non-empty."""
        out = {}
        if reasoning and self.include_reasoning:
            out.update(self._reasoning(reasoning))
        if content:
            out["content"] = content
        if calls:
            out["tool_calls"] = calls
        return out

    def _finish_reason(self, ev: FinishEvent, calls: list) -> str:
        """``tool_calls`` where the answer made calls and ended by itself or at ``max_tokens`` (vLLM reports the
        calls it extracted so, whatever followed them), else the engine's reason (``abort`` stays); a call forced by
        name ends with ``stop`` (OpenAI's answer, which vLLM follows since its PR 25054). An answer that ended inside
        its last call (``complete`` false: its arguments cut) keeps the engine's reason, ``length`` at ``max_tokens``,
        as OpenAI reports a call ``max_tokens`` cut."""
        if calls and not calls[-1].complete:
            return ev.reason
        if calls and ev.reason in ("stop", "length"):
            named = self.tool_use is not None and self.tool_use.forced not in (None, "required")
            return "stop" if named else "tool_calls"
        return ev.reason

    def usage_chunk(self, usage: dict) -> dict:
        """The stream's last chunk (``stream_options.include_usage``): no choices, the request's ``usage``."""
        return self._chunk(None, usage=usage)
