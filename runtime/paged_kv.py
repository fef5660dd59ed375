"""Host-side bookkeeping of the paged KV cache and the GDN state slots.

The device pools (per attention layer ``k_pages``/``v_pages`` [num_pages, Hkv, P, hd] bf16; per GDN
layer ``conv_ring`` [num_slots, W, C] and ``rec_state`` [num_slots, Hv, dk, dv] fp32) are allocated
once by the engine; this module decides which page and which slot each sequence uses. A page or slot
returned to the pool is never assumed clean: kernels ignore KV beyond a sequence's context and start
GDN state from zero at position 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ninferc.errors import NinfercError


class PoolExhausted(NinfercError):
    """No free page or slot left (names the pool, its size and the request)."""


class PagePool:
    """``num_pages`` physical KV pages of ``page_size`` tokens each, with reference counts: a page may be held by
    several sequences and prefix-cache entries at once (a shared prefix) and returns to the free list when the
    last holder gives it back.

    Args:
        on_free: called with the pages that just became free (tests fill them with garbage).
    """

    def __init__(self, num_pages: int, page_size: int, on_free=None):
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"num_pages ({num_pages}) and page_size ({page_size}) must be >= 1")
        self.num_pages, self.page_size = num_pages, page_size
        self._free = list(range(num_pages - 1, -1, -1))  # pop() hands out 0, 1, 2 ...
        self._refs = [0] * num_pages
        self.on_free = on_free
        #: bumped by every take / share / give: equal versions mean no page changed holders in between (what the
        #: prefix cache's page counts, read by every scheduler iteration's snapshot, are memoised on)
        self.version = 0

    @property
    def free(self) -> int:
        """Pages not held by anyone."""
        return len(self._free)

    def refs(self, page: int) -> int:
        """Holders of ``page`` (0 = free)."""
        return self._refs[page]

    def take(self, n: int) -> list[int]:
        """``n`` free pages, each with one holder.  Raises PoolExhausted (pool size, free count, request)."""
        if n > len(self._free):
            raise PoolExhausted(f"KV page pool exhausted: {n} pages requested, {len(self._free)} of "
                                f"{self.num_pages} free (page size {self.page_size} tokens)")
        out = [self._free.pop() for _ in range(n)]
        for p in out:
            self._refs[p] = 1
        self.version += 1
        return out

    def share(self, pages: list[int]) -> None:
        """One more holder for each of ``pages`` (held already).

        Raises:
            ValueError: a page outside the pool or free (sharing it would hand out garbage).
        """
        for p in pages:
            if not 0 <= p < self.num_pages or self._refs[p] == 0:
                raise ValueError(f"KV page {p} shared while {'free' if 0 <= p < self.num_pages else 'out of range'} "
                                 f"(pool of {self.num_pages} pages)")
        for p in pages:
            self._refs[p] += 1
        self.version += 1

    def give(self, pages: list[int]) -> None:
        """One holder less for each of ``pages``; those with none left return to the free list (their contents are
        never trusted).

        Raises:
            ValueError: a page outside the pool or already free (a bookkeeping bug that would hand one page to two
                sequences).
        """
        for p in pages:
            if not 0 <= p < self.num_pages or self._refs[p] == 0:
                raise ValueError(f"KV page {p} returned to a pool of {self.num_pages} pages while "
                                 f"{'already free' if 0 <= p < self.num_pages else 'out of range'}")
        freed = []
        self.version += 1
        for p in pages:
            self._refs[p] -= 1
            if self._refs[p] == 0:
                freed.append(p)
        self._free.extend(reversed(freed))
        if freed and self.on_free is not None:
            self.on_free(freed)


class SlotPool:
    """A free list of ``num_slots`` GDN state slots (one per live sequence)."""

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))

    @property
    def free(self) -> int:
        """Slots not handed out."""
        return len(self._free)

    def take(self) -> int:
        """One free slot (PoolExhausted names the pool size when none is left)."""
        if not self._free:
            raise PoolExhausted(f"GDN state slots exhausted: all {self.num_slots} in use")
        return self._free.pop()

    def give(self, slot: int) -> None:
        """Return a slot to the pool (its contents are never trusted).

        Raises:
            ValueError: a slot outside the pool or already free.
        """
        if not 0 <= slot < self.num_slots or slot in self._free:
            raise ValueError(f"GDN slot {slot} returned to a pool of {self.num_slots} slots while "
                             f"{'already free' if slot in self._free else 'out of range'}")
        self._free.append(slot)


@dataclass
class Sequence:
    """One live sequence: its GDN ``slot``, its KV ``pages`` (logical page i -> physical id) and its
    ``length`` (tokens whose KV and state are in place). A speculating sequence (``mtp`` True) also keeps the MTP
    head's KV in the same pages: ``mtp_length`` of its rows are in place (row t reads the model's hidden state at
    position t and the token at t + 1, so ``mtp_length`` <= ``length``)."""

    slot: int
    pages: list[int] = field(default_factory=list)
    length: int = 0
    mtp: bool = False
    mtp_length: int = 0

    def ensure_capacity(self, tokens: int, pool: PagePool, max_pages: int) -> None:
        """Own enough pages for ``tokens`` positions.

        Raises:
            NinfercError: ``tokens`` beyond the max context (max_pages * page_size).
            PoolExhausted: the pool cannot supply the pages.
        """
        need = -(-tokens // pool.page_size)
        if need > max_pages:
            raise NinfercError(f"context of {tokens} tokens exceeds the max context "
                               f"{max_pages * pool.page_size} (--max-context)")
        if need > len(self.pages):
            self.pages.extend(pool.take(need - len(self.pages)))
