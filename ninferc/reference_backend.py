"""The CPU backend: the numpy reference executor behind the :class:`~ninferc.generate.Backend` API."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ninferc.errors import NinfercError
from ninferc.ir.config import ModelConfig
from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.reference import ReferenceExecutor
from ninferc.sampling import HostSampler, NonFiniteLogits, SamplingParams


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
        return self._sampler.sample(self.logits).token

    def _check(self, tokens: int) -> None:
        if self.max_context is not None and tokens > self.max_context:
            raise NinfercError(f"context of {tokens} tokens exceeds the max context {self.max_context} (--max-context)")

    def synchronize(self) -> None:
        """Nothing to wait for on the CPU."""
        pass


class _SlotStates:
    """A mapping state name -> the array of one GDN slot in a pool (what :class:`SequenceState` keeps in a dict):
    reads return the slot's array, writes copy into it."""

    def __init__(self, pool: dict, slot: int):
        self.pool, self.slot = pool, slot

    def __getitem__(self, name: str) -> np.ndarray:
        return self.pool[name][self.slot]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.pool[name][self.slot] = value


class _PagedSequence:
    """The :class:`~ninferc.ir.reference.SequenceState` interface over a backend's pools for one
    :class:`~ninferc.runtime.paged_kv.Sequence`: K/V rows are written into the pages its page table lists and
    read back through it; conv / recurrent state live in its GDN slot. ``length`` is the sequence's."""

    def __init__(self, backend: "ReferenceBatchBackend", seq):
        self.b, self.seq = backend, seq
        self.conv = _SlotStates(backend.conv, seq.slot)
        self.recurrent = _SlotStates(backend.recurrent, seq.slot)

    @property
    def length(self) -> int:
        return self.seq.length

    @length.setter
    def length(self, n: int) -> None:
        self.seq.length = n

    def kv_append(self, name: str, k: np.ndarray, v: np.ndarray):
        """Store K / V rows [T, Hkv, d] at positions length.. through the page table; return the context's
        (K, V) [length + T, Hkv, d] gathered back from the pages."""
        P = self.b.page_size  # noqa: N806
        start, T = self.seq.length, k.shape[0]  # noqa: N806
        end = start + T
        if -(-end // P) > len(self.seq.pages):
            raise NinfercError(f"sequence at {start} tokens + {T} needs {-(-end // P)} KV pages but holds "
                               f"{len(self.seq.pages)} (page size {P})")
        kp, vp = self.b.k_pages[name], self.b.v_pages[name]
        pos = np.arange(start, end)
        pages = np.asarray(self.seq.pages, np.int64)
        kp[pages[pos // P], pos % P] = k
        vp[pages[pos // P], pos % P] = v
        pos = np.arange(end)
        return kp[pages[pos // P], pos % P], vp[pages[pos // P], pos % P]


def reference_memory_plan(config: ModelConfig, graph, *, num_pages: int, page_size: int, num_slots: int,
                          weights=None):
    """Host bytes the :class:`ReferenceBatchBackend` will hold: ``weights`` (every graph parameter converted to
    fp32 once, 4 bytes per element), ``kv_pages`` (``num_pages * page_size`` tokens x K and V of every attention
    layer in fp32) and ``gdn_state`` (``num_slots`` x the conv window and recurrent matrix of every GDN layer,
    fp32). Returns a :class:`~ninferc.runtime.memory.MemoryPlan`."""
    from ninferc.runtime.memory import MemoryPlan

    g = graph if graph is not None else build_graph(config, lm_rows="last")
    mp = MemoryPlan()
    mp.add("weights", sum(4 * p.numel for p in g.params.values()))
    kv = sum(4 * 2 * s.shape[1] * s.shape[2] for s in g.states.values() if s.kind == "kv")
    mp.add("kv_pages", num_pages * page_size * kv)
    fixed = 0
    for s in g.states.values():
        if s.kind in ("conv", "recurrent"):
            n = 4
            for d in s.shape:
                n *= d
            fixed += n
    mp.add("gdn_state", num_slots * fixed)
    return mp


class ReferenceBatchBackend:
    """The numpy reference executor behind the batched backend interface (:mod:`ninferc.runtime.backend`): a
    loop over sequences, each step computed exactly as :class:`ReferenceBackend` computes it for one sequence
    alone (so a request's greedy output does not depend on what shares its steps), with K/V held in a paged pool
    and GDN state in slots, like the CUDA engine's.

    Args:
        config, weights, graph: as :class:`ReferenceBackend`.
        num_pages: KV pages in the pool. page_size: tokens per page. num_slots: GDN state slots.
        max_context: most tokens one sequence may hold.

    Memory: K and V are kept in fp32 (the reference's arithmetic): ``num_pages * page_size`` tokens x
    ``2 * Hkv * head_dim * 4`` bytes per attention layer; GDN state ``num_slots`` x (conv + recurrent) fp32.
    """

    name = "reference"

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray], *, num_pages: int, page_size: int,
                 num_slots: int, max_context: int, graph=None):
        if min(num_pages, page_size, num_slots, max_context) < 1:
            raise NinfercError(f"num_pages ({num_pages}), page_size ({page_size}), num_slots ({num_slots}) and "
                               f"max_context ({max_context}) must be >= 1")
        self.config, self.vocab_size = config, config.vocab_size
        self.page_size, self.num_pages, self.num_slots, self.max_context = page_size, num_pages, num_slots, max_context
        self.exec = ReferenceExecutor(graph if graph is not None else build_graph(config, lm_rows="last"), weights)
        g = self.exec.graph
        self.k_pages, self.v_pages, self.conv, self.recurrent = {}, {}, {}, {}
        for s in g.states.values():
            if s.kind == "kv":
                _, hkv, d = s.shape
                self.k_pages[s.name] = np.zeros((num_pages, page_size, hkv, d), np.float32)
                self.v_pages[s.name] = np.zeros((num_pages, page_size, hkv, d), np.float32)
            elif s.kind == "conv":
                self.conv[s.name] = np.zeros((num_slots,) + tuple(s.shape), np.float32)
            elif s.kind == "recurrent":
                self.recurrent[s.name] = np.zeros((num_slots,) + tuple(s.shape), np.float32)
        self.memory = reference_memory_plan(config, g, num_pages=num_pages, page_size=page_size, num_slots=num_slots)

    # -- state ------------------------------------------------------------------------------------------
    def reset_slot(self, slot: int) -> None:
        """Zero GDN slot ``slot`` (a new sequence starts from zero state)."""
        for pool in (*self.conv.values(), *self.recurrent.values()):
            pool[slot] = 0.0

    def poison(self, pages=(), slots=()) -> None:
        """Fill KV ``pages`` and GDN ``slots`` with NaN (tests: free memory is never trusted clean)."""
        pages = list(pages)
        for pool in (*self.k_pages.values(), *self.v_pages.values()):
            pool[pages] = np.nan
        for s in slots:
            for pool in (*self.conv.values(), *self.recurrent.values()):
                pool[s] = np.nan

    def _view(self, seq) -> _PagedSequence:
        if not 0 <= seq.slot < self.num_slots:
            raise NinfercError(f"sequence holds GDN slot {seq.slot}, outside 0..{self.num_slots - 1}")
        if seq.length == 0:
            self.reset_slot(seq.slot)
        return _PagedSequence(self, seq)

    def _check(self, seq, tokens: int) -> None:
        if seq.length + tokens > self.max_context:
            raise NinfercError(f"context of {seq.length + tokens} tokens exceeds the max context {self.max_context}")

    # -- steps ------------------------------------------------------------------------------------------
    def prefill(self, seq, ids: list[int]) -> np.ndarray:
        """Append the chunk ``ids`` to ``seq``; logits of its last token [1, V] fp32."""
        if not ids:
            raise NinfercError("prefill needs at least one token")
        self._check(seq, len(ids))
        return self.exec.forward(list(ids), self._view(seq))[-1:]

    def decode(self, seqs: list, tokens: list[int]) -> np.ndarray:
        """One token per sequence (row order); logits [B, V] fp32."""
        if len(seqs) != len(tokens) or not seqs:
            raise NinfercError(f"decode: {len(tokens)} tokens for {len(seqs)} sequences")
        out = []
        for seq, t in zip(seqs, tokens):
            self._check(seq, 1)
            out.append(self.exec.forward([int(t)], self._view(seq))[-1])
        return np.stack(out)

    def sample(self, logits: np.ndarray, rows: list) -> list:
        """One :class:`~ninferc.sampling.Sampled` per row (``rows[i] = (HostSampler, logprobs or None)``), or the
        :class:`~ninferc.sampling.NonFiniteLogits` error of a row whose logits hold NaN / Inf (the other rows are
        sampled as usual)."""
        out = []
        for i, (s, lp) in enumerate(rows):
            try:
                out.append(s.sample(logits[i], lp))
            except NonFiniteLogits as exc:
                out.append(exc)
        return out

    def close(self) -> None:
        """Drop the pools."""
        self.k_pages, self.v_pages, self.conv, self.recurrent = {}, {}, {}, {}
