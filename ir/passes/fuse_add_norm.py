"""FuseAddRMSNorm: a ResidualAdd whose sum feeds an RMSNorm becomes one AddRMSNorm producing both the
sum (the residual stream, updated in place by the kernel) and the normalised output: one pass over
the hidden state instead of two."""

from __future__ import annotations

from ninferc.ir.graph import Graph, Op
from ninferc.ir.passes.common import add_op, consumers, mark


def fuse_add_rmsnorm(graph: Graph) -> Graph:
    """Return a copy with every (ResidualAdd -> RMSNorm over the whole row) pair fused; the graph is
    unchanged (but for the pass mark) where no pair exists."""
    g = graph.copy()
    for add in [op for op in g.ops() if op.kind == "ResidualAdd"]:
        s = add.outputs[0]
        norms = [c for c in consumers(g, s) if c.kind == "RMSNorm" and c.inputs == (s,)]
        if len(norms) != 1:
            continue
        norm = norms[0]
        y = norm.outputs[0]
        g.remove_op(norm.name)
        g.remove_op(add.name)
        add_op(g, Op(norm.name, "AddRMSNorm", add.inputs, (s, y), dict(norm.params), dict(norm.attrs), {}, norm.layer))
    return mark(g, "FuseAddRMSNorm")
