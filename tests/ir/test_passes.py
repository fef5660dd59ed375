"""IR passes: Before/After structure (networkx isomorphism with op-kind match), numerics preserved,
no-op when a pattern is absent, memory plan sound."""

import networkx as nx
import pytest

from ninferc.ir.graph import Graph, Op, ParamSpec, TensorSpec
from ninferc.ir.ops import infer
from ninferc.ir.passes import (
    PIPELINE, choose_formats, fuse_add_rmsnorm, fuse_gate_up_swiglu, fuse_gated_attention, fuse_gated_deltanet,
    fuse_sibling_linears, plan_memory, run_pipeline, validate_shapes,
)
from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.reference import ReferenceExecutor
from ninferc.ir.tolerances import FP32_REORDER
from ninferc.ir.weights import GraphWeights


def _same_structure(a: Graph, b: Graph) -> bool:
    return nx.is_isomorphic(a.g, b.g, node_match=lambda x, y: x["op"].kind == y["op"].kind)


def _add(g, name, kind, inputs, params=None, attrs=None, n_out=1):
    outs = tuple([name] if n_out == 1 else [f"{name}.{i}" for i in range(n_out)])
    op = Op(name, kind, tuple(inputs), outs, params or {}, attrs or {})
    g.add_op(op, [TensorSpec(n, s, d) for n, (s, d) in zip(outs, infer(g, op))])
    return outs[0] if n_out == 1 else outs


def _tiny_block(residual_add=True):
    """x -> Linear -> (ResidualAdd x) -> RMSNorm -> Linear: the smallest add+norm pattern."""
    g = Graph()
    for n, s in [("w1", (8, 8)), ("w2", (8, 8)), ("n", (8,))]:
        g.add_param(ParamSpec(n, s))
    x = g.add_input(TensorSpec("x", ("T", 8), "f32"))
    h = _add(g, "lin1", "Linear", [x], {"weight": "w1"})
    if residual_add:
        h = _add(g, "add", "ResidualAdd", [x, h])
    y = _add(g, "norm", "RMSNorm", [h], {"weight": "n"}, {"eps": 1e-6, "unit_offset": True})
    g.outputs = (_add(g, "lin2", "Linear", [y], {"weight": "w2"}),)
    return g


def test_fuse_add_rmsnorm_before_after():
    before = _tiny_block()
    after = fuse_add_rmsnorm(before)
    expected = Graph()
    for n, s in [("w1", (8, 8)), ("w2", (8, 8)), ("n", (8,))]:
        expected.add_param(ParamSpec(n, s))
    x = expected.add_input(TensorSpec("x", ("T", 8), "f32"))
    h = _add(expected, "lin1", "Linear", [x], {"weight": "w1"})
    _, y = _add(expected, "norm", "AddRMSNorm", [x, h], {"weight": "n"}, {"eps": 1e-6, "unit_offset": True}, n_out=2)
    _add(expected, "lin2", "Linear", [y], {"weight": "w2"})
    assert _same_structure(after, expected)
    assert not _same_structure(before, expected)
    assert after.count_ops() == {"AddRMSNorm": 1, "Linear": 2}
    validate_shapes(after)


def test_fuse_add_rmsnorm_noop_without_pattern():
    g = _tiny_block(residual_add=False)
    out = fuse_add_rmsnorm(g)
    assert _same_structure(out, g) and out.count_ops() == g.count_ops()
    assert out.meta["passes"] == ["FuseAddRMSNorm"]


@pytest.mark.parametrize("fn", [fuse_gate_up_swiglu, fuse_sibling_linears, fuse_gated_deltanet, fuse_gated_attention])
def test_fusions_noop_on_graph_without_pattern(fn):
    g = _tiny_block()
    out = fn(g)
    assert _same_structure(out, g)


