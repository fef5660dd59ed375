"""`ninferc serve (model.ninfer | MODEL_DIR | --preset NAME --synthetic-weights)`: an OpenAI-compatible HTTP server
with continuous batching.

``--preset NAME --synthetic-weights`` serves a built-in model shape (e.g. ``qwen3.8-27b``) with random weights
generated on the GPU, for serving benchmarks at sizes no fixture has: its tokenizer is a stand-in (id ``i`` <->
the word ``t{i}``, :meth:`~ninferc.tokenizer.Tokenizer.synthetic`), so clients send prompts as token ids; there is
no chat template (chat requests get 400) and no generation config.

Start-up: the HTTP server listens at once (``/health`` answers 503 while loading); the engine thread builds the
backend, printing the memory plan in bytes, and the server then answers 200 on ``/health``. A memory plan over the
device's free memory (the host's available memory for the reference backend) is refused before anything is
allocated, naming every term. A backend that cannot be built (no GPU, a plan over memory, ...) ends the server:
one ``error:`` line and exit status 2. An engine that fails while serving leaves the server up answering 503 on
``/health`` and to every request until it is stopped; it then exits with status 2 too. SIGINT / SIGTERM: stop admitting (503), let running requests finish for up to
``--drain-timeout`` seconds, end the rest with ``finish_reason`` ``abort``, exit 0.

``NINFERC_POISON_FREED=1`` (tests) makes the reference backend fill every KV page with NaN the moment it becomes
free, so a page still in use that is freed by mistake shows up as a wrong answer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from ninferc.errors import NinfercError, RuntimeMemoryError, option_given, path_problem
from ninferc.server.reasoning import PARSERS as REASONING_PARSERS, THINK_START
from ninferc.server.tools import PARSERS as TOOL_PARSERS, template_reads_tools

#: the context of a checkpoint directory served without --max-context (tokens)
DEFAULT_CONTEXT = 4096
#: KV page size of the reference backend on a checkpoint directory (tokens; an artifact has its own)
DEFAULT_PAGE_SIZE = 64
#: the prefix cache's default budget for GDN state checkpoints (GiB): at the 27B shape one checkpoint is ~153 MiB
#: (49 layers' fp32 recurrent matrices and conv windows: 160,161,792 bytes, `ninferc inspect --preset qwen3.8-27b`),
#: so 4 GiB hold 26
DEFAULT_PREFIX_CACHE_GIB = 4.0


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def host_available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (Linux), or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def kv_pages(kv_capacity: str, *, max_concurrency: int, max_context: int, page_size: int) -> int:
    """KV pages of the server's pool: ``auto`` = ``max_concurrency`` sequences of ``max_context`` tokens each, else
    ``kv_capacity`` tokens (rounded up to whole pages).

    Raises:
        NinfercError: not ``auto`` nor an integer, or fewer pages than one request of ``max_context`` tokens needs
            (as vLLM refuses a KV cache smaller than ``max_model_len`` at startup: a request the context admits, the
            chat default of "the rest of the context" among them, could otherwise never be admitted); the message
            names both sizes and the two ways out.
    """
    per_seq = -(-max_context // page_size)
    if kv_capacity == "auto":
        return max_concurrency * per_seq
    try:
        tokens = int(kv_capacity)
    except ValueError:
        raise NinfercError(f"--kv-capacity must be 'auto' or a number of tokens, found {kv_capacity!r}") from None
    if tokens < page_size:
        raise NinfercError(f"--kv-capacity {tokens} is less than one KV page ({page_size} tokens)")
    pages = -(-tokens // page_size)
    if pages < per_seq:
        raise NinfercError(f"--kv-capacity {tokens} tokens ({pages} KV pages of {page_size}) cannot hold one request of "
                           f"the context, {max_context} tokens ({per_seq} pages): pass --kv-capacity "
                           f"{per_seq * page_size} or more, or --max-context {pages * page_size} or less")
    return pages


@click.command("serve")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--preset", default=None, help="serve a built-in model shape instead (e.g. qwen3.8-27b), with "
              "--synthetic-weights")
@click.option("--synthetic-weights", is_flag=True, help="with --preset: random weights generated on the GPU")
@click.option("--weights", "weights_fmt", type=click.Choice(["bf16", "w8", "w4"]), default=None,
              help="with --preset: weight format of the synthetic weights (as ninferc compile --weights) "
                   "[default: bf16]")
@click.option("--kv-dtype", type=click.Choice(["bf16", "int8"]), default=None,
              help="with --preset: KV cache dtype [default: bf16]")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (127.0.0.1: this machine only)")
@click.option("--port", default=8000, type=click.IntRange(0, 65535), show_default=True,
              help="port to bind; 0 picks a free one (printed)")
@click.option("--model-id", "--served-model-name", "model_id", default=None,
              help="the model name clients use (--served-model-name: vLLM's name for it) [default: the file or "
                   "folder name]")
@click.option("--backend", type=click.Choice(["cuda", "reference"]), default=None,
              help="default: cuda for a .ninfer artifact, reference for a checkpoint directory")
@click.option("--max-context", "--max-model-len", "max_context", default=None, type=click.IntRange(min=2),
              help="tokens one request may hold, prompt + generated (--max-model-len: vLLM's name for it) [default: "
                   "the artifact's compile-time --max-context; 4096 for a checkpoint directory]")
@click.option("--kv-capacity", default="auto", show_default=True,
              help="KV pool size in tokens (at least --max-context), or 'auto' = --max-concurrency x --max-context")
@click.option("--max-concurrency", "--max-num-seqs", "max_concurrency", default=4, type=click.IntRange(1, 256),
              show_default=True, help="requests decoded together, each holding a GDN state slot (--max-num-seqs: "
                                      "vLLM's name for it)")
@click.option("--max-pending", default=16, type=click.IntRange(min=0), show_default=True,
              help="requests that may wait for admission beyond those; more get 429")
@click.option("--pending-timeout-ms", default=600_000, type=click.IntRange(min=1), show_default=True,
              help="a request waiting longer for admission gets 503")
@click.option("--prefill-chunk", default=1024, type=click.IntRange(min=1), show_default=True,
              help="most prompt tokens per prefill step (a long prompt delays others by at most one chunk)")
@click.option("--api-key", default=None, envvar="NINFERC_API_KEY",
              help="require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize and /reset_prefix_cache "
                   "(/health, /metrics and /version stay open; also NINFERC_API_KEY)")
@click.option("--request-log", default=None, type=click.Path(path_type=Path),
              help="also append one JSON line per finished request here")
@click.option("--drain-timeout", default=30.0, type=click.FloatRange(min=0), show_default=True,
              help="seconds running requests may take to finish after SIGINT / SIGTERM")
@click.option("--no-cuda-graph", is_flag=True, help="cuda backend: launch decode steps eagerly")
@click.option("--spec", type=click.Choice(["mtp"]), default=None,
              help="speculative decoding with the checkpoint's multi-token-prediction head (lossless)")
@click.option("--draft-tokens", "--num-speculative-tokens", "draft_tokens", default=3, type=int, show_default=True,
              help="with --spec: drafts per round (a round: the drafts, then one verify step of them), 1-5 "
                   "(--num-speculative-tokens: vLLM's name for it)")
@click.option("--draft-lm-head", type=click.Choice(["bf16", "w8", "w4"]), default="bf16", show_default=True,
              help="with --spec: the drafts' LM head format (verification always uses the model's own)")
@click.option("--spec-disable-by-batch-size", "spec_disable_by_batch_size", type=int, default=None, metavar="N",
              help="with --spec: N >= 1; a step of more than N decoding requests drafts nothing (a plain decode "
                   "step; drafting resumes at N or fewer), vLLM's disable_by_batch_size [default: always draft]")
@click.option("--speculative-config", "speculative_config", default=None, metavar="JSON",
              help="vLLM's form of --spec / --draft-tokens / --spec-disable-by-batch-size: e.g. '{\"method\": \"mtp\", "
                   "\"num_speculative_tokens\": 3}' (keys method: mtp or qwen3_next_mtp, num_speculative_tokens, "
                   "disable_by_batch_size)")
@click.option("--reasoning-parser", type=click.Choice(list(REASONING_PARSERS)), default=None,
              help="chat answers' <think> blocks go to the message's reasoning (and reasoning_content), the rest to "
                   "content (vLLM's flag; needs a chat template that writes <think>) [default: all text is content]")
@click.option("--tool-call-parser", type=click.Choice(list(TOOL_PARSERS)), default=None,
              help="chat requests may carry tools, and the calls in an answer go to tool_calls (vLLM's flag and "
                   "names: qwen3_coder for Qwen3.5 / 3.6 / 3.8, hermes for Qwen3; needs a chat template that reads "
                   "tools) [default: tool_choice auto (or none given) with tools gets 400; 'required' or a named "
                   "function still force a call]")
@click.option("--enable-auto-tool-choice", is_flag=True,
              help="vLLM's companion flag, accepted for its command lines; it needs --tool-call-parser, which alone "
                   "turns tool_choice auto on ('required' and a named function force a call with or without either "
                   "flag)")
@click.option("--no-prefix-cache", is_flag=True, help="turn prefix reuse across requests off")
@click.option("--prefix-cache-gib", default=DEFAULT_PREFIX_CACHE_GIB, type=click.FloatRange(min=0, min_open=True),
              show_default=True, help="byte budget of the prefix cache's GDN state checkpoints, GiB")
@click.option("--prefix-checkpoint-interval", default=None, type=click.IntRange(min=0),
              help="also checkpoint every N prompt tokens during prefill (a multiple of the KV page size; 0 = only "
                   "at the ends of prompts and generations) [default: --prefill-chunk rounded down to pages]")
def serve_cmd(path, preset, synthetic_weights, weights_fmt, kv_dtype, host, port, model_id, backend, max_context, kv_capacity, max_concurrency, max_pending,
              pending_timeout_ms, prefill_chunk, api_key, request_log, drain_timeout, no_cuda_graph, spec,
              draft_tokens, draft_lm_head, spec_disable_by_batch_size, speculative_config, reasoning_parser, tool_call_parser, enable_auto_tool_choice,
              no_prefix_cache, prefix_cache_gib,
              prefix_checkpoint_interval):
    """Serve a model over the OpenAI API (chat and text completions, streaming), with continuous batching, a
    per-request log line on stderr and Prometheus metrics at /metrics."""
    import uvicorn

    from ninferc.chat import chat_template_for, end_of_turn_ids
    from ninferc.runtime.engine_loop import EngineLoop
    from ninferc.runtime.scheduler import Scheduler
    from ninferc.server.app import ServerState, create_app
    from ninferc.server.metrics import ServerMetrics

    if (path is None) == (preset is None):
        raise NinfercError("give exactly one of a .ninfer file, a checkpoint directory, or --preset NAME "
                           "--synthetic-weights")
    if preset is None and (synthetic_weights or weights_fmt or kv_dtype):
        raise NinfercError("--synthetic-weights/--weights/--kv-dtype apply to --preset; an artifact's formats were "
                           "chosen by ninferc compile")
    if preset is not None and not synthetic_weights:
        raise NinfercError("--preset needs --synthetic-weights (there is no checkpoint to read)")
    why = path_problem(path, "a checkpoint directory or a .ninfer file") if path is not None else None
    if why:
        raise NinfercError(why)
    if api_key is not None and not api_key.strip():
        raise NinfercError("--api-key is empty")
    log_file = None
    if request_log is not None:
        try:
            log_file = open(request_log, "a", encoding="utf-8")  # noqa: SIM115 -- closed when the server stops
        except OSError as exc:
            raise NinfercError(f"--request-log {request_log}: cannot open it for appending ({exc.strerror})") from None
    ctx_obj = click.get_current_context()
    if speculative_config is not None:
        given = [n for n in ("spec", "draft_tokens", "spec_disable_by_batch_size") if option_given(ctx_obj, n)]
        if given:
            raise NinfercError(f"--speculative-config and --{given[0].replace('_', '-')} both set speculative decoding; "
                               "give one of them")
        spec, k, cut = parse_speculative_config(speculative_config)
        draft_tokens = draft_tokens if k is None else k
        spec_disable_by_batch_size = cut
    spec_cfg = spec_config(spec, draft_tokens, draft_lm_head, ctx_obj, spec_disable_by_batch_size)
    if preset is not None:
        opened = open_preset(preset, backend, max_context, weights_fmt=weights_fmt or "bf16",
                             kv_dtype=kv_dtype or "bf16", max_concurrency=max_concurrency,
                             mtp=spec_cfg is not None, draft_lm_head=draft_lm_head)
    else:
        opened = open_model(path, backend, max_context, draft_lm_head=draft_lm_head)
    if opened.backend == "reference" and no_cuda_graph:
        raise NinfercError("--no-cuda-graph applies to the cuda backend")
    if spec_cfg is not None:
        opened.check_spec()
    if opened.backend == "cuda":  # no GPU: one error line before the server starts (the engine loads after it)
        from ninferc.runtime.kernels import cupy

        cupy("ninferc serve --preset --synthetic-weights (its weights are generated on the GPU)" if preset else
             "the CUDA backend", hint="" if preset else "on a machine without a GPU use --backend reference")
    ctx = opened.max_context
    if prefill_chunk > ctx:
        prefill_chunk = ctx
    num_pages = kv_pages(kv_capacity, max_concurrency=max_concurrency, max_context=ctx, page_size=opened.page_size)
    ps = opened.page_size
    cache_bytes = None if no_prefix_cache else int(prefix_cache_gib * 2**30)
    if no_prefix_cache and option_given(ctx_obj, "prefix_cache_gib"):
        raise NinfercError("--prefix-cache-gib applies to the prefix cache, which --no-prefix-cache turns off")
    if no_prefix_cache and prefix_checkpoint_interval is not None:
        raise NinfercError("--prefix-checkpoint-interval applies to the prefix cache, which --no-prefix-cache turns "
                           "off")
    interval = prefill_chunk // ps * ps if prefix_checkpoint_interval is None else prefix_checkpoint_interval
    if interval % ps:
        raise NinfercError(f"--prefix-checkpoint-interval {interval} is not a multiple of the KV page size "
                           f"({ps} tokens)")
    model_id = model_id or (preset if path is None else path.stem if path.is_file() else path.name)
    tok = opened.tokenizer
    chat = chat_template_for(tok)
    if reasoning_parser is not None and (chat is None or THINK_START not in chat.source):
        raise NinfercError(f"--reasoning-parser {reasoning_parser} splits off <think> blocks, and this model's chat "
                           f"template {'is missing' if chat is None else 'never writes <think>'}")
    if enable_auto_tool_choice and tool_call_parser is None:
        raise NinfercError("--enable-auto-tool-choice needs --tool-call-parser (qwen3_coder or hermes): the server "
                           "must know how the model writes a call")
    if tool_call_parser is not None and (chat is None or not template_reads_tools(chat.source)):
        raise NinfercError(f"--tool-call-parser {tool_call_parser} reads the calls of a model shown the request's "
                           f"tools, and this model's chat template "
                           f"{'is missing' if chat is None else 'never reads tools'}")
    gen_cfg = opened.generation_config
    eos = list(opened.config.eos_token_ids)
    g_eos = gen_cfg.get("eos_token_id")
    for t in (g_eos if isinstance(g_eos, list) else [] if g_eos is None else [g_eos]):
        if isinstance(t, int) and t not in eos:
            eos.append(t)
    defaults = {k: gen_cfg[k] for k in ("temperature", "top_p", "top_k") if isinstance(gen_cfg.get(k), (int, float))}
    # after every argument check (a wrong flag is named as such even where the port is taken) and before the engine
    # loads anything: a port in use is a one-line error, not a late exit
    check_bind(host, port)
    _log(f"ninferc serve: model {model_id!r} ({path or preset + ', synthetic ' + (weights_fmt or 'bf16') + ' weights'}), backend {opened.backend}, context {ctx} tokens, "
         f"concurrency {max_concurrency}, pending {max_pending}, prefill chunk {prefill_chunk}, "
         f"chat template {'yes' if chat else 'none (chat requests get 400)'}"
         + (f", spec mtp with {spec_cfg.draft_tokens} draft{'s' if spec_cfg.draft_tokens != 1 else ''} per round (draft LM head {draft_lm_head}"
            + (f"; none in rounds of more than {spec_cfg.disable_by_batch_size} requests"
               if spec_cfg.disable_by_batch_size else "") + ")"
            if spec_cfg else "")
         + (f", reasoning parser {reasoning_parser}" if reasoning_parser else "")
         + (f", tool-call parser {tool_call_parser}" if tool_call_parser else ""))

    def make_backend():
        be = opened.make(num_pages=num_pages, num_slots=max_concurrency, prefill_chunk=prefill_chunk,
                         cuda_graph=not no_cuda_graph, log=_log, cache_bytes=cache_bytes or 0,
                         spec_tokens=spec_cfg.draft_tokens if spec_cfg is not None else 0)
        if cache_bytes:
            from ninferc.runtime.paged_kv import Sequence

            one = be.state_nbytes(Sequence(slot=0, mtp=spec_cfg is not None))
            _log(f"prefix cache: budget {cache_bytes:,} B for GDN state checkpoints of {one:,} B each (every GDN "
                 f"layer's conv window and recurrent state) = {cache_bytes // max(one, 1)} checkpoints; their KV pages "
                 "come from the KV pool; checkpoints " + (f"every {interval} prompt tokens and " if interval else "")
                 + "at the ends of prompts and generations")
        return be

    state = ServerState(engine=None, tokenizer=tok, chat=chat, model_id=model_id, max_context=ctx,
                        eos_ids=tuple(eos), chat_stop_ids=end_of_turn_ids(tok), defaults=defaults, api_key=api_key,
                        reasoning_parser=reasoning_parser, tool_parser=tool_call_parser)
    metrics = ServerMetrics(lambda: state.engine.scheduler.snapshot() if state.engine.scheduler else None, log=_log,
                            request_log=log_file, spec=spec_cfg is not None)
    state.metrics = metrics

    def make_scheduler(be):
        return Scheduler(be, max_concurrency=max_concurrency, max_pending=max_pending,
                         pending_timeout_s=pending_timeout_ms / 1e3, prefill_chunk=prefill_chunk, spec=spec_cfg,
                         prefix_cache_bytes=cache_bytes, checkpoint_interval=interval if cache_bytes else 0,
                         poison_freed=os.environ.get("NINFERC_POISON_FREED") == "1", observer=metrics)

    engine = EngineLoop(make_backend, make_scheduler, log=_log)
    state.engine = engine
    app = create_app(state)

    class _Server(uvicorn.Server):
        """uvicorn's server whose first SIGINT / SIGTERM drains the engine before the HTTP side stops; a second one
        stops now: the requests in flight end with ``abort`` (their streams get their last chunk) and the server
        exits 0 without waiting out ``--drain-timeout``; a third stops waiting for open connections too. uvicorn's
        own handler is not called: it would re-raise the signal at exit (status 143 for SIGTERM)."""

        draining_thread = None
        stopping_now = False

        def handle_exit(self, sig, frame):
            import threading

            if self.draining_thread is not None:  # a second signal: stop now
                if self.stopping_now:  # a third: do not wait for open connections either
                    self.force_exit = True
                    return
                self.stopping_now = True
                sched = engine.scheduler
                n = sched.inflight if sched is not None else 0
                _log(f"ninferc serve: signal {sig} again: stopping now, {n} request{'s' if n != 1 else ''} in flight "
                     "end with finish_reason abort")
                if sched is not None:  # off the signal handler: the event loop may hold the scheduler's lock here
                    threading.Thread(target=sched.abort_all, daemon=True).start()
                self.should_exit = True
                return
            _log(f"ninferc serve: signal {sig}: draining (up to {drain_timeout:g} s), no new requests")
            state.draining = True

            def drain():
                engine.shutdown(drain_timeout)
                self.should_exit = True

            self.draining_thread = threading.Thread(target=drain, daemon=True)
            self.draining_thread.start()

        async def startup(self, sockets=None):
            await super().startup(sockets)
            if engine.state == "failed":  # the load failed before the socket opened: the server is stopping
                return
            for s in self.servers:
                for sock in s.sockets:
                    h, p = sock.getsockname()[:2]
                    _log(f"listening on http://{h}:{p} (OpenAI API at /v1, /health, /metrics)")

    engine.start()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=max(1, int(drain_timeout) + 5))
    server = _Server(config)

    def stop_if_loading_fails():
        if not engine.wait_ready():
            server.should_exit = True

    import threading

    threading.Thread(target=stop_if_loading_fails, daemon=True, name="ninferc-load-watch").start()
    try:
        server.run()
    finally:
        engine.shutdown(0.0)
        if log_file is not None:
            log_file.close()
        _log(f"ninferc serve: stopped (engine {engine.state})")
    if engine.state == "failed" and engine.error:
        raise NinfercError(f"the engine failed{' to load' if engine.scheduler is None else ''}: {engine.error}")


def check_bind(host: str, port: int) -> None:
    """Bind ``host``:``port`` once and let go (as uvicorn will, with SO_REUSEADDR), so an address in use or not
    available is reported before the model loads.

    Raises:
        NinfercError: the address cannot be resolved or bound (the OS's reason named)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise NinfercError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            raise NinfercError(f"--host {host} --port {port}: cannot bind ({exc.strerror}); another server there? "
                               "(--port 0 picks a free port)") from None


