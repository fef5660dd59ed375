"""`ninferc run MODEL_DIR | FILE.ninfer --prompt ...`: generate text (stdout) with timings (stderr)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ninferc.errors import NinfercError, option_given, path_problem
from ninferc.sampling import SamplingParams

#: KV capacity of ``ninferc run`` on a checkpoint directory when --max-context is not given (tokens)
DEFAULT_CONTEXT = 4096


def open_backend(path: Path, backend: str | None, *, max_context: int | None, cuda_graph: bool, prefill_chunk: int,
                 log=None):
    """(backend object, tokenizer, model config, max_context) for a checkpoint dir or an artifact.

    ``backend`` None picks ``cuda`` for an artifact and ``reference`` for a checkpoint directory.
    ``max_context`` None takes the artifact's compile-time ``--max-context`` (4096 for a checkpoint
    directory, or its max_position_embeddings when smaller).

    Raises:
        NinfercError: path missing; ``cuda`` asked for a checkpoint directory (compile it first).
        ConfigError: ``max_context`` beyond the model's max_position_embeddings.
        ArtifactError: an artifact that cannot be opened (see :class:`ninferc.artifact.Artifact`).
        TargetError: ``cuda`` with no usable GPU, or an artifact compiled for another arch.
    """
    from ninferc.reference_backend import ReferenceBackend
    from ninferc.tokenizer import Tokenizer

    why = path_problem(path, "a checkpoint directory or a .ninfer file")
    if why:
        raise NinfercError(why)
    if path.is_dir():
        from ninferc.checkpoint import Checkpoint

        backend = backend or "reference"
        if backend != "reference":
            raise NinfercError(
                f"--backend {backend} needs a compiled artifact; run `ninferc compile {path} --target ARCH "
                "--sku NAME -o model.ninfer` first (see `ninferc plan --help` for targets and SKUs), or use "
                "--backend reference")
        ck = Checkpoint(path)
        if max_context is None:
            max_context = min(DEFAULT_CONTEXT, ck.config.max_position_embeddings)
        ck.config.check_context(max_context)
        tok = Tokenizer.from_dir(path)
        tok.check_fits(ck.config.vocab_size, f"{path}/config.json")
        return ReferenceBackend(ck.config, ck, max_context=max_context), tok, ck.config, max_context
    from ninferc.artifact import Artifact

    art = Artifact.open(path)
    tok = art.tokenizer()
    tok.check_fits(art.config.vocab_size, f"the artifact {path}")
    if max_context is None:
        max_context = int(art.header["compile"]["max_context"])
    art.config.check_context(max_context)
    backend = backend or "cuda"
    if backend == "reference":
        return (ReferenceBackend(art.config, art.weights(), graph=art.graph(), max_context=max_context), tok,
                art.config, max_context)
    from ninferc.runtime.engine import Engine

    eng = Engine.from_artifact(art, max_context=max_context, cuda_graph=cuda_graph, prefill_chunk=prefill_chunk,
                               log=log)
    return eng.session(), tok, art.config, max_context


def read_prompt(prompt: str | None, prompt_file: Path | None) -> str:
    """The prompt text from ``--prompt`` or ``--prompt-file`` (``-`` = stdin), exactly one of them.

    Raises:
        NinfercError: neither or both given; the text is not valid UTF-8 (names the byte offset); the file cannot be
            read.
    """
    if (prompt is None) == (prompt_file is None):
        raise NinfercError("give exactly one of --prompt TEXT or --prompt-file PATH ('-' reads stdin)")
    if prompt is not None:
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:  # click hands undecodable argv bytes over as surrogate escapes
            raise NinfercError(f"--prompt is not valid UTF-8 (character {exc.start}); pass the text as UTF-8, or "
                               "use --prompt-file") from None
        return prompt
    try:
        data = sys.stdin.buffer.read() if str(prompt_file) == "-" else prompt_file.read_bytes()
    except OSError as exc:
        raise NinfercError(f"--prompt-file {str(prompt_file)!r}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NinfercError(f"--prompt-file {str(prompt_file)!r} is not valid UTF-8 (byte {exc.start})") from None


@click.command("run")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--prompt", default=None, help="the prompt text")
@click.option("--prompt-file", default=None, type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
              help="read the prompt from this file ('-' = stdin), for prompts past the shell's argument limit")
@click.option("--chat", is_flag=True,
              help="render the prompt as a user message through the model's chat template; stop at its end of turn")
@click.option("--stop", "stop", multiple=True, help="stop when the text contains this string (repeatable; not printed)")
@click.option("--max-new", default=128, type=click.IntRange(min=1), show_default=True, help="tokens to generate at most")
@click.option("--max-context", default=None, type=click.IntRange(min=2),
              help="KV capacity per sequence (tokens) [default: the artifact's compile-time --max-context; 4096 for "
                   "a checkpoint directory]")
@click.option("--prefill-chunk", default=1024, type=click.IntRange(min=1), show_default=True, help="prompt tokens per prefill step")
@click.option("--greedy", is_flag=True, help="argmax decoding (the default unless --temperature > 0)")
@click.option("--temperature", default=0.0, show_default=True, help="0 = greedy; else 1e-5 to 100")
@click.option("--top-p", default=1.0, show_default=True, help="nucleus mass kept when sampling, in (0, 1]")
@click.option("--top-k", default=0, type=click.IntRange(min=0), show_default=True,
              help="keep the k most likely tokens when sampling; 0 = off, at most the vocabulary")
@click.option("--seed", default=0, show_default=True, help="sampling seed, 0 <= seed < 2**64")
@click.option("--no-cuda-graph", is_flag=True, help="launch the decode step eagerly instead of replaying a graph")
@click.option("--backend", type=click.Choice(["cuda", "reference"]), default=None,
              help="default: cuda for a .ninfer artifact, reference for a checkpoint directory")
@click.option("--ignore-eos", is_flag=True, help="keep generating past the end-of-sequence token")
@click.option("--spec", type=click.Choice(["mtp"]), default=None,
              help="speculative decoding with the checkpoint's multi-token-prediction head (lossless)")
@click.option("--draft-tokens", default=3, type=int, show_default=True, help="with --spec: drafts per round, 1-5")
@click.option("--draft-lm-head", type=click.Choice(["bf16", "w8", "w4"]), default="bf16", show_default=True,
              help="with --spec: the drafts' LM head format (verification always uses the model's own)")
def run_cmd(path, prompt, prompt_file, chat, stop, max_new, max_context, prefill_chunk, greedy, temperature, top_p,
            top_k, seed, no_cuda_graph, backend, ignore_eos, spec, draft_tokens, draft_lm_head):
    """Generate a continuation of --prompt: text on stdout as it is decoded, then one newline; timings on stderr."""
    from ninferc.generate import generate
    from ninferc.tokenizer import TextOutput

    ctx = click.get_current_context()
    if any(not s for s in stop):
        raise NinfercError("--stop '' is an empty string, which no text can end with; leave it out")
    prompt = read_prompt(prompt, prompt_file)

    def given(name: str) -> bool:
        return option_given(ctx, name)

    if greedy and temperature:
        raise NinfercError(f"--greedy conflicts with --temperature {temperature}")
    params = SamplingParams(temperature=0.0 if greedy else temperature, top_k=top_k, top_p=top_p, seed=seed)
    if params.greedy:  # sampling options set away from their defaults (off) would be ignored: say so instead
        unused = [f"--{name} {v}" for name, v, off in (("top-p", top_p, 1.0), ("top-k", top_k, 0), ("seed", seed, 0))
                  if v != off]
        if unused:
            raise NinfercError(f"{' and '.join(unused)} {'applies' if len(unused) == 1 else 'apply'} only when "
                               "sampling (--temperature > 0); decoding is greedy here")
    if no_cuda_graph and (backend == "reference" or (backend is None and path.is_dir())):
        raise NinfercError("--no-cuda-graph applies to the cuda backend; the reference backend has no CUDA graph")

    def log(msg):
        click.echo(msg, err=True)

    def check_chunk(ctx_tokens: int, where: str) -> None:
        # an explicit --prefill-chunk longer than the context would be cut to it silently; the default adapts
        if given("prefill_chunk") and prefill_chunk > ctx_tokens:
            raise NinfercError(f"--prefill-chunk {prefill_chunk} is more than {where} {ctx_tokens} (a chunk holds at "
                               "most the context's tokens)")

    if max_context is not None:
        check_chunk(max_context, "--max-context")
    from ninferc.cmd_serve import open_model, spec_config

    spec_cfg = spec_config(spec, draft_tokens, draft_lm_head, ctx)
    if spec_cfg is not None:
        why = path_problem(path, "a checkpoint directory or a .ninfer file")
        if why:
            raise NinfercError(why)
        opened = open_model(path, backend, max_context, draft_lm_head=draft_lm_head)
        opened.check_spec()
        be, tok, cfg, resolved = None, opened.tokenizer, opened.config, opened.max_context
    else:
        be, tok, cfg, resolved = open_backend(path, backend, max_context=max_context, cuda_graph=not no_cuda_graph,
                                              prefill_chunk=prefill_chunk, log=log)
    if max_context is None:
        check_chunk(resolved, "the max context the artifact was compiled for" if path.is_file() else
                    "the default max context")
    max_context = resolved
    if params.top_k > cfg.vocab_size:
        raise NinfercError(f"--top-k {params.top_k} is more than the vocabulary ({cfg.vocab_size} tokens); use 0 "
                           "for no limit")
    stop_ids = [] if ignore_eos else list(cfg.eos_token_ids)
    if chat:
        from ninferc.chat import ChatTemplateError, chat_template_for, end_of_turn_ids

        tpl = chat_template_for(tok)
        if tpl is None:
            raise NinfercError(f"--chat: {path} has no chat template (neither chat_template.jinja nor a chat_template "
                               "in tokenizer_config.json)")
        try:
            prompt = tpl.render([{"role": "user", "content": prompt}], add_generation_prompt=True)
        except ChatTemplateError as exc:
            raise NinfercError(f"--chat: {exc}") from None
        if not ignore_eos:
            stop_ids += [t for t in end_of_turn_ids(tok) if t not in stop_ids]
    ids = tok.encode(prompt)
    if len(ids) + max_new > max_context:
        origin = "the artifact was compiled for" if path.is_file() else "the default for a checkpoint directory"
        where = (f"--max-context {max_context}" if given("max_context") else
                 f"the context of {max_context} tokens ({origin}; a larger --max-context raises it)")
        raise NinfercError(f"the prompt ({len(ids)} tokens) plus --max-new {max_new} is {len(ids) + max_new} tokens, "
                           f"over {where}")
    text = TextOutput(tok, stop)
    if spec_cfg is not None:
        return _run_spec(opened, ids, max_new=max_new, params=params, prefill_chunk=min(prefill_chunk, max_context),
                         stop_ids=stop_ids, text=text, spec=spec_cfg, cuda_graph=not no_cuda_graph, log=log)

    def on_token(t):
        if t in stop_ids:
            return False
        piece, stopped = text.push(t)
        sys.stdout.write(piece)
        sys.stdout.flush()
        return stopped

    res = generate(be, ids, max_new=max_new, params=params, prefill_chunk=prefill_chunk, stop_ids=tuple(stop_ids),
                   on_token=on_token)
    sys.stdout.write(text.flush() + "\n")
    sys.stdout.flush()
    log(f"prompt {res.prompt_tokens} token{'s' if res.prompt_tokens != 1 else ''}, generated {len(res.ids)} ({res.stopped_by}); "
        f"TTFT {res.ttft_s * 1e3:.1f} ms, prefill {_rate(res.prefill_tok_s)}, decode {_rate(res.decode_tok_s)}")


def _rate(tok_s: float | None) -> str:
    """``"123.4 tok/s"``, or ``"-"`` where there is no rate (NaN or None: a decode of one token has no interval),
    as the server's log line writes it."""
    return "-" if tok_s is None or tok_s != tok_s else f"{tok_s:.1f} tok/s"


