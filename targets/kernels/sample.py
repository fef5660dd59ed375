"""Next-token selection on the GPU (template ``sample.cu.j2``): argmax and temperature / top-k / top-p
sampling from fp32 logits, one CTA per sequence row, no host synchronisation.

Contract
--------
Input ``logits`` fp32 ``[B, ld]`` (row b at ``logits + b*ld``, any alignment, V <= ld); output ``out``
int32 ``[B]``; optionally ``history[b, hist_pos[b]] = token`` (int32 ``[B, hist_ld]``) and, with
``advance``, ``step[b] += 1`` and ``hist_pos[b] += 1`` after use, so a captured CUDA graph can replay the
same launch every decode step -- and ``tok_pos[b] += 1``, ``seq_ctx[b] += 1`` (the decode step's metadata, when
given): a replayed decode step then finds the next step's position and context length on the device, and the
runtime skips the metadata upload between steps (``Engine.write_meta``; bench/NOTES.md run 173: that upload and
the id copy cost ~14 us per token on the H200). ``history`` may be host memory (pinned, mapped into the device's
address space): the runtime reads each sampled id there instead of copying it.

* A row whose maximum is not finite -- a NaN or +inf in it, or nothing but -inf -- gives no token: ``out[b] = -1``
  in either mode (the runtime raises :class:`~ninferc.sampling.NonFiniteLogits` for it: no sampler turns garbage
  logits into an id).
* ``argmax`` mode: ``numpy.argmax`` semantics -- largest value, ties to the lowest index. One pass over the row.
* ``sample`` mode, per row: ``temperature[b] <= 0`` (or NaN) -> argmax as above. Otherwise the kept set is that of :func:`ninferc.sampling.filtered_probs` -- logits / T, the
  ``top_k[b]`` largest (0 or >= V: off), then the shortest prefix of the remaining tokens in (value
  descending, index ascending) order whose probability mass reaches ``top_p[b]`` (>= 1: off; the top-1
  is always kept) -- with ties at either cut resolved by index exactly like ``filtered_probs``' stable
  sort. Masses are fixed point: ``round(exp((x - max) / T) * 2^31)`` summed in 64-bit integers, so the
  cut is exact and order-independent (deterministic); it can differ from ``filtered_probs``' float64
  cumsum only when the cumulative mass is within ~1e-9 of ``top_p``.

  The draw is Gumbel-max over the kept set: token = argmax_i ``(x_i - max) / T - log(-log(u_i))``
  (ties to the lowest index), which samples exactly ``softmax(x / T)`` restricted to the set.

RNG (counter-based, deterministic given (seed, step)): element i of row b uses 32-bit word ``i % 4`` of
``Philox4x32-10(counter = (i // 4, step[b], 0, 0), key = (seed[b] & 0xffffffff, seed[b] >> 32))``
(Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; constants of Random123), mapped
to ``u = (2 * (word >> 9) + 1) * 2^-24`` in (0, 1). The sequence's identity is its seed (the runtime
gives each request its own), so a token does not depend on the row the sequence occupies in a batch.

Argmax mode splits a long row over CTAs (grid ``(B, splits)``, :meth:`SampleFamily.argmax_splits`): one CTA
streams a 1 MB row of a 248,320-entry vocabulary at one SM's bandwidth, ``splits`` CTAs of 256 threads at the
device's (on the H200, bench/NOTES.md: the one-CTA sampler's kernel time in the graph-replayed 27B step was 42 us,
run 77, the split one's 12-14 us, run 94; the step itself gained 1.005x in w4 and nothing measurable in w8 in one
process, run 95). Each CTA reduces its contiguous share of
the row to a packed (key, index) maximum, ``atomicMax``-es it into ``ws[2b]`` and takes a ticket from
``ws[2b + 1]``; the last CTA to arrive reads the maximum, writes the outputs and resets both words to 0. The
maximum of packed keys is order-free, so the id is the same whatever order the CTAs run in.

Algorithm (sample mode: one CTA per row; the row is re-read from L2 per pass): (1) argmax pass; for sampling rows
(2) top-k threshold by a 4-level 8-bit radix select on order-preserving keys (counts), plus one scan
pass to find the index cut among ties when needed; (3) top-p threshold by the same radix select
weighted by fixed-point mass, restricted to the top-k set; (4) the Gumbel pass. Passes skipped when
their filter is off: argmax-only rows cost 1 pass, temperature-only 2, top-k + top-p at most 11.

Runtime arguments (:func:`arg_names`): ``logits, ld, vocab, rows, temperature, top_k, top_p, seed, step,
out, history, hist_pos, hist_ld, advance, ws, tok_pos, seq_ctx``. Argmax mode ignores ``temperature, top_k, top_p, seed``
(pass 0); ``step`` may be 0 (null) in both modes (counter 0, nothing advanced); ``ws`` (uint64 ``[2 B]``, zero
before the first launch, left zero by every launch) is read only by a split argmax (else it may be null).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import PlanError
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

MODES = ("argmax", "sample")
WARP = 32  # threads per warp on every CUDA architecture
GROUP = 4  # consecutive logits per thread step (one Philox block)
THREADS = (256, 1024)
"""Thread-count variants: 256 for small vocabularies, 1024 when each thread would otherwise walk more
than four 4-element groups."""
SPLIT_GROUPS_PER_THREAD = 4
"""A split argmax gives each thread of its 256-thread CTAs up to this many 4-element groups (four independent
16-byte loads in flight per thread): 248,320 logits -> 61 CTAs of 16 KB each."""


@dataclass(frozen=True)
class SampleProblem:
    """One sampler instance.

    Attributes:
        vocab: V, logits per row (>= 1). mode: ``"argmax" | "sample"``.

    Raises:
        PlanError: V < 1 or an unknown mode.
    """

    vocab: int
    mode: str = "sample"

    def __post_init__(self):
        if self.vocab < 1:
            raise PlanError(f"sample: vocab = {self.vocab} must be at least 1")
        if self.mode not in MODES:
            raise PlanError(f"sample: unknown mode {self.mode!r}; supported: {', '.join(MODES)}")


class SampleFamily:
    """The ``sample`` kernel family (see module docstring).

    Args:
        threads: thread-count variants (multiples of 32, <= 1024), ascending.
        split_argmax: split a long argmax row over CTAs (:meth:`argmax_splits`); False keeps one CTA per row
            (the A/B baseline of bench/family_ab.py).
    """

    name = "sample"
    template = "sample.cu.j2"

    def __init__(self, threads: tuple[int, ...] = THREADS, split_argmax: bool = True):
        if not threads or any(t % WARP or not 0 < t <= 1024 for t in threads):
            raise PlanError(f"sample: thread variants {threads} must be multiples of {WARP} in [32, 1024]")
        self.threads = tuple(sorted(threads))
        self.split_argmax = bool(split_argmax)

    def spec(self, problem: SampleProblem, threads: int) -> KernelSpec:
        """The kernel for (mode, threads)."""
        return KernelSpec.make(self.name, self.template, {"threads": threads, "mode": problem.mode}, threads,
                               cooperative=False)

    def variants(self, problem: SampleProblem) -> list[KernelSpec]:
        """Every thread-count variant of the problem's mode."""
        return [self.spec(problem, t) for t in self.threads]

    def sample_problems(self) -> list[SampleProblem]:
        """Both modes (at the 27B vocabulary; V is a runtime argument)."""
        return [SampleProblem(248320, m) for m in MODES]

    def threads_for(self, problem: SampleProblem) -> int:
        """The smallest variant whose threads walk at most 4 groups of 4 logits each, else the largest
        (4096 -> 256 threads, 248320 -> 1024)."""
        groups = -(-problem.vocab // GROUP)
        for t in self.threads:
            if groups <= 4 * t:
                return t
        return self.threads[-1]

    def argmax_splits(self, problem: SampleProblem, ctx: PlanContext) -> int:
        """CTAs per row of a split argmax (256 threads each): enough that each thread walks at most
        :data:`SPLIT_GROUPS_PER_THREAD` groups, at most one wave of the variant on the device (its resident
        CTAs/SM from the compiled kernel's resources x ``ctx.sms``); 1 (no split) for sample mode or a row that
        one CTA covers in one such pass (V <= 4,096), and for a family made with ``split_argmax=False``."""
        if problem.mode != "argmax" or not self.split_argmax:
            return 1
        t = self.threads[0]
        groups = -(-problem.vocab // GROUP)
        need = -(-groups // (SPLIT_GROUPS_PER_THREAD * t))
        return max(1, min(need, ctx.cap(self.spec(problem, t))))

    def launch(self, problem: SampleProblem, tokens: int, ctx: PlanContext) -> Launch:
        """Sample mode: one CTA per row (route ``row_per_cta``); argmax mode: ``(B, splits)`` CTAs of the
        smallest variant (route ``split_row``, :meth:`argmax_splits`) when a row needs more than one, else one
        CTA per row. ``tokens`` is the number of rows B (one logits row per sequence).

        Raises:
            PlanError: B < 1.
        """
        if tokens < 1:
            raise PlanError(f"sample: rows = {tokens} must be at least 1")
        splits = self.argmax_splits(problem, ctx)
        if splits > 1:
            return ctx.make_launch(self.spec(problem, self.threads[0]), (tokens, splits, 1), route="split_row",
                                   tokens=tokens)
        spec = self.spec(problem, self.threads_for(problem))
        return ctx.make_launch(spec, tokens, route="row_per_cta", tokens=tokens)


def arg_names(problem: SampleProblem) -> tuple[str, ...]:
    """Kernel parameters in order (dtypes in the template): ``logits`` fp32*, ``ld`` i32, ``vocab`` i32,
    ``rows`` i32, ``temperature`` fp32*, ``top_k`` i32*, ``top_p`` fp32*, ``seed`` u64*, ``step`` i32*,
    ``out`` i32*, ``history`` i32*, ``hist_pos`` i32*, ``hist_ld`` i32, ``advance`` i32, ``ws`` u64* (``[2 B]``,
    zero; a split argmax's meeting words), ``tok_pos`` i32* and ``seq_ctx`` i32* (``[B]`` or null: a decode
    step's positions and context lengths, each + 1 with ``advance``)."""
    return ("logits", "ld", "vocab", "rows", "temperature", "top_k", "top_p", "seed", "step", "out",
            "history", "hist_pos", "hist_ld", "advance", "ws", "tok_pos", "seq_ctx")


def kernel_args(problem: SampleProblem, launch: Launch, logits, out, *, ld: int | None = None, temperature=None,
                top_k=None, top_p=None, seed=None, step=None, history=None, hist_pos=None, hist_ld: int = 0,
                advance: bool = False, ws=None, tok_pos=None, seq_ctx=None) -> tuple:
    """Argument tuple in :func:`arg_names` order (rows = ``launch.tokens``); missing pointers -> 0 (null).

    Raises:
        PlanError: sample mode without temperature/top_k/top_p/seed, history without hist_pos, or a split
            launch (grid y > 1) without ``ws``.
    """
    if problem.mode == "sample" and any(a is None for a in (temperature, top_k, top_p, seed)):
        raise PlanError("sample: sample mode needs temperature, top_k, top_p and seed arrays")
    if history is not None and hist_pos is None:
        raise PlanError("sample: history needs hist_pos")
    if launch.grid[1] > 1 and ws is None:
        raise PlanError(f"sample: the argmax split over {launch.grid[1]} CTAs per row needs ws (uint64 [2 B], zero)")
    z = lambda a: 0 if a is None else a  # noqa: E731
    return (logits, np.int32(problem.vocab if ld is None else ld), np.int32(problem.vocab), np.int32(launch.tokens),
            z(temperature), z(top_k), z(top_p), z(seed), z(step), out, z(history), z(hist_pos), np.int32(hist_ld),
            np.int32(1 if advance else 0), z(ws), z(tok_pos), z(seq_ctx))


# ------------------------------------------------------------------------------------------------
# numpy reference
# ------------------------------------------------------------------------------------------------

_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter, key) -> np.ndarray:
    """Philox4x32 with 10 rounds (Random123), vectorised.

    Args:
        counter: uint32-valued array [..., 4]; key: uint32-valued array [..., 2] (broadcastable).

    Returns:
        uint32 [..., 4]. Known answers (Random123 kat_vectors): counter 0, key 0 ->
        6627e8d5 e169c58d bc57ac4c 9b00dbd8.
    """
    c = [np.asarray(counter, dtype=np.uint64)[..., i] for i in range(4)]
    k0 = np.asarray(key, dtype=np.uint64)[..., 0].copy()
    k1 = np.asarray(key, dtype=np.uint64)[..., 1].copy()
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(_PHILOX_W0)) & _MASK32
            k1 = (k1 + np.uint64(_PHILOX_W1)) & _MASK32
        p0 = c[0] * np.uint64(_PHILOX_M0)
        p1 = c[2] * np.uint64(_PHILOX_M1)
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return np.stack(c, axis=-1).astype(np.uint32)


def uniforms(vocab: int, seed, step) -> np.ndarray:
    """The u_i in (0, 1) the kernel draws for rows with these seeds and steps.

    Args:
        vocab: V. seed: int or uint64 array [B]. step: int or int array [B] (broadcast with seed).

    Returns:
        float32 [V] for scalar seed and step, else float32 [B, V].
    """
    seed_a = np.asarray(seed, dtype=np.uint64)
    step_a = np.asarray(step, dtype=np.int64).astype(np.uint64) & _MASK32
    seed_a, step_a = np.broadcast_arrays(seed_a, step_a)
    groups = -(-vocab // GROUP)
    g = np.arange(groups, dtype=np.uint64)
    shape = seed_a.shape + (groups,)
    ctr = np.zeros(shape + (4,), dtype=np.uint64)
    ctr[..., 0] = g
    ctr[..., 1] = step_a[..., None]
    key = np.stack([seed_a & _MASK32, seed_a >> np.uint64(32)], axis=-1)[..., None, :]
    words = philox4x32_10(ctr, key).reshape(seed_a.shape + (groups * GROUP,))[..., :vocab].astype(np.uint64)
    return ((np.uint64(2) * (words >> np.uint64(9)) + np.uint64(1)).astype(np.float32)
            * np.float32(2.0 ** -24)).astype(np.float32)


def _canon(x: np.ndarray) -> np.ndarray:
    return np.where(x == 0, np.float32(0), x).astype(np.float32)


def fixed_masses(row: np.ndarray, temperature: float) -> np.ndarray:
    """uint64 [V]: round(exp((x - max) * (1/T)) * 2^31) in float32 arithmetic, as the kernel computes."""
    x = np.asarray(row, dtype=np.float32)
    m = x.max()
    inv_t = np.float32(1) / np.float32(temperature)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(((x - m) * inv_t).astype(np.float32)).astype(np.float32)
    return np.rint(e.astype(np.float64) * 2.0 ** 31).astype(np.uint64)


def kept_mask(row, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """bool [V]: the tokens the kernel may sample for one row (finite max, temperature > 0).

    Order = value descending, index ascending (``filtered_probs``' stable sort); keep the first
    ``top_k`` (0 or >= V: all), then the shortest prefix of those whose fixed-point mass reaches
    ``ceil(float64(top_p) * total)`` (top_p >= 1: all; never fewer than one).
    """
    x = _canon(np.asarray(row, dtype=np.float32))
    V = x.shape[0]
    order = np.argsort(-x, kind="stable")
    if 0 < top_k < V:
        order = order[:top_k]
    if np.float32(top_p) < np.float32(1.0):
        mf = fixed_masses(x, temperature)[order]
        cum = np.cumsum(mf, dtype=np.uint64)
        target = float(np.float32(top_p)) * float(cum[-1])
        need = np.uint64(np.ceil(target)) if target > 0 else np.uint64(0)
        L = int(np.searchsorted(cum, need, side="left")) + 1
        order = order[:max(1, min(L, order.shape[0]))]
    keep = np.zeros(V, dtype=bool)
    keep[order] = True
    return keep


def _fma32(a, b, c) -> np.ndarray:
    """float32(a * b + c) with one rounding (the kernel's contracted multiply-add)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)


def reference(problem: SampleProblem, logits, temperature=None, top_k=None, top_p=None, seed=None,
              step=None) -> np.ndarray:
    """The tokens the kernel chooses (int32 [B]; -1 for a row whose maximum is not finite), computed in numpy.

    Args:
        logits: fp32 [B, V]. temperature, top_p: float [B]; top_k: int [B]; seed: uint64 [B]; step:
            int [B] (default 0). Only ``logits`` is used in argmax mode.

    Exact for argmax and the kept set; the Gumbel scores are float32 like the kernel's, but the device
    ``logf`` may differ from numpy's by an ulp, so a sampled token can differ where the two best scores
    are within ~1e-6 (rare; tests bound the mismatch rate).
    """
    x = np.asarray(logits, dtype=np.float32)
    B, V = x.shape
    out = np.empty(B, dtype=np.int32)
    for b in range(B):
        row = x[b]
        greedy = int(np.argmax(row))
        m = row[greedy]
        if not np.isfinite(m):  # a NaN (argmax finds the first) or +inf in the row, or nothing but -inf
            out[b] = -1
            continue
        if problem.mode == "argmax":
            out[b] = greedy
            continue
        t = float(np.float32(temperature[b]))
        if not t > 0:
            out[b] = greedy
            continue
        keep = kept_mask(row, t, int(top_k[b]), float(top_p[b]))
        u = uniforms(V, int(seed[b]), int(step[b]) if step is not None else 0)
        inv_t = np.float32(1) / np.float32(t)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gumbel = (-np.log(-np.log(u))).astype(np.float32)
            score = _fma32((row - m).astype(np.float32), inv_t, gumbel)
        score = np.where(keep, score, -np.inf)
        out[b] = int(np.argmax(score))
    return out


FAMILY = SampleFamily()
