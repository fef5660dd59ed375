"""CPU tests of the embed and rmsnorm families (targets/kernels/elementwise.py): every variant compiles for
the four targets without spills (resources printed), geometry, argument order, and the references.
GPU twin: test_elementwise_gpu.py."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from ninferc.errors import PlanError
from ninferc.ir.quant import quantize
from ninferc.ir.reference import ref_rmsnorm
from ninferc.targets.arch import ARCHS
from ninferc.targets.kernels.elementwise import (EmbedFamily, EmbedProblem, RMSNormFamily, RMSNormProblem,
                                                 embed_arg_names, embed_kernel_args, embed_reference,
                                                 rmsnorm_arg_names, rmsnorm_kernel_args, rmsnorm_reference)
from ninferc.targets.plan import PlanContext, check_launch, compile_variants

EMBED, NORM = EmbedFamily(), RMSNormFamily()
ALL_ARCHS = tuple(ARCHS)


@functools.lru_cache(maxsize=None)
def resources(arch: str):
    specs = [s for fam in (EMBED, NORM) for p in fam.sample_problems() for s in fam.variants(p)]
    return {uri: r for uri, (_, r) in compile_variants(specs, arch).items()}


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_launch_geometry(arch):
    res = resources(arch)
    ctx = PlanContext(arch, 82, res)
    for p in EMBED.sample_problems():
        for t in (1, 7, 4096):
            ln = EMBED.launch(p, t, ctx)
            check_launch(ln, arch, res[ln.kernel.uri], ctx.sms)
            assert ln.grid == (t, 1, 1) and ln.route == "row_per_cta"
    for p in NORM.sample_problems():
        for t in (1, 5, 8192):
            ln = NORM.launch(p, t, ctx)
            check_launch(ln, arch, res[ln.kernel.uri], ctx.sms)
            assert ln.grid == (t, 1, 1) and ln.block == (NORM.threads_for(p), 1, 1)
    with pytest.raises(PlanError, match="T = 0"):
        EMBED.launch(EmbedProblem(256, 10), 0, ctx)
    with pytest.raises(PlanError, match="rows = 0"):
        NORM.launch(RMSNormProblem(256), 0, ctx)


def test_threads_and_args():
    assert EMBED.threads_for(EmbedProblem(5120, 248320)) == 256
    assert EMBED.threads_for(EmbedProblem(256, 4096)) == 32
    assert NORM.threads_for(RMSNormProblem(5120)) == 320
    assert NORM.threads_for(RMSNormProblem(256)) == 32
    with pytest.raises(PlanError, match="hidden = 100"):
        EmbedProblem(100, 10)
    with pytest.raises(PlanError, match="dim = 10"):
        RMSNormProblem(10)
    with pytest.raises(PlanError, match="mode"):
        RMSNormProblem(256, "layernorm")
    ctx = PlanContext("sm_90", 132, resources("sm_90"))
    p = RMSNormProblem(256, "add_rmsnorm", gather=True)
    ln = NORM.launch(p, 3, ctx)
    args = rmsnorm_kernel_args(p, ln, "X", "W", "Y", d="D", row_index="R")
    assert len(args) == len(rmsnorm_arg_names(p)) == 7
    assert args[:5] == ("X", "D", "W", "Y", "R") and int(args[5]) == 3 and args[6] == np.float32(1e-6)
    plain = RMSNormProblem(256)
    args = rmsnorm_kernel_args(plain, NORM.launch(plain, 4, ctx), "X", "W", "Y")
    assert args[1] == 0 and args[4] == 0
    with pytest.raises(PlanError, match="addend"):
        rmsnorm_kernel_args(p, ln, "X", "W", "Y", row_index="R")
    with pytest.raises(PlanError, match="row_index"):
        rmsnorm_kernel_args(p, ln, "X", "W", "Y", d="D")
    ep = EmbedProblem(256, 4096)
    eargs = embed_kernel_args(ep, EMBED.launch(ep, 9, ctx), "T", "TAB", "X")
    assert len(eargs) == len(embed_arg_names(ep)) == 6 and [int(a) for a in eargs[3:]] == [9, 256, 4096]


def test_embed_formats_identity_and_abi():
    # bf16 kernels keep the URIs (and sources) they had before the table formats existed
    assert [EMBED.spec(EmbedProblem(h, v)).uri for h, v in ((256, 4096), (5120, 248320))] == ["embed__th32",
                                                                                             "embed__th256"]
    assert "scales" not in EMBED.spec(EmbedProblem(256, 4096)).render()
    assert EMBED.spec(EmbedProblem(256, 4096, "w8")).uri == "embed__th32_wfmt-w8"
    assert EMBED.spec(EmbedProblem(5120, 248320, "w8")).uri == "embed__th256_wfmt-w8"
    assert {p.wfmt for p in EMBED.sample_problems()} == {"bf16", "w8"}
    with pytest.raises(PlanError, match="w4 embedding table is not supported"):
        EmbedProblem(256, 4096, "w4")
    with pytest.raises(PlanError, match="unknown table format 'fp8'"):
        EmbedProblem(256, 4096, "fp8")
    for p in EMBED.sample_problems():  # argument names equal the rendered signature
        spec = EMBED.spec(p)
        sig = re.search(rf"{spec.entry}\(([^)]*)\)", spec.render()).group(1)
        names = tuple(a.split()[-1].strip("*") for a in sig.replace("__restrict__", "").split(","))
        assert names == embed_arg_names(p), spec.uri
    w8 = EmbedProblem(256, 4096, "w8")
    assert embed_arg_names(w8) == ("tokens", "table", "scales", "x", "t", "h", "vocab")
    ctx = PlanContext("sm_90", 132, resources("sm_90"))
    ln = EMBED.launch(w8, 5, ctx)
    args = embed_kernel_args(w8, ln, "T", "TAB", "X", scales="S")
    assert args[:4] == ("T", "TAB", "S", "X") and [int(a) for a in args[4:]] == [5, 256, 4096]
    with pytest.raises(PlanError, match="w8 table needs scales"):
        embed_kernel_args(w8, ln, "T", "TAB", "X")
    with pytest.raises(PlanError, match="bf16 table takes no scales"):
        embed_kernel_args(EmbedProblem(256, 4096), ln, "T", "TAB", "X", scales="S")


def test_references():
    import ml_dtypes

    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 16)).astype(ml_dtypes.bfloat16)
    tok = np.array([3, 0, 49, 50, -1])
    x = embed_reference(tok, table)
    assert x.dtype == np.float32 and x.shape == (5, 16)
    np.testing.assert_array_equal(x[:3], table[[3, 0, 49]].astype(np.float32))
    assert np.isnan(x[3:]).all()

    qt = quantize(table, "w8")  # int8 codes [50, 16] + fp32 scales [50]
    x8 = embed_reference(tok, qt.codes, qt.scales)
    assert x8.dtype == np.float32 and x8.shape == (5, 16)
    np.testing.assert_array_equal(x8[:3], qt.dequantize()[[3, 0, 49]])  # fl32(q * scale[tok]), exactly
    np.testing.assert_array_equal(x8[:3], (qt.codes[[3, 0, 49]].astype(np.float32) * qt.scales[[3, 0, 49], None]))
    assert np.isnan(x8[3:]).all()
    with pytest.raises(PlanError, match="expected int8 codes"):
        embed_reference(tok, qt.codes, qt.scales[:10])

    xs = rng.standard_normal((6, 16)).astype(np.float32)
    d = rng.standard_normal((6, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32) * 0.1
    xa, y = rmsnorm_reference(RMSNormProblem(16, "add_rmsnorm"), xs, w, d=d)
    np.testing.assert_array_equal(xa, xs + d)
    np.testing.assert_array_equal(y, ref_rmsnorm(xs + d, w, 1e-6, True))
    xa, y = rmsnorm_reference(RMSNormProblem(16, "add_rmsnorm", gather=True), xs, w, d=d, row_index=[5, 2])
    np.testing.assert_array_equal(xa, xs)  # no write-back with gather
    np.testing.assert_array_equal(y, ref_rmsnorm((xs + d)[[5, 2]], w, 1e-6, True))
    xa, y = rmsnorm_reference(RMSNormProblem(16, unit_offset=False), xs, w)
    np.testing.assert_array_equal(y, ref_rmsnorm(xs, w, 1e-6, False))


@pytest.mark.parametrize("problem", [RMSNormProblem(64, "add_rmsnorm", True, False, eps=1e-5),
                                     RMSNormProblem(64, "rmsnorm", True, True),
                                     RMSNormProblem(64, "rmsnorm", True, False, x_dtype="bf16", ld_out=128)],
                         ids=["add", "gather", "bf16_in_slice_out"])
def test_emulated_rmsnorm(problem):
    """The rmsnorm kernel on the CPU emulator against rmsnorm_reference: the residual write-back, the row gather, and
    the MTP head's variant (bf16 x widened exactly; output rows a column slice of a 2 x wider row, the other half
    untouched)."""
    import sys
    from pathlib import Path

    import ml_dtypes

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cuda_host import HostKernel

    from ninferc.targets.kernels.elementwise import rmsnorm_kernel_args, rmsnorm_reference

    rng = np.random.default_rng(3)
    T, D = 5, problem.dim
    x = rng.standard_normal((T, D)).astype(np.float32)
    if problem.x_dtype == "bf16":
        xb = x.astype(ml_dtypes.bfloat16)
        x, x_dev = xb.astype(np.float32), xb.view(np.uint16).copy()
    else:
        x_dev = x.copy()
    d = rng.standard_normal((T, D)).astype(np.float32)
    w = (rng.standard_normal(D) * 0.1).astype(np.float32)
    idx = np.array([4, 0, 4], np.int32)
    rows = len(idx) if problem.gather else T
    ld = problem.ld_out or D
    y = np.full((rows, ld), 0xFFFF, np.uint16)
    built = compile_variants(NORM.variants(problem), "sm_90")
    ctx = PlanContext("sm_90", 132, {uri: r for uri, (_, r) in built.items()})
    ln = NORM.launch(problem, rows, ctx)
    args = rmsnorm_kernel_args(problem, ln, x_dev, w, y, d=d if problem.mode == "add_rmsnorm" else None,
                               row_index=idx if problem.gather else None)
    HostKernel(ln.kernel.render(), ln.kernel.entry).launch(ln.grid, ln.block, args)
    x_after, y_ref = rmsnorm_reference(problem, x, w, d=d if problem.mode == "add_rmsnorm" else None,
                                       row_index=idx if problem.gather else None)
    got = (y[:, :D].astype(np.uint32) << 16).view(np.float32)
    want = y_ref.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.abs(got - want).max() <= 2 ** -7 * np.abs(want).max()
    assert (y[:, D:] == 0xFFFF).all()  # the rest of a wider output row is not written
    if problem.x_dtype == "f32":
        np.testing.assert_array_equal(x_dev, x_after)
