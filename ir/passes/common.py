"""Helpers shared by the IR passes: dead-op elimination, View-chain resolution, and the norms a decode-size
lowering folds into the GEMVs on either side of them."""

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


def norms_between_linears(g: Graph) -> dict[str, tuple[str, str]]:
    """AddRMSNorm ops that sit between two Linears and nothing else: norm name -> (producer, consumer) Linear
    names. The producer has no epilogue, its output is the norm's ``d`` (input 1) and is read by this norm
    alone; the norm's output ``y`` (output 1) is read by the consumer Linear alone (not an LM head), whose K is
    the norm's width; neither Linear is itself the producer or consumer of another such norm.

    These are the norms a decode-size lowering may fold into the two GEMVs
    (:mod:`ninferc.targets.kernels.gemv`: ``add_norm_parts`` + ``in_norm parts``), where the producer
    writes ``y`` -- so :func:`ninferc.ir.passes.plan_memory.plan_memory` places ``y`` as born at the producer.
    """
    readers: dict[str, list[Op]] = {}
    for op in g.ops():
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    found: dict[str, tuple[str, str]] = {}
    for norm in g.ops():
        if norm.kind != "AddRMSNorm":
            continue
        prod = g.producer(norm.inputs[1])
        y_readers = readers.get(norm.outputs[-1], [])
        if (prod is None or prod.kind != "Linear" or prod.attrs.get("epilogue", "none") != "none"
                or readers.get(prod.outputs[0], []) != [norm] or len(y_readers) != 1 or y_readers[0].kind != "Linear"
                or y_readers[0].inputs[0] != norm.outputs[-1]):
            continue
        cons = y_readers[0]
        width = g.params[norm.params["weight"]].shape[0]
        if (g.params[prod.params["weight"]].shape[0] != width
                or g.params[cons.params["weight"]].shape[1] != width):
            continue
        found[norm.name] = (prod.name, cons.name)
    # a Linear may take one role only (one parts workspace per GEMV launch)
    roles: dict[str, int] = {}
    for p, c in found.values():
        roles[p] = roles.get(p, 0) + 1
        roles[c] = roles.get(c, 0) + 1
    return {n: pc for n, pc in found.items() if roles[pc[0]] == 1 and roles[pc[1]] == 1}
