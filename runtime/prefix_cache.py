"""Prefix reuse across requests for a hybrid model: shared KV pages + GDN state checkpoints (DESIGN.md §6b).

A hybrid model cannot slice its recurrent state: a hit at position P needs the attention KV of positions 0..P-1
*and* the exact GDN conv / recurrent state at P, which exists only where a forward pass stopped. So the cache keeps
**checkpoints**: the backend's saved state of a sequence at P (every GDN layer's conv window and fp32 recurrent
matrix; for a speculating sequence also the MTP head's position and the hidden rows it has not consumed yet) plus
references to the KV pages that hold positions 0..P-1. They are taken where a forward pass stops: at prefill
chunk ends on multiples of the checkpoint interval, one token before the end of a request's prompt (the scheduler
ends a prefill chunk there) or instead at the positions the request asks for (``GenerationRequest.checkpoint_at``:
the server's chat requests ask for the end of their messages, before the generation prompt, which is what a
conversation's next turn repeats), and at the end of its generation.

Keys: chained page hashes (page i's hash covers the tokens of pages 0..i, so a hash names the whole prefix;
BLAKE2b, 16 bytes) and, for a checkpoint at P, the hash of its last full page chained with the tokens of the
partial page. Lookup: the longest checkpoint whose prefix equals the prompt's first P tokens, with P at most the
prompt length minus one (the last prompt token is always computed: its logits give the first new token). A prompt
that diverges mid-page therefore reuses up to the last checkpoint before the divergence.

Pages: a reusing sequence *shares* the checkpoint's full pages (reference counts in the
:class:`~ninferc.runtime.paged_kv.PagePool`) and gets private *copies* of the page holding position P-1 when it
is partly filled (it will append into it) or when the sequence speculates (its MTP row P-1 depends on the token at
P, which differs between the requests that share the prefix). A page returns to the pool only when no sequence and
no checkpoint holds it. Checkpoint state lives in a pool with a byte budget, evicted least recently used; a
checkpoint being restored is pinned; KV pages held only by the cache are released (by evicting checkpoints) when
admission needs them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

#: bytes of a block hash
HASH_BYTES = 16


def _h(prev: bytes, tokens) -> bytes:
    b = hashlib.blake2b(prev, digest_size=HASH_BYTES)
    b.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return b.digest()


def page_hashes(tokens, page_size: int) -> list[bytes]:
    """Chained hashes of the full pages of ``tokens``: entry i names tokens[0 : (i + 1) * page_size]."""
    out, prev = [], b""
    for i in range(len(tokens) // page_size):
        prev = _h(prev, tokens[i * page_size:(i + 1) * page_size])
        out.append(prev)
    return out


def prefix_key(tokens, length: int, page_size: int, hashes: list[bytes] | None = None) -> bytes:
    """The key of the prefix ``tokens[:length]``: the chained hash of its full pages, chained with the tokens of its
    partial page (``hashes``: the full-page hashes of ``tokens`` when already computed)."""
    full = length // page_size
    hs = hashes if hashes is not None else page_hashes(tokens[:full * page_size], page_size)
    prev = hs[full - 1] if full else b""
    return _h(prev + b"|" + length.to_bytes(8, "little"), tokens[full * page_size:length])


@dataclass
class Checkpoint:
    """A cached prefix: ``length`` P tokens, the ``pages`` holding positions 0..P-1 (the cache holds a reference to
    each), the backend's saved ``state`` at P, its size ``nbytes`` and the ``tokens`` themselves (the backend needs
    them to resume a speculating sequence)."""

    key: bytes
    length: int
    pages: list[int]
    state: object
    nbytes: int
    tokens: np.ndarray
    mtp: bool
    hits: int = 0
    pinned: int = 0


@dataclass
class CacheStats:
    """Counters since start: prompt tokens looked up (``query_tokens``), tokens served from the cache
    (``hit_tokens``), requests looked up and those that hit, checkpoints stored and evicted."""

    queries: int = 0
    hits: int = 0
    query_tokens: int = 0
    hit_tokens: int = 0
    stored: int = 0
    evicted: int = 0
    by_reason: dict = field(default_factory=dict)


class PrefixCache:
    """Checkpoints of sequences' states with their KV pages (module docstring).

    Args:
        pools: the scheduler's :class:`~ninferc.runtime.backend.KVPools`.
        backend: the batched backend (``save_state`` / ``restore_state`` / ``copy_page`` / ``state_nbytes``).
        budget_bytes: most bytes of checkpoint state kept (KV pages are counted in the KV pool, not here).
        interval: checkpoint every ``interval`` prompt tokens during prefill (a multiple of the page size; 0 = only at
            the ends of prompts and generations).
    """

    def __init__(self, pools, backend, *, budget_bytes: int, interval: int = 0):
        ps = pools.page_size
        if interval < 0 or (interval and interval % ps):
            raise ValueError(f"prefix checkpoint interval {interval} must be 0 or a multiple of the page size {ps}")
        self.pools, self.backend, self.page_size = pools, backend, ps
        self.budget_bytes, self.interval = budget_bytes, interval
        self._lru: OrderedDict[bytes, Checkpoint] = OrderedDict()
        self._by_len: dict[int, dict[bytes, Checkpoint]] = {}
        self.bytes = 0
        self.stats = CacheStats()
        self._counts: tuple[int, tuple[int, int]] | None = None  # (pool version, page_counts) of the last count

    # -- queries ------------------------------------------------------------------------------------------
    @property
    def checkpoints(self) -> int:
        """Checkpoints held."""
        return len(self._lru)

    def pages_held(self) -> int:
        """Distinct KV pages the cache holds a reference to."""
        return self.page_counts()[0]

    def pages_only_cached(self) -> int:
        """Pages held by the cache and by nobody else (what evicting everything would free)."""
        return self.page_counts()[1]

    def page_counts(self) -> tuple[int, int]:
        """(:meth:`pages_held`, :meth:`pages_only_cached`) in one pass over the checkpoints' pages, counted again
        only when a page changed holders since the last count (:attr:`PagePool.version`: the cache's own inserts
        and drops share and give pages too), so the scheduler's per-iteration snapshot costs a comparison on a
        decode step that crosses no page boundary."""
        pool = self.pools.pages
        if self._counts is None or self._counts[0] != pool.version:
            counts: dict[int, int] = {}
            for c in self._lru.values():
                for p in c.pages:
                    counts[p] = counts.get(p, 0) + 1
            self._counts = (pool.version, (len(counts), sum(1 for p, n in counts.items() if pool.refs(p) == n)))
        return self._counts[1]

    def lookup(self, tokens, *, mtp: bool) -> Checkpoint | None:
        """The longest checkpoint whose tokens are a prefix of ``tokens`` ending at most one token before its end
        (taken by a sequence of the same kind: speculating or not). Pins the hit (the caller calls :meth:`release`
        once it has restored from it, or given up); the caller counts queries and hits in :attr:`stats` when the
        request is admitted."""
        n = len(tokens)
        hashes = page_hashes(tokens[:(n - 1) // self.page_size * self.page_size], self.page_size)
        for length in sorted((L for L in self._by_len if L <= n - 1), reverse=True):
            key = prefix_key(tokens, length, self.page_size, hashes)
            c = self._by_len[length].get(key)
            if c is not None and c.mtp == mtp and np.array_equal(np.asarray(tokens[:length]), c.tokens):
                self._lru.move_to_end(key)
                c.hits += 1
                c.pinned += 1
                return c
        return None

    def release(self, c: Checkpoint) -> None:
        """Unpin a checkpoint returned by :meth:`lookup`."""
        c.pinned -= 1

    def shared_and_copied(self, c: Checkpoint, *, mtp: bool) -> tuple[list[int], list[int]]:
        """(pages a reusing sequence shares, pages it gets private copies of), in page order."""
        full = c.length // self.page_size
        shared = list(c.pages[:full])
        copied = list(c.pages[full:])  # the partial page, if any
        if mtp and shared and c.length % self.page_size == 0:
            copied = [shared.pop()] + copied  # the page holding MTP row P-1 (written by each reuser)
        return shared, copied

    # -- updates ------------------------------------------------------------------------------------------
    def insert(self, seq, tokens, reason: str) -> Checkpoint | None:
        """Checkpoint ``seq`` as it is now (``seq.length`` tokens, equal to ``tokens``); returns the entry (an existing
        one with the same prefix is refreshed instead), or None when its state alone is over the budget."""
        length = seq.length
        if length < 1 or len(tokens) != length:
            raise ValueError(f"checkpoint of a sequence at {length} tokens given {len(tokens)} tokens")
        key = prefix_key(tokens, length, self.page_size)
        if key in self._lru:
            self._lru.move_to_end(key)
            return self._lru[key]
        nbytes = self.backend.state_nbytes(seq)
        if nbytes > self.budget_bytes:
            return None
        self.evict_bytes(self.budget_bytes - nbytes)
        pages = list(seq.pages[:-(-length // self.page_size)])
        self.pools.pages.share(pages)
        c = Checkpoint(key, length, pages, self.backend.save_state(seq), nbytes, np.asarray(tokens, np.int32),
                       seq.mtp)
        self._lru[key] = c
        self._by_len.setdefault(length, {})[key] = c
        self.bytes += nbytes
        self.stats.stored += 1
        self.stats.by_reason[reason] = self.stats.by_reason.get(reason, 0) + 1
        return c

    def _drop(self, c: Checkpoint) -> None:
        del self._lru[c.key]
        d = self._by_len[c.length]
        del d[c.key]
        if not d:
            del self._by_len[c.length]
        self.bytes -= c.nbytes
        self.pools.pages.give(c.pages)
        self.stats.evicted += 1

    def evict_bytes(self, target: int) -> None:
        """Evict least recently used, unpinned checkpoints until at most ``target`` bytes are held."""
        for c in list(self._lru.values()):
            if self.bytes <= target:
                return
            if not c.pinned:
                self._drop(c)

    def evict_for_pages(self, need: int) -> bool:
        """Evict least recently used, unpinned checkpoints until ``need`` pages are free; True when they are."""
        for c in list(self._lru.values()):
            if self.pools.pages.free >= need:
                return True
            if not c.pinned:
                self._drop(c)
        return self.pools.pages.free >= need

    def clear(self) -> int:
        """Drop every unpinned checkpoint; returns how many were dropped."""
        n = 0
        for c in list(self._lru.values()):
            if not c.pinned:
                self._drop(c)
                n += 1
        return n
