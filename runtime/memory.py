"""The device memory plan: every byte the runtime will allocate, summed and checked against the free
device memory *before* anything is uploaded; the error lists every term in bytes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ninferc.errors import RuntimeMemoryError


@dataclass
class MemoryPlan:
    """Named byte counts. ``terms`` maps a readable name (``weights``, ``kv_pages``, ``gdn_state``,
    ``activations``, ``workspace``, ``logits``, ``graph_allowance``) to bytes."""

    terms: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, nbytes: int) -> None:
        """Add ``nbytes`` (int >= 0) under ``name`` (accumulates)."""
        if nbytes < 0:
            raise ValueError(f"memory term {name} is negative: {nbytes}")
        self.terms[name] = self.terms.get(name, 0) + int(nbytes)

    @property
    def total(self) -> int:
        """Sum of all terms, bytes."""
        return sum(self.terms.values())

    def describe(self) -> str:
        """One line per term and the total, in bytes and GiB."""
        w = max(len(k) for k in self.terms) if self.terms else 5
        lines = [f"  {k:<{w}} {v:>16,} B  ({v / 2**30:8.3f} GiB)" for k, v in self.terms.items()]
        lines.append(f"  {'total':<{w}} {self.total:>16,} B  ({self.total / 2**30:8.3f} GiB)")
        return "\n".join(lines)

    def check(self, free_bytes: int, *, device: str = "device") -> None:
        """Raise unless the plan fits in ``free_bytes``.

        Raises:
            RuntimeMemoryError: listing every term, the total, the free memory and the shortfall, with
                what to change (--max-context, batch size).
        """
        if self.total > free_bytes:
            raise RuntimeMemoryError(
                f"the memory plan needs {self.total:,} bytes but {device} has {free_bytes:,} bytes free "
                f"(short by {self.total - free_bytes:,} bytes):\n{self.describe()}\n"
                "reduce --max-context or the batch size, or free device memory")
