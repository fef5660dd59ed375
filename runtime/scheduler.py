"""Continuous batching over a batched backend: admission, KV reservation, chunked prefill, decode steps,
cancellation (DESIGN.md §6b, layer 2). Plain Python; no CuPy.

One :class:`Scheduler` is driven by one thread (the engine thread, :class:`ninferc.runtime.engine_loop.EngineLoop`)
calling :meth:`Scheduler.step`; other threads only call :meth:`Scheduler.submit`, :meth:`Scheduler.cancel` and
:meth:`Scheduler.snapshot`, which are thread-safe.

An iteration (:meth:`Scheduler.step`):

1. take new requests and cancellations from the inbox; end cancelled requests (``finish_reason`` ``abort``,
   their pages and slot back to the pools within this iteration);
2. expire waiting requests older than the pending timeout (:class:`QueueTimeout`);
3. admit waiting requests in arrival order while fewer than ``max_concurrency`` run and the KV pool can
   reserve pages for prompt + ``max_tokens`` tokens and a GDN slot is free (the "planning reservation": an
   admitted request never waits for memory again);
4. run at most one prefill chunk (``prefill_chunk`` tokens) of the oldest admitted request whose prompt is not
   done -- so a long prompt delays the others' next token by at most one chunk; when it completes the prompt,
   sample the request's first token;
5. one decode step for every request that has a sampled token to append, sample the next token of each, emit,
   and retire those that finished (stop id, stop string, ``max_tokens``).

Decode ahead: when the backend samples every row of a step on its own device (``sample_async``: every row without
a grammar -- penalties, min_p, logit_bias and min_tokens are applied there, and a row's logprobs are computed on the
host from a copy of its logits row) and the same requests go on, the next decode step is queued -- fed with the ids
the device sampler wrote, before the host reads them -- and only then are the last step's ids read and emitted, so the
device never waits for the host's per-step work (reading ids, stop strings, streaming, the next step's metadata).
A request that ends at step N (stop id, stop string) has had step N + 1 queued already: its result is dropped,
and its sequence holds one more token than it emitted (inside its KV reservation, which ``max_tokens`` bounds: a
request whose next token is its last gets no step ahead); a generation-end checkpoint then covers that token too
(its state and its pages agree). The pipeline waits a step for a request joining the batch.

With a prefix cache (:mod:`ninferc.runtime.prefix_cache`), admission first looks the prompt up: a hit at P
shares the checkpoint's KV pages, restores its GDN state and starts the prefill at P (``cached_tokens`` = P);
checkpoints are taken at prefill chunk ends on multiples of the checkpoint interval, one token before the end of
each prompt (the prefill stops there for one step, so that the same prompt sent again, whose last token must be
computed for its logits, finds its whole prefix) -- or instead at the positions a request asks for
(``GenerationRequest.checkpoint_at``: a chat's end of messages), where they lie past its cache hit -- and at the end
of each generation; KV pages held only by the cache are released when admission needs them.

A request that scores its prompt (``GenerationRequest.prompt_logprobs``) is prefilled whole, without a prefix-cache
hit, in chunks of at most the backend's ``max_scored_tokens`` (``prefill_scored``: the logits of every token, each
scoring the prompt's next token); it may ask for no generated token (``max_tokens`` 0).

Events reach the request's ``sink`` callable on the engine thread: one :class:`PromptEvent` when the request scores
its prompt, :class:`TokenEvent`, then one :class:`FinishEvent` or :class:`ErrorEvent`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ninferc.errors import NinfercError
from ninferc.runtime.backend import KVPools
from ninferc.sampling import GrammarError, HostSampler, SampleError, Sampled, SamplingParams


class ServingError(NinfercError):
    """A request refused or ended by the server's policy; ``status`` is the HTTP status, ``code`` the OpenAI
    error code (``type`` is the error type string)."""

    status = 400
    type = "invalid_request_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.param = param


class Overloaded(ServingError):
    """``max_concurrency`` running + ``max_pending`` waiting requests are in flight (HTTP 429)."""

    status, type, code = 429, "server_overloaded", "server_overloaded"


class QueueTimeout(ServingError):
    """A request waited past the pending timeout without being admitted (HTTP 503)."""

    status, type, code = 503, "request_queue_timeout", "request_queue_timeout"


class TooLarge(ServingError):
    """A request that can never fit the context or the KV pool (HTTP 400)."""

    status, type, code = 400, "invalid_request_error", "context_length_exceeded"


class Draining(ServingError):
    """The server is shutting down and admits nothing new (HTTP 503)."""

    status, type, code = 503, "server_shutting_down", "server_shutting_down"


class EngineFailed(ServingError):
    """The engine failed (HTTP 500); the message says why."""

    status, type, code = 500, "internal_error", "engine_error"


class GrammarFailed(ServingError):
    """A request's grammar (``response_format``, a forced tool call) failed while generating (HTTP 400: the schema,
    not the engine)."""

    status, type, code = 400, "invalid_request_error", "grammar_error"


def row_error(exc: Exception) -> ServingError:
    """The error a request ends with when its row could not be sampled: :class:`GrammarFailed` for its grammar,
    :class:`EngineFailed` otherwise (non-finite logits)."""
    if isinstance(exc, GrammarError):
        return GrammarFailed(str(exc), param="response_format")
    return EngineFailed(str(exc))


class OutputFilter(Protocol):
    """Turns generated ids into text for one request (detokenisation, stop strings): see
    :class:`ninferc.tokenizer.TextOutput`."""

    def push(self, token: int) -> tuple[str, bool]:
        """Text completed by ``token`` and whether a stop string ended the text."""

    def flush(self) -> str:
        """Text held back at the end of the generation."""


@dataclass
class GenerationRequest:
    """What the server hands the scheduler.

    Attributes:
        request_id: unique id (logs, cancellation).
        prompt_ids: the prompt's token ids (>= 1).
        max_tokens: tokens to generate at most (>= 1).
        params: sampling parameters.
        stop_ids: ids that end the generation (emitted, counted, not turned into text).
        logprobs: None, or how many alternatives to report per position (0..20).
        output: the text filter, or None (ids only).
        sink: called on the engine thread with every event of this request.
        checkpoint_at: prompt positions (tokens) where, with the prefix cache on, a prefill chunk ends and the
            sequence is checkpointed, instead of one token short of the prompt's end (the server's chat requests:
            where the messages end and the generation prompt begins, the prefix a conversation's next turn
            repeats); positions outside 1..len(prompt_ids) - 2 or not past the request's cache hit are ignored (with
            none left, the end-of-prompt checkpoint is taken).
        labels: what the caller wants in the request's log record and nothing else reads (the server's
            ``endpoint`` and ``stream``); copied to :attr:`RequestStats.labels`.
        constraint: None, or the request's grammar state (:class:`ninferc.structured.TokenConstraint`; the server's
            ``response_format``), which its sampler applies (:class:`~ninferc.sampling.HostSampler`).
        prompt_logprobs: None, or score the prompt: every position after the first gets the log-probability of its
            token given the tokens before it, its rank and this many alternatives (0..20), delivered in one
            :class:`PromptEvent` when the prefill ends, before any token. The prompt is then computed whole (no
            prefix-cache hit: the cached positions' logits are gone), in chunks of the backend's
            ``max_scored_tokens``, and ``max_tokens`` may be 0 (score only: the request ends with ``length`` after
            the prefill, no token generated). The backend needs ``prefill_scored``.
    """

    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    params: SamplingParams = field(default_factory=SamplingParams)
    stop_ids: frozenset = frozenset()
    logprobs: int | None = None
    output: OutputFilter | None = None
    sink: Callable[[object], None] = lambda ev: None
    checkpoint_at: tuple[int, ...] = ()
    labels: dict = field(default_factory=dict)
    constraint: object = None
    prompt_logprobs: int | None = None


@dataclass
class PromptEvent:
    """The scored prompt of a request with ``prompt_logprobs``: one :class:`~ninferc.sampling.PromptScore` per prompt
    position 1 .. n - 1, in order (position 0 has nothing before it to be scored against)."""

    scores: list


@dataclass
class TokenEvent:
    """New tokens of a request: ``ids``, the ``text`` they complete, and per id the :class:`Sampled` record."""

    ids: list[int]
    text: str
    sampled: list[Sampled]


def _tokens(n: int) -> str:
    """``n`` tokens, singular for one (error messages)."""
    return f"{n} token" if n == 1 else f"{n} tokens"


@dataclass
class RequestStats:
    """Timings (seconds, ``time.monotonic``, or the scheduler's clock) and counts of one request; rates in tokens per
    second. ``arrival_unix``: the wall-clock time of arrival (``time.time()``, seconds since the epoch, UTC) for the
    log record; ``labels``: the request's :attr:`GenerationRequest.labels`."""

    request_id: str
    prompt_tokens: int
    cached_tokens: int = 0
    generated: int = 0
    finish_reason: str = ""
    arrival: float = 0.0
    admitted: float | None = None
    first_token: float | None = None
    finished: float | None = None
    steps_shared: int = 0  # decode steps this request shared with at least one other request
    decode_steps: int = 0
    spec: object = None    # SpecStats when the request decoded speculatively
    scored: int = 0        # prompt positions scored (a request with prompt_logprobs: prompt_tokens - 1)
    arrival_unix: float = 0.0
    labels: dict = field(default_factory=dict)

    @property
    def queue_s(self) -> float:
        """Arrival to admission."""
        return (self.admitted if self.admitted is not None else (self.finished or self.arrival)) - self.arrival

    @property
    def ttft_s(self) -> float | None:
        """Arrival to the first generated token."""
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def prefill_s(self) -> float | None:
        """Admission to the first token: the prompt's prefill (its chunks) and the first sample; for a scored prompt
        that generated nothing (``max_tokens`` 0), admission to its end."""
        end = self.first_token
        if end is None and self.scored and not self.generated and self.finish_reason == "length":
            end = self.finished
        return None if end is None or self.admitted is None else end - self.admitted

    @property
    def decode_s(self) -> float | None:
        """First token to the last."""
        return None if self.first_token is None or self.finished is None else self.finished - self.first_token

    @property
    def prefill_tok_s(self) -> float | None:
        """Prompt tokens computed (not cached) per second of prefill."""
        p = self.prefill_s
        return (self.prompt_tokens - self.cached_tokens) / p if p else None

    @property
    def decode_tok_s(self) -> float | None:
        """(generated - 1) / decode time, as the per-request log line states it."""
        d = self.decode_s
        return (self.generated - 1) / d if d and self.generated > 1 else None

    @property
    def wall_s(self) -> float:
        """Arrival to finish."""
        return (self.finished or self.arrival) - self.arrival


@dataclass
class FinishEvent:
    """The request ended: ``reason`` ``stop`` | ``length`` | ``abort``, the final ``text`` held back by the
    filter (if any), and its :class:`RequestStats`."""

    reason: str
    text: str
    stats: RequestStats


@dataclass
class ErrorEvent:
    """The request ended with an error (:class:`ServingError`) before or while generating."""

    error: ServingError
    stats: RequestStats


class Observer:
    """Hooks the serving layer implements (metrics, logs); called on the engine thread. No-ops here."""

    def on_admit(self, stats: RequestStats) -> None: ...

    def on_tokens(self, stats: RequestStats, n: int, now: float) -> None: ...

    def on_finish(self, stats: RequestStats) -> None: ...

    def on_error(self, stats: RequestStats, error: ServingError) -> None: ...

    def on_reject(self, reason: str) -> None: ...


class _Active:
    """A request inside the scheduler."""

    __slots__ = ("req", "stats", "seq", "prefilled", "sampler", "last", "out_ids", "cancelled", "reserve",
                 "last_token_t", "drafts", "scores")

    def __init__(self, req: GenerationRequest, now: float):
        self.req = req
        self.stats = RequestStats(req.request_id, len(req.prompt_ids), arrival=now, arrival_unix=time.time(),
                                  labels=dict(req.labels))
        self.seq = None
        self.prefilled = 0       # prompt tokens whose KV is in place
        self.sampler = HostSampler(req.params, req.prompt_ids, req.stop_ids, req.constraint)
        self.last: int | None = None  # sampled, not yet appended
        self.out_ids: list[int] = []
        self.cancelled = False
        self.reserve = 0
        self.last_token_t = 0.0
        self.drafts: list[int] | None = None  # the next round's drafts, made by the last round's verify_round
        self.scores: list = []  # the prompt's scores so far (prompt_logprobs)


@dataclass
class _Ahead:
    """A decode step queued on the backend whose sampled ids are not read yet: its rows, in order, and the
    backend's pending sample."""

    rows: list
    pending: object


#: the backend ``stats`` keys a :class:`Snapshot` copies: rows drawn by the GPU sampler, rows drawn by the host sampler,
#: device rows whose logits were adjusted on the device first (penalties, min_p, logit_bias, min_tokens), and device
#: rows whose logits were copied to the host for their logprobs (:mod:`ninferc.runtime.cuda_backend`)
SAMPLER_ROWS = ("device_rows", "host_rows", "adjusted_rows", "logprob_rows")


@dataclass
class Snapshot:
    """Counts read by ``/metrics`` and ``/health`` (thread-safe copy); ``cache_*`` are the prefix cache's (zero
    without one)."""

    running: int = 0
    waiting: int = 0
    pages_total: int = 0
    pages_free: int = 0
    slots_total: int = 0
    slots_free: int = 0
    iterations: int = 0
    cache_enabled: bool = False
    cache_checkpoints: int = 0
    cache_pages: int = 0
    cache_pages_only: int = 0  # pages only the prefix cache holds: evicted on demand, so usable by a new request
    cache_bytes: int = 0
    cache_queries: int = 0
    cache_hits: int = 0
    cache_query_tokens: int = 0
    cache_hit_tokens: int = 0
    #: the backend's sampled-row counts where it keeps them (the CUDA backend's ``stats``: ``device_rows``,
    #: ``host_rows``, ``adjusted_rows``, ``logprob_rows``); empty for a backend that keeps none
    sampler_rows: dict = field(default_factory=dict)


class Scheduler:
    """Continuous batching over ``backend`` (see the module docstring).

    Args:
        backend: a batched backend (:mod:`ninferc.runtime.backend`).
        max_concurrency: requests admitted at once (C); at most the backend's GDN slots.
        max_pending: requests that may wait beyond those (more are refused with :class:`Overloaded`).
        pending_timeout_s: seconds a request may wait for admission (then :class:`QueueTimeout`).
        prefill_chunk: most prompt tokens per prefill step.
        spec: speculative decoding (:class:`~ninferc.runtime.spec.SpecConfig`), or None for one token per step.
        prefix_cache_bytes: byte budget of the prefix cache's checkpoint states; None = no prefix cache.
        checkpoint_interval: with a prefix cache, also checkpoint every this many prompt tokens during prefill (a
            multiple of the page size; 0 = only at the ends of prompts and generations).
        poison_freed: fill KV pages with garbage the moment they become free (tests; the reference backend).
        observer: metrics / log hooks.
        clock: the time source (seconds).

    Raises:
        NinfercError: a limit < 1, ``max_concurrency`` above the backend's slots, or ``spec`` on a backend without
            an MTP head.
    """

    def __init__(self, backend, *, max_concurrency: int = 4, max_pending: int = 16, pending_timeout_s: float = 600.0,
                 prefill_chunk: int = 1024, spec=None, prefix_cache_bytes: int | None = None,
                 checkpoint_interval: int = 0, poison_freed: bool = False, observer: Observer | None = None,
                 clock=time.monotonic):
        if max_concurrency < 1 or max_pending < 0 or prefill_chunk < 1 or not pending_timeout_s > 0:
            raise NinfercError(f"max_concurrency ({max_concurrency}) and prefill_chunk ({prefill_chunk}) must be >= 1, "
                               f"max_pending ({max_pending}) >= 0 and the pending timeout ({pending_timeout_s} s) > 0")
        if max_concurrency > backend.num_slots:
            raise NinfercError(f"max_concurrency {max_concurrency} is more than the backend's {backend.num_slots} GDN "
                               "state slots")
        if spec is not None and not getattr(backend, "has_mtp", False):
            why = getattr(backend, "no_mtp_reason", None) or (
                "the checkpoint declares none, or the artifact was compiled without it")
            raise NinfercError(f"--spec {spec.method}: the {backend.name} backend has no MTP head for this model "
                               f"({why})")
        self.backend, self.spec = backend, spec
        self.max_concurrency, self.max_pending = max_concurrency, max_pending
        self.pending_timeout_s, self.prefill_chunk = pending_timeout_s, prefill_chunk
        self.observer = observer or Observer()
        self.clock = clock
        self.pools = KVPools(backend.num_pages, backend.page_size, backend.num_slots)
        if poison_freed:
            self.pools.pages.on_free = lambda pages: backend.poison(pages=pages)
        self.cache = None
        if prefix_cache_bytes is not None:
            if not hasattr(backend, "save_state"):
                raise NinfercError(f"the {backend.name} backend cannot save GDN state checkpoints: no prefix cache")
            from ninferc.runtime.prefix_cache import PrefixCache

            self.cache = PrefixCache(self.pools, backend, budget_bytes=prefix_cache_bytes,
                                     interval=checkpoint_interval)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._inflight: dict[str, _Active] = {}  # submitted and not finished (guarded by _lock)
        self._draining = False
        self.waiting: deque[_Active] = deque()
        self.running: list[_Active] = []   # admitted, in admission order
        self._ahead: _Ahead | None = None   # a decode step queued and not read (decode ahead, module docstring)
        #: whether the backend can sample on its device and decode from those ids before they are read (a
        #: speculating server's plain steps too: those of more requests than --spec-disable-by-batch-size)
        self.decode_ahead = hasattr(backend, "sample_async")
        self._snap = Snapshot()
        self.iterations = 0
        self._update_snapshot()

    # -- any thread ---------------------------------------------------------------------------------------
    def check(self, prompt_tokens: int, max_tokens: int | None, *, prompt_param: str = "prompt") -> int:
        """The ``max_tokens`` a request of ``prompt_tokens`` may have: the given value, or the rest of the
        context when None (vLLM's default).

        Raises:
            TooLarge: the prompt alone leaves no room for a generated token (``param`` = ``prompt_param``: the
                server's ``prompt`` or ``messages``), the prompt plus ``max_tokens`` exceeds the context, or its KV
                reservation exceeds the whole pool (``param`` ``max_tokens``); names the token counts and the limit.
        """
        ctx = self.backend.max_context
        if prompt_tokens >= ctx:
            raise TooLarge(f"the prompt is {_tokens(prompt_tokens)}; the context is {_tokens(ctx)}, which leaves no "
                           "room for a generated token", param=prompt_param)
        if max_tokens is None:
            max_tokens = ctx - prompt_tokens
        if prompt_tokens + max_tokens > ctx:
            raise TooLarge(f"the prompt ({_tokens(prompt_tokens)}) plus max_tokens ({max_tokens}) is "
                           f"{prompt_tokens + max_tokens} tokens, over the context of {_tokens(ctx)}",
                           param="max_tokens")
        need = self.pools.pages_for(prompt_tokens + max_tokens)
        if need > self.pools.pages.num_pages:
            raise TooLarge(f"the prompt ({_tokens(prompt_tokens)}) plus max_tokens ({max_tokens}) needs {need} KV pages, "
                           f"more than the server's whole pool of {self.pools.pages.num_pages} pages "
                           f"({self.pools.pages.num_pages * self.pools.page_size} tokens)", param="max_tokens")
        return max_tokens

    def submit(self, req: GenerationRequest) -> None:
        """Queue ``req`` (thread-safe). Its events arrive through ``req.sink``.

        Raises:
            Overloaded: ``max_concurrency + max_pending`` requests are already in flight.
            Draining: the server is shutting down.
            TooLarge: see :meth:`check`. NinfercError: an empty prompt, ``max_tokens`` < 1, a duplicate id.
        """
        self.submit_group([req])

    def submit_group(self, reqs: list[GenerationRequest]) -> None:
        """Queue every request of ``reqs`` or none (thread-safe): the server's request of ``n`` choices, each a
        request of its own, is refused whole (:class:`Overloaded` where the group does not fit in the room left)
        rather than half admitted. Raises as :meth:`submit`."""
        for req in reqs:
            if not req.prompt_ids:
                raise ServingError("the prompt is empty after tokenisation; give at least one token", param="prompt")
            scored = req.prompt_logprobs is not None
            if req.max_tokens < (0 if scored else 1):
                raise ServingError(f"max_tokens must be at least {0 if scored else 1}"
                                   f"{' (0: score the prompt only)' if scored else ''}, found {req.max_tokens}",
                                   param="max_tokens")
            if scored and not hasattr(self.backend, "prefill_scored"):
                raise ServingError(f"the {self.backend.name} backend cannot score a prompt (prompt_logprobs)",
                                   param="prompt_logprobs")
            self.check(len(req.prompt_ids), req.max_tokens)
        ids = [r.request_id for r in reqs]
        twice = next((rid for k, rid in enumerate(ids) if rid in ids[:k]), None)
        if twice is not None:
            raise ServingError(f"request id {twice!r} is given twice in one group")
        with self._lock:
            if self._draining:
                self.observer.on_reject("shutting_down")
                raise Draining("the server is shutting down and admits no new requests")
            for rid in ids:
                if rid in self._inflight:
                    raise ServingError(f"request id {rid!r} is already in flight")
            if len(self._inflight) + len(reqs) > self.max_concurrency + self.max_pending:
                self.observer.on_reject("overloaded")
                what = "" if len(reqs) == 1 else f" for {len(reqs)} more"
                raise Overloaded(f"the server is at capacity{what}: {self.max_concurrency} requests running and "
                                 f"{self.max_pending} waiting (--max-concurrency, --max-pending); retry later")
            now = self.clock()
            group = [_Active(req, now) for req in reqs]
            for a in group:
                self._inflight[a.req.request_id] = a
        for a in group:
            self._inbox.put(("new", a))

    def cancel(self, request_id: str) -> None:
        """Abort a request (thread-safe; a finished or unknown id is ignored). It ends within one iteration with
        ``finish_reason`` ``abort``."""
        self._inbox.put(("cancel", request_id))

    def drain(self) -> None:
        """Stop admitting new submissions (thread-safe); running and waiting requests go on."""
        with self._lock:
            self._draining = True

    def abort_all(self) -> None:
        """Abort every request in flight (thread-safe)."""
        with self._lock:
            ids = list(self._inflight)
        for i in ids:
            self.cancel(i)

    def clear_cache(self) -> None:
        """Drop every prefix-cache checkpoint (thread-safe: done by the engine thread at its next iteration)."""
        self._inbox.put(("clear_cache", None))

    def has(self, request_id: str) -> bool:
        """Whether ``request_id`` is in flight (thread-safe)."""
        with self._lock:
            return request_id in self._inflight

    @property
    def inflight(self) -> int:
        """Requests submitted and not finished (thread-safe)."""
        with self._lock:
            return len(self._inflight)

    def snapshot(self) -> Snapshot:
        """Counts as of the end of the last iteration (thread-safe copy)."""
        with self._lock:
            return Snapshot(**vars(self._snap))

    def wait_for_work(self, timeout: float) -> None:
        """Block until something arrives in the inbox or ``timeout`` seconds pass (the engine thread's idle)."""
        try:
            item = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return
        self._inbox.put(item)

    @property
    def idle(self) -> bool:
        """Nothing waiting, running or in the inbox (engine thread)."""
        return not self.waiting and not self.running and self._inbox.empty()

    # -- the engine thread --------------------------------------------------------------------------------
    def step(self) -> bool:
        """One iteration (see the module docstring). Returns whether a prefill or decode step ran."""
        self.iterations += 1
        self._take_inbox()
        now = self.clock()
        self._expire(now)
        self._admit(now)
        worked = self._prefill_one()
        worked = self._decode_all() or worked
        self._update_snapshot()
        return worked

    def fail_all(self, error: ServingError) -> None:
        """End every request with ``error`` (the engine failed); frees what they hold."""
        self._take_inbox()
        self._ahead = None
        for a in list(self.running) + list(self.waiting):
            self._end_error(a, error)
        self.running, self.waiting = [], deque()
        self._update_snapshot()

    def _take_inbox(self) -> None:
        """Apply the inbox in arrival order: a cancellation ends only a request submitted before it (a client that
        reuses an id right after its request finished must not have the new one cancelled)."""
        while True:
            try:
                kind, x = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "new":
                self.waiting.append(x)
            elif kind == "clear_cache":
                if self.cache is not None:
                    self.cache.clear()
            else:
                for a in [a for a in self.waiting if a.req.request_id == x]:
                    self.waiting.remove(a)
                    self._finish(a, "abort")
                for a in [a for a in self.running if a.req.request_id == x]:
                    self._finish(a, "abort")

    def _expire(self, now: float) -> None:
        while self.waiting and now - self.waiting[0].stats.arrival > self.pending_timeout_s:
            a = self.waiting.popleft()
            self.observer.on_reject("queue_timeout")
            self._end_error(a, QueueTimeout(
                f"the request waited {now - a.stats.arrival:.1f} s for admission, past the pending timeout of "
                f"{self.pending_timeout_s:g} s (--pending-timeout-ms)"))

    def _admit(self, now: float) -> None:
        pools, cache = self.pools, self.cache
        spec = self.spec is not None
        while self.waiting and len(self.running) < self.max_concurrency and pools.slots.free >= 1:
            a = self.waiting[0]
            prompt = a.req.prompt_ids
            # the KV reservation: prompt + max_tokens (+ the drafts of a last round, which may run past max_tokens)
            extra = self.spec.draft_tokens if spec else 0
            tokens = min(len(prompt) + a.req.max_tokens + extra, self.backend.max_context)
            scored = a.req.prompt_logprobs is not None  # every position's logits are needed: no cached prefix
            hit = cache.lookup(prompt, mtp=spec) if cache is not None and not scored else None
            shared, copied = cache.shared_and_copied(hit, mtp=spec) if hit is not None else ([], [])
            fresh = pools.pages_for(tokens) - len(shared)
            if pools.pages.free < fresh and not (cache is not None and cache.evict_for_pages(fresh)):
                if hit is not None:
                    cache.release(hit)
                break
            self.waiting.popleft()
            a.seq = pools.open_shared(shared, fresh)
            a.seq.mtp = spec
            for i, src in enumerate(copied):  # private copies of the pages the sequence will write into
                self.backend.copy_page(src, a.seq.pages[len(shared) + i])
            if cache is not None and not scored:
                cache.stats.queries += 1
                cache.stats.query_tokens += len(prompt)
            if hit is not None:
                self.backend.restore_state(a.seq, hit.state, prompt[:hit.length])
                a.prefilled = a.stats.cached_tokens = hit.length
                cache.stats.hits += 1
                cache.stats.hit_tokens += hit.length
                cache.release(hit)
            if spec:
                from ninferc.runtime.spec import SpecStats

                a.stats.spec = SpecStats(draft_tokens=self.spec.draft_tokens)
            a.reserve = tokens
            a.stats.admitted = now
            self.running.append(a)
            self.observer.on_admit(a.stats)

    def _checkpoint(self, a: _Active, tokens, reason: str) -> None:
        """Checkpoint ``a``'s sequence as it is now (``tokens``: its positions' tokens) into the prefix cache."""
        if self.cache is None or a.seq is None or a.seq.length != len(tokens) or not tokens:
            return
        self.backend.settle(a.seq)
        self.cache.insert(a.seq, tokens, reason)

    def _prefill_one(self) -> bool:
        a = next((a for a in self.running if a.prefilled < len(a.req.prompt_ids)), None)
        if a is None:
            return False
        ids = a.req.prompt_ids
        n = len(ids)
        end = min(a.prefilled + self.prefill_chunk, n)
        iv = self.cache.interval if self.cache is not None else 0
        if iv:  # chunks end on the checkpoint interval's multiples, where checkpoints are taken
            end = min(end, (a.prefilled // iv + 1) * iv)
        # the positions the request asks checkpoints at (a chat's end of messages) replace the end-of-prompt one:
        # each split of the prompt costs a forward pass more before the first token
        own = [p for p in a.req.checkpoint_at if a.stats.cached_tokens < p < n - 1] if self.cache is not None else []
        if self.cache is not None and not own and end == n and a.prefilled < n - 1:
            end = n - 1  # the prompt's checkpoint one token short of its end: it serves this prompt again too
        asked = [p for p in own if p > a.prefilled]
        if asked:
            end = min(end, min(asked))
        scored = a.req.prompt_logprobs is not None
        if scored:
            end = min(end, a.prefilled + self.backend.max_scored_tokens)
            try:
                logits, scores = self.backend.prefill_scored(a.seq, ids[a.prefilled:end], ids[a.prefilled + 1:end + 1],
                                                             a.req.prompt_logprobs)
            except SampleError as exc:  # a scored row's logits are not finite
                self._end_error(a, row_error(exc))
                return True
            a.scores.extend(scores)
        else:
            logits = self.backend.prefill(a.seq, ids[a.prefilled:end])
        a.prefilled = end
        if iv and end % iv == 0 and end < n - 1:
            self._checkpoint(a, ids[:end], "interval")
        elif end in asked:
            self._checkpoint(a, ids[:end], "history")
        if self.cache is not None and end == n - 1 and n > 1:
            self._checkpoint(a, ids[:end], "prompt")
        if a.prefilled == n:
            if scored:
                a.stats.scored = len(a.scores)
                a.req.sink(PromptEvent(a.scores))
                a.scores = []
            if a.req.max_tokens == 0:  # the prompt scored, nothing to generate
                self._finish(a, "length")
            else:
                self._sample([a], logits)
        return True

    def _decode_all(self) -> bool:
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            rows = [a for a in self.running if a.last is not None]
            if not rows:
                return False
            if self.spec is not None and self.spec.drafts_in(len(rows)):
                self._count_step(rows)
                self._spec_round(rows)
                return True
            # a plain step: no speculation, or more decoding requests than --spec-disable-by-batch-size (the backend
            # keeps the MTP head's rows of a speculating sequence, so drafting resumes at any later step)
            for a in rows:
                a.drafts = None  # drafts the last round made on the device are dropped
            logits = self.backend.decode([a.seq for a in rows], [a.last for a in rows])
            params = [(a.sampler, a.req.logprobs) for a in rows]
            if not (self.decode_ahead and self.backend.samples_on_device(params)):
                self._count_step(rows)
                self._sample(rows, logits)
                return True
            ahead = _Ahead(rows, self.backend.sample_async(logits, params))
        # a step is queued and unread: queue the next one for the same rows (fed with its sampled ids) first
        rows = ahead.rows
        if self._may_go_ahead(rows):
            logits = self.backend.decode_next([a.seq for a in rows], ahead.pending)
            self._ahead = _Ahead(rows, self.backend.sample_async(logits, [(a.sampler, a.req.logprobs)
                                                                          for a in rows]))
        got = ahead.pending.result()
        live = [(a, s) for a, s in zip(rows, got) if a.seq is not None]  # a request cancelled meanwhile is gone
        self._count_step([a for a, _ in live], shared=len(rows) > 1)
        now = self.clock()
        for a, s in live:
            self._emit_sampled(a, s, now)
        return True

    def _may_go_ahead(self, rows: list[_Active]) -> bool:
        """Whether the step after the unread one may be queued for ``rows``: they are exactly the requests with a
        token to decode (none ended, none joined), each has room for one more token in its KV reservation, and
        none is at its last token (``max_tokens``)."""
        if any(a.seq is None for a in rows):
            return False
        if self.spec is not None and self.spec.drafts_in(len(rows)):  # the next step is a speculative round
            return False
        if sum(1 for a in self.running if a.last is not None and a not in rows):
            return False
        return all(a.stats.generated + 1 < a.req.max_tokens and a.seq.length + 1 <= a.reserve for a in rows)

    @staticmethod
    def _count_step(rows: list[_Active], shared: bool | None = None) -> None:
        shared = len(rows) > 1 if shared is None else shared
        for a in rows:
            a.stats.decode_steps += 1
            if shared:
                a.stats.steps_shared += 1

    def _spec_round(self, rows: list[_Active]) -> None:
        """One speculative round for every row (:mod:`ninferc.runtime.spec`): draft, one verify step, accept. With a
        backend that has ``verify_round`` (CUDA), rows accepted from drawn ids whose next draft count is the same
        decide acceptance and draft the next round on the device, one host read per round; the host's rule
        (:func:`~ninferc.runtime.spec.accept_ids`) runs on the ids read and must agree."""
        from ninferc.runtime.spec import accept_drafts, accept_ids, ids_suffice

        be, k = self.backend, self.spec.draft_tokens  # (steps past --spec-disable-by-batch-size: _decode_all's)
        seqs = [a.seq for a in rows]
        ks = [max(0, min(k, a.reserve - 1 - a.seq.length)) for a in rows]  # never past the reserved pages
        # the drafts the last round made on the device (verify_round) for the rows that have them; the others draft
        drafts = be.draft(seqs, [a.last for a in rows], [0 if a.drafts is not None else n for a, n in zip(rows, ks)])
        drafts = [a.drafts[:n] if a.drafts is not None else d for a, d, n in zip(rows, drafts, ks)]
        for a in rows:
            a.drafts = None
        # no request asks for logprobs or has a grammar: acceptance from a token the backend draws from each verify
        # row (one read of the ids per round; the CUDA backend adjusts penalised, min_p, logit_bias and min_tokens
        # rows on the device first); otherwise from the rows' logits on the host (logprobs, a grammar, or such rows
        # on a backend that does not adjust them)
        by_ids = [hasattr(be, "verify_ids") and ids_suffice(a.sampler, a.req.logprobs, be) for a in rows]
        on_ids = all(by_ids)
        # some but not all: those accepted from drawn ids keep them (a seeded request the same text in any round), the
        # others' rows come back as logits (verify_mixed), where the backend can
        mixed = not on_ids and any(by_ids) and hasattr(be, "verify_mixed")
        token_lists = [[a.last] + d for a, d in zip(rows, drafts)]
        # the next round's draft count per row if every draft is kept; where it is the same non-zero count for every
        # row, the backend that can decides acceptance and drafts the next round on the device (one read per round)
        next_ks = {max(0, min(k, a.reserve - 1 - (a.seq.length + len(t)))) for a, t in zip(rows, token_lists)}
        one_read = on_ids and hasattr(be, "verify_round") and len(next_ks) == 1 and 0 not in next_ks
        if one_read:
            verified, dev_ms, nxt = be.verify_round(seqs, token_lists, [a.sampler for a in rows], next_ks.pop())
        elif mixed:
            verified = be.verify_mixed(seqs, token_lists, [a.sampler if d else None for a, d in zip(rows, by_ids)])
        else:
            verified = (be.verify_ids(seqs, token_lists, [a.sampler for a in rows]) if on_ids
                        else be.verify(seqs, token_lists))
        outs, ms = [], []
        for i, (a, lg, d) in enumerate(zip(rows, verified, drafts)):
            try:
                toks = accept_ids(a.sampler, lg, d) if on_ids or (mixed and by_ids[i]) else \
                    accept_drafts(a.sampler, lg, d, a.req.logprobs)
            except SampleError as exc:  # NaN / Inf logits, or a grammar that allows no token
                toks = exc
            outs.append(toks)
            ms.append(0 if isinstance(toks, Exception) else len(toks) - 1)
            if one_read and not isinstance(toks, Exception):
                if ms[-1] != dev_ms[i]:
                    raise EngineFailed(f"speculative round: the device accepted {dev_ms[i]} drafts of request "
                                       f"{a.req.request_id}, the host's rule {ms[-1]}")
                a.drafts = nxt[i]
        if not one_read:
            be.accept(seqs, ms)
        now = self.clock()
        for a, d, toks, m in zip(rows, drafts, outs, ms):
            if isinstance(toks, Exception):
                self._end_error(a, row_error(toks))
                continue
            # a row that drafted nothing (its token budget's end) took a plain step: not a round of its speculative
            # stats (vLLM's num_drafts counts steps with drafts)
            self._emit_many(a, toks, now, spec_round=(len(d), m) if d else None)

    def _sample(self, rows: list[_Active], logits) -> None:
        got = self.backend.sample(logits, [(a.sampler, a.req.logprobs) for a in rows])
        now = self.clock()
        for a, s in zip(rows, got):
            self._emit_sampled(a, s, now)

    def _emit_sampled(self, a: _Active, s, now: float) -> None:
        """Emit one sampled token, or end the request when its row's logits were not finite (the others go on)."""
        if isinstance(s, Exception):
            self._end_error(a, row_error(s))
        else:
            self._emit_many(a, [s], now)

    def _emit_many(self, a: _Active, samples: list[Sampled], now: float,
                   spec_round: tuple[int, int] | None = None) -> None:
        """Hand the request its new tokens (one event), stopping at the first that ends it: a stop id (emitted and
        counted), a stop string (the text ends before it) or ``max_tokens`` -- nothing after it is emitted.
        ``spec_round`` (drafted, accepted) of the speculative round that made ``samples``: recorded in the request's
        :class:`~ninferc.runtime.spec.SpecStats` with the tokens taken, before a finish reports the stats."""
        st, req = a.stats, a.req
        ids, texts, used, finish = [], [], [], None
        for s in samples:
            tok = s.token
            a.out_ids.append(tok)
            st.generated += 1
            ids.append(tok)
            used.append(s)
            text, stopped = "", False
            if tok not in req.stop_ids and req.output is not None:
                text, stopped = req.output.push(tok)
            texts.append(text)
            if stopped:
                finish = ("stop", False)  # the text ends before the stop string
            elif tok in req.stop_ids:
                finish = ("stop", True)
            elif st.generated >= req.max_tokens:
                finish = ("length", True)
            if finish:
                break
        if spec_round is not None:
            st.spec.add(*spec_round, len(ids))
        if st.first_token is None:
            st.first_token = now
        self.observer.on_tokens(st, len(ids), now)
        a.last = ids[-1]
        req.sink(TokenEvent(ids, "".join(texts), used))
        if finish:
            self._finish(a, finish[0], flush=finish[1])

    def _release(self, a: _Active) -> None:
        a.drafts = None
        if a in self.running:
            self.running.remove(a)
        if a.seq is not None:
            self.pools.close(a.seq)
            a.seq = None
        a.last = None
        with self._lock:
            self._inflight.pop(a.req.request_id, None)

    def _finish(self, a: _Active, reason: str, *, flush: bool = True) -> None:
        if reason in ("stop", "length") and a.seq is not None:  # the end of a generation: a checkpoint for the
            known = a.req.prompt_ids + a.out_ids  # next turn (when every appended token is known)
            if a.seq.length <= len(known):
                self._checkpoint(a, known[:a.seq.length], "generation")
        self._release(a)
        a.stats.finished = self.clock()
        a.stats.finish_reason = reason
        tail = a.req.output.flush() if a.req.output is not None and flush else ""
        self.observer.on_finish(a.stats)
        a.req.sink(FinishEvent(reason, tail, a.stats))

    def _end_error(self, a: _Active, error: ServingError) -> None:
        self._release(a)
        a.stats.finished = self.clock()
        a.stats.finish_reason = "error"
        self.observer.on_error(a.stats, error)
        a.req.sink(ErrorEvent(error, a.stats))

    def _update_snapshot(self) -> None:
        with self._lock:
            s = self._snap
            s.running, s.waiting = len(self.running), len(self.waiting) + max(
                0, len(self._inflight) - len(self.running) - len(self.waiting))
            s.pages_total, s.pages_free = self.pools.pages.num_pages, self.pools.pages.free
            s.slots_total, s.slots_free = self.pools.slots.num_slots, self.pools.slots.free
            s.iterations = self.iterations
            st = getattr(self.backend, "stats", None)
            if isinstance(st, dict):
                s.sampler_rows = {k: int(st[k]) for k in SAMPLER_ROWS if k in st}
            c = self.cache
            if c is not None:
                s.cache_enabled = True
                s.cache_pages, s.cache_pages_only = c.page_counts()
                s.cache_checkpoints, s.cache_bytes = c.checkpoints, c.bytes
                st = c.stats
                s.cache_queries, s.cache_hits = st.queries, st.hits
                s.cache_query_tokens, s.cache_hit_tokens = st.query_tokens, st.hit_tokens
