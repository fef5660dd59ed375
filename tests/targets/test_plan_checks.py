"""Plan-time launch checks: each violation raises PlanError naming kernel, target, value and limit."""

import dataclasses

import pytest

from ninferc.errors import PlanError
from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem, GemvTuning
from ninferc.targets.cubin import KernelResources
from ninferc.ir.config import ModelConfig
from ninferc.ir.passes import run_pipeline
from ninferc.ir.qwen3_5 import build_graph
from ninferc.targets import model_plan
from ninferc.targets.model_plan import plan_model
from ninferc.targets.plan import PlanContext, check_launch

OK = KernelResources(registers=64, static_smem_bytes=0, local_bytes=0, max_threads=256, uses_grid_sync=False,
                     barriers=1)
PROB = GemvProblem(5120, 5120, "residual_add")


@pytest.fixture
def gemv():
    """The gemv family with bf16 on fp32 FMAs at every token tile: these checks build cooperative and plain specs at
    the default (largest) tile, which the registered family runs on tensor cores, plain only, for bf16."""
    return GemvFamily(GemvTuning(bf16_mma_tiles=()))


def ctx_for(gemv, arch="sm_89", sms=92, res=OK):
    return PlanContext(arch, sms, {s.uri: res for s in gemv.variants(PROB)})


def expect(launch, arch, res, *needles):
    with pytest.raises(PlanError) as e:
        check_launch(launch, arch, res)
    msg = str(e.value)
    for n in (launch.kernel.uri, arch, *map(str, needles)):
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


def test_valid_launch_passes(gemv):
    ctx = ctx_for(gemv)
    check_launch(gemv.launch(PROB, 1, ctx), "sm_89", OK)


def test_cooperative_grid_over_cap(gemv):
    ctx = ctx_for(gemv)
    spec = gemv.spec(PROB, 256, "coop")
    cap = ctx.cap(spec)
    ln = ctx.make_launch(spec, cap + 1, route="coop_splitk", tokens=1, split_k=2)
    expect(ln, "sm_89", OK, cap + 1, cap, "cooperative cap")


def test_grid_y_over_65535(gemv):
    ctx = ctx_for(gemv)
    ln = ctx.make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), (4, 70000, 1), route="plain", tokens=1)
    expect(ln, "sm_89", OK, 70000, 65535, "fold it onto x")


def test_grid_z_over_65535(gemv):
    ctx = ctx_for(gemv)
    ln = ctx.make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), (1, 1, 65536), route="plain", tokens=1)
    expect(ln, "sm_89", OK, 65536, 65535)


def test_static_smem_over_48k(gemv):
    res = dataclasses.replace(OK, static_smem_bytes=49 * 1024)
    ln = ctx_for(gemv).make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), 8, route="plain", tokens=1)
    expect(ln, "sm_89", res, 49 * 1024, 48 * 1024)


def test_dynamic_smem_over_optin(gemv):
    # e.g. a split-KV combine whose shared memory grows with max context
    ctx = ctx_for(gemv, "sm_86", 82)
    ln = ctx.make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), 8, route="plain", tokens=1)
    ln = dataclasses.replace(ln, dynamic_smem_bytes=128 * 1024)
    expect(ln, "sm_86", OK, 128 * 1024, 99 * 1024, "opt-in")


def test_block_over_1024(gemv):
    ln = ctx_for(gemv).make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), 8, route="plain", tokens=1)
    ln = dataclasses.replace(ln, block=(2048, 1, 1))
    expect(ln, "sm_89", dataclasses.replace(OK, max_threads=None), 2048, 1024)


def test_block_over_launch_bounds(gemv):
    ln = ctx_for(gemv).make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), 8, route="plain", tokens=1)
    ln = dataclasses.replace(ln, block=(512, 1, 1))
    expect(ln, "sm_89", OK, 512, 256, "launch bounds")


def test_zero_resident_ctas(gemv):
    res = dataclasses.replace(OK, registers=255, max_threads=None)
    ctx = PlanContext("sm_90", 132, {s.uri: res for s in gemv.variants(PROB)})
    ln = ctx.make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), 8, route="plain", tokens=1)
    ln = dataclasses.replace(ln, block=(1024, 1, 1))
    expect(ln, "sm_90", res, "0 resident CTAs", "registers", 255, "at least 1")


def test_barrier_kernel_must_launch_cooperatively(gemv):
    ln = ctx_for(gemv).make_launch(gemv.spec(PROB, 256, "coop"), 8, route="coop_splitk", tokens=1)
    expect(dataclasses.replace(ln, cooperative=False), "sm_89", OK, "not cooperative")


def test_stale_occupancy_is_caught(gemv):
    ln = ctx_for(gemv).make_launch(gemv.spec(PROB, 256, "plain", k_warps=2), 8, route="plain", tokens=1)
    expect(ln, "sm_89", dataclasses.replace(OK, registers=128), "assumes 4", "give 2")


def test_plan_model_argument_errors(monkeypatch, tiny_dir):
    """The product's plan (:func:`plan_model`) refuses a missing or contradicting SM count, non-positive token
    counts and two steps of one name, before any kernel is compiled."""
    graph = run_pipeline(build_graph(ModelConfig.from_dir(tiny_dir), lm_rows="last"))
    with pytest.raises(PlanError, match="give a SKU or an SM count"):
        plan_model(graph, "sm_89")
    with pytest.raises(PlanError, match="contradicts SKU"):
        plan_model(graph, "sm_89", sms=100, sku="l20")
    with pytest.raises(PlanError, match="prefill token counts must be positive"):
        plan_model(graph, "sm_89", sms=92, prefill_tokens=(0,))
    with pytest.raises(PlanError, match="decode batches must be positive"):
        plan_model(graph, "sm_89", sms=92, decode_batches=())
    lower = model_plan.lower

    def lower_twice(*args, **kw):  # a lowering that named two steps alike
        program = lower(*args, **kw)
        program.steps.append(program.steps[0])
        return program

    monkeypatch.setattr(model_plan, "lower", lower_twice)
    with pytest.raises(PlanError, match="duplicate step names"):
        plan_model(graph, "sm_89", sms=92)
