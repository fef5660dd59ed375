"""gemv_coop on the CPU emulator (tests/kernels/cuda_host.py), cooperative launches included: every epilogue
(store, residual_add, swiglu, add_rmsnorm) and weight format (bf16, w8, w4), the cooperative split-K route with
its grid barrier and the fused norm's second (group) barrier, and the plain route -- against the numpy
reference, on small shapes whose row blocks are partial and whose fused-norm CTAs straddle tokens. Outputs and
the workspace are poisoned with NaN first; both barrier words must come back reusable. The GPU tier runs the
same kernels on the device (tests/targets/test_gemv_coop_gpu.py); this one runs in CI without a GPU.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ninferc.errors import PlanError  # noqa: E402
from ninferc.ir.quant import quantize  # noqa: E402
from ninferc.targets.kernels.gemv_coop import GemvCoopFamily, GemvProblem, kernel_args, reference  # noqa: E402
from ninferc.targets.plan import PlanContext, compile_variants  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU emulator needs g++")

ARCH, SMS = "sm_90", 132  # the plan the launches come from; the emulator runs any grid
FAM = GemvCoopFamily(threads=(256,))
BF16_NAN = 0x7FC0
#: fp32 accumulation in a different order than numpy's matmul (relative L2); bf16 outputs: a few one-ulp flips
F32_REL, BF16_REL = 1e-5, 2e-3

# (format, K): K gives the cooperative route at least two K splits (K / (elements per 16-byte vector) / 32)
SHAPES = {"bf16": 512, "w8": 1024, "w4": 2048}
N = 96  # 3 row blocks of 32 outputs (bf16, 4 rows per warp) / 2 of 64 (w8, w4: 2 rows per warp, partial)


@pytest.fixture(scope="module")
def ctx():
    specs = [s for f, k in SHAPES.items() for e in ("store", "residual_add", "swiglu", "add_rmsnorm")
             for u in (True, False) for s in FAM.variants(GemvProblem(k, N, e, f, unit_offset=u))]
    built = compile_variants(specs, ARCH)
    return PlanContext(ARCH, SMS, {u: r for u, (_, r) in built.items()})


def _rel(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "non-finite output (an element never written, or NaN)"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _run(prob: GemvProblem, launch, seed: int):
    from cuda_host import HostKernel

    rng = np.random.default_rng(seed)
    t, k = launch.tokens, prob.k
    w = (rng.standard_normal((prob.w_rows, k), dtype=np.float32) / np.float32(np.sqrt(k))).astype(ml_dtypes.bfloat16)
    if prob.quantized:
        qt = quantize(w, prob.wfmt)
        w_dev, scales, w_ref = np.ascontiguousarray(qt.codes), np.ascontiguousarray(qt.scales), qt.dequantize()
    else:
        w_dev, scales, w_ref = np.ascontiguousarray(w.view(np.uint16)), None, w.astype(np.float32)
    x = rng.standard_normal((t, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    x_dev = np.ascontiguousarray(x.view(np.uint16))
    ws = np.full(max(launch.workspace_bytes // 4, 1), np.nan, np.float32)
    barrier = np.zeros(2, np.uint32)
    y_in, norm = None, {}
    if prob.epilogue == "swiglu":
        y = np.full((t, prob.n), BF16_NAN, np.uint16)
    elif prob.epilogue in ("residual_add", "add_rmsnorm"):
        y_in = rng.standard_normal((t, prob.n), dtype=np.float32)
        y = y_in.copy()
        if prob.fused_norm:
            norm = {"norm_w": (rng.standard_normal(prob.n, dtype=np.float32) * np.float32(0.2)),
                    "xn": np.full((t, prob.n), BF16_NAN, np.uint16), "eps": 1e-6}
    else:
        y = np.full((t, prob.n), np.nan, np.float32)
    spec = launch.kernel
    hk = HostKernel(spec.render(), spec.entry)
    hk.launch(launch.grid, launch.block, kernel_args(prob, launch, w_dev, x_dev, y, ws, barrier, scales=scales, **norm),
              cooperative=launch.cooperative)
    ref_prob = GemvProblem(k, prob.n, prob.epilogue, unit_offset=prob.unit_offset)
    if prob.fused_norm:
        h_ref, xn_ref = reference(ref_prob, x, w_ref, y_in, norm_w=norm["norm_w"], eps=norm["eps"])
        assert _rel(y, h_ref) < F32_REL
        got = (norm["xn"].astype(np.uint32) << 16).view(np.float32)
        assert _rel(got, xn_ref.astype(np.float32)) < BF16_REL
    elif prob.epilogue == "swiglu":
        got = (y.astype(np.uint32) << 16).view(np.float32)
        assert _rel(got, reference(ref_prob, x, w_ref).astype(np.float32)) < BF16_REL
    else:
        assert _rel(y, reference(ref_prob, x, w_ref, y_in)) < F32_REL
    if launch.cooperative:  # the emulator applied the protocol's arithmetic: low 31 bits back to zero
        assert int(barrier[0]) & 0x7FFFFFFF == 0 and int(barrier[1]) & 0x7FFFFFFF == 0
        assert int(barrier[0]) == 0x80000000  # exactly one grid barrier
        assert int(barrier[1]) == (0x80000000 if prob.fused_norm else 0)  # the norm's group barrier, once


CASES = [(f, e, mode, t) for f in SHAPES for e in ("store", "residual_add", "swiglu", "add_rmsnorm")
         for mode in ("coop", "plain") for t in (1, 3) if not (e == "add_rmsnorm" and mode == "plain")]


@pytest.mark.parametrize("fmt,epilogue,mode,t", CASES, ids=lambda v: str(v))
def test_gemv_kernel_on_the_emulator(ctx, fmt, epilogue, mode, t):
    prob = GemvProblem(SHAPES[fmt], N, epilogue, fmt, unit_offset=(t == 1))
    splits = 2 if mode == "coop" else None
    launch = FAM.launch_variant(prob, t, ctx, 256, mode, splits, max_tokens=FAM.tile_for(t, prob))
    assert launch.cooperative == (mode == "coop") and launch.split_k == (2 if mode == "coop" else 1)
    _run(prob, launch, seed=len(CASES) * t + CASES.index((fmt, epilogue, mode, t)))


def test_fused_norm_tail_with_one_split_and_tokens_straddling_ctas(ctx):
    """add_rmsnorm with T = 3 and N = 96: CTA 0 owns outputs 0..255 (all of tokens 0 and 1, part of token 2),
    CTA 1 the rest of token 2 -- the per-(token, CTA) partial sums and the CTA range each token sums over."""
    prob = GemvProblem(SHAPES["bf16"], N, "add_rmsnorm")
    launch = FAM.launch_variant(prob, 3, ctx, 256, "coop", 1)
    assert launch.ctas * 256 >= 3 * N > 256
    _run(prob, launch, seed=7)


def test_emulator_catches_a_wrong_group_barrier_count(ctx):
    """A negative control: the same kernel with the group barrier's participant count off by one must fail in
    the emulator (on a GPU it would hang)."""
    from cuda_host import HostKernel, HostKernelError

    prob = GemvProblem(SHAPES["bf16"], N, "add_rmsnorm")
    launch = FAM.launch_variant(prob, 3, ctx, 256, "coop", 2)
    src = launch.kernel.render()
    needle = "ninfer::group_barrier(barrier + 1, (unsigned int)active);"
    assert src.count(needle) == 1
    hk = HostKernel(src.replace(needle, "ninfer::group_barrier(barrier + 1, (unsigned int)active + 1u);"),
                    launch.kernel.entry)
    rng = np.random.default_rng(0)
    w = np.ascontiguousarray(rng.integers(0, 1 << 14, (N, prob.k)).astype(np.uint16))
    x = np.ascontiguousarray(rng.integers(0, 1 << 14, (3, prob.k)).astype(np.uint16))
    args = kernel_args(prob, launch, w, x, np.zeros((3, N), np.float32), np.zeros(launch.workspace_bytes // 4, np.float32),
                       np.zeros(2, np.uint32), norm_w=np.ones(N, np.float32), xn=np.zeros((3, N), np.uint16), eps=1e-6)
    with pytest.raises(HostKernelError, match="grid barrier mismatch"):
        hk.launch(launch.grid, launch.block, args, cooperative=True)
    with pytest.raises(PlanError):  # and the planner refuses a fused grid that cannot give each output a thread
        FAM.launch_variant(GemvProblem(SHAPES["bf16"], N, "add_rmsnorm"), 3, ctx, 256, "plain")
