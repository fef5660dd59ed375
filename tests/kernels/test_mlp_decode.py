"""The fused decode MLP (mlp_decode) on the CPU emulator (tests/kernels/cuda_host.py): w8 and w4, both norm forms,
grids of a few CTAs (so the ticket counter hands out most items and down items wait for other CTAs' gate|up items)
and a partial last slice of y, in thread order and reversed -- against the numpy reference (gemv's gate|up
then down references). Outputs and scratch are poisoned first; the counters must come back zero. Broken variants
of the source (no wait for the slice, a row block summed one slice early, the counters not cleared, a gate|up item
not counted in) must fail.
The GPU tier runs the same kernel on the device (tests/kernels/test_mlp_decode_gpu.py).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mlp_cases import IN_EPS, SS_PARTS, check, make_case  # noqa: E402

from ninferc.targets.kernels.mlp_decode import MlpDecodeFamily, MlpProblem, kernel_args  # noqa: E402
from ninferc.targets.plan import PlanContext, compile_variants  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU emulator needs g++")

ARCH = "sm_90"
#: hidden 256 (eight row blocks of 32 rows), inter 1536: w4 slices of 1024 (the second one half full), w8 of 512
PROBLEMS = [MlpProblem(256, 1536, "w4", True), MlpProblem(256, 1536, "w8", False), MlpProblem(192, 1024, "w8", True)]
FAM = MlpDecodeFamily()


@pytest.fixture(scope="module")
def resources():
    built = compile_variants([FAM.spec(p) for p in PROBLEMS], ARCH)
    return {u: r for u, (_, r) in built.items()}


def _launch(p: MlpProblem, resources, sms: int):
    return FAM.launch(p, 1, PlanContext(ARCH, sms, resources))


def _run(p: MlpProblem, launch, seed: int, *, source: str | None = None, reverse: bool = False, fam=FAM):
    from cuda_host import HostKernel

    inputs, out, ref = make_case(p, seed, fam)
    assert launch.workspace_bytes == 4 * fam.norm_parts(launch) == 4 * fam.counts(p)[2]
    args = kernel_args(p, launch, ss_parts=SS_PARTS, in_eps=IN_EPS, **inputs, **out)
    spec = launch.kernel
    HostKernel(source or spec.render(), spec.entry).launch(launch.grid, launch.block, args,
                                                           smem=launch.dynamic_smem_bytes, cooperative=True,
                                                           reverse=reverse)
    return out, ref


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
    out, ref = _run(p, launch, seed=i, reverse=rev)
    check(out, ref)


MUTATIONS = {
    "no wait for the slice": ("ninfer::wait_count_geq(ready + s, need);", ""),
    "a row block summed one slice early": ("(unsigned int)(n_sl * kWarps - 1)", "(unsigned int)(n_sl * kWarps - 1 - kWarps)"),
    "counters not cleared": ("for (int i = 0; i < 2 + n_sl + n_rb; ++i) sync[i] = 0u;", ""),
    "the gate|up item not counted in": ("atomicAdd(ready + item * kWarps / kSlice, 1u);", ""),
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
        out, ref = _run(p, launch, seed=0, source=src.replace(old, new))
        check(out, ref)
