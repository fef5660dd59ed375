"""Sampling parameters and the host (numpy) sampler used by the reference backend.

Semantics (as in HF `generate` / vLLM): greedy when ``temperature == 0``; otherwise logits are divided
by the temperature, restricted to the ``top_k`` largest (0 = no limit), then to the smallest set whose
probability mass reaches ``top_p`` (the top-1 token is always kept), renormalised, and sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import NinfercError


@dataclass(frozen=True)
class SamplingParams:
    """``temperature`` >= 0 (0 = greedy); ``top_k`` >= 0 (0 = off); 0 < ``top_p`` <= 1; ``seed``.

    Raises:
        NinfercError: a value outside its range (names the value and the range).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if not self.temperature >= 0:
            raise NinfercError(f"temperature must be >= 0, found {self.temperature}")
        if self.top_k < 0:
            raise NinfercError(f"top_k must be >= 0 (0 disables it), found {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise NinfercError(f"top_p must be in (0, 1], found {self.top_p}")

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
        if self.params.greedy:
            return int(np.argmax(logits))
        probs = filtered_probs(logits, self.params)
        return int(self.rng.choice(probs.shape[0], p=probs))
