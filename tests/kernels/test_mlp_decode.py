"""The fused decode MLP (mlp_decode) on the CPU emulator (tests/kernels/cuda_host.py): w8 and w4, both norm forms,
grids of a few CTAs (so the ticket counter hands out most items and down items wait for other CTAs' gate|up items)
and a partial last slice of y, in thread order and reversed -- against the numpy reference (gemv_coop's gate|up
then down references). Outputs and scratch are poisoned first; the counters must come back zero. Broken variants
of the source (no wait for the slice, a row block summed one slice early, the counters not cleared, a gate|up item
not counted in) must fail.
The GPU tier runs the same kernel on the device (tests/targets/test_mlp_decode_gpu.py).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ninferc.ir.quant import quantize  # noqa: E402
from ninferc.targets.kernels.mlp_decode import MlpDecodeFamily, MlpProblem, kernel_args, reference  # noqa: E402
from ninferc.targets.plan import PlanContext, compile_variants  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU emulator needs g++")

ARCH = "sm_90"
BF16_NAN = 0x7FC0
#: h: fp32 sums in another order than numpy's (relative L2); bf16 outputs: a few one-ulp flips
F32_REL, BF16_REL = 1e-5, 2e-3
#: hidden 256 (two row blocks of 32 rows... eight), inter 1536: w4 slices of 1024 (the second one half full), w8 of 512
PROBLEMS = [MlpProblem(256, 1536, "w4", True), MlpProblem(256, 1536, "w8", False), MlpProblem(192, 1024, "w8", True)]
FAM = MlpDecodeFamily()


def _bf16_bits_to_f32(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) << 16).view(np.float32)


def _rel(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "non-finite output (an element never written, or NaN)"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module")
def resources():
    built = compile_variants([FAM.spec(p) for p in PROBLEMS], ARCH)
    return {u: r for u, (_, r) in built.items()}


def _launch(p: MlpProblem, resources, sms: int):
    return FAM.launch(p, 1, PlanContext(ARCH, sms, resources))


def _run(p: MlpProblem, launch, seed: int, *, source: str | None = None, reverse: bool = False, fam=FAM):
    from cuda_host import HostKernel

    rng = np.random.default_rng(seed)
    w_gu = (rng.standard_normal((2 * p.inter, p.hidden), dtype=np.float32) / np.float32(np.sqrt(p.hidden)))
    w_dn = (rng.standard_normal((p.hidden, p.inter), dtype=np.float32) / np.float32(np.sqrt(p.inter)))
    q_gu, q_dn = quantize(w_gu.astype(ml_dtypes.bfloat16), p.wfmt), quantize(w_dn.astype(ml_dtypes.bfloat16), p.wfmt)
    x = (rng.standard_normal((1, p.hidden), dtype=np.float32) * np.float32(3)).astype(ml_dtypes.bfloat16)
    ss_in = np.abs(rng.standard_normal((1, 7), dtype=np.float32)) * np.float32(9 * p.hidden / 7)
    h = rng.standard_normal((1, p.hidden), dtype=np.float32)
    norm_w = rng.standard_normal(p.hidden, dtype=np.float32) * np.float32(0.2)
    _, n_sl, n_rb = fam.counts(p)
    scratch = fam.scratch_bytes(p)
    out = {"y_gu": np.full((1, p.inter), BF16_NAN, np.uint16), "h": h.copy(),
           "xs": np.full((1, p.hidden), BF16_NAN, np.uint16), "ss_out": np.full(n_rb, np.nan, np.float32),
           "parts": np.full(scratch["mlp_parts"] // 4, np.nan, np.float32),
           "sync": np.zeros(scratch["mlp_sync"] // 4, np.uint32), "norm_w": norm_w}
    assert launch.workspace_bytes == 4 * fam.norm_parts(launch) == 4 * n_rb
    args = kernel_args(p, launch, w_gu=np.ascontiguousarray(q_gu.codes), s_gu=np.ascontiguousarray(q_gu.scales),
                       w_dn=np.ascontiguousarray(q_dn.codes), s_dn=np.ascontiguousarray(q_dn.scales),
                       x_gu=np.ascontiguousarray(x.view(np.uint16)), ss_in=ss_in, ss_parts=7, in_eps=1e-6, **out)
    spec = launch.kernel
    HostKernel(source or spec.render(), spec.entry).launch(launch.grid, launch.block, args,
                                                           smem=launch.dynamic_smem_bytes, cooperative=True,
                                                           reverse=reverse)
    ref = reference(p, x, q_gu.codes, q_gu.scales, q_dn.codes, q_dn.scales, ss_in, 1e-6, h, norm_w)
    return out, ref, norm_w


def _check(out, ref):
    y_ref, h_ref, xs_ref, ss_ref = ref
    assert _rel(_bf16_bits_to_f32(out["y_gu"]), y_ref.astype(np.float32)) < BF16_REL
    assert _rel(out["h"], h_ref) < F32_REL
    assert _rel(_bf16_bits_to_f32(out["xs"]), xs_ref.astype(np.float32)) < BF16_REL
    np.testing.assert_allclose(out["ss_out"].sum(), ss_ref[0, 0], rtol=1e-5)  # the row blocks cover h once
    assert not out["sync"].any(), f"counters left {out['sync'].tolist()} (the next launch needs them zero)"


CASES = [(i, sms, rev) for i in range(len(PROBLEMS)) for sms, rev in ((1, False), (2, True))]



@pytest.mark.parametrize("case", CASES, ids=[f"{PROBLEMS[i].wfmt}-h{PROBLEMS[i].hidden}-i{PROBLEMS[i].inter}-"
                                              f"u{int(PROBLEMS[i].unit_offset)}-sms{s}{'-rev' if r else ''}"
                                              for i, s, r in CASES])
def test_mlp_decode_on_the_emulator(resources, case):
    i, sms, rev = case
    p = PROBLEMS[i]
    launch = _launch(p, resources, sms)
    assert launch.cooperative and launch.tokens == 1
    n_gu, _, _ = FAM.counts(p)
    assert 1 < launch.ctas < n_gu  # tickets hand out most gate|up items
    out, ref, _ = _run(p, launch, seed=i, reverse=rev)
    _check(out, ref)


MUTATIONS = {
    "no wait for the slice": ("ninfer::wait_count_geq(ready + s, need);", ""),
    "a row block summed one slice early": ("(unsigned int)(n_sl * kWarps - 1)", "(unsigned int)(n_sl * kWarps - 1 - kWarps)"),
    "counters not cleared": ("for (int i = 0; i < 2 + n_sl + n_rb; ++i) sync[i] = 0u;", ""),
    "the gate|up item not counted in": ("atomicAdd(ready + item * kGuOuts * kWarps / kSlice, 1u);", ""),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_mlp_decode_emulator_catches(resources, name):
    from cuda_host import HostKernelError

    p = PROBLEMS[0]
    launch = _launch(p, resources, 1)
    old, new = MUTATIONS[name]
    src = launch.kernel.render()
    assert old in src, f"mutation anchor {old!r} not in the source"
    with pytest.raises((AssertionError, HostKernelError)):
        out, ref, _ = _run(p, launch, seed=0, source=src.replace(old, new))
        _check(out, ref)
