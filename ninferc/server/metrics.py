"""Prometheus metrics and the per-request log line of ``ninferc serve``.

Metric names carry the ``ninferc:`` prefix in the style of vLLM's ``vllm:`` metrics (vLLM
``vllm/v1/metrics/loggers.py``: the same meanings; bucket edges chosen for a single GPU serving 1-8 requests):

==========================================  =========  ==========================================================
name                                         type       meaning
==========================================  =========  ==========================================================
``ninferc:num_requests_running``             gauge      admitted requests (prefilling or decoding)
``ninferc:num_requests_waiting``             gauge      requests waiting for admission
``ninferc:kv_cache_usage_perc``              gauge      fraction of KV pages held by requests, 0..1 (pages only
                                                        the prefix cache holds are evicted on demand and count
                                                        as free, as vLLM counts its cached free blocks)
``ninferc:kv_pages_total`` / ``_free``       gauge      KV pages in the pool / on the free list now
``ninferc:gdn_slots_total`` / ``_free``      gauge      GDN state slots / free now
``ninferc:prompt_tokens_total``              counter    prompt tokens of admitted requests
``ninferc:generation_tokens_total``          counter    generated tokens
``ninferc:request_success_total``            counter    finished requests, label ``finished_reason``
                                                        (stop, length, abort)
``ninferc:request_error_total``              counter    requests ended by an error, label ``code`` (a queue
                                                        timeout counts as a rejection only)
``ninferc:request_rejected_total``           counter    requests refused, label ``reason`` (overloaded,
                                                        queue_timeout, shutting_down)
``ninferc:http_errors_total``                counter    error responses, label ``status`` (400, 401, 404, 413,
                                                        429, 503, 500, ...)
``ninferc:time_to_first_token_seconds``      histogram  arrival to first token
``ninferc:inter_token_latency_seconds``      histogram  time between a request's consecutive tokens
``ninferc:e2e_request_latency_seconds``      histogram  arrival to finish
``ninferc:request_queue_time_seconds``       histogram  arrival to admission
``ninferc:prefix_cache_queries`` / ``_hits``  counter    admitted requests looked up / that reused a prefix
``ninferc:prefix_cache_query_tokens``        counter    their prompt tokens / the tokens served from the cache
/ ``_hit_tokens``
``ninferc:prefix_cache_checkpoints``,        gauge      checkpoints, KV pages referenced and state bytes held
``_pages``, ``_bytes``                                  by the prefix cache
``ninferc:prefix_cache_pages_evictable``     gauge      KV pages only the prefix cache holds
``ninferc:sampler_rows_total``               counter    cuda backend: rows sampled, label ``kind``: device (the
                                                        GPU sampler; with --spec, verify rows of requests
                                                        accepted from drawn ids), host (a grammar's rows; verify rows of
                                                        requests accepted on the host), adjusted (device rows
                                                        whose penalties, min_p, logit_bias or min_tokens were
                                                        applied on the device), logprobs (device rows whose
                                                        logits were copied to the host for their logprobs)
``ninferc:spec_decode_num_drafts``           counter    with ``--spec``: speculative verify rounds with
                                                        drafts (K each, fewer at a request's token
                                                        budget's end)
``ninferc:spec_decode_num_draft_tokens``     counter    draft tokens proposed
``ninferc:spec_decode_num_accepted_tokens``  counter    draft tokens the verifier accepted
``ninferc:spec_decode_num_accepted_tokens``  counter    accepted drafts by position in the round, label
``_per_pos``                                            ``position`` (0 = the first draft)
==========================================  =========  ==========================================================

The ``spec_decode`` counters (vLLM's names and meanings) count a request's rounds when it ends (finish or error),
so they lag a long request; acceptance rate = accepted_tokens / draft_tokens, mean tokens per round =
1 + accepted_tokens / drafts.

The per-request log line (stderr, and one JSON object per line with ``--request-log``)::

    [req ID] done finish=stop prompt=P cached=C gen=G queue=Qms ttft=Tms prefill=X tok/s decode=Y tok/s wall=Ws
        steps=S shared=N [spec=mtp 1.62 tok/round, 21 % accepted] [error=CODE: message]

queue = arrival to admission (for a request that ended before it was admitted -- cancelled, timed out, shut down --
its whole wait; the queue-time histogram counts admitted requests); ttft = arrival to the first token (``-`` without
one); prefill = (prompt - cached) / (first token time -
admission time), so it includes the iterations the request's chunks waited behind other requests' steps; decode =
(gen - 1) / (last token time - first token time); steps = decode (or speculative) steps, shared = those it shared
with other requests; spec = the tokens the request took per round with drafts (a round cut short by max_tokens or a
stop counts what it delivered; a step that drafted nothing -- at the token budget's end, or in a batch past
``--spec-disable-by-batch-size`` -- is a step but no round) and the share of drafted tokens the verifier accepted. All
measured by the server.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ninferc.runtime.scheduler import Observer, QueueTimeout, RequestStats, ServingError

#: the code of a request that timed out waiting for admission: logged as a request, counted as a rejection
QUEUE_TIMEOUT = QueueTimeout.code

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
               0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class _PoolCollector:
    """Gauges read from the scheduler's snapshot at scrape time."""

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def collect(self):
        s = self.snapshot()
        if s is None:
            return
        for name, doc, v in (
                ("ninferc:num_requests_running", "Admitted requests (prefilling or decoding).", s.running),
                ("ninferc:num_requests_waiting", "Requests waiting for admission.", s.waiting),
                ("ninferc:kv_cache_usage_perc", "Fraction of KV pages held by requests (0..1); pages only the "
                 "prefix cache holds count as free (evicted on demand).",
                 (s.pages_total - s.pages_free - s.cache_pages_only) / s.pages_total if s.pages_total else 0.0),
                ("ninferc:kv_pages_total", "KV pages in the pool.", s.pages_total),
                ("ninferc:kv_pages_free", "KV pages no request and no cached prefix holds now (kv_cache_usage_perc "
                 "counts prefix_cache_pages_evictable as free too).", s.pages_free),
                ("ninferc:gdn_slots_total", "GDN state slots.", s.slots_total),
                ("ninferc:gdn_slots_free", "GDN state slots free now.", s.slots_free)):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], float(v))
            yield g
        if s.sampler_rows:
            c = CounterMetricFamily("ninferc:sampler_rows", "Rows sampled, by kind: device (drawn by the GPU "
                                    "sampler), host (drawn on the host: a grammar), adjusted (device rows adjusted on "
                                    "the device first: penalties, min_p, logit_bias, min_tokens), logprobs (device "
                                    "rows whose logits were copied for their logprobs).", labels=["kind"])
            for key, kind in (("device_rows", "device"), ("host_rows", "host"), ("adjusted_rows", "adjusted"),
                              ("logprob_rows", "logprobs")):
                if key in s.sampler_rows:
                    c.add_metric([kind], float(s.sampler_rows[key]))
            yield c
        if not s.cache_enabled:
            return
        for name, doc, v in (
                ("ninferc:prefix_cache_checkpoints", "GDN state checkpoints held by the prefix cache.",
                 s.cache_checkpoints),
                ("ninferc:prefix_cache_pages", "KV pages the prefix cache holds a reference to.", s.cache_pages),
                ("ninferc:prefix_cache_pages_evictable", "KV pages only the prefix cache holds (evicted on demand).",
                 s.cache_pages_only),
                ("ninferc:prefix_cache_bytes", "Bytes of checkpoint state held by the prefix cache.", s.cache_bytes)):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], float(v))
            yield g
        for name, doc, v in (
                ("ninferc:prefix_cache_queries", "Admitted requests looked up in the prefix cache.", s.cache_queries),
                ("ninferc:prefix_cache_hits", "Admitted requests that reused a cached prefix.", s.cache_hits),
                ("ninferc:prefix_cache_query_tokens", "Prompt tokens of the requests looked up.",
                 s.cache_query_tokens),
                ("ninferc:prefix_cache_hit_tokens", "Prompt tokens served from the prefix cache.",
                 s.cache_hit_tokens)):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(v))
            yield c


