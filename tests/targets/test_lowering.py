"""Lowering: every kernel argument of every launch the runtime can make is bound (ABI completeness),
for both modes, several T, and all four targets — checked on the CPU before any GPU run."""

import pytest

from ninferc.ir.config import ModelConfig, preset
from ninferc.testing import ARCH_SKUS
from ninferc.ir.passes import run_pipeline
from ninferc.ir.qwen3_5 import build_graph
from ninferc.targets.lower import Ref, arg_names, launch_scalars
from ninferc.targets.model_plan import plan_model, plan_steps


pytestmark = pytest.mark.slow  # seconds each on 2 cores: `pytest -m "not slow"` skips them


@pytest.fixture(scope="module", params=["tiny", "27b"])
def graph(request, tiny_dir):
    cfg = ModelConfig.from_dir(tiny_dir) if request.param == "tiny" else preset("qwen3.8-27b")
    return run_pipeline(build_graph(cfg, lm_rows="last"))


@pytest.mark.parametrize("arch,sku", list(ARCH_SKUS.items()))
def test_every_argument_bound(graph, arch, sku):
    mp = plan_model(graph, arch, sku=sku, decode_batches=(1, 3), prefill_tokens=(1, 5, 64, 200))
    ctx = mp.context()
    cases = [("decode", b, b, b) for b in (1, 3)] + [("prefill", t, 1, 1) for t in (1, 5, 64, 200)] + \
            [("prefill", 200, 2, 2)] + [("verify", b * 4, b, b * 4) for b in (1, 3)]
    seen = set()
    for mode, T, B, R in cases:
        for step, ln in plan_steps(mp.program, ctx, T=T, B=B, R=R, mode=mode):
            scal = launch_scalars(step, ln, ctx, B)
            missing = [n for n in arg_names(step, ln) if n not in scal and n not in step.bind]
            assert not missing, f"{step.name} {ln.kernel.uri}: unbound {missing}"
            seen.add(ln.kernel.family)
    for greedy in (True, False):
        s = mp.program.sampler(greedy)
        from ninferc.targets.lower import step_launch
        ln = step_launch(s, ctx, T=2, B=2, R=2)
        assert not [n for n in arg_names(s, ln) if n not in launch_scalars(s, ln, ctx, 2) and n not in s.bind]
    assert {"embed", "rmsnorm", "gemv", "gemm", "gdn_recurrent", "gdn_conv", "gdn_ring_update", "attn_prep",
            "attn_decode", "attn_combine", "attn_prefill"} <= seen


def test_linear_route_boundary(tiny_dir):
    """A Linear uses the GEMV up to GEMV_MAX_TOKENS and the GEMM above, at exactly that boundary."""
    from ninferc.targets.lower import GEMV_MAX_TOKENS

    g = run_pipeline(build_graph(ModelConfig.from_dir(tiny_dir), lm_rows="last"))
    mp = plan_model(g, "sm_89", sku="l20", decode_batches=(1,), prefill_tokens=(GEMV_MAX_TOKENS, GEMV_MAX_TOKENS + 1))
    lns = mp.launches[("L0.mlp.gate_up", "prefill")]
    assert [ln.kernel.family for ln in lns] == ["gemv", "gemm"]


