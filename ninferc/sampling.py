"""Sampling parameters and the host (numpy) sampler used by the reference backend and the server.

Semantics (as in vLLM's v1 sampler, which follows HF `generate` for the shared parts), applied to one row of
fp32 logits in this order:

1. adjustments (also under greedy decoding), in vLLM v1's order: a grammar's mask (``response_format``, a forced
   tool call: the ids it does not allow set to -inf; :mod:`ninferc.structured`); ``logit_bias`` added to its tokens' logits
   (OpenAI's definition: a bias in [-100, 100] per token id); while fewer than ``min_tokens`` tokens were generated,
   the sequence's stop ids (EOS, the chat template's end of turn, ``stop_token_ids``) set to -inf (vLLM's
   ``min_tokens``); then the penalties: ``repetition_penalty`` r over every token of the prompt and of the
   output so far (a positive logit is divided by r, a negative one multiplied by r; HF
   ``RepetitionPenaltyLogitsProcessor``); ``frequency_penalty`` f and ``presence_penalty`` p over the output so
   far: ``logit -= f * count + p * (count > 0)`` (OpenAI's definition);
2. greedy when ``temperature == 0``: the argmax (ties to the lowest id);
3. otherwise logits / temperature; ``min_p`` keeps the tokens whose probability is at least ``min_p`` times the
   most likely one's; ``top_k`` keeps the k largest (0 = no limit); ``top_p`` keeps the smallest set whose mass
   reaches it (the top-1 token is always kept); renormalise; draw.

Non-finite logits are never turned into a token: :class:`HostSampler` raises :class:`NonFiniteLogits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ninferc.errors import NinfercError


#: Sampling temperatures allowed besides 0 (greedy): a range we chose, not a hardware limit (HF and vLLM accept any
#: positive value; vLLM draws greedily below 1e-5, its sampling epsilon). The GPU sampler divides fp32 logits by the
#: temperature (multiplies by 1 / t): at 1e-5 a logit gap of 1e-6 is still a gap of 0.1, logits of 1e3 scale to 1e8
#: (fp32's range is 3.4e38), and draws below ~0.01 are argmax but for near-ties; far smaller values overflow 1 / t (1e-320
#: gave NaN probabilities). Above 100 typical logit spreads of ~10-30 shrink below 0.3 (close to a uniform draw over
#: the vocabulary), and inf made the draw uniform. The lower bound was 0.01 until 2026-12-07: clients that send a
#: small temperature for "nearly greedy" (0.001, 0.005) got a 400 (a new-user trial).
TEMPERATURE_RANGE = (1e-5, 100.0)
#: presence / frequency penalty range (OpenAI's API reference: "Number between -2.0 and 2.0")
PENALTY_RANGE = (-2.0, 2.0)
#: repetition penalty range: (0, REPETITION_PENALTY_MAX]; 1 = off (vLLM requires > 0; we bound it like the
#: temperature, since 2 already makes a repeated token's logit half or double)
REPETITION_PENALTY_MAX = 10.0
#: most alternatives one position's ``top_logprobs`` may ask for (OpenAI's limit)
MAX_TOP_LOGPROBS = 20
#: ``logit_bias`` values allowed (OpenAI's API reference: "from -100 to 100"; vLLM clamps to it, we refuse outside)
LOGIT_BIAS_RANGE = (-100.0, 100.0)


class SampleError(NinfercError):
    """No token can be drawn for one row (that request ends with an error; the step's other rows go on)."""


class GrammarError(SampleError):
    """The request's grammar (``response_format``, a forced tool call) failed at this row: a schema the grammar
    engine cannot follow further (its limits, a value it cannot complete). The request's fault, not the engine's."""


class NonFiniteLogits(SampleError):
    """A logits row holds NaN or Inf: the model produced garbage and no token may be drawn from it."""


def _num(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise NinfercError(f"{name} must be a number, found {v!r}")
    return float(v)


@dataclass(frozen=True)
class SamplingParams:
    """How one sequence picks its next token (see the module docstring for the order of the steps).

    Attributes:
        temperature: 0 (greedy) or in :data:`TEMPERATURE_RANGE`.
        top_k: >= 0; 0 = off.
        top_p: in (0, 1]; 1 = off.
        min_p: in [0, 1]; 0 = off.
        seed: an integer in [0, 2**64) (the GPU sampler's Philox key is 64 bits).
        presence_penalty, frequency_penalty: in :data:`PENALTY_RANGE`; 0 = off.
        repetition_penalty: in (0, :data:`REPETITION_PENALTY_MAX`]; 1 = off.
        logit_bias: ``((token id, bias), ...)``, ids >= 0 and unique (the caller checks them against the
            vocabulary), biases in :data:`LOGIT_BIAS_RANGE`; added to the logits before anything else.
        min_tokens: >= 0; the sampler's stop ids (:class:`HostSampler`) cannot be drawn before this many tokens
            were generated.

    Raises:
        NinfercError: a value outside its range, NaN, or of the wrong type (names the value and the range).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple = ()
    min_tokens: int = 0

    def __post_init__(self):
        lo, hi = TEMPERATURE_RANGE
        t = _num("temperature", self.temperature)
        if not (t == 0.0 or lo <= t <= hi):
            raise NinfercError(f"temperature must be 0 (greedy) or in [{lo:g}, {hi:g}], found {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer)) or self.top_k < 0:
            raise NinfercError(f"top_k must be an integer >= 0 (0 disables it), found {self.top_k!r}")
        if not 0.0 < _num("top_p", self.top_p) <= 1.0:
            raise NinfercError(f"top_p must be in (0, 1], found {self.top_p}")
        if not 0.0 <= _num("min_p", self.min_p) <= 1.0:
            raise NinfercError(f"min_p must be in [0, 1], found {self.min_p}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**64:
            raise NinfercError(f"seed must be an integer in [0, 2**64), found {self.seed!r}")
        plo, phi = PENALTY_RANGE
        for name in ("presence_penalty", "frequency_penalty"):
            v = _num(name, getattr(self, name))
            if not plo <= v <= phi:
                raise NinfercError(f"{name} must be in [{plo:g}, {phi:g}], found {v}")
        r = _num("repetition_penalty", self.repetition_penalty)
        if not 0.0 < r <= REPETITION_PENALTY_MAX:
            raise NinfercError(f"repetition_penalty must be in (0, {REPETITION_PENALTY_MAX:g}], found {r}")
        blo, bhi = LOGIT_BIAS_RANGE
        seen = set()
        for item in self.logit_bias:
            tok, bias = item
            if isinstance(tok, bool) or not isinstance(tok, (int, np.integer)) or tok < 0:
                raise NinfercError(f"logit_bias: token id must be an integer >= 0, found {tok!r}")
            if tok in seen:
                raise NinfercError(f"logit_bias: token id {tok} is given twice")
            seen.add(tok)
            b = _num(f"logit_bias[{tok}]", bias)
            if not blo <= b <= bhi:
                raise NinfercError(f"logit_bias[{tok}] must be in [{blo:g}, {bhi:g}], found {b}")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, (int, np.integer)) \
                or self.min_tokens < 0:
            raise NinfercError(f"min_tokens must be an integer >= 0, found {self.min_tokens!r}")

    @property
    def greedy(self) -> bool:
        """True when ``temperature == 0`` (argmax decoding)."""
        return self.temperature == 0.0

    @property
    def penalised(self) -> bool:
        """True when any of the three penalties is on (the sampler then needs the token history)."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0


def apply_penalties(logits: np.ndarray, p: SamplingParams, prompt_ids, output_counts: dict[int, int]) -> np.ndarray:
    """Penalised copy of ``logits`` [V] (fp32): step 1 of the module docstring.

    Args:
        prompt_ids: the prompt's token ids (only the repetition penalty reads them).
        output_counts: token id -> times it was generated so far.
    """
    x = np.array(logits, dtype=np.float32)
    if p.repetition_penalty != 1.0:
        seen = np.fromiter(set(prompt_ids) | set(output_counts), np.int64)
        seen = seen[(seen >= 0) & (seen < x.shape[0])]
        v = x[seen]
        x[seen] = np.where(v > 0, v / np.float32(p.repetition_penalty), v * np.float32(p.repetition_penalty))
    if output_counts and (p.frequency_penalty or p.presence_penalty):
        ids = np.fromiter(output_counts.keys(), np.int64)
        cnt = np.fromiter(output_counts.values(), np.float32)
        keep = ids < x.shape[0]
        x[ids[keep]] -= (np.float32(p.frequency_penalty) * cnt[keep] + np.float32(p.presence_penalty))
    return x


def filtered_candidates(logits: np.ndarray, p: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The distribution sampled from, sparse: logits [V] -> (ids int64 ascending, their probabilities fp64 summing to
    1) after temperature, min-p, top-k, top-p (step 3 of the module docstring; penalties are applied before, by
    :func:`apply_penalties`); every id outside has probability 0. Ties at a top-k or top-p cut are resolved by index
    (value descending, index ascending), as the GPU sampler resolves them.

    Work is done on the candidates only: min-p's set and top-k's (thresholds, no sort of the vocabulary), then a sort
    of what is left when top-p needs an order (so a 248k vocabulary is sorted only for top-p with neither min-p nor
    top-k).
    """
    x = np.asarray(logits, dtype=np.float64) / p.temperature
    cand = None  # None: every id
    if p.min_p > 0.0:  # p_i >= min_p * p_max  <=>  x_i - x_max >= log(min_p)
        cand = np.flatnonzero(x - x.max() >= math.log(p.min_p))
    n = x.shape[0] if cand is None else cand.shape[0]
    if p.top_k and p.top_k < n:
        xc = x if cand is None else x[cand]
        kth = np.partition(xc, n - p.top_k)[n - p.top_k]  # the k-th largest value
        cand = np.flatnonzero(xc >= kth) if cand is None else cand[xc >= kth]  # the k largest + ties of the k-th
        if cand.shape[0] > p.top_k:  # cut the ties by index: sort the few candidates, value desc / index asc
            order = np.argsort(-x[cand], kind="stable")
            cand = np.sort(cand[order[:p.top_k]])
    if cand is None:
        cand = np.arange(x.shape[0])
    xc = x[cand]
    pc = np.exp(xc - xc.max())
    pc /= pc.sum()
    if p.top_p < 1.0:
        order = np.argsort(-xc, kind="stable")
        cum = np.cumsum(pc[order])
        cut = max(int(np.searchsorted(cum, p.top_p)) + 1, 1)  # smallest prefix with mass >= top_p
        kept = np.sort(order[:cut])
        cand, pc = cand[kept], pc[kept] / pc[kept].sum()
    return cand, pc


def filtered_probs(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """:func:`filtered_candidates` as a dense distribution: probs [V] fp64."""
    cand, pc = filtered_candidates(logits, p)
    probs = np.zeros(np.shape(logits)[0])
    probs[cand] = pc
    return probs


def draw_from(rng: np.random.Generator, ids: np.ndarray, probs: np.ndarray) -> int:
    """One id drawn from the sparse distribution (``ids`` ascending, ``probs`` theirs; :func:`filtered_candidates`):
    the id ``rng.choice(V, p=dense)`` draws from the dense one, without the dense array (whose cumulative sum and
    checks took ~2 ms of a 248,320-token row). numpy's ``Generator.choice`` takes one ``random()`` u and returns the
    first index whose cumulative probability, divided by the total, exceeds u; over the candidates in id order those
    cumulative sums are the same floats (the zeros between them add nothing), so this is the same id for the same
    generator state (``tests/ninferc/test_sampling_host.py`` checks it against ``rng.choice``)."""
    cdf = np.cumsum(probs)
    cdf /= cdf[-1]
    return int(ids[int(np.searchsorted(cdf, rng.random(), side="right"))])


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax of ``logits`` [V] in float64 (the model's own distribution, before any sampling step)."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def raw_logprobs(logits: np.ndarray, token: int, n: int) -> tuple[float, list[tuple[int, float]]]:
    """The raw log-probability of ``token`` and the ``n`` most likely (id, logprob) pairs, most likely first and ties
    to the lower id (what ``np.argsort(-log_softmax(logits), kind="stable")[:n]`` gives), from one row of logits [V].

    The log-sum-exp is taken once in float64 and only the ids asked about are turned into log-probabilities; the top
    ``n`` come from a partition (one pass) and a sort of the few ids at or above its threshold, not a sort of the
    vocabulary: a full stable sort of a 248,320-token row took ~43 ms on the host, which at every step of a request
    asking for logprobs cut an H100's 8-request aggregate decode of the 27B shape from 179.9 to 60.2 tok/s
    (``bench/results/serve_27b_bf16_lp4_c8_h100_6c47f61.json``, ``bench/NOTES.md`` run 283).
    """
    x = np.asarray(logits, dtype=np.float64)
    m = x.max()
    lse = m + math.log(float(np.exp(x - m).sum()))
    top: list[tuple[int, float]] = []
    if n:
        k = min(n, x.shape[0])
        thr = np.partition(x, x.shape[0] - k)[x.shape[0] - k]  # the k-th largest value
        ids = np.flatnonzero(x >= thr)  # the k largest and any ties of the k-th
        ids = ids[np.argsort(-x[ids], kind="stable")[:k]]  # value desc, then id asc (flatnonzero is ascending)
        top = [(int(i), float(x[i] - lse)) for i in ids]
    return float(x[token] - lse), top


@dataclass
class Sampled:
    """One sampled position: ``token``; with logprobs asked for, ``logprob`` (of ``token``) and ``top`` (the
    ``n`` most likely (id, logprob) pairs, most likely first), both from the model's raw distribution -- the
    log softmax of the logits before penalties and temperature (vLLM's default ``raw_logprobs``)."""

    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class PromptScore:
    """One scored prompt position (a request's ``prompt_logprobs``, a completion's ``echo`` with ``logprobs``): the
    prompt's ``token`` there, its ``logprob`` under the model's distribution after the tokens before it, its
    ``rank`` (1 = the most likely token; 1 + the number of tokens with a larger logit) and ``top``, the ``n`` most
    likely (id, logprob) pairs, most likely first -- raw log-probabilities, as :class:`Sampled`'s."""

    token: int
    logprob: float
    rank: int
    top: list[tuple[int, float]] = field(default_factory=list)


def score_rows(logits, targets: list[int], top_n: int, xp=np) -> list[PromptScore]:
    """Score ``targets[i]`` under row ``i`` of ``logits`` (the rows of a prefill chunk, row i predicting the token
    after the chunk's token i) for every ``i < len(targets)``.

    Args:
        logits: [R, V] fp32 (R >= len(targets)), a numpy array or, with ``xp`` = cupy, a device array (the CUDA
            backend scores where its logits are and reads back only the scores).
        targets: token ids, each in 0..V - 1. top_n: alternatives per row (0..:data:`MAX_TOP_LOGPROBS`).
        xp: the array module of ``logits`` (numpy or cupy).

    Returns:
        one :class:`PromptScore` per target, the log softmax taken in fp32 (vLLM computes its logprobs in fp32).

    Raises:
        NonFiniteLogits: a scored row holds NaN or Inf (no score is made up for it).
    """
    k = len(targets)
    if k == 0:
        return []
    x = logits[:k].astype(xp.float32, copy=False)
    finite = xp.isfinite(x).all(axis=1)
    if not bool(finite.all()):
        row = int(xp.argmin(finite))
        bad = int((~xp.isfinite(x[row])).sum())
        raise NonFiniteLogits(f"the model produced {bad} non-finite logits of {x.shape[1]} (NaN or Inf) at the prompt's "
                              f"scored position {row} of this chunk; no log-probability can be given")
    m = x.max(axis=1, keepdims=True)
    lse = (m + xp.log(xp.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]
    tgt = xp.asarray(np.asarray(targets, np.int64))
    xt = xp.take_along_axis(x, tgt[:, None], axis=1)[:, 0]
    rank = (x > xt[:, None]).sum(axis=1) + 1
    lp = (xt - lse).tolist()
    ranks = rank.tolist()
    tops: list = [[] for _ in range(k)]
    if top_n:  # the top_n largest per row, most likely first, ties to the lower id (as raw_logprobs orders them)
        n = min(top_n, x.shape[1])
        idx = xp.argpartition(-x, n - 1, axis=1)[:, :n]
        vals = xp.take_along_axis(x, idx, axis=1)
        over = ((x >= vals.min(axis=1, keepdims=True)).sum(axis=1) > n).tolist()  # a tie across the n-th place
        lse_h, idx_h, vals_h = lse.tolist(), idx.tolist(), vals.tolist()
        for r in range(k):
            if over[r]:  # the partition kept any of the tied ids: take the lowest, from the whole tied set
                ids = xp.flatnonzero(x[r] >= min(vals_h[r])).tolist()
                idx_h[r], vals_h[r] = ids, x[r][xp.asarray(np.asarray(ids, np.int64))].tolist()
            tops[r] = sorted(((i, v - lse_h[r]) for i, v in zip(idx_h[r], vals_h[r])),
                             key=lambda iv: (-iv[1], iv[0]))[:n]
    return [PromptScore(int(t), float(a), int(r), [(int(i), float(v)) for i, v in top])
            for t, a, r, top in zip(targets, lp, ranks, tops)]


class HostSampler:
    """Samples token ids on the host for one sequence: its parameters, its own seeded generator and the token
    history the penalties read.

    Args:
        params: the sampling parameters.
        prompt_ids: the prompt (read by the repetition penalty only).
        stop_ids: the ids that end this sequence (EOS, ``stop_token_ids``): held back (-inf) while fewer than
            ``params.min_tokens`` tokens were generated.
        constraint: None, or a grammar's state (:class:`ninferc.structured.TokenConstraint`: ``allowed()`` -> bool
            [V] or None, ``advance(token)``): the ids it does not allow are set to -inf before anything else.
    """

    def __init__(self, params: SamplingParams, prompt_ids=(), stop_ids=(), constraint=None):
        self.params = params
        self.constraint = constraint
        self.rng = np.random.default_rng(params.seed)
        self.prompt_ids = tuple(prompt_ids) if params.repetition_penalty != 1.0 else ()
        self.counts: dict[int, int] = {}
        #: tokens drawn so far (the GPU sampler's Philox counter for this sequence when it samples on the device)
        self.draws = 0
        #: the stop ids ``min_tokens`` holds back (int64, ascending; empty without ``min_tokens``)
        self.held_stop_ids = (np.fromiter(sorted(set(stop_ids)), np.int64) if params.min_tokens
                              else np.zeros(0, np.int64))
        #: ``logit_bias`` as arrays: its token ids (int64) and their biases (fp32), in the request's order
        self.bias_ids = np.array([t for t, _ in params.logit_bias], np.int64)
        self.bias_values = np.array([b for _, b in params.logit_bias], np.float32)

    @property
    def holding_stops(self) -> bool:
        """True while ``min_tokens`` holds the stop ids back (fewer tokens generated than it asks, and some stop id
        to hold)."""
        return self.draws < self.params.min_tokens and self.held_stop_ids.size > 0

    @property
    def device_ok(self) -> bool:
        """Whether the GPU sampler can draw this sequence's next token from its logits as they are: no penalties, no
        min_p, no logit_bias, no stop id held back by ``min_tokens``, no grammar (the GPU sampler applies temperature,
        top-k and top-p). The CUDA backend draws more (:attr:`device_drawable`: it applies the others to the row on
        the device first); where nothing needs applying it skips that. Once ``min_tokens`` tokens were generated a
        sequence has nothing held back (never again)."""
        p = self.params
        return (not p.penalised and p.min_p == 0.0 and not p.logit_bias and not self.holding_stops
                and self.constraint is None)

    @property
    def device_drawable(self) -> bool:
        """Whether the CUDA backend can draw this sequence's next token on the device: everything but a grammar (its
        mask is computed on the host, by llguidance). The adjustments of step 1 other than the grammar's (logit
        bias, min_tokens' held stop ids, the penalties over a per-sequence token count kept on the device) and
        min_p are applied to the row there before the GPU sampler draws (:mod:`ninferc.runtime.cuda_backend`)."""
        return self.constraint is None

    def adjust(self, logits: np.ndarray) -> np.ndarray:
        """The logits after step 1 of the module docstring (the grammar's mask, logit bias, the stop ids held back by
        ``min_tokens``, penalties) for the next token, given the history recorded so far: ``logits`` [V] (any float
        dtype) itself when nothing applies, else a fp32 copy. Ids at or past V in ``logit_bias`` or the stop ids are
        left out.

        Raises:
            GrammarError: the grammar allows no id of the row (or its state is an error)."""
        p = self.params
        x = np.asarray(logits)
        held = self.holding_stops
        allowed = None
        if self.constraint is not None:
            try:
                allowed = self.constraint.allowed()
            except NinfercError as exc:
                raise GrammarError(str(exc)) from None
        if not (p.logit_bias or held or p.penalised or allowed is not None):
            return x
        x = np.array(x, dtype=np.float32)
        if allowed is not None:
            n = min(x.shape[0], allowed.shape[0])
            if not allowed[:n].any():
                raise GrammarError("structured output: the grammar allows no token here")
            x[:n][~allowed[:n]] = -np.inf
            x[n:] = -np.inf
        if p.logit_bias:
            keep = self.bias_ids < x.shape[0]
            x[self.bias_ids[keep]] += self.bias_values[keep]
        if held:
            x[self.held_stop_ids[self.held_stop_ids < x.shape[0]]] = -np.inf
        if p.penalised:
            x = apply_penalties(x, p, self.prompt_ids, self.counts)
        return x

    def observe(self, token: int) -> None:
        """Record a generated ``token`` (the frequency / presence / repetition penalties count it)."""
        self.counts[int(token)] = self.counts.get(int(token), 0) + 1
        self.draws += 1
        if self.constraint is not None:
            self.constraint.advance(int(token))

    def __call__(self, logits: np.ndarray) -> int:
        """One token id from ``logits`` [V] (any float dtype); see :meth:`sample`. The token is not recorded:
        callers that use penalties call :meth:`observe` (or use :meth:`sample`)."""
        return self._draw(logits)

    def sample(self, logits: np.ndarray, logprobs: int | None = None) -> Sampled:
        """Draw, record and describe the next token from ``logits`` [V].

        Args:
            logprobs: None, or how many top alternatives to report (0..:data:`MAX_TOP_LOGPROBS`).

        Raises:
            NonFiniteLogits: the row holds NaN or Inf.
        """
        tok = self._draw(logits)
        self.observe(tok)
        out = Sampled(tok)
        if logprobs is not None:
            out.logprob, out.top = raw_logprobs(logits, tok, logprobs)
        return out

    def _draw(self, logits: np.ndarray) -> int:
        x = np.asarray(logits)
        if not np.isfinite(x).all():
            bad = int((~np.isfinite(x)).sum())
            raise NonFiniteLogits(f"the model produced {bad} non-finite logits of {x.size} (NaN or Inf); no token "
                                  "can be drawn (NINFERC_CHECK_FINITE=1 on the GPU names the first op "
                                  "that writes one)")
        p = self.params
        x = self.adjust(x)
        if p.greedy:
            return int(np.argmax(x))
        return draw_from(self.rng, *filtered_candidates(x, p))


def rows_on_device(rows) -> bool:
    """Whether the CUDA backend draws every row of a step on the device: ``rows[i] = (HostSampler, logprobs or
    None)``, each :attr:`HostSampler.device_drawable` (no grammar; penalties, min_p, logit_bias and min_tokens are
    applied to the row on the device). A row asking for logprobs qualifies: its token is drawn on the device and its
    logprobs (:func:`raw_logprobs`, which depend on the raw logits only) are computed on the host from a copy of its
    logits row, read with the ids.
    The rule both batched backends share: the CUDA backend draws those rows on the device, the reference backend
    schedules them the same way (decode ahead)."""
    return all(s.device_drawable for s, _ in rows)
