"""Lowering: every kernel argument of every launch the runtime can make is bound (ABI completeness),
for both modes, several T, and all four targets — checked on the CPU before any GPU run."""

import pytest

from ninferc.ir.config import ModelConfig, preset
from ninferc.testing import ARCH_SKUS
from ninferc.ir.passes import run_pipeline
from ninferc.ir.qwen3_5 import build_graph
from ninferc.targets.lower import arg_names, launch_scalars
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
            [("prefill", 200, 2, 2)]
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
    assert {"embed", "rmsnorm", "gemv_coop", "gemm", "gdn_recurrent", "gdn_conv", "gdn_ring_update", "attn_prep",
            "attn_decode", "attn_combine", "attn_prefill"} <= seen


def test_linear_route_boundary(tiny_dir):
    """A Linear uses the GEMV up to GEMV_MAX_TOKENS and the GEMM above, at exactly that boundary."""
    from ninferc.targets.lower import GEMV_MAX_TOKENS

    g = run_pipeline(build_graph(ModelConfig.from_dir(tiny_dir), lm_rows="last"))
    mp = plan_model(g, "sm_89", sku="l20", decode_batches=(1,), prefill_tokens=(GEMV_MAX_TOKENS, GEMV_MAX_TOKENS + 1))
    lns = mp.launches[("L0.mlp.gate_up", "prefill")]
    assert [ln.kernel.family for ln in lns] == ["gemv_coop", "gemm"]


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