@pytest.mark.parametrize("arch,sku", [("sm_90", "h200"), ("sm_89", "l20")])
def test_folded_attn_prep_lowering(graph, arch, sku):
    """``AttnDecodeFamily.fuse_prep``: attn_prep becomes a prefill-only step, the decode step's attn_decode takes
    proj / q_norm_w / k_norm_w / inv_freq / eps (all bound) instead of q, and it is the staged kernel on every target
    (the folded prep writes the new row into the staged tile); with int8 KV the plan refuses it, naming why. "auto"
    is the default."""
    import dataclasses

    from ninferc.errors import PlanError
    from ninferc.targets.kernels import FAMILIES

    fam = FAMILIES["attn_decode"]
    assert fam.fuse_prep == "auto"
    try:
        mp = plan_model(graph, arch, sku=sku, decode_batches=(1,), prefill_tokens=(64,))
        ctx = mp.context()
        dec = [ln for step, ln in plan_steps(mp.program, ctx, T=1, B=1, R=1, mode="decode")
               if ln.kernel.family in ("attn_prep", "attn_decode")]
        staged = any("stage" in dict(ln.kernel.params) for ln in dec)
        # "auto": fused exactly where the staged bf16 kernel is chosen (sm_90; the tiny shape everywhere)
        assert ("attn_prep" in [ln.kernel.family for ln in dec]) == (not staged), dec
        assert all(bool(dict(ln.kernel.params).get("prep")) == staged for ln in dec if ln.kernel.family == "attn_decode")
        fam.fuse_prep = True
        mp = plan_model(graph, arch, sku=sku, decode_batches=(1, 3), prefill_tokens=(1, 64))
        ctx = mp.context()
        for mode, T, B in (("decode", 1, 1), ("decode", 3, 3), ("prefill", 64, 1)):
            steps = list(plan_steps(mp.program, ctx, T=T, B=B, R=B, mode=mode))
            fams = [ln.kernel.family for _, ln in steps]
            assert ("attn_prep" in fams) == (mode == "prefill"), (mode, fams)
            for step, ln in steps:
                missing = [n for n in arg_names(step, ln) if n not in launch_scalars(step, ln, ctx, B)
                           and n not in step.bind]
                assert not missing, f"{step.name} {ln.kernel.uri}: unbound {missing}"
                if ln.kernel.family == "attn_decode":
                    assert dict(ln.kernel.params).get("prep") and dict(ln.kernel.params).get("stage"), ln.kernel.uri
                    assert "q" not in arg_names(step, ln) and "proj" in arg_names(step, ln)
        p = next(s.problem for s in mp.program.steps if s.family == "attn_decode")
        with pytest.raises(PlanError, match="fuse_prep cannot take int8 KV pages"):
            fam.spec(dataclasses.replace(p, kv_dtype="int8"), True)
        with pytest.raises(PlanError, match="fuse_prep cannot take the global-memory kernel"):
            fam.spec(p, False)
    finally:
        fam.fuse_prep = "auto"


@pytest.mark.parametrize("arch,sku", list(ARCH_SKUS.items()))
def test_verify_mode_keeps_the_gdn_state_after_every_token(graph, arch, sku):
    """The speculative verify step (B sequences x K + 1 tokens, every token's logits): the prefill program with each
    GDN layer's conv, ring update and core replaced by the verify kernels (the conv with its per-token rings ->
    recurrent verify, bound to seq_slot_out -> the gated norm exactly where the core splits the columns) and each attention layer's attn_prefill by split-KV rows, one per token (prep -> attn_decode
    without the folded prep, over the per-token tok_pages / tok_ctx -> attn_combine at the same split count), no
    other prefill step left out, every launch checked on the target."""
    mp = plan_model(graph, arch, sku=sku, decode_batches=(1,), prefill_tokens=(8,))
    prog = mp.program
    verify, prefill = prog.for_mode("verify"), prog.for_mode("prefill")
    assert {s.name for s in prefill} - {s.name for s in verify} == {s.name for s in prefill if s.prefill_only}
    gdn_layers = {s.op for s in prog.steps if s.family == "gdn_conv"}
    attn_layers = {s.op for s in prog.steps if s.family == "attn_prefill"}
    assert gdn_layers and attn_layers
    assert {s.op for s in prog.steps if s.prefill_only} == gdn_layers | attn_layers
    for op in gdn_layers:
        names = [s.name for s in verify if s.op == op]
        assert names == [f"{op}.conv_verify", f"{op}.verify", f"{op}.verify_norm"]
    for op in attn_layers:
        names = [s.name for s in verify if s.op == op]
        assert names == [f"{op}.prep", f"{op}.verify", f"{op}.verify_combine"]
    for B, K in ((1, 3), (4, 5)):
        T = B * (K + 1)
        launches = plan_steps(prog, mp.context(), T=T, B=B, R=T, mode="verify")
        gdn = [(s, ln) for s, ln in launches if s.family in ("gdn_verify", "gdn_conv_verify")]
        assert len(gdn) == 2 * len(gdn_layers)
        for s, ln in gdn:
            assert "seq_slot_out" in arg_names(s, ln) and s.bind["seq_slot_out"].name == "seq_slot_out"
            assert ln.grid[1] == B and ln.route in ("verify", "verify_split", "conv_verify")
        # the gated norm runs exactly after the verify cores that split the columns (o to the workspace, bound)
        by_name = {s.name: (s, ln) for s, ln in launches}
        for op in gdn_layers:
            sc, core = by_name[f"{op}.verify"]
            assert (f"{op}.verify_norm" in by_name) == (core.route == "verify_split"), (op, core.route)
            if core.route == "verify_split":
                assert core.workspace_bytes == 4 * T * core.kernel.param("hv") * core.kernel.param("dv")
                assert sc.bind["o_ws"].name == "gdn_o" and "o_ws" in arg_names(sc, core)
                assert by_name[f"{op}.verify_norm"][1].kernel.family == "gdn_gated_norm"
        attn = {s.name: (s, ln) for s, ln in launches if s.op in attn_layers}
        assert len(attn) == 3 * len(attn_layers)  # the prep is never dropped: no verify kernel folds it
        for op in attn_layers:
            (sd, dec), (_, comb) = attn[f"{op}.verify"], attn[f"{op}.verify_combine"]
            assert dec.kernel.family == "attn_decode" and not dict(dec.kernel.params).get("prep")
            assert dec.grid[2] == T and comb.grid[1] == T and comb.split_k == dec.split_k == dec.grid[0]
            assert "q" in arg_names(sd, dec) and sd.bind["q"].name == "attn_q"
            assert (sd.bind["page_table"].name, sd.bind["seq_ctx"].name) == ("tok_pages", "tok_ctx")
        head = [ln for s, ln in launches if s.rows == "R"]
        assert head and all(ln.tokens == T for ln in head)  # every token's logits


