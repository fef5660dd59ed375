"""gemv_coop route selection: caps scale with SM count, cooperative grids never exceed the cap, routes
switch exactly at the boundary, and the boundary moves with the SM count (same compiled kernels)."""

import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from targets_testlib import family_resources
from ninferc.errors import PlanError
from ninferc.targets.kernels.gemv_coop import GemvProblem, kernel_args, reference
from ninferc.targets.plan import PlanContext, check_launch
from ninferc.targets.skus import get_sku, skus_for_arch

O_PROJ = GemvProblem(6144, 5120, "residual_add")


def ctx(arch, sku):
    return PlanContext(arch, get_sku(sku, arch).sms, family_resources(arch))


def coop_fits(gemv, prob, tokens, c):
    """Independent statement of the route rule: some thread variant fits >= 2 splits, where a split
    is one CTA per (32-thread warp x 4 rows) output block per 4-token chunk and the cap is CTAs/SM x SMs."""
    for th in gemv.threads:
        outs = th // 32 * (2 if prob.epilogue == "swiglu" else 4)
        base = -(-prob.n // outs) * -(-tokens // 4)
        if 2 * base <= c.cap(gemv.spec(prob, th, "coop")) and prob.k // 256 >= 2:
            return True
    return False


def test_l20_and_4090_caps_differ_by_the_sm_ratio(gemv):
    l20, r4090 = ctx("sm_89", "l20"), ctx("sm_89", "rtx4090")
    for spec in gemv.variants(O_PROJ):
        assert l20.occupancy(spec).ctas_per_sm == r4090.occupancy(spec).ctas_per_sm
        assert Fraction(l20.cap(spec), r4090.cap(spec)) == Fraction(92, 128)
    a, b = gemv.launch(O_PROJ, 1, l20), gemv.launch(O_PROJ, 1, r4090)
    assert a.cooperative and b.cooperative and a.ctas <= a.coop_cap and b.ctas <= b.coop_cap
    assert (a.split_k, b.split_k) == (a.coop_cap // (a.ctas // a.split_k), b.coop_cap // (b.ctas // b.split_k))
    assert b.split_k > a.split_k  # more SMs, more K splits for the same row blocks


@pytest.mark.parametrize("arch", ["sm_86", "sm_89", "sm_90", "sm_120a"])
def test_sweep_never_exceeds_cap_and_switches_exactly_at_boundary(gemv, arch):
    problems = [O_PROJ, GemvProblem(17408, 5120, "residual_add"), GemvProblem(5120, 17408, "swiglu"),
                GemvProblem(5120, 1344, "store"), GemvProblem(256, 704, "store"), GemvProblem(512, 96, "store")]
    for sku in skus_for_arch(arch):
        c = ctx(arch, sku.key)
        for prob in problems:
            prev = None
            for t in range(1, 65):
                ln = gemv.launch(prob, t, c)
                check_launch(ln, arch, c.resources_of(ln.kernel), c.sms)
                assert ln.route == ("coop_splitk" if coop_fits(gemv, prob, t, c) else "plain"), (sku.key, prob, t)
                if ln.cooperative:
                    assert 2 <= ln.split_k and ln.ctas <= ln.coop_cap and ln.waves == 1
                    assert ln.workspace_bytes == 4 * ln.split_k * t * prob.w_rows
                else:
                    assert ln.split_k == 1 and ln.workspace_bytes == 0
                if prev == "plain":  # monotone in T: once plain, plain for every larger T
                    assert ln.route == "plain"
                prev = ln.route


def last_coop_t(gemv, prob, c, t_max=128):
    ts = [t for t in range(1, t_max + 1) if gemv.launch(prob, t, c).route == "coop_splitk"]
    return max(ts) if ts else 0


def test_boundary_moves_with_sm_count_3090_vs_3090ti(gemv):
    """Same sm_86 cubins, 82 vs 84 SMs: a problem whose cooperative grid needs 165..168 CTAs per split
    (256 threads) stays cooperative one token chunk longer on the 3090 Ti."""
    r3090, r3090ti = ctx("sm_86", "rtx3090"), ctx("sm_86", "rtx3090ti")
    prob = GemvProblem(5120, 42 * 32, "store")  # 42 row blocks of 32 outputs at 256 threads
    a, b = last_coop_t(gemv, prob, r3090), last_coop_t(gemv, prob, r3090ti)
    assert (a, b) == (12, 16)
    la, lb = gemv.launch(prob, 16, r3090), gemv.launch(prob, 16, r3090ti)
    assert la.route == "plain" and lb.route == "coop_splitk"
    assert lb.ctas == 2 * 168 == lb.coop_cap and la.coop_cap == la.ctas_per_sm * 82
    # and across many shapes the boundaries differ somewhere, never in the 3090's favour
    diffs = [(n, last_coop_t(gemv, GemvProblem(5120, n), r3090, 64), last_coop_t(gemv, GemvProblem(5120, n), r3090ti, 64))
             for n in range(256, 4096, 256)]
    assert any(x != y for _, x, y in diffs) and all(x <= y for _, x, y in diffs)


def test_launch_variant_forced_and_errors(gemv):
    c = ctx("sm_89", "l20")
    ln = gemv.launch_variant(O_PROJ, 1, c, 512, "coop", splits=1)
    assert ln.cooperative and ln.split_k == 1 and ln.ctas == 80
    with pytest.raises(PlanError, match="exceeds the cooperative cap"):
        gemv.launch_variant(O_PROJ, 64, c, 256, "coop", splits=2)
    assert gemv.launch_variant(O_PROJ, 64, c, 256, "plain").ctas == 160 * 16


def test_problem_validation():
    with pytest.raises(PlanError, match="K = 5121 must be a positive multiple of 8"):
        GemvProblem(5121, 5120)
    with pytest.raises(PlanError, match="epilogue"):
        GemvProblem(64, 64, "gelu")


def test_arg_names_match_the_template_signature(gemv):
    for prob in gemv.sample_problems():
        spec = gemv.variants(prob)[0]
        src = spec.render()
        sig = re.search(rf"{spec.entry}\(([^)]*)\)", src).group(1)
        names = [p.split()[-1].strip("*") for p in sig.replace("__restrict__", "").split(",")]
        assert tuple(names) == gemv.arg_names(prob)
        ln = gemv.launch(prob, 3, ctx("sm_90", "h200"))
        norm = dict(norm_w="NW", xn="XN", eps=1e-6) if prob.fused_norm else {}
        args = kernel_args(prob, ln, "W", "X", "Y", scales="S" if prob.quantized else None, **norm)
        assert len(args) == len(names)
        tail = args[-5:-3] if prob.fused_norm else args[-2:]
        assert tail == (3, ln.split_k)


def test_add_rmsnorm_route_is_cooperative_and_falls_back_to_store(gemv):
    """The fused norm always launches cooperatively (one split if that is all that fits) and takes the
    unfused store launch when not even one split fits the cap; it has no plain mode."""
    c = ctx("sm_90", "h200")
    fused = GemvProblem(5120, 5120, "add_rmsnorm")
    ln = gemv.launch(fused, 1, c)
    assert ln.route == "coop_norm" and ln.cooperative and "add_rmsnorm" in ln.kernel.uri and ln.ctas <= c.cap(ln.kernel)
    # w8 at T=4: the store GEMV is plain (two splits do not fit), the fused one runs coop with one split
    w8 = GemvProblem(5120, 5120, "add_rmsnorm", "w8")
    assert gemv.launch(w8.unfused(), 4, c).route == "plain"
    ln4 = gemv.launch(w8, 4, c)
    assert ln4.route == "coop_norm" and ln4.split_k == 1
    # a shape whose grid exceeds every variant's cap: the unfused launch, never a silent oversize grid
    wide = GemvProblem(256, 262144, "add_rmsnorm")
    lw = gemv.launch(wide, 1, c)
    assert lw.route in ("plain", "coop_splitk") and "add_rmsnorm" not in lw.kernel.uri
    assert lw == gemv.launch(wide.unfused(), 1, c)
    with pytest.raises(PlanError, match="no plain mode"):
        gemv.launch_variant(fused, 1, c, 256, "plain")
    with pytest.raises(PlanError, match="norm_w, xn and eps"):
        kernel_args(fused, ln, "W", "X", "Y")


def test_reference_epilogues():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 16)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    acc = x.astype(np.float32) @ w.astype(np.float32).T
    np.testing.assert_array_equal(reference(GemvProblem(16, 8), x, w), acc)
    y0 = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_array_equal(reference(GemvProblem(16, 8, "residual_add"), x, w, y0), y0 + acc)
    out = reference(GemvProblem(16, 4, "swiglu"), x, w)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (3, 4)
    g, u = acc[:, :4], acc[:, 4:]
    np.testing.assert_allclose(out.astype(np.float32), g / (1 + np.exp(-g)) * u, rtol=1e-2, atol=1e-2)
    with pytest.raises(PlanError, match="expected x"):
        reference(GemvProblem(16, 8), x[:, :8], w)
    nw = rng.standard_normal(8).astype(np.float32)
    for unit in (True, False):
        h, xn = reference(GemvProblem(16, 8, "add_rmsnorm", unit_offset=unit), x, w, y0, norm_w=nw, eps=1e-6)
        np.testing.assert_array_equal(h, y0 + acc)
        scale = (1 + nw) if unit else nw
        want = h / np.sqrt((h.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6) * scale
        assert xn.dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(xn.astype(np.float32), want, rtol=8e-3, atol=1e-6)
    with pytest.raises(PlanError, match="norm_w and eps"):
        reference(GemvProblem(16, 8, "add_rmsnorm"), x, w, y0)
