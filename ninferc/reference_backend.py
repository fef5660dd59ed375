"""The CPU backend: the numpy reference executor behind the :class:`~ninferc.generate.Backend` API."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ninferc.errors import NinfercError
from ninferc.ir.config import ModelConfig
from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.reference import ReferenceExecutor
from ninferc.sampling import HostSampler, SamplingParams


class ReferenceBackend:
    """One sequence on the numpy reference executor (fp32 math on the stored weights).

    Args:
        config: the model config.
        weights: IR param name -> array (a Checkpoint or an artifact's tensors).
        gdn_mode: see :class:`ReferenceExecutor`.
        graph: the graph to execute (an artifact's compiled graph, whose weights are the artifact's
            tensors); default the unfused graph of ``config`` over checkpoint weights.
        max_context: most tokens a sequence may hold (prompt + generated), like the CUDA engine's KV
            capacity; None = unbounded.

    Raises:
        NinfercError: from prefill/decode when the sequence would exceed ``max_context``.
    """

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray], *, gdn_mode: str = "auto",
                 graph=None, max_context: int | None = None):
        self.config = config
        self.max_context = max_context
        self.exec = ReferenceExecutor(graph if graph is not None else build_graph(config, lm_rows="last"), weights,
                                      gdn_mode=gdn_mode)
        self.state = self.exec.new_state()
        self.logits: np.ndarray | None = None
        self._sampler: HostSampler | None = None

    def prefill(self, ids: list[int], chunk: int) -> None:
        """Reset the sequence and run ``ids`` in chunks of ``chunk`` tokens; keeps the last logits."""
        self._check(len(ids))
        self.state = self.exec.new_state()
        self._sampler = None
        for s in range(0, len(ids), chunk):
            self.logits = self.exec.forward(ids[s:s + chunk], self.state)[-1]

    def decode(self, token: int) -> None:
        """Append ``token`` and compute the logits after it."""
        self._check(self.state.length + 1)
        self.logits = self.exec.forward([token], self.state)[-1]

    def sample(self, params: SamplingParams) -> int:
        """Sample the next id from the latest logits on the host (seeded numpy Generator)."""
        if self._sampler is None or self._sampler.params != params:
            self._sampler = HostSampler(params)
        return self._sampler(self.logits)

    def _check(self, tokens: int) -> None:
        if self.max_context is not None and tokens > self.max_context:
            raise NinfercError(f"context of {tokens} tokens exceeds the max context {self.max_context} (--max-context)")

    def synchronize(self) -> None:
        """Nothing to wait for on the CPU."""
        pass