@pytest.mark.parametrize("arch,sku", list(ARCH_SKUS.items()))
def test_mtp_head_lowers_and_plans(tiny_dir, arch, sku):
    """The MTP head's graph (the model's passes) lowers to kernels the artifact compiles: its Concat is the two input
    norms writing the halves of one bf16 row (no kernel of its own), the hidden-side norm reads the model's bf16
    final-norm rows gathered by ``hidden_rows``, and every argument of its decode / prefill launches is bound."""
    from ninferc.ir.qwen3_5 import build_mtp_graph
    from ninferc.targets.lower import MTP_HIDDEN_SRC, lower, step_launch

    cfg = ModelConfig.from_dir(tiny_dir)
    H = cfg.hidden_size
    mg = run_pipeline(build_mtp_graph(cfg, lm_rows="last"))
    mp = plan_model(mg, arch, sku=sku, decode_batches=(1, 4), prefill_tokens=(1, 9))
    steps = {s.name: s for s in mp.program.steps}
    assert "mtp.concat" not in steps
    emb, hid = steps["mtp.pre_fc_norm_embedding"], steps["mtp.pre_fc_norm_hidden"]
    assert emb.problem.ld_out == hid.problem.ld_out == 2 * H
    assert (emb.bind["y"].name, emb.bind["y"].offset) == ("mtp.concat", 0)
    assert (hid.bind["y"].name, hid.bind["y"].offset) == ("mtp.concat", 2 * H)  # bytes: bf16 columns
    assert hid.problem.x_dtype == "bf16" and hid.problem.gather and hid.rows == "T"
    assert hid.bind["x"].name == "hidden" and hid.bind["row_index"].name == "hidden_rows"
    ctx = mp.context()
    for mode, T, B, R in (("decode", 4, 4, 4), ("prefill", 9, 2, 2), ("prefill", 3, 1, 1)):
        for step, ln in plan_steps(mp.program, ctx, T=T, B=B, R=R, mode=mode):
            scal = launch_scalars(step, ln, ctx, B)
            assert not [n for n in arg_names(step, ln) if n not in scal and n not in step.bind], step.name
    ln = step_launch(hid, ctx, T=9, B=2, R=2)
    assert ln.tokens == 9  # every MTP row reads its hidden row
    # the model's program for a speculating engine stores every token's final-norm row, in every mode (decode too:
    # a speculating server's steps past --spec-disable-by-batch-size keep the head's rows); a plain engine's does not
    prog = lower(run_pipeline(build_graph(cfg, lm_rows="last")), mtp_hidden=True)
    extra = [s for s in prog.steps if s.bind.get("y") == Ref("tensor", MTP_HIDDEN_SRC)]
    assert len(extra) == 1 and extra[0].rows == "T" and not extra[0].problem.gather
    assert all(extra[0] in prog.for_mode(m) for m in ("prefill", "verify", "decode"))
    plain = lower(run_pipeline(build_graph(cfg, lm_rows="last")))
    assert not [s for s in plain.steps if s.bind.get("y") == Ref("tensor", MTP_HIDDEN_SRC)]


def test_plan_verify_steps_bounds(graph):
    """``plan_model(draft_tokens=K)`` takes K in 0..MAX_DRAFT_TOKENS (the server's range) and names the value."""
    from ninferc.errors import PlanError

    for k in (-1, 6):
        with pytest.raises(PlanError, match=rf"draft_tokens = {k} must be in 0\.\.5"):
            plan_model(graph, "sm_90", sms=132, decode_batches=(1,), prefill_tokens=(1,), draft_tokens=k)
