"""FuseGatedDeltaNet and FuseGatedAttention: collapse each token mixer, from its (fused) input
projection to the input of its output projection, into one op whose columns into the projection are
explicit. The lowering then picks the kernels per mode (one fused decode kernel; conv + chunked
delta rule for prefill; QK-norm/RoPE/KV-append + paged attention for attention). Both passes leave a
graph without the matching pattern unchanged (but for the pass mark)."""

from __future__ import annotations

from ninferc.ir.graph import Graph, Op
from ninferc.ir.ops import ShapeError
from ninferc.ir.passes.common import add_op, flat_window, mark, remove_dead_ops


def _window(g: Graph, t: str, what: str, op: Op) -> tuple[str, int, int]:
    w = flat_window(g, t)
    if w is None:
        raise ShapeError(f"{op.name}: {what} ({t}) is not a column window of a projection")
    return w


def fuse_gated_deltanet(graph: Graph) -> Graph:
    """Replace conv -> views -> L2Norms -> gating -> delta rule -> gated norm -> flatten by one
    ``GatedDeltaNet`` op reading the projection output directly."""
    g = graph.copy()
    for dr in [op for op in g.ops() if op.kind == "GatedDeltaRule"]:
        ql2, kl2 = g.producer(dr.inputs[0]), g.producer(dr.inputs[1])
        gating = g.producer(dr.inputs[3])
        if not (ql2 and kl2 and gating and ql2.kind == kl2.kind == "L2Norm" and gating.kind == "GDNGating"):
            continue
        qv, kv, vv = g.producer(ql2.inputs[0]), g.producer(kl2.inputs[0]), g.producer(dr.inputs[2])
        if not all(o is not None and o.kind == "View" for o in (qv, kv, vv)):
            continue
        conv = g.producer(qv.inputs[0])
        if conv is None or conv.kind != "CausalConv1d" or {kv.inputs[0], vv.inputs[0]} != {conv.outputs[0]}:
            continue
        users = [g.op(n) for n in g.g.successors(dr.name)]
        if len(users) != 1 or users[0].kind != "GatedRMSNorm":
            continue
        gnorm = users[0]
        flat = [g.op(n) for n in g.g.successors(gnorm.name)]
        if len(flat) != 1 or flat[0].kind != "View":
            continue
        flat = flat[0]
        base, c0, c1 = _window(g, conv.inputs[0], "conv input", dr)
        bz, z0, z1 = _window(g, gnorm.inputs[1], "z", dr)
        bb, b0, b1 = _window(g, gating.inputs[1], "b", dr)
        ba, a0, a1 = _window(g, gating.inputs[0], "a", dr)
        if not base == bz == bb == ba:
            continue  # the projections were not fused into one Linear: nothing to do here
        Hk, dk = g.tensors[ql2.inputs[0]].shape[1:]
        Hv, dv = g.tensors[dr.inputs[2]].shape[1:]
        kd = Hk * dk
        cols = {"q": (c0, c0 + kd), "k": (c0 + kd, c0 + 2 * kd), "v": (c0 + 2 * kd, c1), "z": (z0, z1),
                "b": (b0, b1), "a": (a0, a1)}
        attrs = {"Hk": Hk, "Hv": Hv, "dk": dk, "dv": dv, "width": conv.attrs["width"], "eps": gnorm.attrs["eps"],
                 "scale": dr.attrs["scale"], "chunk": dr.attrs.get("chunk", 64), "l2_eps": ql2.attrs.get("eps", 1e-6),
                 "cols": cols}
        params = {"conv": conv.params["weight"], "A_log": gating.params["A_log"], "dt_bias": gating.params["dt_bias"],
                  "norm": gnorm.params["weight"]}
        states = {"conv": conv.states["conv"], "recurrent": dr.states["recurrent"]}
        out = flat.outputs[0]
        name = dr.name.rsplit(".", 1)[0] + ".mixer"
        for o in (flat, gnorm, dr, gating, ql2, kl2, qv, kv, vv, conv):
            g.remove_op(o.name)
        add_op(g, Op(name, "GatedDeltaNet", (base,), (out,), params, attrs, states, dr.layer))
        remove_dead_ops(g)
    return mark(g, "FuseGatedDeltaNet")


def fuse_gated_attention(graph: Graph) -> Graph:
    """Replace views -> Q/K RMSNorm -> partial RoPE -> GatedAttention by one ``GatedAttentionBlock``."""
    g = graph.copy()
    for at in [op for op in g.ops() if op.kind == "GatedAttention"]:
        qr, kr = g.producer(at.inputs[0]), g.producer(at.inputs[1])
        if not (qr and kr and qr.kind == kr.kind == "PartialRoPE"):
            continue
        qn, kn = g.producer(qr.inputs[0]), g.producer(kr.inputs[0])
        if not (qn and kn and qn.kind == kn.kind == "RMSNorm"):
            continue
        qview, kview = g.producer(qn.inputs[0]), g.producer(kn.inputs[0])
        vview, gview = g.producer(at.inputs[2]), g.producer(at.inputs[3])
        if not all(o is not None and o.kind == "View" for o in (qview, kview, vview, gview)):
            continue
        if qview.inputs != gview.inputs:
            continue
        Hq, hd = g.tensors[at.inputs[0]].shape[1:]
        Hkv = g.tensors[at.inputs[1]].shape[1]
        # q|gate: a per-head interleaved window [Hq * 2 * hd] of the projection
        if tuple(qview.attrs.get("shape", ())) != (Hq, 2 * hd) or tuple(qview.attrs.get("inner")) != (0, hd) \
                or tuple(gview.attrs.get("inner")) != (hd, 2 * hd):
            continue
        bq, q0, q1 = _window(g, qview.inputs[0], "q|gate", at)
        if qview.attrs.get("start", 0) or qview.attrs.get("stop", q1 - q0) != q1 - q0:
            continue
        bk, k0, k1 = _window(g, kview.inputs[0], "k", at)
        bv, v0, v1 = _window(g, vview.inputs[0], "v", at)
        if not bq == bk == bv or kview.attrs.get("inner") or vview.attrs.get("inner"):
            continue
        if qr.inputs[1] != kr.inputs[1]:
            continue
        attrs = {"Hq": Hq, "Hkv": Hkv, "hd": hd, "eps": qn.attrs["eps"], "rotary_dim": qr.attrs["rotary_dim"],
                 "theta": qr.attrs["theta"], "scale": at.attrs["scale"], "groups": at.attrs["groups"],
                 "cols": {"qg": (q0, q1), "k": (k0, k1), "v": (v0, v1)}}
        params = {"q_norm": qn.params["weight"], "k_norm": kn.params["weight"]}
        out = at.outputs[0]
        name = at.name.rsplit(".", 1)[0] + ".mixer"
        for o in (at, qr, kr, qn, kn, qview, kview, vview, gview):
            g.remove_op(o.name)
        add_op(g, Op(name, "GatedAttentionBlock", (bq, qr.inputs[1]), (out,), params, attrs, dict(at.states), at.layer))
        remove_dead_ops(g)
    return mark(g, "FuseGatedAttention")