class ServerMetrics(Observer):
    """The scheduler's :class:`~ninferc.runtime.scheduler.Observer`: Prometheus metrics on a registry of its own,
    and the per-request log line.

    Args:
        snapshot: callable returning the scheduler's :class:`~ninferc.runtime.scheduler.Snapshot` (or None before
            the engine is ready).
        log: where the log line goes (stderr in the server).
        request_log: an open text file for JSON lines, or None.
        spec: whether the server decodes speculatively: the ``spec_decode`` counters exist only then (as in vLLM).
    """

    def __init__(self, snapshot, *, log=lambda s: None, request_log=None, spec: bool = False):
        self.registry = CollectorRegistry()
        r = self.registry
        self.prompt_tokens = Counter("ninferc:prompt_tokens", "Prompt tokens of admitted requests.", registry=r)
        self.generation_tokens = Counter("ninferc:generation_tokens", "Generated tokens.", registry=r)
        self.success = Counter("ninferc:request_success", "Finished requests by finish reason.", ["finished_reason"],
                               registry=r)
        self.errors = Counter("ninferc:request_error", "Requests ended by an error, by code.", ["code"], registry=r)
        self.rejected = Counter("ninferc:request_rejected", "Requests refused, by reason.", ["reason"], registry=r)
        self.http_errors = Counter("ninferc:http_errors", "Error responses by HTTP status (bad requests, auth, "
                                   "refusals, engine errors).", ["status"], registry=r)
        self.ttft = Histogram("ninferc:time_to_first_token_seconds", "Arrival to first token.",
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("ninferc:inter_token_latency_seconds", "Time between consecutive tokens of a request.",
                             buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("ninferc:e2e_request_latency_seconds", "Arrival to finish.", buckets=LATENCY_BUCKETS,
                             registry=r)
        self.queue = Histogram("ninferc:request_queue_time_seconds", "Arrival to admission.", buckets=LATENCY_BUCKETS,
                               registry=r)
        self.spec_drafts = None
        if spec:
            self._spec_counters(r)
        for reason in ("stop", "length", "abort"):
            self.success.labels(reason)
        for reason in ("overloaded", "queue_timeout", "shutting_down"):
            self.rejected.labels(reason)
        r.register(_PoolCollector(snapshot))
        self.log, self.request_log = log, request_log
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def _spec_counters(self, r: CollectorRegistry) -> None:
        self.spec_drafts = Counter("ninferc:spec_decode_num_drafts", "Speculative verify rounds (counted when "
                                   "their request ends).", registry=r)
        self.spec_draft_tokens = Counter("ninferc:spec_decode_num_draft_tokens", "Draft tokens proposed.", registry=r)
        self.spec_accepted = Counter("ninferc:spec_decode_num_accepted_tokens", "Draft tokens accepted.", registry=r)
        self.spec_accepted_pos = Counter("ninferc:spec_decode_num_accepted_tokens_per_pos",
                                         "Accepted draft tokens by position in the round (0 = first draft).",
                                         ["position"], registry=r)

    # -- Observer ---------------------------------------------------------------------------------------------
    def on_admit(self, stats: RequestStats) -> None:
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.queue.observe(stats.queue_s)

    def on_tokens(self, stats: RequestStats, n: int, now: float) -> None:
        self.generation_tokens.inc(n)
        prev = self._last.get(stats.request_id)
        if prev is None:
            self.ttft.observe(now - stats.arrival)
        else:
            self.itl.observe((now - prev) / max(n, 1))
        self._last[stats.request_id] = now

    def on_finish(self, stats: RequestStats) -> None:
        self._last.pop(stats.request_id, None)
        self.success.labels(stats.finish_reason).inc()
        self.e2e.observe(stats.wall_s)
        self._count_spec(stats)
        self._log(stats)

    def on_error(self, stats: RequestStats, error: ServingError) -> None:
        self._last.pop(stats.request_id, None)
        if error.code != QUEUE_TIMEOUT:  # counted once, as a rejection (on_reject), though logged as a request
            self.errors.labels(str(error.code)).inc()
        self._count_spec(stats)
        self._log(stats, error)

    def _count_spec(self, s: RequestStats) -> None:
        if s.spec is None or not s.spec.rounds or self.spec_drafts is None:
            return
        self.spec_drafts.inc(s.spec.rounds)
        self.spec_draft_tokens.inc(s.spec.drafted)
        self.spec_accepted.inc(s.spec.accepted)
        for pos, n in enumerate(s.spec.accepted_at):
            self.spec_accepted_pos.labels(str(pos)).inc(n)

    def on_reject(self, reason: str) -> None:
        self.rejected.labels(reason).inc()

    # -- the log line -----------------------------------------------------------------------------------------
    def _log(self, s: RequestStats, error: ServingError | None = None) -> None:
        self.log(format_request_line(s, error))
        if self.request_log is not None:
            rec = request_record(s, error)
            with self._lock:
                self.request_log.write(json.dumps(rec) + "\n")
                self.request_log.flush()


def _rate(v: float | None) -> str:
    """Tokens per second with the unit, or ``-`` (no unit) where the rate does not exist."""
    return "-" if v is None else f"{v:.1f} tok/s"


def _ms(v: float | None) -> str:
    """Seconds as milliseconds with the unit, or ``-`` (no unit) where the time does not exist."""
    return "-" if v is None else f"{v * 1e3:.1f}ms"


def format_request_line(s: RequestStats, error: ServingError | None = None) -> str:
    """The per-request log line (module docstring); ``-`` where a figure does not exist (no token yet)."""
    line = (f"[req {s.request_id}] done finish={s.finish_reason} prompt={s.prompt_tokens} cached={s.cached_tokens} "
            f"gen={s.generated} queue={_ms(s.queue_s)} ttft={_ms(s.ttft_s)} "
            f"prefill={_rate(s.prefill_tok_s)} decode={_rate(s.decode_tok_s)} "
            f"wall={s.wall_s:.2f}s steps={s.decode_steps} shared={s.steps_shared}")
    if s.scored:
        line += f" scored={s.scored}"
    if s.spec is not None:
        line += f" spec={s.spec.describe()}"
    if error is not None:
        line += f" error={error.code}: {error}"
    return line


def request_record(s: RequestStats, error: ServingError | None = None) -> dict:
    """The JSON-lines record of one request (seconds and tokens per second): ``time`` is the arrival in ISO 8601 UTC
    (milliseconds), ``arrival_unix`` the same in seconds since the epoch, then the request's labels (the server's
    ``endpoint``: ``chat.completions`` / ``completions``, and ``stream``), then the figures of the log line."""
    when = datetime.fromtimestamp(s.arrival_unix, tz=timezone.utc)
    rec = {"time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "arrival_unix": s.arrival_unix,
           **s.labels,
           "request_id": s.request_id, "finish_reason": s.finish_reason, "prompt_tokens": s.prompt_tokens,
           "cached_tokens": s.cached_tokens, "generated_tokens": s.generated, "queue_s": s.queue_s,
           "ttft_s": s.ttft_s, "prefill_s": s.prefill_s, "decode_s": s.decode_s, "prefill_tok_s": s.prefill_tok_s,
           "decode_tok_s": s.decode_tok_s, "wall_s": s.wall_s, "decode_steps": s.decode_steps,
           "shared_steps": s.steps_shared}
    if s.scored:
        rec["scored_positions"] = s.scored
    if s.spec is not None:
        rec["spec"] = {"method": "mtp", "rounds": s.spec.rounds, "drafted": s.spec.drafted,
                       "accepted": s.spec.accepted, "accepted_at": list(s.spec.accepted_at),
                       "delivered": s.spec.delivered, "tokens_per_round": s.spec.tokens_per_round,
                       "acceptance": s.spec.acceptance}
    if error is not None:
        rec["error"] = {"code": error.code, "message": str(error)}
    return rec
