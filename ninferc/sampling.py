"""Sampling parameters and the host (numpy) sampler used by the reference backend.

Semantics (as in HF `generate` / vLLM): greedy when ``temperature == 0``; otherwise logits are divided
by the temperature, restricted to the ``top_k`` largest (0 = no limit), then to the smallest set whose
probability mass reaches ``top_p`` (the top-1 token is always kept), renormalised, and sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import NinfercError


#: Sampling temperatures allowed besides 0 (greedy): a range we chose, not a hardware limit (HF and vLLM accept any
#: positive value). The GPU sampler divides fp32 logits by the temperature; below 0.01 logit gaps of ~0.1 become
#: gaps of >= 10 (draws are argmax in all but name -- use 0) and far smaller values underflow (1e-320 gave NaN
#: probabilities); above 100 typical logit spreads of ~10-30 shrink below 0.3 (close to a uniform draw over the
#: vocabulary), and inf made the draw uniform.
TEMPERATURE_RANGE = (0.01, 100.0)


@dataclass(frozen=True)
class SamplingParams:
    """``temperature`` 0 (greedy) or in :data:`TEMPERATURE_RANGE`; ``top_k`` >= 0 (0 = off); 0 < ``top_p`` <= 1;
    ``seed`` an integer in [0, 2**64) (the GPU sampler's Philox key is 64 bits).

    Raises:
        NinfercError: a value outside its range (names the value and the range).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        lo, hi = TEMPERATURE_RANGE
        if not (self.temperature == 0.0 or lo <= self.temperature <= hi):
            raise NinfercError(f"temperature must be 0 (greedy) or in [{lo:g}, {hi:g}], found {self.temperature}")
        if self.top_k < 0:
            raise NinfercError(f"top_k must be >= 0 (0 disables it), found {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise NinfercError(f"top_p must be in (0, 1], found {self.top_p}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**64:
            raise NinfercError(f"seed must be an integer in [0, 2**64), found {self.seed!r}")

    @property
    def greedy(self) -> bool:
        """True when ``temperature == 0`` (argmax decoding)."""
        return self.temperature == 0.0


def filtered_probs(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The distribution sampled from: logits [V] -> probs [V] fp64 after temperature, top-k, top-p."""
    x = np.asarray(logits, dtype=np.float64) / p.temperature
    order = np.argsort(-x, kind="stable")
    keep = np.ones(x.shape[0], bool) if p.top_k == 0 else np.zeros(x.shape[0], bool)
    if p.top_k:
        keep[order[: p.top_k]] = True
    z = np.where(keep, x, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    if p.top_p < 1.0:
        sp = probs[order]
        cum = np.cumsum(sp)
        cut = int(np.searchsorted(cum, p.top_p)) + 1  # smallest prefix with mass >= top_p
        mask = np.zeros_like(keep)
        mask[order[:max(cut, 1)]] = True
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum()
    return probs


class HostSampler:
    """Samples token ids from logits on the host with a seeded numpy Generator (reference backend)."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def __call__(self, logits: np.ndarray) -> int:
        """One token id from ``logits`` [V] (any float dtype): the argmax when greedy, else a draw from
        :func:`filtered_probs` with this sampler's generator (seeded by ``params.seed``; successive calls continue
        its stream). Raises nothing for finite logits (SamplingParams has checked the parameters)."""
        if self.params.greedy:
            return int(np.argmax(logits))
        probs = filtered_probs(logits, self.params)
        return int(self.rng.choice(probs.shape[0], p=probs))