def test_pipeline_op_counts_27b():
    from ninferc.ir.config import preset

    g = run_pipeline(build_graph(preset("qwen3.8-27b")))
    # per layer: mixer in-proj, mixer out-proj, gate|up, down = 4 Linears; mixers fused to one op each
    assert g.count_ops() == {"AddRMSNorm": 130, "Embedding": 1, "GatedAttentionBlock": 16, "GatedDeltaNet": 49,
                             "LMHead": 1, "Linear": 260, "RMSNorm": 1}
    fused = g.params["L0.gdn.in_qkv_in_z_in_b_in_a"]
    assert fused.shape == (2 * 2048 + 6144 + 6144 + 48 + 48, 5120)
    assert [p.name for p in fused.parts] == ["L0.gdn.in_qkv", "L0.gdn.in_z", "L0.gdn.in_b", "L0.gdn.in_a"]
    assert g.params["L3.attn.q_k_v"].shape == (24 * 512 + 2 * 1024, 5120)
    assert g.params["L3.mlp.gate_up"].shape == (2 * 17408, 5120)
    assert g.params["L0.gdn.conv"].dtype == "f32" and g.params["L3.attn.q_k_v"].dtype == "bf16"
    # every GEMM input is bf16, every other activation fp32
    for op in g.ops():
        if op.kind in ("Linear", "LMHead"):
            assert g.tensors[op.inputs[0]].dtype == "bf16", op.name


def test_each_pass_preserves_logits(tiny_ckpt, goldens):
    """Running the graph after every pass gives the same logits as the unfused graph (fp32)."""
    ids = goldens["cases"][0]["prompt_ids"] + goldens["cases"][0]["greedy_ids"][:20]
    g = build_graph(tiny_ckpt.config)
    ref = ReferenceExecutor(g, tiny_ckpt).forward(ids, ReferenceExecutor(g, tiny_ckpt).new_state())
    for fn in (fuse_gate_up_swiglu, fuse_sibling_linears, fuse_gated_deltanet, fuse_gated_attention,
               fuse_add_rmsnorm, choose_formats, plan_memory):
        g = fn(g)
        ex = ReferenceExecutor(g, GraphWeights(g, tiny_ckpt))
        FP32_REORDER.check(ex.forward(ids, ex.new_state()), ref, f"after {g.meta['passes'][-1]}")


def test_memory_plan_sound(tiny_ckpt):
    g = run_pipeline(build_graph(tiny_ckpt.config))
    mem = g.meta["memory"]
    ops = list(g.ops())
    idx = {op.name: i for i, op in enumerate(ops)}
    root = lambda t: mem["aliases"].get(t, t)  # noqa: E731
    span = {}
    for op in ops:
        for t in op.outputs + op.inputs:
            r = root(t)
            if r in mem["tensors"]:
                lo, hi = span.get(r, (10 ** 9, -1))
                span[r] = (min(lo, idx[op.name]), max(hi, idx[op.name]))
    items = list(mem["tensors"].items())
    for i, (a, pa) in enumerate(items):
        assert pa["offset_per_token"] % 256 == 0
        assert pa["offset_per_token"] + pa["row_bytes"] <= mem["arena_bytes_per_token"]
        for b, pb in items[i + 1:]:
            live_overlap = not (span[a][1] < span[b][0] or span[b][1] < span[a][0])
            mem_overlap = not (pa["offset_per_token"] + pa["row_bytes"] <= pb["offset_per_token"]
                               or pb["offset_per_token"] + pb["row_bytes"] <= pa["offset_per_token"])
            assert not (live_overlap and mem_overlap), (a, b)
    # the residual stream is updated in place by every AddRMSNorm
    for op in ops:
        if op.kind == "AddRMSNorm":
            assert root(op.outputs[0]) == root(op.inputs[0])
    assert g.meta["state"]["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2


def test_dump_ir_writes_every_pass(tmp_path, tiny_ckpt):
    run_pipeline(build_graph(tiny_ckpt.config), dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.glob("*.txt"))
    assert names[0] == "00-input.txt" and len(names) == len(PIPELINE) + 1
    assert "GatedDeltaNet" in (tmp_path / names[-1]).read_text()
