"""FuseGateUpSwiGLU: Linear(gate) + Linear(up) on the same input feeding a SwiGLU become one Linear
over the stacked weight [gate; up] with a SwiGLU epilogue (one pass over the input, one launch)."""

from __future__ import annotations

from ninferc.ir.graph import Graph, Op, ParamSpec
from ninferc.ir.passes.common import add_op, consumers, mark


def fuse_gate_up_swiglu(graph: Graph) -> Graph:
    """Return a copy of ``graph`` with every matching (gate, up, SwiGLU) triple fused; unchanged
    (but for the pass mark) when nothing matches."""
    g = graph.copy()
    for sw in [op for op in g.ops() if op.kind == "SwiGLU"]:
        gp, up = g.producer(sw.inputs[0]), g.producer(sw.inputs[1])
        if not (gp and up and gp.kind == up.kind == "Linear"):
            continue
        if gp.inputs != up.inputs or gp.attrs.get("epilogue", "none") != "none" or up.attrs.get("epilogue", "none") != "none":
            continue
        if len(consumers(g, gp.outputs[0])) != 1 or len(consumers(g, up.outputs[0])) != 1:
            continue
        wg, wu = g.params[gp.params["weight"]], g.params[up.params["weight"]]
        if wg.shape != wu.shape:
            continue
        pname = f"{wg.name}_up" if wg.name.endswith(".gate") else f"{wg.name}+{wu.name}"
        g.params[pname] = ParamSpec(pname, (2 * wg.shape[0], wg.shape[1]), wg.dtype, wg.group, parts=(wg, wu))
        del g.params[wg.name], g.params[wu.name]
        out = sw.outputs[0]
        name = pname if pname not in g.g else g.fresh_name(pname)
        for o in (sw, gp, up):
            g.remove_op(o.name)
        add_op(g, Op(name, "Linear", gp.inputs, (out,), {"weight": pname}, {"epilogue": "swiglu"}, {}, sw.layer))
    return mark(g, "FuseGateUpSwiGLU")
