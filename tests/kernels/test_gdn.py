"""GDN kernels on the CPU: the layout-level numpy reference against the reference executor, every template
compiled for the four targets with resources read and plans checked, and the kernels themselves run by the
CPU emulator (tests/kernels/cuda_host.py) against the reference on small shapes (the GPU file runs the tiny
and 27B shapes on the device)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gdn_cases as cases  # noqa: E402
from ninferc.errors import PlanError  # noqa: E402
from ninferc.ir.config import ModelConfig, preset  # noqa: E402
from ninferc.ir.tolerances import BF16_ELEMENTWISE, FP32_REORDER  # noqa: E402
from ninferc.targets.arch import ARCHS, get_arch  # noqa: E402
from ninferc.targets.kernels import gdn  # noqa: E402
from ninferc.targets.plan import PlanContext, check_launch, compile_variants  # noqa: E402

ALL_ARCHS = tuple(ARCHS)
F32 = np.float32


# ------------------------------------------------------------------------------------------------
# problem and layouts
# ------------------------------------------------------------------------------------------------


def test_problem_from_configs(tiny_dir):
    tiny = gdn.GdnProblem.from_config(ModelConfig.from_dir(tiny_dir))
    assert tiny == gdn.TINY
    big = gdn.GdnProblem.from_config(preset("qwen3.8-27b"))
    assert (big.hk, big.hv, big.dk, big.dv, big.width) == (16, 48, 128, 128, 4)
    assert big.conv_dim == 10240 and big.proj_dim == 16480 and big.group == 3
    assert big.scale == 128 ** -0.5
    # proj columns q | k | v | z | b | a tile [0, proj_dim)
    offs = [big.off_q, big.off_k, big.off_v, big.off_z, big.off_b, big.off_a, big.proj_dim]
    widths = [big.key_dim, big.key_dim, big.value_dim, big.value_dim, big.hv, big.hv]
    assert [b - a for a, b in zip(offs, offs[1:])] == widths


def test_problem_errors_name_the_value():
    with pytest.raises(PlanError, match="hv = 5 is not a multiple of hk = 2"):
        gdn.GdnProblem(hk=2, hv=5, dk=64, dv=64)
    with pytest.raises(PlanError, match="dv = 62"):
        gdn.GdnProblem(hk=2, hv=4, dk=64, dv=62)


def test_decode_one_pass_needs_a_row_group_inside_a_warp():
    """one_pass "auto" renders the one-pass kernel where dv / 4 divides 32 and the two-pass one elsewhere; a forced
    one_pass names dv; a value other than True / False / "auto" is refused."""
    wide_dv = gdn.GdnProblem(hk=1, hv=2, dk=64, dv=256, width=4)
    assert dict(gdn.GdnRecurrentFamily().spec(gdn.QWEN38_27B).params).get("onepass") is True
    assert "onepass" not in dict(gdn.GdnRecurrentFamily().spec(wide_dv).params)
    assert "onepass" not in dict(gdn.GdnRecurrentFamily(one_pass=False).spec(gdn.QWEN38_27B).params)
    with pytest.raises(PlanError, match="dv = 256"):
        gdn.GdnRecurrentFamily(one_pass=True).spec(wide_dv)
    with pytest.raises(PlanError, match="one_pass = 'yes'"):
        gdn.GdnRecurrentFamily(one_pass="yes")


@pytest.mark.parametrize("length", range(0, 9))
def test_ring_window_roundtrip(length):
    rng = np.random.default_rng(length)
    W, C = 4, 10
    win = rng.standard_normal((C, W - 1)).astype(F32)
    for d in range(W - 1):
        if length - (W - 1) + d < 0:
            win[:, d] = 0  # the executor's window holds zeros for positions < 0
    ring = gdn.ring_from_window(win, length)
    assert np.isnan(ring[length % W]).all()  # the row of position length - W is garbage
    np.testing.assert_array_equal(gdn.window_from_ring(ring, length), win)


def test_geometry_helpers():
    assert gdn.recurrent_threads(gdn.TINY) == 128 and gdn.recurrent_threads(gdn.QWEN38_27B) == 512
    assert gdn.dv_blocks(gdn.QWEN38_27B) == [128, 64, 32, 16]
    assert gdn.chunk_smem_bytes(gdn.QWEN38_27B, 64) == 93824
    assert gdn.chunk_smem_bytes(gdn.QWEN38_27B, 128) == 145024
    assert gdn.chunk_smem_bytes(gdn.QWEN38_27B, 64) <= get_arch("sm_86").max_smem_per_cta_optin
    assert gdn.chunk_smem_bytes(gdn.QWEN38_27B, 128) > get_arch("sm_120a").max_smem_per_cta_optin
    assert gdn.arg_names("gdn_recurrent", "decode")[0] == "proj"
    with pytest.raises(KeyError, match="known"):
        gdn.arg_names("nope")


# ------------------------------------------------------------------------------------------------
# the layout reference equals the reference executor (tiny checkpoint, two sequences, several steps)
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor(tiny_dir, tiny_ckpt):
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.ir.reference import ReferenceExecutor

    cfg = ModelConfig.from_dir(tiny_dir)
    return cfg, ReferenceExecutor(build_graph(cfg), tiny_ckpt)


def test_layout_reference_matches_executor(executor):
    """Two sequences stepped through prefill / decode / prefill by the executor; for two GDN layers the
    layout-level reference on packed batches (ring and slot layouts, garbage elsewhere, sequence A starting
    at position 0 over a garbage slot) reproduces y, the conv window and the recurrent state at every step,
    and the kernel-faithful ring gather (layout_conv) reproduces the conv output and ring."""
    cfg, ex = executor
    p = gdn.GdnProblem.from_config(cfg)
    rng = np.random.default_rng(7)
    layers = [i for i in cfg.gdn_layers][:2]
    weights = {i: {"conv_w": ex.w(f"L{i}.gdn.conv"), "A_log": ex.w(f"L{i}.gdn.A_log"),
                   "dt_bias": ex.w(f"L{i}.gdn.dt_bias"), "norm_w": ex.w(f"L{i}.gdn.norm")} for i in layers}
    states = [ex.new_state(), ex.new_state()]
    slots = [3, 1]
    dev = {i: cases.garbage_state(p, 4) for i in layers}
    steps = [(9, 70), (1, 1), (3, 1), (1, 66)]
    for step, lens in enumerate(steps):
        starts = [s.length for s in states]
        caps = []
        for s, n in zip(states, lens):
            caps.append(ex.forward(rng.integers(1, cfg.vocab_size, n), s, capture=True)[1])
        batch = gdn.Batch.make(starts, list(lens), slots)
        for i in layers:
            L = f"L{i}.gdn"
            proj = np.concatenate([np.concatenate([c[f"{L}.in_qkv"], c[f"{L}.in_z"], c[f"{L}.in_b"], c[f"{L}.in_a"]],
                                                  axis=1) for c in caps]).astype(F32)
            ref = gdn.reference_step(p, proj, weights[i], dev[i].conv_ring, dev[i].rec_state, batch, mode="auto")
            y_exec = np.concatenate([c[f"{L}.norm"].reshape(len(c[f"{L}.norm"]), -1) for c in caps])
            FP32_REORDER.check(ref["y"], y_exec, f"step {step} layer {i}: y")
            for b, (s, slot) in enumerate(zip(states, slots)):
                win = gdn.window_from_ring(ref["conv_ring"][slot], s.length)
                FP32_REORDER.check(win, s.conv[f"L{i}.conv"], f"step {step} layer {i} seq {b}: conv window")
                FP32_REORDER.check(ref["rec_state"][slot], s.recurrent[f"L{i}.recurrent"],
                                   f"step {step} layer {i} seq {b}: recurrent state")
            conv_out, ring = gdn.layout_conv(p, proj, weights[i]["conv_w"], dev[i].conv_ring, batch)
            FP32_REORDER.check(conv_out, ref["conv_out"], f"step {step} layer {i}: layout_conv output")
            cases.check_ring(ring, ref["conv_ring"], f"step {step} layer {i}: layout_conv ring")
            dev[i] = cases.SlotState(ref["conv_ring"], ref["rec_state"])
    assert [s.length for s in states] == [14, 138]


def test_reference_position_zero_ignores_garbage_slot():
    """A sequence starting at position 0 gives the same result over a NaN slot as over a zeroed one."""
    p = gdn.GdnProblem(hk=1, hv=2, dk=16, dv=8)
    rng = np.random.default_rng(3)
    w = cases.random_weights(p, rng)
    proj = cases.random_proj(p, 5, rng)
    batch = gdn.Batch.make([0], [5], [0])
    nan = cases.garbage_state(p, 1)
    zero = cases.SlotState(np.zeros_like(nan.conv_ring), np.zeros_like(nan.rec_state))
    a = gdn.reference_step(p, proj, w, nan.conv_ring, nan.rec_state, batch)
    b = gdn.reference_step(p, proj, w, zero.conv_ring, zero.rec_state, batch)
    np.testing.assert_array_equal(a["y"], b["y"])
    np.testing.assert_array_equal(a["rec_state"], b["rec_state"])


# ------------------------------------------------------------------------------------------------
# compile for every target, read resources, plan
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=ALL_ARCHS)
def arch_ctx(request):
    return request.param, cases.make_ctx([gdn.TINY, gdn.QWEN38_27B], request.param, sms=82)


@pytest.mark.parametrize("problem", [gdn.TINY, gdn.QWEN38_27B], ids=["tiny", "27b"])
def test_compile_resources_and_plan(arch_ctx, problem):
    arch, ctx = arch_ctx
    a = get_arch(arch)
    for fam in gdn.FAMILIES:
        for spec in fam.variants(problem):
            r = ctx.resources_of(spec)
            assert r.local_bytes == 0, f"{spec.uri} spills on {arch}: {r.local_bytes} B local"
            assert 0 < r.registers <= a.max_regs_per_thread, spec.uri
            assert r.static_smem_bytes <= a.max_static_smem_per_cta, spec.uri
            assert r.max_threads == spec.threads, spec.uri
    for T, B in [(1, 1), (3, 3), (200, 1), (1024, 4)]:
        for decode in (True, False):
            if decode and T != B:
                continue
            for route in gdn.ROUTES:
                for name, ln in gdn.layer_launches(problem, T, ctx, decode=decode, batch=B, route=route):
                    check_launch(ln, a, ctx.resources_of(ln.kernel), ctx.sms)
    core = gdn.GdnChunkFamily(route="chunked").launch(problem, 200, ctx)
    scan = gdn.GdnChunkFamily().launch(problem, 200, ctx)  # route wy
    wy = gdn.BY_NAME["gdn_chunk_wy"].launch(problem, 200, ctx, batch=2)
    assert wy.grid == (5, problem.hv, 1) and wy.route == "wy"  # (200 + 2 * 63) // 64: two sequences' chunks
    assert wy.workspace_bytes == 4 * 200 * problem.hv * (problem.dk + problem.dv + 64 + 4)
    assert wy.dynamic_smem_bytes == gdn.wy_smem_bytes(problem)
    if problem is gdn.QWEN38_27B:
        # this plan has 82 SMs: 96 CTAs of 64 columns would be two waves, so sm_90 (the only arch whose
        # shared memory holds 128 columns) takes one wave of 48 full-width CTAs (chunk_cost); the scan
        # (scan_cost) makes the same choice here
        want = ("chunked", 128) if arch == "sm_90" else ("chunked_split", 64)
        assert (core.route, core.kernel.param("dv_block")) == want
        assert core.dynamic_smem_bytes == gdn.chunk_smem_bytes(problem, want[1])
        assert core.grid == (48 * 128 // want[1], 1, 1)
        want_scan = ("wy", 128) if arch == "sm_90" else ("wy_split", 64)
        assert (scan.route, scan.kernel.param("dv_block"), scan.kernel.param("wy")) == (*want_scan, 1)
        assert scan.dynamic_smem_bytes == gdn.chunk_smem_bytes(problem, want_scan[1], wy=True)
        dec = gdn.BY_NAME["gdn_recurrent"].launch(problem, 3, ctx)
        assert dec.grid == (48, 3, 1) and dec.threads == 512
    else:  # 6 V heads of 64: 16-column blocks give 24 CTAs, each a quarter of the value-side work
        assert core.route == "chunked_split" and core.kernel.param("dv_block") == 16


def test_dv_block_follows_the_sm_count_and_the_cost_model():
    """The column block is derived from the plan's SM count (gdn.chunk_cost), not fixed per arch: on a
    78-SM sm_90 card (H20) one wave of 48 full-width CTAs beats two waves of 64-column ones; on 132 SMs
    the 96 half-width CTAs win; a 4-sequence chunk on 132 SMs still prefers 64 columns."""
    p = gdn.QWEN38_27B
    fam = gdn.GdnChunkFamily()
    assert fam.choose_dv_block(p, cases.make_ctx([p], "sm_90", sms=78)) == 128
    assert fam.choose_dv_block(p, cases.make_ctx([p], "sm_90", sms=132)) == 64
    assert fam.choose_dv_block(p, cases.make_ctx([p], "sm_90", sms=132), batch=4) == 64
    assert fam.choose_dv_block(p, cases.make_ctx([p], "sm_86", sms=82)) == 64  # 128 does not fit 99 KiB
    # the model itself, by hand: ceil(CTAs / SMs) * (2 C^2 dk + d (3 C dk + 1.5 C^2)), C = 64, dk = 128
    assert gdn.chunk_cost(p, 128, 132) == 1 * (2 * 64 * 64 * 128 + 128 * (3 * 64 * 128 + 6144))
    assert gdn.chunk_cost(p, 64, 132) == 1 * (2 * 64 * 64 * 128 + 64 * (3 * 64 * 128 + 6144))
    assert gdn.chunk_cost(p, 64, 78) == 2 * (2 * 64 * 64 * 128 + 64 * (3 * 64 * 128 + 6144))
    with pytest.raises(PlanError, match="sms >= 1"):
        gdn.chunk_cost(p, 64, 0)
    # the scan of route wy: the shared-memory loads bind at every block (dk 128, C 64, r = 4 rows per thread);
    # per thread 256 * max(FMAs / 128, loads / 32): block 64 (n = 4) = 256 * (128 * 12 + 64 * 8 + 4 * 64 * 6) / 32
    assert gdn.scan_cost(p, 64, 132) == 256 * (128 * 12 + 64 * 8 + 4 * 64 * 6) / 32
    assert gdn.scan_cost(p, 32, 132) == 2 * 256 * (128 * 10 + 64 * 6 + 4 * 64 * 4) / 32
    assert fam.choose_dv_block(p, cases.make_ctx([p], "sm_90", sms=132), wy=True) == 64
    assert fam.choose_dv_block(p, cases.make_ctx([p], "sm_90", sms=78), wy=True) == 128


def test_chunk_dv_block_that_fits_nowhere_is_a_plan_error():
    ctx = cases.make_ctx([gdn.QWEN38_27B], "sm_86", sms=82)
    with pytest.raises(PlanError, match="opt-in shared-memory maximum of 101376 B"):
        gdn.GdnChunkFamily(dv_block=128).launch(gdn.QWEN38_27B, 64, ctx)


def test_route_wy_needs_chunk_64():
    ctx = cases.make_ctx([gdn.TINY], "sm_90", sms=132)
    with pytest.raises(PlanError, match="route wy needs chunk 64.*chunk = 32"):
        gdn.GdnChunkFamily(chunk=32).launch(gdn.TINY, 100, ctx)
    with pytest.raises(PlanError, match="gdn_chunk_wy: chunk = 32"):
        gdn.GdnChunkWyFamily(chunk=32).spec(gdn.TINY)
    with pytest.raises(PlanError, match="dk = 24 must be a multiple of 16"):
        gdn.GdnChunkWyFamily().spec(gdn.GdnProblem(hk=1, hv=1, dk=24, dv=64))


def test_kernel_args_order_and_types():
    ctx = cases.make_ctx([gdn.TINY], "sm_90", sms=132)
    ln = gdn.GdnChunkFamily().launch(gdn.TINY, 10, ctx)
    scalars = {"num_seqs", "scale", "l2_eps", "norm_eps"}
    bufs = {n: f"<{n}>" for n in gdn.arg_names("gdn_chunk") if n not in scalars} | {"num_seqs": 2}
    del bufs["o_ws"]
    args = gdn.kernel_args(ln, gdn.TINY, bufs)
    names = gdn.arg_names("gdn_chunk")
    assert len(args) == len(names)
    assert args[names.index("o_ws")] == 0 and args[names.index("num_seqs")].dtype == np.int32
    assert args[names.index("scale")] == np.float32(64 ** -0.5)
    with pytest.raises(KeyError, match="conv_out"):
        gdn.kernel_args(ln, gdn.TINY, {"num_seqs": 1})


# ------------------------------------------------------------------------------------------------
# the kernels, run by the CPU emulator (small shapes; both thread schedules)
# ------------------------------------------------------------------------------------------------

SMALL = gdn.GdnProblem(hk=2, hv=4, dk=32, dv=64, width=3)  # dk != dv, group 2, W 3
WIDE = gdn.GdnProblem(hk=1, hv=2, dk=128, dv=128, width=4)  # the 27B head dims, two V heads


@pytest.fixture(scope="module")
def host_ctx():
    return {arch: cases.make_ctx([gdn.TINY, SMALL, WIDE], arch, sms=82) for arch in ("sm_86", "sm_90")}


@pytest.mark.parametrize("variant", list(cases.DECODE_VARIANTS))
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.slow
def test_emulated_decode(host_ctx, reverse, variant):
    """The decode kernel variants over fresh / short / long histories, B = 3 and B = 2 (the first sequence of each
    CTA row is the one a preload variant loads before the wait; later ones load after it: grid.y < B below)."""
    be = cases.HostBackend(reverse=reverse)
    cases.scenario_decode(be, host_ctx["sm_90"], gdn.TINY, [0, 5, 130], variant=variant)
    cases.scenario_decode(be, host_ctx["sm_90"], WIDE, [1, 0], variant=variant)
    cases.scenario_decode(be, host_ctx["sm_90"], SMALL, [2, 7, 0, 1], variant=variant, grid_y=2)


@pytest.mark.parametrize("route", ["wy", "chunked"])
@pytest.mark.parametrize("dv_block", [64, 32, 16])
@pytest.mark.slow
def test_emulated_chunk_prefill_tiny(host_ctx, dv_block, route):
    cases.scenario_prefill(cases.HostBackend(reverse=dv_block == 32), host_ctx["sm_90"], gdn.TINY, [0, 3], [70, 1],
                           route=route, dv_block=dv_block)


@pytest.mark.parametrize("route", ["wy", "chunked"])
@pytest.mark.parametrize("arch,dv_block", [("sm_86", None), ("sm_90", 128)])
@pytest.mark.slow
def test_emulated_chunk_prefill_27b_head(host_ctx, arch, dv_block, route):
    """dk = dv = 128: split into column blocks + gdn_gated_norm (the sm_86 plan's own choice: two V heads on
    82 SMs take the narrowest block), or one fused full-width CTA per head (forced 128, sm_90 only); route wy
    adds gdn_chunk_wy before the scan."""
    out = cases.scenario_prefill(cases.HostBackend(reverse=arch == "sm_86"), host_ctx[arch], WIDE, [0, 9], [65, 2],
                                 route=route, dv_block=dv_block)
    want = [f"{route}_split", "gated_norm"] if arch == "sm_86" else [route]
    assert [ln.route for ln in out["launches"]][2:] == (["wy"] if route == "wy" else []) + want


@pytest.mark.slow
def test_emulated_wy_chunks_of_many_sequences(host_ctx):
    """gdn_chunk_wy maps its flat grid onto every sequence's chunks (here 1 + 3 + 1 + 2 chunks of lengths 1,
    130, 64 and 65, one sequence empty) and its extra CTAs exit; the scan then reads exactly those records."""
    out = cases.scenario_prefill(cases.HostBackend(reverse=True), host_ctx["sm_86"], SMALL, [0, 7, 3, 0, 2],
                                 [1, 130, 0, 64, 65])
    wy = next(ln for ln in out["launches"] if ln.kernel.family == "gdn_chunk_wy")
    assert wy.grid[0] == gdn.wy_chunks(260, 5) == 8  # 7 chunks needed


@pytest.mark.slow
def test_emulated_recurrent_prefill(host_ctx):
    cases.scenario_prefill(cases.HostBackend(reverse=True), host_ctx["sm_90"], SMALL, [0, 2, 40], [67, 1, 3],
                           route="recurrent")


@pytest.mark.slow
def test_emulated_chain_and_routes(host_ctx):
    cases.scenario_chain(cases.HostBackend(), host_ctx["sm_86"], SMALL)
    cases.scenario_routes_agree(cases.HostBackend(), host_ctx["sm_86"], SMALL, [0, 5], [130, 64])


@pytest.mark.parametrize("variant", ["planned", "two_pass", "one_pass_flat", "verify_whole", "verify_split2"])
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
def test_emulated_verify_keeps_the_state_after_every_token(host_ctx, reverse, variant):
    """The verify step (the speculative round's K + 1 tokens per sequence): the state and conv window after each
    token in its own slot, the step's input slot among them (read before it is overwritten) or left alone;
    histories shorter than the conv width included. The planned core is the one-pass kernel with the tree
    reduction (three barriers per token), its columns split over as many CTAs as offered here (these heads fill
    no 82-SM grid: SMALL 2 CTAs per head, WIDE 4, then the gated norm), checked beside the two-pass kernel, the
    one-pass flat sum, one CTA per head (``verify_whole``) and two (``verify_split2``)."""
    be = cases.HostBackend(reverse=reverse)
    cases.scenario_verify(be, host_ctx["sm_90"], SMALL, [5, 1, 40], [4, 3, 1], current=[2, 4, 0], variant=variant)
    cases.scenario_verify(be, host_ctx["sm_86"], WIDE, [9, 2], [2, 4], current=[0, 3], variant=variant)


def test_verify_kernels_arguments_and_launches():
    """The verify kernels' ABI: the prefill kernel's arguments plus ``o_ws`` and ``seq_slot_out``; one CTA row per
    sequence; the columns split over CTAs until the grid reaches one CTA per SM (here TINY's 6 heads never do: dv 64
    splits in two, its smallest block of 32)."""
    ctx = cases.make_ctx([gdn.TINY], "sm_90", sms=132)
    core = gdn.BY_NAME["gdn_recurrent"].verify_launch(gdn.TINY, 12, ctx, batch=3)
    conv = gdn.BY_NAME["gdn_conv"].launch(gdn.TINY, 12, ctx, batch=3, verify=True)
    assert core.grid == (2 * gdn.TINY.hv, 3, 1) and core.route == "verify_split" and conv.route == "conv_verify"
    assert dict(core.kernel.params)["dv_block"] == 32 and core.workspace_bytes == 4 * 12 * gdn.TINY.value_dim
    whole = cases.decode_family("verify_whole").verify_launch(gdn.TINY, 12, ctx, batch=3)
    assert whole.grid == (gdn.TINY.hv, 3, 1) and whole.route == "verify" and whole.workspace_bytes == 0
    assert "dv_block" not in dict(whole.kernel.params)
    assert conv.grid == (-(-gdn.TINY.conv_dim // conv.threads), 3, 1) and conv.workspace_bytes == 4 * 12 * gdn.TINY.conv_dim
    assert gdn.kernel_mode(core.kernel) == "verify" and gdn.kernel_mode(conv.kernel) == "verify"
    assert gdn.kernel_mode(gdn.BY_NAME["gdn_conv"].launch(gdn.TINY, 12, ctx).kernel) is None
    # the core takes the decode kernel's one-pass reduction (tree where the row groups allow it), not the prefill's
    assert dict(core.kernel.params).get("onepass") and dict(core.kernel.params).get("tree")
    assert not dict(gdn.BY_NAME["gdn_recurrent"].prefill_spec(gdn.TINY).params).get("onepass")
    names = gdn.arg_names("gdn_recurrent", "verify")
    pre = gdn.arg_names("gdn_recurrent", "prefill")
    assert names == pre[:7] + ("o_ws",) + pre[7:10] + ("seq_slot_out",) + pre[10:]
    assert gdn.arg_names("gdn_conv", "verify") == ("proj", "conv_w", "conv_ring", "conv_out", "tok_pos", "seq_start",
                                                   "seq_slot", "seq_slot_out", "num_seqs")
    with pytest.raises(PlanError, match=r"gdn_conv verify: need 1 <= B \(5\) <= T \(4\)"):
        gdn.BY_NAME["gdn_conv"].launch(gdn.TINY, 4, ctx, batch=5, verify=True)
    with pytest.raises(PlanError, match=r"1 <= B \(5\) <= T \(4\)"):
        gdn.BY_NAME["gdn_recurrent"].verify_launch(gdn.TINY, 4, ctx, batch=5)


def test_verify_split_follows_the_sm_count_and_its_errors():
    """The verify core's column split (:meth:`GdnRecurrentFamily.choose_verify_block`): at the 27B shape (48 V heads,
    dv 128; on sm_90 the whole-head kernel of 512 threads has 1 resident CTA per SM, the 64-column one of 256
    threads at least 2) one sequence on 132 SMs takes dv_block 32 (192 CTAs: 48 and 96 leave SMs idle), two take 64
    (192), three 64 too (whole heads: 144 CTAs, a second wave for 12), eight the whole head (no grid fits one wave:
    every SM is busy anyway); on 48 SMs one sequence fills the grid with whole heads, on 46 it would need a second
    wave for 2 of them and takes 64 columns. The blocks offered, a forced split, and the errors naming the value."""
    p = gdn.QWEN38_27B
    fam = gdn.BY_NAME["gdn_recurrent"]
    assert fam.verify_blocks(p) == [128, 64, 32]
    assert fam.verify_blocks(SMALL) == [64, 32] and fam.verify_blocks(gdn.GdnProblem(1, 1, 32, 32, 4)) == [32]
    assert gdn.GdnRecurrentFamily(one_pass=False).verify_blocks(p) == [128]  # the split writes o from row group 0
    specs = fam.variants(p) + gdn.BY_NAME["gdn_gated_norm"].variants(p)
    built = compile_variants(specs, "sm_90", jobs=1)
    for sms, want in ((132, {1: 32, 2: 64, 3: 64, 8: 128}), (48, {1: 128, 2: 128}), (46, {1: 64})):
        ctx = PlanContext("sm_90", sms, {u: r for u, (_, r) in built.items()})
        for b, d in want.items():
            ln = fam.verify_launch(p, 4 * b, ctx, batch=b)
            assert ln.grid == (p.hv * (p.dv // d), b, 1), (sms, b, ln.grid)
            assert ln.route == ("verify_split" if d < p.dv else "verify")
            assert ln.threads == p.dk * d // 32  # 32 state floats per thread at every block
    tiny = fam.prefill_spec(gdn.TINY, "verify", 32)  # 64 threads would hold 32 floats each; a split CTA keeps 4 warps
    assert tiny.threads == 128 and fam.prefill_spec(gdn.TINY, "verify").threads == 128
    assert gdn.GdnRecurrentFamily(verify_split=2).verify_blocks(p) == [64]
    with pytest.raises(PlanError, match=r"verify_split = 8 \(dv_block 16\) not offered for dv = 128; dv_block may be "
                                        r"\[128, 64, 32\]"):
        gdn.GdnRecurrentFamily(verify_split=8).verify_blocks(p)
    with pytest.raises(PlanError, match=r"verify_split = 0 must be 'auto' or a positive int"):
        gdn.GdnRecurrentFamily(verify_split=0)
    with pytest.raises(PlanError, match=r"prefill: dv_block = 64 not offered"):
        fam.prefill_spec(p, "prefill", 64)


@pytest.mark.parametrize("rows", [None, 1, 2], ids=["planned", "G1", "G2"])
def test_emulated_gated_norm_one_warp_per_head(rows):
    """``gdn_gated_norm`` on the emulator against :func:`ref_gated_rmsnorm` for 18 V heads (3 CTA rows of 8 warps
    planned: 8, 8 and 2 heads), and with fewer CTA rows than that (1 and 2: warps loop over heads): every element of
    y written once, equal to the reference. The planned grid is (T, ceil(Hv / warps))."""
    from ninferc.ir.reference import ref_gated_rmsnorm

    p = gdn.GdnProblem(hk=2, hv=18, dk=16, dv=40, width=3)  # dv 40: lanes past dv idle in the second pass
    fam = gdn.BY_NAME["gdn_gated_norm"]
    ctx = PlanContext("sm_90", 82, {u: r for u, (_, r) in compile_variants(fam.variants(p), "sm_90", jobs=1).items()})
    ln = fam.launch(p, 3, ctx)
    assert ln.grid == (3, -(-p.hv // (fam.threads // 32)), 1) == (3, 3, 1)
    if rows:
        ln = dataclasses.replace(ln, grid=(3, rows, 1))
    rng = np.random.default_rng(5)
    o = rng.standard_normal((3, p.value_dim)).astype(F32)
    proj = rng.standard_normal((3, p.proj_dim)).astype(F32)
    w = (1.0 + rng.standard_normal(p.dv) * 0.1).astype(F32)
    be = cases.HostBackend(reverse=rows == 2)
    y = be.put(np.full((3, p.value_dim), cases.BF16_NAN, np.uint16))
    be.launch(ln, gdn.kernel_args(ln, p, {"o_ws": be.put(o), "proj": be.put(proj), "norm_w": be.put(w), "y": y}))
    z = proj[:, p.off_z:p.off_z + p.value_dim].reshape(3, p.hv, p.dv)
    ref = ref_gated_rmsnorm(o.reshape(3, p.hv, p.dv), z, w, p.norm_eps).reshape(3, p.value_dim)
    cases.check(BF16_ELEMENTWISE, cases.bf16_to_f32(be.get(y)), ref, f"gated norm, {rows or 'planned'} CTA rows")
