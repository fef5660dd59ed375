"""The generation loop shared by every backend (reference numpy, CUDA): prefill, then sample/decode
until ``max_new`` tokens or a stop id, streaming text through a callback and timing each phase.

A backend implements :class:`Backend`; sampling may happen on the device (the CUDA backend returns
only the sampled id, the one host sync per token needed to stream).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ninferc.errors import NinfercError
from ninferc.sampling import SamplingParams


class Backend(Protocol):
    """What :func:`generate` needs from an engine holding one sequence."""

    def prefill(self, ids: list[int], chunk: int) -> None:
        """Reset the sequence and run the prompt ``ids`` in chunks of at most ``chunk`` tokens."""

    def sample(self, params: SamplingParams) -> int:
        """Sample the next token from the latest logits."""

    def decode(self, token: int) -> None:
        """Append ``token`` and compute the logits after it."""

    def synchronize(self) -> None:
        """Wait for queued device work (no-op on the CPU)."""

    # optional: decode_stream(params, n) -> iterator of the next n sampled ids (see Session.decode_stream)


@dataclass
class GenerationResult:
    """Generated ``ids`` (prompt excluded), their text, and timings in seconds."""

    ids: list[int] = field(default_factory=list)
    text: str = ""
    prompt_tokens: int = 0
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    stopped_by: str = "length"

    @property
    def prefill_tok_s(self) -> float:
        """Prompt tokens per second of the prefill (NaN when not timed)."""
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else float("nan")

    @property
    def decode_tok_s(self) -> float:
        """Generated tokens per second after the first (NaN with fewer than 2 tokens)."""
        n = max(len(self.ids) - 1, 0)
        return n / self.decode_s if self.decode_s > 0 and n else float("nan")


def generate(
    backend: Backend,
    prompt_ids: list[int],
    *,
    max_new: int,
    params: SamplingParams,
    prefill_chunk: int = 1024,
    stop_ids: tuple[int, ...] = (),
    on_token: Callable[[int], bool | None] | None = None,
) -> GenerationResult:
    """Prefill ``prompt_ids`` then generate up to ``max_new`` tokens.

    The first generated token is sampled from the prefill's last logits (TTFT = prefill + that
    sample); each later token costs one decode step. ``on_token`` is called with every id as soon as
    it is known (the CLI streams text through it); when it returns True the generation stops there with
    ``stopped_by`` ``"stop"`` (a stop string was completed). A backend with ``decode_stream(params, n)`` (the CUDA
    session) keeps one step queued ahead of the id being streamed, so a stop id has already been appended to
    its sequence when generation stops; the ids are the same either way.

    Raises:
        NinfercError: empty prompt, ``max_new`` < 1 or ``prefill_chunk`` < 1.
    """
    if not prompt_ids:
        raise NinfercError("the prompt is empty after tokenisation; give at least one token")
    if max_new < 1:
        raise NinfercError(f"max_new must be >= 1, found {max_new}")
    if prefill_chunk < 1:
        raise NinfercError(f"prefill_chunk must be >= 1, found {prefill_chunk}")
    res = GenerationResult(prompt_tokens=len(prompt_ids))
    t0 = time.perf_counter()
    backend.prefill(list(prompt_ids), prefill_chunk)
    backend.synchronize()
    t1 = time.perf_counter()
    tok = backend.sample(params)
    t2 = time.perf_counter()
    res.prefill_s, res.ttft_s = t1 - t0, t2 - t0
    stream = getattr(backend, "decode_stream", None)
    rest = stream(params, max_new - 1) if stream is not None else _step_loop(backend, tok, params, max_new - 1)
    try:
        while True:
            res.ids.append(tok)
            if on_token and on_token(tok):
                res.stopped_by = "stop"
                break
            if tok in stop_ids:
                res.stopped_by = "stop"
                break
            if len(res.ids) >= max_new:
                break
            tok = next(rest)
    finally:
        rest.close()
    res.decode_s = time.perf_counter() - t2
    return res


def _step_loop(backend: Backend, tok: int, params: SamplingParams, n: int):
    """The ids after ``tok`` for a backend without ``decode_stream``: decode the previous id, sample the next."""
    for _ in range(n):
        backend.decode(tok)
        tok = backend.sample(params)
        yield tok
