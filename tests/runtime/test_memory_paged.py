"""CPU tests of the runtime's host-side bookkeeping: the memory plan's error and the page/slot pools."""

import pytest

from ninferc.errors import NinfercError, RuntimeMemoryError
from ninferc.runtime.memory import MemoryPlan
from ninferc.runtime.paged_kv import PagePool, PoolExhausted, Sequence, SlotPool


def test_memory_plan_error_lists_every_term_in_bytes():
    mp = MemoryPlan()
    for name, n in [("weights", 54_558_543_296), ("kv_pages", 1 << 30), ("gdn_state", 160_161_792),
                    ("activations", 960_000_000), ("workspace", 500_000_000), ("graph_allowance", 64 << 20)]:
        mp.add(name, n)
    mp.check(mp.total)  # exactly fits
    with pytest.raises(RuntimeMemoryError) as e:
        mp.check(mp.total - 1, device="GPU 0")
    msg = str(e.value)
    assert f"needs {mp.total:,} bytes" in msg and "short by 1 bytes" in msg and "GPU 0" in msg
    for name, n in mp.terms.items():
        assert name in msg and f"{n:,} B" in msg


def test_pages_and_slots():
    pool = PagePool(4, 64)
    s = Sequence(slot=SlotPool(1).take())
    s.ensure_capacity(65, pool, max_pages=3)
    assert s.pages == [0, 1] and pool.free == 2
    with pytest.raises(NinfercError, match="exceeds the max context 192"):
        s.ensure_capacity(193, pool, max_pages=3)
    s.ensure_capacity(192, pool, max_pages=3)
    with pytest.raises(PoolExhausted, match="2 pages requested, 1 of 4 free"):
        Sequence(slot=0).ensure_capacity(65, pool, max_pages=3)
    slots = SlotPool(1)
    slots.take()
    with pytest.raises(PoolExhausted, match="all 1 in use"):
        slots.take()


def test_workspace_sizes_cover_every_launch_that_needs_one():
    """Every launch the engine can make fits the workspace it is bound to. The GDN split route's ``o_ws`` (the
    chunk kernel's family is ``gdn_chunk``) was once sized by a family name no launch carries, so it stayed at
    256 B and the kernel wrote past it; the sizing now refuses any family it does not know."""
    from ninferc.checkpoint import Checkpoint
    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.runtime.memory import workspace_of, workspace_sizes
    from ninferc.targets.lower import step_launch
    from ninferc.targets.model_plan import plan_model
    from ninferc.testing import models_dir

    g = run_pipeline(build_graph(Checkpoint(models_dir() / "qwen35-tiny-code").config, lm_rows="last"))
    mp = plan_model(g, "sm_90", sku="h200", decode_batches=(1,), prefill_tokens=(64,))
    ctx, prog = mp.context(), mp.program
    sizes = workspace_sizes(prog, ctx, t_cap=1024, max_batch=4)
    seen = set()
    for mode, T, B in [("prefill", 1024, 1), ("prefill", 3, 1), ("prefill", 700, 2), ("decode", 4, 4), ("decode", 1, 1)]:
        for s in prog.for_mode(mode):
            ln = step_launch(s, ctx, T=T, B=B, R=B)
            if ln.workspace_bytes:
                name = workspace_of(ln)
                assert ln.workspace_bytes <= sizes[name], (s.name, ln.kernel.uri, ln.workspace_bytes, sizes[name])
                seen.add(name)
    # the tiny fixture's GDN core takes the split route (16-column blocks), so its o_ws is exercised; the
    # decode GEMVs that fold a norm write its parts to norm_ss
    assert {"norm_ss", "gdn_conv_out", "gdn_o", "attn_partials"} <= seen
    assert sizes["gdn_o"] >= 4 * 1024 * 6 * 64


def test_workspace_sizes_cover_every_batch_size_and_verify_step():
    """Every decode step of 1 .. max_batch sequences and every verify step (B sequences, B .. B x (K + 1) tokens), of
    the model and of the MTP head, fits the workspaces the engine allocates. On the H100 on 2026-12-05 the fixture
    served at 8 slots wrote past ``attn_partials`` (an illegal address with 8 concurrent streams): the attention's
    split count is chosen per batch size to fill the 132 SMs, so B = 5 needs more partials than B = 8, and the
    sizing had looked at B = 1 and 8 only."""
    from ninferc.checkpoint import Checkpoint
    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph, build_mtp_graph
    from ninferc.runtime.memory import engine_workspace_sizes, workspace_of
    from ninferc.targets.lower import lower, step_launch
    from ninferc.targets.model_plan import plan_model
    from ninferc.targets.plan import PlanContext
    from ninferc.testing import models_dir

    cfg = Checkpoint(models_dir() / "qwen35-tiny-code").config
    mb, k = 8, 3
    progs, res = [], {}  # the model's and the MTP head's programs; their kernels' resources in one context
    for g, hidden in ((run_pipeline(build_graph(cfg, lm_rows="last")), True),
                      (run_pipeline(build_mtp_graph(cfg)), False)):
        res.update(plan_model(g, "sm_90", sku="h200", decode_batches=(1,), prefill_tokens=(64,)).context().resources)
        progs.append(lower(g, page_size=64, max_context=4096, mtp_hidden=hidden))
    ctx = PlanContext("sm_90", 132, res)
    sizes = engine_workspace_sizes(progs[0], progs[1], ctx, t_cap=1024, max_batch=mb, spec_tokens=k)
    cases = [("decode", b, b) for b in range(1, mb + 1)]
    cases += [("verify", t, b) for b in range(1, mb + 1) for t in range(b, b * (k + 1) + 1)]
    partials = {}
    for prog in progs:
        for mode, T, B in cases:  # noqa: N806
            for s in prog.for_mode(mode):
                ln = step_launch(s, ctx, T=T, B=B, R=T)
                if ln.workspace_bytes:
                    name = workspace_of(ln)
                    assert ln.workspace_bytes <= sizes[name], (mode, T, B, s.name, ln.workspace_bytes, sizes[name])
                    if name == "attn_partials" and mode == "decode":
                        partials[B] = max(partials.get(B, 0), ln.workspace_bytes)
    assert set(partials) == set(range(1, mb + 1))  # the decode attention's partials were checked at every B
