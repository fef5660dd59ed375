"""The AddRMSNorm folded into the GEMVs on either side of it (decode-size steps): which norms fold, where their
output lives in the arena (apart from the producer's input, which the producer is still reading while it writes
it), how the two Linears are lowered and bound, when the norm step is skipped, and that a graph whose memory
plan does not keep the two apart is lowered unfused."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from ninferc.errors import PlanError
from ninferc.ir.config import ModelConfig
from ninferc.ir.passes import run_pipeline
from ninferc.ir.passes.common import norms_between_linears
from ninferc.ir.qwen3_5 import build_graph
from ninferc.targets.lower import drop_unneeded_steps, linear_problem, lower
from ninferc.targets.model_plan import plan_model, plan_steps

plan_memory_mod = importlib.import_module("ninferc.ir.passes.plan_memory")  # the module (the package exports the pass)


@pytest.fixture(scope="module")
def cfg(tiny_dir):
    return ModelConfig.from_dir(tiny_dir)


@pytest.fixture(scope="module")
def graph(cfg):
    return run_pipeline(build_graph(cfg, lm_rows="last"))


def _span(graph, t):
    mem = graph.meta["memory"]
    p = mem["tensors"][mem["aliases"].get(t, t)]
    return p["offset_per_token"], p["offset_per_token"] + p["row_bytes"]


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_the_norms_between_linears(graph, cfg):
    """Every AddRMSNorm but the final one (whose output is gathered for the LM head): the post-mixer norms of every
    layer and the input norms of layers 1..L-1; producers are the out / down projections, consumers the MLP and
    mixer input projections."""
    found = norms_between_linears(graph)
    n = cfg.num_hidden_layers
    assert len(found) == 2 * n - 1
    for norm, (prod, cons) in found.items():
        assert graph.op(norm).kind == "AddRMSNorm"
        assert prod.endswith(("mlp.down", "gdn.out", "attn.o")), prod
        assert cons.endswith(("mlp.gate_up", "attn.q_k_v")) or ".gdn.in_" in cons, cons
    assert not any(graph.op(n_).outputs[-1] in {op.inputs[0] for op in graph.ops() if op.kind == "LMHead"}
                   for n_ in found)


def test_the_folded_norm_output_never_overlaps_the_producer_input(graph):
    for norm, (prod, _) in norms_between_linears(graph).items():
        assert not _overlap(_span(graph, graph.op(norm).outputs[-1]), _span(graph, graph.op(prod).inputs[0])), norm


def test_without_early_placement_the_arena_would_overlap_and_lowering_keeps_the_norm(cfg, monkeypatch):
    """The hazard the early placement removes is real: planned as an output of the norm (born at the norm), some
    folded norm's output shares storage with its producer's input -- and lower() then keeps that norm unfused."""
    monkeypatch.setattr(plan_memory_mod, "norms_between_linears", lambda g: {})
    g = run_pipeline(build_graph(cfg, lm_rows="last"))
    clash = [n for n, (p, _) in norms_between_linears(g).items()
             if _overlap(_span(g, g.op(n).outputs[-1]), _span(g, g.op(p).inputs[0]))]
    assert clash, "expected the liveness planner to reuse a producer input's slot for some norm output"
    prog = lower(g)
    folded = {s.name for s in prog.steps if s.family == "rmsnorm" and s.absorbed_by}
    assert folded and not folded & set(clash)


def test_lowered_producer_and_consumer(graph):
    prog = lower(graph)
    steps = {s.name: s for s in prog.steps}
    for norm, (prod, cons) in norms_between_linears(graph).items():
        ns, ps, cs = steps[norm], steps[prod], steps[cons]
        assert (ns.absorbed_by, ns.absorbed_into) == (prod, cons)
        pp = linear_problem(ps.problem)  # (an MLP's down step: the down GEMV of its MlpProblem)
        assert pp.epilogue == "add_norm_parts" and pp.unit_offset == bool(graph.op(norm).attrs["unit_offset"])
        assert ps.bind["h"].name == graph.op(norm).inputs[0] and ps.bind["xs"].name == graph.op(norm).outputs[-1]
        assert ps.bind["y"].name == graph.op(prod).outputs[0]  # what the prefill GEMM stores
        assert cs.problem.in_norm == "parts" and cs.bind["ss_parts"].kind == "parts" and cs.bind["ss_parts"].name == prod
        assert cs.bind["x"].name == graph.op(norm).outputs[-1]
    # unfused: plain stores, no parts, every norm its own step
    plain = lower(graph, fuse_norm=False)
    assert not any(s.absorbed_by for s in plain.steps)
    assert not any(getattr(s.problem, "norm_out", False) or getattr(s.problem, "norm_in", False) for s in plain.steps)


def test_norm_steps_run_exactly_where_the_gemms_run(graph, cfg):
    """Decode (GEMV) steps launch only the first layer's input norm and the final norm; prefill chunks above the
    GEMV limit launch every norm; a half-folded pair is refused."""
    mp = plan_model(graph, "sm_90", sku="h200", decode_batches=(1, 4), prefill_tokens=(64,))
    ctx = mp.context()
    n = cfg.num_hidden_layers
    for b in (1, 4):
        norms = [s.name for s, _ in plan_steps(mp.program, ctx, T=b, B=b, R=b, mode="decode") if s.family == "rmsnorm"]
        assert len(norms) == 2, norms
    norms = [s for s, _ in plan_steps(mp.program, ctx, T=64, B=1, R=1, mode="prefill") if s.family == "rmsnorm"]
    assert len(norms) == 2 * n + 1
    steps = mp.program.for_mode("decode")
    launches = {s.name: ln for s, ln in plan_steps(mp.program, ctx, T=1, B=1, R=1, mode="decode")}
    gemm = plan_steps(mp.program, ctx, T=64, B=1, R=1, mode="prefill")
    gemm_ln = next(ln for s, ln in gemm if ln.kernel.family == "gemm")
    norm = next(s for s in steps if s.absorbed_by)
    launches[norm.absorbed_into] = gemm_ln  # the consumer on the GEMM, the producer on the GEMV
    launches[norm.name] = gemm_ln
    with pytest.raises(PlanError, match="must both run the GEMV"):
        drop_unneeded_steps(steps, launches)


def test_workspace_of_the_parts(graph):
    from ninferc.runtime.memory import workspace_sizes

    mp = plan_model(graph, "sm_90", sku="h200", decode_batches=(1,), prefill_tokens=(64,))
    sizes = workspace_sizes(mp.program, mp.context(), t_cap=64, max_batch=4)
    parts = [ln for s, ln in plan_steps(mp.program, mp.context(), T=4, B=4, R=4, mode="decode")
             if dataclasses.asdict(s.problem).get("epilogue") == "add_norm_parts"]
    assert parts and max(ln.workspace_bytes for ln in parts) <= sizes["norm_ss"]


def test_the_fused_mlp_route(cfg, monkeypatch):
    """With the fused decode MLP enabled (off by default: ninferc.targets.kernels.mlp_decode, "Status"), a w4 model's
    one-token step launches mlp_decode for every MLP whose down GEMV starts a folded norm and skips its gate|up
    step; a 4-sequence step and prefill keep the two GEMVs / GEMMs; the next norm's consumer reads the fused
    launch's row blocks as its parts; the workspaces cover the fused launch's partial sums and counters."""
    from ninferc.runtime.memory import workspace_sizes
    from ninferc.targets.kernels import FAMILIES

    monkeypatch.setattr(FAMILIES["mlp_decode"], "enabled", True)
    g = run_pipeline(build_graph(cfg, lm_rows="last"), weights="w4")
    mp = plan_model(g, "sm_90", sku="h200", decode_batches=(1, 4), prefill_tokens=(64,))
    ctx, n = mp.context(), cfg.num_hidden_layers
    one = plan_steps(mp.program, ctx, T=1, B=1, R=1, mode="decode")
    fused = [(s, ln) for s, ln in one if ln.kernel.family == "mlp_decode"]
    assert len(fused) == n - 1  # the last layer's down GEMV stores (the final norm is gathered for the LM head)
    names = {s.name for s, _ in one}
    for s, ln in fused:
        assert s.name.endswith("mlp.down") and s.name.replace("mlp.down", "mlp.gate_up") not in names
        assert ln.cooperative and ln.ctas <= ln.ctas_per_sm * ctx.sms
    four = plan_steps(mp.program, ctx, T=4, B=4, R=4, mode="decode")
    assert not any(ln.kernel.family == "mlp_decode" for _, ln in four)
    assert sum(s.name.endswith("mlp.gate_up") for s, _ in four) == n
    launches = {s.name: ln for s, ln in one}
    for s, _ in one:  # every in_norm consumer of a fused producer finds its parts
        ref = s.bind.get("ss_parts")
        if ref is not None and ref.kind == "parts" and launches[ref.name].kernel.family == "mlp_decode":
            assert FAMILIES["mlp_decode"].norm_parts(launches[ref.name]) > 0
    sizes = workspace_sizes(mp.program, ctx, t_cap=64, max_batch=4)
    need = FAMILIES["mlp_decode"].scratch_bytes(fused[0][0].problem)
    assert sizes["mlp_parts"] >= need["mlp_parts"] and sizes["mlp_sync"] >= need["mlp_sync"]
