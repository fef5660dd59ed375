"""The batched backend interface the serving policy drives (DESIGN.md §6b, layer 3).

The policy (:mod:`ninferc.runtime.scheduler`, speculative decoding, the prefix cache) is plain Python and owns
every allocation decision: which GDN state slot and which KV pages a sequence holds (:class:`KVPools`). A backend
only computes: it stores K/V into the pages a :class:`~ninferc.runtime.paged_kv.Sequence` lists, keeps GDN state in
the slot it names, and returns logits. Two backends implement it: the numpy reference
(:class:`ninferc.reference_backend.ReferenceBatchBackend`, a loop over sequences, used by every CPU test of the
server) and the CUDA engine (:class:`ninferc.runtime.cuda_backend.CudaBatchBackend`).

Contract of a backend (duck-typed; :class:`BatchBackend` lists it):

* attributes ``page_size`` (tokens per KV page), ``num_pages`` (pages in its pool), ``num_slots`` (GDN state
  slots), ``max_context`` (tokens one sequence may hold), ``vocab_size``, ``memory`` (a
  :class:`~ninferc.runtime.memory.MemoryPlan` of what it allocated, in bytes), ``name`` (for logs);
* ``prefill(seq, ids)``: append ``ids`` (one chunk) at positions ``seq.length ..``; the pages for them are
  already in ``seq.pages``; a sequence at length 0 starts from zero GDN state (a slot is never trusted clean);
  advances ``seq.length``; returns the logits of the chunk's last token, ``[1, V]``;
* ``decode(seqs, tokens)``: one token per sequence, in row order; advances each ``seq.length``; returns
  ``[B, V]`` logits;
* ``sample(logits, rows)``: one :class:`~ninferc.sampling.Sampled` per row from the logits a step returned, or
  for a row whose logits are not finite the :class:`~ninferc.sampling.NonFiniteLogits` error (never a token);
  ``rows[i]`` is ``(HostSampler, logprobs or None)`` and holds the request's parameters, its own seeded generator
  and its token history, so a request's draws do not depend on the other rows of the step;
* for scoring a prompt (optional; ``prompt_logprobs``, a completion's ``echo`` with ``logprobs``):
  ``prefill_scored(seq, ids, targets, top_n)`` -- ``prefill`` of the chunk that also scores ``targets[i]`` (the
  prompt's token after ``ids[i]``) under the logits after ``ids[i]``, returning ``(the last token's logits as prefill
  returns them, [PromptScore])`` (:func:`~ninferc.sampling.score_rows`) -- and ``max_scored_tokens``, the most tokens
  of such a chunk;
* ``close()``: release device memory;
* for the prefix cache (optional): ``state_nbytes(seq)``, ``save_state(seq)`` (a copy of the GDN state of the
  sequence's slot and, when it speculates, what the MTP head needs to resume), ``restore_state(seq, state,
  tokens)``, ``copy_page(src, dst)``, ``settle(seq)`` (compute the MTP rows whose tokens are known, so that a
  checkpoint's pages are complete), ``poison(pages)`` (tests);
* for speculative decoding (optional, ``has_mtp``): ``draft``, ``verify``, ``accept``
  (:mod:`ninferc.runtime.spec`).
"""

from __future__ import annotations

from typing import Protocol

from ninferc.runtime.paged_kv import PagePool, PoolExhausted, Sequence, SlotPool


class BatchBackend(Protocol):
    """See the module docstring."""

    page_size: int
    num_pages: int
    num_slots: int
    max_context: int
    vocab_size: int
    name: str

    def prefill(self, seq: Sequence, ids: list[int]): ...

    def decode(self, seqs: list[Sequence], tokens: list[int]): ...

    def sample(self, logits, rows: list) -> list: ...

    def close(self) -> None: ...


class KVPools:
    """The policy's view of a backend's KV pages and GDN state slots: who holds what.

    Args:
        num_pages: pages in the backend's pool. page_size: tokens per page. num_slots: GDN state slots.
    """

    def __init__(self, num_pages: int, page_size: int, num_slots: int):
        self.pages = PagePool(num_pages, page_size)
        self.slots = SlotPool(num_slots)
        self.page_size = page_size

    def pages_for(self, tokens: int) -> int:
        """Pages that hold ``tokens`` positions (ceil division)."""
        return -(-tokens // self.page_size)

    def open_shared(self, shared: list[int], fresh: int) -> Sequence:
        """A new sequence holding a GDN slot, one more reference to each of the ``shared`` pages (a cached prefix)
        and ``fresh`` new pages after them.

        Raises:
            PoolExhausted: no slot, or fewer than ``fresh`` free pages (nothing is taken then).
        """
        if self.pages.free < fresh:
            raise PoolExhausted(f"KV page pool: {fresh} pages needed, {self.pages.free} of {self.pages.num_pages} free")
        seq = Sequence(slot=self.slots.take())
        self.pages.share(shared)
        seq.pages = list(shared) + self.pages.take(fresh)
        return seq

    def close(self, seq: Sequence) -> None:
        """Return a sequence's pages and slot (their contents are never trusted again)."""
        self.pages.give(seq.pages)
        seq.pages = []
        if seq.slot >= 0:
            self.slots.give(seq.slot)
            seq.slot = -1


__all__ = ["BatchBackend", "KVPools", "PoolExhausted", "Sequence"]