#: vLLM's ``speculative_config`` methods that mean the checkpoint's own MTP head (vllm/config/speculative.py)
VLLM_MTP_METHODS = ("mtp", "qwen3_next_mtp")
#: the ``speculative_config`` keys serve takes, and the option each stands for
VLLM_SPEC_KEYS = {"method": "--spec", "num_speculative_tokens": "--draft-tokens",
                  "disable_by_batch_size": "--spec-disable-by-batch-size"}


def parse_speculative_config(text: str) -> tuple[str, int | None, int | None]:
    """vLLM's ``--speculative-config`` JSON as serve's options: ``(spec, draft_tokens or None, disable_by_batch_size
    or None)``, e.g. ``'{"method": "mtp", "num_speculative_tokens": 3}'`` -> ``("mtp", 3, None)``. The counts'
    ranges are checked where the options' are (:class:`~ninferc.runtime.spec.SpecConfig`).

    Raises:
        NinfercError: not a JSON object; no ``method``, or one other than the MTP head's (:data:`VLLM_MTP_METHODS`);
            a key serve does not take (named, with those it takes: :data:`VLLM_SPEC_KEYS`); a count that is not an
            integer.
    """
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise NinfercError(f"--speculative-config is not JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise NinfercError(f"--speculative-config must be a JSON object, found {type(cfg).__name__}")
    other = [k for k in cfg if k not in VLLM_SPEC_KEYS]
    if other:
        raise NinfercError(f"--speculative-config key {other[0]!r} is not supported; ninferc takes "
                           + ", ".join(VLLM_SPEC_KEYS))
    method = cfg.get("method")
    if method not in VLLM_MTP_METHODS:
        raise NinfercError(f"--speculative-config method must be one of {', '.join(VLLM_MTP_METHODS)} (the "
                           f"checkpoint's own MTP head; ninferc has no other drafter), found {method!r}")
    counts = []
    for key in ("num_speculative_tokens", "disable_by_batch_size"):
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise NinfercError(f"--speculative-config {key} must be an integer, found {v!r}")
        counts.append(v)
    return "mtp", counts[0], counts[1]


def spec_config(spec: str | None, draft_tokens: int, draft_lm_head: str, ctx,
                disable_by_batch_size: int | None = None):
    """The :class:`~ninferc.runtime.spec.SpecConfig` of ``--spec`` / ``--draft-tokens`` /
    ``--spec-disable-by-batch-size``, or None.

    Raises:
        NinfercError: ``--draft-tokens``, ``--draft-lm-head`` or ``--spec-disable-by-batch-size`` given without
            ``--spec``; a bad draft count or batch size.
    """
    if spec is None:
        for name in ("draft_tokens", "draft_lm_head", "spec_disable_by_batch_size"):
            if name in ctx.params and option_given(ctx, name):  # the last is serve's only
                raise NinfercError(f"--{name.replace('_', '-')} applies with --spec mtp")
        return None
    from ninferc.runtime.spec import SpecConfig

    return SpecConfig(spec, draft_tokens, disable_by_batch_size)


class OpenedModel:
    """A model opened for serving: its tokenizer, config and how to build its batched backend.

    Attributes:
        backend: ``"cuda"`` or ``"reference"``. max_context: tokens per request. page_size: KV page tokens.
        generation_config: ``generation_config.json`` (dict; empty when absent). has_mtp: whether the MTP head's
        weights are there (``mtp_why`` says why not).
    """

    def __init__(self, *, backend, tokenizer, config, max_context, page_size, generation_config, make,
                 has_mtp=False, mtp_why=""):
        self.backend, self.tokenizer, self.config = backend, tokenizer, config
        self.max_context, self.page_size, self.generation_config = max_context, page_size, generation_config
        self._make = make
        self.has_mtp, self.mtp_why = has_mtp, mtp_why

    def check_spec(self) -> None:
        """Refuse ``--spec mtp`` before anything is loaded when the model or backend cannot speculate.

        Raises:
            NinfercError: naming why (no MTP head in the checkpoint / artifact, or a backend without MTP).
        """
        if not self.has_mtp:
            raise NinfercError(f"--spec mtp: {self.mtp_why}")

    def make(self, **kw):
        """Build the batched backend (``num_pages``, ``num_slots``, ``prefill_chunk``, ``cuda_graph``, ``log``)."""
        return self._make(**kw)


def open_model(path: Path, backend: str | None, max_context: int | None, *, draft_lm_head: str = "bf16"
               ) -> OpenedModel:
    """Open a checkpoint directory or an artifact for serving (nothing is allocated yet).

    Raises:
        NinfercError: ``cuda`` for a checkpoint directory (compile it first); ConfigError: a context beyond the
            model's positions; ArtifactError: an unreadable artifact.
    """
    from ninferc.reference_backend import ReferenceBatchBackend, reference_memory_plan
    from ninferc.tokenizer import Tokenizer

    if path.is_dir():
        from ninferc.checkpoint import Checkpoint

        backend = backend or "reference"
        if backend != "reference":
            raise NinfercError(f"--backend {backend} needs a compiled artifact; run `ninferc compile {path} --target "
                               "ARCH --sku NAME -o model.ninfer` first, or use --backend reference")
        ck = Checkpoint(path, notice=None)
        cfg = ck.config
        ctx = max_context if max_context is not None else min(DEFAULT_CONTEXT, cfg.max_position_embeddings)
        cfg.check_context(ctx)
        gc = path / "generation_config.json"
        gen_cfg = _json_or_empty(gc.read_bytes() if gc.is_file() else None)
        weights, graph, page_size, art_mtp = ck, None, DEFAULT_PAGE_SIZE, None
        tok = Tokenizer.from_dir(path)
        tok.check_fits(cfg.vocab_size, f"{path}/config.json")
    else:
        from ninferc.artifact import Artifact

        art = Artifact.open(path)
        cfg = art.config
        ctx = max_context if max_context is not None else int(art.header["compile"]["max_context"])
        cfg.check_context(ctx)
        gen_cfg = _json_or_empty(art.blob("generation_config.json") if art.has_blob("generation_config.json")
                                 else None)
        page_size = int(art.header["compile"]["page_size"])
        tok = art.tokenizer()
        tok.check_fits(cfg.vocab_size, f"the artifact {path}")
        backend = backend or "cuda"
        if backend == "cuda":
            return _opened_cuda(lambda num_slots: art, tokenizer=tok, config=cfg, max_context=ctx,
                                page_size=page_size, generation_config=gen_cfg,
                                mtp=art.header.get("mtp_graph") is not None, draft_lm_head=draft_lm_head)
        weights, graph, art_mtp = art.weights(), art.graph(), art.mtp_graph()

    from ninferc.ir.qwen3_5 import mtp_param_specs

    mtp_names = list(mtp_param_specs(cfg))
    has_mtp = art_mtp is not None if graph is not None else bool(mtp_names) and all(n in weights for n in mtp_names)

    def make_reference(*, num_pages, num_slots, prefill_chunk, cuda_graph, log, cache_bytes=0, spec_tokens=0):
        from ninferc.ir.qwen3_5 import build_mtp_graph

        mtp_graph = art_mtp if art_mtp is not None else build_mtp_graph(cfg) if has_mtp else None
        plan = reference_memory_plan(cfg, graph, num_pages=num_pages, page_size=page_size, num_slots=num_slots,
                                     weights=weights, mtp_graph=mtp_graph)
        if cache_bytes:
            plan.add("prefix_cache_budget", cache_bytes)
        log(f"memory plan (host memory, reference backend: weights widened to fp32 once, KV kept in fp32): KV pool "
            f"{num_pages} pages x {page_size} tokens = {num_pages * page_size} tokens; {num_slots} GDN state slots"
            + ("; the prefix cache's budget is an upper bound, used as checkpoints are taken" if cache_bytes else "")
            + f"\n{plan.describe()}")
        avail = host_available_bytes()
        if avail is not None:
            try:
                plan.check(avail, device="this host")
            except RuntimeMemoryError as exc:
                raise RuntimeMemoryError(str(exc).replace("reduce --max-context or the batch size",
                                                          "reduce --kv-capacity, --max-context or "
                                                          "--max-concurrency")) from None
            log(f"  headroom {avail - plan.total:,} B of {avail:,} B available")
        return ReferenceBatchBackend(cfg, weights, graph=graph, num_pages=num_pages, page_size=page_size,
                                     num_slots=num_slots, max_context=ctx, draft_lm_head=draft_lm_head,
                                     mtp_graph=mtp_graph if has_mtp else None)


    why = ("the model's config declares no MTP head (mtp_num_hidden_layers)" if not mtp_names else
           "the artifact carries no MTP head (compiled before 2026-12-05, when `ninferc compile` began to store "
           "it); compile it again")
    return OpenedModel(backend="reference", tokenizer=tok, config=cfg, max_context=ctx, page_size=page_size,
                       generation_config=gen_cfg, make=make_reference, has_mtp=has_mtp, mtp_why=why)


def open_preset(name: str, backend: str | None, max_context: int | None, *, weights_fmt: str, kv_dtype: str,
                max_concurrency: int, mtp: bool = False, draft_lm_head: str = "bf16") -> OpenedModel:
    """A built-in model shape with synthetic weights, opened for serving on the CUDA engine: the compiled graph is
    built here (no GPU needed: a bad preset or recipe fails now); the plan for the device (its arch and SM count,
    decode batches 1 and ``max_concurrency``) and the weights, generated on the GPU, come when the backend is made.
    ``mtp`` (``--spec mtp``): with the one-layer MTP head the Qwen3.5 / 3.6 checkpoints carry, its weights synthetic
    too (:func:`~ninferc.bench.synthetic_artifact`), so its drafts are rarely accepted: such a server measures the
    speculative rounds' cost, not MTP's gain. ``draft_lm_head``: ``--draft-lm-head``.

    Raises:
        NinfercError: ``--backend reference`` (there are no weights to read on the host); ConfigError: an unknown
            preset or a context beyond its positions; QuantError: a recipe the pipeline rejects.
    """
    from ninferc.bench import synthetic_graph
    from ninferc.ir.config import preset as get_preset
    from ninferc.ir.quant import recipe_name as make_recipe_name
    from ninferc.tokenizer import Tokenizer

    if backend not in (None, "cuda"):
        raise NinfercError(f"--backend {backend}: --preset --synthetic-weights runs on the cuda backend only (its "
                           "weights are generated on the GPU)")
    cfg = get_preset(name)
    ctx = max_context if max_context is not None else min(DEFAULT_CONTEXT, cfg.max_position_embeddings)
    cfg.check_context(ctx)
    recipe = make_recipe_name(weights_fmt, None)
    graph = synthetic_graph(name, recipe, kv_dtype)
    from ninferc.runtime.synthetic import PAGE_SIZE as page_size

    def synthetic(num_slots):
        from ninferc.bench import synthetic_artifact
        from ninferc.runtime.kernels import cupy

        cupy("ninferc serve --preset --synthetic-weights (its weights are generated on the GPU)", hint="")
        return synthetic_artifact(name, recipe, kv_dtype, target=None, max_context=ctx,
                                  batch=max(num_slots, 1), graph=graph, mtp=mtp)

    return _opened_cuda(synthetic, tokenizer=Tokenizer.synthetic(cfg.vocab_size), config=cfg, max_context=ctx,
                        page_size=page_size, generation_config={}, mtp=mtp, draft_lm_head=draft_lm_head)


def _opened_cuda(artifact, *, tokenizer, config, max_context, page_size, generation_config, mtp: bool = False,
                 draft_lm_head: str = "bf16") -> OpenedModel:
    """An :class:`OpenedModel` on the CUDA backend; ``artifact(num_slots)`` gives the artifact when the engine
    thread makes the backend (an opened file, or a synthetic one planned for that many slots); ``mtp``: the artifact
    carries the MTP head."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend

    def make_cuda(*, num_pages, num_slots, prefill_chunk, cuda_graph, log, cache_bytes=0, spec_tokens=0):
        return CudaBatchBackend(artifact(num_slots), max_context=max_context, num_slots=num_slots,
                                num_pages=num_pages, prefill_chunk=prefill_chunk, cuda_graph=cuda_graph, log=log,
                                cache_bytes=cache_bytes, spec_tokens=spec_tokens,
                                draft_lm_head=draft_lm_head if spec_tokens else "bf16")

    why = ("" if mtp else "the artifact carries no MTP head (its checkpoint declares none, or it was compiled before "
           "2026-12-05); compile it again")
    return OpenedModel(backend="cuda", tokenizer=tokenizer, config=config, max_context=max_context,
                       page_size=page_size, generation_config=generation_config, make=make_cuda,
                       has_mtp=not why, mtp_why=why)


def _json_or_empty(data: bytes | None) -> dict:
    """``generation_config.json`` parsed (empty when absent).

    Raises:
        NinfercError: present but not a JSON object.
    """
    if not data:
        return {}
    try:
        d = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NinfercError(f"generation_config.json is not valid JSON ({exc})") from None
    if not isinstance(d, dict):
        raise NinfercError(f"generation_config.json must hold a JSON object, found {type(d).__name__}")
    return d
