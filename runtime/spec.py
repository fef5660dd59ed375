"""Speculative decoding with the checkpoint's MTP head (DESIGN.md §6b; README-mtp.md beside the fixture).

A round for one sequence whose last sampled token ``x`` is not yet appended (at position L):

1. **draft**: the backend runs the MTP head over the rows it has not seen (positions up to L - 1, the last one
   taking ``x``) and chains it ``k - 1`` more times on its own output: greedy draft ids ``d_1 .. d_k``
   (:meth:`ReferenceBatchBackend.draft`);
2. **verify**: the model over ``[x, d_1 .. d_k]`` at positions L .. L + k in one step, keeping the GDN state after
   every token (k + 1 state slots on the GPU): logits ``z_0 .. z_k``, ``z_j`` predicting position L + j + 1;
3. **accept** (:func:`accept_drafts`): draft ``d_{j+1}`` is kept when the target accepts it at ``z_j`` -- greedy:
   it is the argmax; sampling: with probability ``p_j(d_{j+1})`` (a greedy draft is a point mass, so this is the
   standard speculative-sampling rule ``min(1, p/q)``) -- until the first rejection, where the token is drawn from
   ``p_j`` with the draft removed and renormalised; when all k are kept, a bonus token is drawn from ``z_k``. The
   ``p_j`` are exactly the plain sampler's distributions (penalties counted over the tokens accepted so far), so
   the output distribution equals non-speculative sampling, and greedy output equals plain greedy output. A
   request without penalties, min_p, logit_bias, min_tokens or logprobs -- on the CUDA backend, which applies
   those four to each verify row on the device with the drafts before the row counted, any request without logprobs
   or a grammar (:func:`ids_suffice`) -- is accepted from one token drawn per row
   instead (:func:`accept_ids`, the same rule in distribution: the rows' argmax or independent draws, drawn where the
   logits are -- on the GPU, no logits leave the device);
4. the backend keeps the first m + 1 tokens (``x`` and the m accepted drafts): length L + m + 1, GDN state of slot
   m, MTP rows for them on the next draft (the chained rows are dropped).

A round emits m + 1 tokens. ``k`` is cut where the KV reservation ends (a round never writes past its pages) and
is 0 when nothing fits: a round with no draft is a plain decode step that still keeps the state right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ninferc.errors import NinfercError
from ninferc.sampling import HostSampler, NonFiniteLogits, Sampled, filtered_probs, raw_logprobs
from ninferc.targets.lower import MAX_DRAFT_TOKENS


@dataclass(frozen=True)
class SpecConfig:
    """``method`` ``"mtp"`` (the checkpoint's own head) and ``draft_tokens`` k in 1..:data:`MAX_DRAFT_TOKENS`;
    ``disable_by_batch_size`` N (vLLM's speculative ``disable_by_batch_size``): a step of more than N decoding
    sequences drafts nothing -- a plain decode step (decode ahead included), the MTP head's rows kept so that drafting
    resumes once N or fewer decode -- or None to draft in every round. Where speculation pays at high concurrency
    depends on the card, the weight format and the acceptance (README, speculative serving: runs 293-294), so there is
    no default cut.

    Raises:
        NinfercError: another method, k out of range, N not an integer >= 1 (names the value and the range).
    """

    method: str = "mtp"
    draft_tokens: int = 3
    disable_by_batch_size: int | None = None

    def __post_init__(self):
        if self.method != "mtp":
            raise NinfercError(f"--spec {self.method!r} is not supported; supported: mtp")
        if isinstance(self.draft_tokens, bool) or not isinstance(self.draft_tokens, int) \
                or not 1 <= self.draft_tokens <= MAX_DRAFT_TOKENS:
            raise NinfercError(f"--draft-tokens must be an integer in 1..{MAX_DRAFT_TOKENS}, "
                               f"found {self.draft_tokens!r}")
        n = self.disable_by_batch_size
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise NinfercError(f"--spec-disable-by-batch-size must be an integer >= 1, found {n!r}")

    def drafts_in(self, batch: int) -> bool:
        """Whether a step of ``batch`` decoding sequences drafts (``disable_by_batch_size`` unset, or ``batch`` at
        most it)."""
        return self.disable_by_batch_size is None or batch <= self.disable_by_batch_size


@dataclass
class SpecStats:
    """Per request: ``rounds`` (verify steps with drafts; a step that drafted nothing is not one), ``drafted`` and
    ``accepted`` draft tokens, ``accepted_at[j]`` how often the draft at position j + 1 was accepted, ``per_round``
    the accepted count of each round -- the verifier's decisions, whether or not the request used every token they
    gave -- and ``delivered`` the tokens the rounds handed the request: a round that accepts m drafts yields m + 1
    tokens, fewer when ``max_tokens``, a stop id or a stop string ends the request inside them."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_at: list[int] = field(default_factory=list)
    per_round: list[int] = field(default_factory=list)  # accepted drafts of each round, in order
    delivered: int = 0
    #: drafts per round (``--draft-tokens``): ``accepted_at`` holds a count per draft position from the start, zeros
    #: where a request had no round (its one token from the prefill, or no step that drafted)
    draft_tokens: int = 0

    def __post_init__(self):
        self.accepted_at.extend([0] * (self.draft_tokens - len(self.accepted_at)))

    @property
    def tokens_per_round(self) -> float | None:
        """delivered / rounds: the tokens one round with drafts gave the request on average ((accepted + rounds) /
        rounds where no round was cut short)."""
        return self.delivered / self.rounds if self.rounds else None

    @property
    def acceptance(self) -> float | None:
        """accepted / drafted."""
        return self.accepted / self.drafted if self.drafted else None

    def add(self, k: int, m: int, delivered: int | None = None) -> None:
        """Record a round that drafted ``k`` tokens and accepted ``m`` of them, of whose m + 1 tokens the request
        took ``delivered`` (default all; 1..m + 1, else ValueError)."""
        used = m + 1 if delivered is None else delivered
        if not 1 <= used <= m + 1:
            raise ValueError(f"SpecStats.add: a round that accepted {m} drafts yields 1..{m + 1} tokens, not {used}")
        self.rounds += 1
        self.drafted += k
        self.accepted += m
        self.delivered += used
        self.per_round.append(m)
        while len(self.accepted_at) < k:
            self.accepted_at.append(0)
        for j in range(m):
            self.accepted_at[j] += 1

    def describe(self) -> str:
        """``mtp 3.29 tok/round, 76 % accepted`` (the per-request log's ``spec=`` field: tokens per round with drafts,
        and the share of drafted tokens accepted); ``mtp no rounds`` where the request had none: it ended with the
        prefill's token, or drafted in none of its steps (``--spec-disable-by-batch-size``, the token budget's end;
        its record's ``tokens_per_round`` and ``acceptance`` are null)."""
        if not self.rounds:  # no round with drafts: nothing to rate
            return "mtp no rounds"
        tpr, acc = self.tokens_per_round, self.acceptance
        return f"mtp {tpr:.2f} tok/round, {100 * (acc or 0):.0f} % accepted"


def _target(sampler: HostSampler, logits: np.ndarray):
    """(adjusted logits -- bias, min_tokens, penalties -- and sampling probabilities, or None when greedy) of one verify
    row, as the plain sampler would compute them with the history it holds now."""
    x = np.asarray(logits)
    if not np.isfinite(x).all():
        raise NonFiniteLogits(f"the model produced {int((~np.isfinite(x)).sum())} non-finite logits of {x.size} "
                              "in a verify row (NaN or Inf); no token can be drawn")
    x = sampler.adjust(x)
    return x, (None if sampler.params.greedy else filtered_probs(x, sampler.params))


def accept_drafts(sampler: HostSampler, logits: np.ndarray, drafts: list[int], logprobs: int | None = None
                  ) -> list[Sampled]:
    """The tokens one round emits (step 3 of the module docstring): the accepted drafts, then the correction or
    bonus token; each recorded in ``sampler`` (its penalties' history and draw count).

    Args:
        sampler: the request's sampler (parameters, seeded generator, history).
        logits: verify logits [k + 1, V]. drafts: the k draft ids.
        logprobs: None or how many alternatives to report (raw log softmax of each row).

    Raises:
        NonFiniteLogits: a row the round reads holds NaN or Inf.
    """
    out: list[Sampled] = []

    def emit(j: int, tok: int) -> None:
        s = Sampled(int(tok))
        if logprobs is not None:
            s.logprob, s.top = raw_logprobs(logits[j], tok, logprobs)
        sampler.observe(tok)
        out.append(s)

    for j, d in enumerate(drafts):
        x, probs = _target(sampler, logits[j])
        if probs is None:  # greedy: keep the draft iff it is the argmax
            best = int(np.argmax(x))
            emit(j, best)
            if best != d:
                return out
            continue
        if sampler.rng.random() < probs[d]:
            emit(j, d)
            continue
        rest = probs.copy()
        rest[d] = 0.0
        total = rest.sum()
        if total <= 0.0:  # p was a point mass on d after filtering: accepting was certain; cannot happen
            raise NinfercError("speculative sampling: the residual distribution is empty")
        emit(j, int(sampler.rng.choice(rest.shape[0], p=rest / total)))
        return out
    k = len(drafts)
    x, probs = _target(sampler, logits[k])
    emit(k, int(np.argmax(x)) if probs is None else int(sampler.rng.choice(probs.shape[0], p=probs)))
    return out


def ids_suffice(sampler: HostSampler, logprobs: int | None, backend=None) -> bool:
    """Whether a request's round can be accepted from one token drawn per verify row (:func:`accept_ids`) on
    ``backend``: a request that asks for no logprobs (a round's logprobs need its verify rows' logits on the host)
    whose rows the device sampler draws as they are (greedy or temperature / top-k / top-p) -- or, on a backend that
    adjusts verify rows on the device (``adjusts_verify_rows``: the CUDA backend applies penalties, min_p,
    logit_bias and min_tokens to row j with the drafts before it counted), any request without a grammar."""
    return logprobs is None and (sampler.device_ok or (getattr(backend, "adjusts_verify_rows", False)
                                                        and sampler.device_drawable))


def accept_ids(sampler: HostSampler, ids, drafts: list[int]) -> list[Sampled]:
    """The tokens one round emits from ``ids`` [k + 1], a token drawn from each verify row (the row's argmax for a
    greedy request; an independent draw from the row's filtered distribution for a sampling one -- on the GPU one
    read of k + 1 ids per round): the drafts equal to their row's token, then the first row's token that differs
    (or the bonus row's).

    Lossless (:func:`ids_suffice` requests): the token emitted at row j is a draw from the model's distribution
    given the tokens before it, whether or not it equals the draft, so the output is distributed as plain decoding's.
    With deterministic (greedy) drafts this is the standard rule of :func:`accept_drafts` in another form: the draft
    is kept with probability p(d), and a rejection's token is distributed as p without d, renormalised. Rows after
    the first difference are not read, so their draws (and counters) carry nothing into the output.

    Raises:
        NonFiniteLogits: a row the round reads had non-finite logits (id < 0)."""
    out: list[Sampled] = []
    for j in range(len(drafts) + 1):
        tok = int(ids[j])
        if tok < 0:
            raise NonFiniteLogits("the model produced non-finite logits in a verify row (NaN or Inf); no token can "
                                  "be drawn")
        sampler.observe(tok)
        out.append(Sampled(tok))
        if j == len(drafts) or tok != drafts[j]:
            return out
    return out