def _run_spec(opened, ids: list[int], *, max_new: int, params, prefill_chunk: int, stop_ids, text, spec, cuda_graph,
              log) -> None:
    """``run --spec``: one request through the serving scheduler (:class:`~ninferc.runtime.scheduler.Scheduler`
    with speculative rounds) on a batched backend; text streamed to stdout, timings and acceptance to stderr."""
    from ninferc.runtime.scheduler import ErrorEvent, FinishEvent, GenerationRequest, Scheduler, TokenEvent

    page = opened.page_size
    be = opened.make(num_pages=-(-opened.max_context // page), num_slots=1, prefill_chunk=prefill_chunk,
                     cuda_graph=cuda_graph, log=lambda m: None, spec_tokens=spec.draft_tokens)
    sched = Scheduler(be, max_concurrency=1, max_pending=0, prefill_chunk=prefill_chunk, spec=spec)
    events = []

    def sink(ev):
        events.append(ev)
        if isinstance(ev, TokenEvent):
            sys.stdout.write(ev.text)
            sys.stdout.flush()

    sched.submit(GenerationRequest("run", ids, max_new, params=params, stop_ids=frozenset(stop_ids), output=text,
                                   sink=sink))
    while not sched.idle:
        sched.step()
    end = events[-1]
    if isinstance(end, ErrorEvent):
        raise end.error
    assert isinstance(end, FinishEvent)
    sys.stdout.write(end.text + "\n")
    sys.stdout.flush()
    st, sp = end.stats, end.stats.spec
    log(f"prompt {st.prompt_tokens} token{'s' if st.prompt_tokens != 1 else ''}, generated {st.generated} ({end.reason}); TTFT {(st.ttft_s or 0) * 1e3:.1f} "
        f"ms, prefill {_rate(st.prefill_tok_s)}, decode {_rate(st.decode_tok_s)}")
    head = f"spec: mtp, {spec.draft_tokens} draft{'s' if spec.draft_tokens != 1 else ''} per round: "
    if not sp.rounds:  # the prefill's token ended it, or no step had room to draft (as the server's log line says)
        log(head + "no rounds")
        return
    log(head + f"{sp.rounds} round{'s' if sp.rounds != 1 else ''}, {sp.drafted} drafted, {sp.accepted} accepted "
        f"({100 * (sp.acceptance or 0):.1f} %), {sp.tokens_per_round or 0:.2f} tokens per round; accepted by draft "
        f"position {sp.accepted_at}")
