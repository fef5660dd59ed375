"""Helpers shared by the IR passes: dead-op elimination and View-chain resolution."""

from __future__ import annotations

from ninferc.ir.graph import Graph, Op, TensorSpec
from ninferc.ir.ops import infer


def consumers(g: Graph, tensor: str) -> list[Op]:
    """Ops reading ``tensor`` (any order)."""
    return [g.op(n) for n in g.g.nodes if tensor in g.op(n).inputs]


def remove_dead_ops(g: Graph) -> int:
    """Remove ops none of whose outputs is read or is a graph output; repeat to a fixed point.
    Returns the number removed."""
    removed = 0
    while True:
        used = {t for n in g.g.nodes for t in g.op(n).inputs} | set(g.outputs)
        dead = [n for n in g.g.nodes if not any(t in used for t in g.op(n).outputs)]
        if not dead:
            return removed
        for n in dead:
            g.remove_op(n)
            removed += 1


def flat_window(g: Graph, tensor: str) -> tuple[str, int, int] | None:
    """If ``tensor`` is a chain of Views that only select a contiguous column window of a 2-D base
    tensor (no ``inner`` slice), return (base, start, stop) in the base's flat row; else None."""
    start = 0
    t = tensor
    width = g.tensors[t].row_elems()
    while True:
        op = g.producer(t)
        if op is None or op.kind != "View":
            return (t, start, start + width) if len(g.tensors[t].shape) == 2 else None
        if op.attrs.get("inner") is not None:
            return None
        start += op.attrs.get("start", 0)
        t = op.inputs[0]


def add_op(g: Graph, op: Op, dtypes: dict[str, str] | None = None) -> Op:
    """Insert ``op`` with output specs inferred from its inputs (dtypes overridable per output)."""
    specs = [TensorSpec(n, s, (dtypes or {}).get(n, dt)) for n, (s, dt) in zip(op.outputs, infer(g, op))]
    return g.add_op(op, specs)


def mark(g: Graph, name: str) -> Graph:
    """Record that pass ``name`` ran (graph.meta['passes'])."""
    g.meta.setdefault("passes", []).append(name)
    return g
