"""FuseSiblingLinears: Linears without epilogue that read the same input become one Linear over the
concatenated weight (N = sum of N_i); each original output becomes a View of the fused output, so
consumers are unchanged. Used for attention q|k|v and the GDN in_proj qkv|z|b|a."""

from __future__ import annotations

from ninferc.ir.graph import Graph, Op, ParamSpec
from ninferc.ir.passes.common import add_op, mark


def _common_prefix(names: list[str]) -> str:
    parts = [n.split(".") for n in names]
    pre = []
    for seg in zip(*parts):
        if len(set(seg)) != 1:
            break
        pre.append(seg[0])
    return ".".join(pre)


def fuse_sibling_linears(graph: Graph) -> Graph:
    """Return a copy with each group of >= 2 sibling Linears fused (order of first appearance)."""
    g = graph.copy()
    groups: dict[str, list[Op]] = {}
    for op in g.ops():
        if op.kind == "Linear" and op.attrs.get("epilogue", "none") == "none":
            groups.setdefault(op.inputs[0], []).append(op)
    for x, ops in groups.items():
        if len(ops) < 2:
            continue
        specs = [g.params[o.params["weight"]] for o in ops]
        if len({s.shape[1] for s in specs}) != 1 or len({s.dtype for s in specs}) != 1:
            continue
        pre = _common_prefix([o.name for o in ops])
        suffix = "_".join(o.name[len(pre) + 1:] if pre else o.name for o in ops)
        base = f"{pre}.{suffix}" if pre else suffix
        pname = base
        flat_parts = []
        for s in specs:
            flat_parts.extend(s.parts or (s,))
        g.params[pname] = ParamSpec(pname, (sum(s.shape[0] for s in specs), specs[0].shape[1]), specs[0].dtype,
                                    specs[0].group, parts=tuple(flat_parts))
        for s in specs:
            del g.params[s.name]
        fused_out = g.fresh_name(base + ".out")
        layer = ops[0].layer
        outs = [o.outputs[0] for o in ops]
        for o in ops:
            g.remove_op(o.name)
        add_op(g, Op(g.fresh_name(base), "Linear", (x,), (fused_out,), {"weight": pname}, {"epilogue": "none"}, {},
                     layer))
        start = 0
        for o, s, out in zip(ops, specs, outs):
            add_op(g, Op(out + ".view", "View", (fused_out,), (out,), {}, {"start": start, "stop": start + s.shape[0]},
                         {}, layer))
            start += s.shape[0]
    return mark(g, "FuseSiblingLinears")
