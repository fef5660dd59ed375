"""GPU tier for the fused decode MLP (mlp_decode; marked ``gpu``, skipped cleanly without CuPy or a device).

On the running device, with the device's plan (its arch, SM count and the compiled kernel's resources): the 27B
shapes (w4, w8) and two small ones (a partial last slice, hidden 192) against the numpy reference, outputs and
partial sums poisoned with NaN first. Each case runs three times on the same inputs (h restored): the counters must
come back zero every time and the outputs must be bit-identical (the row blocks are summed in slice order whatever
the schedule). The driver's resident CTAs/SM must equal the plan's (the grid is the cooperative cap), and the
kernel must have no local memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mlp_cases import IN_EPS, SS_PARTS, check, make_case  # noqa: E402

from ninferc.targets.kernels.mlp_decode import MlpDecodeFamily, MlpProblem, kernel_args  # noqa: E402
from ninferc.targets.plan import PlanContext, compile_variants  # noqa: E402

PROBLEMS = {"27b-w4": MlpProblem(5120, 17408, "w4"), "27b-w8": MlpProblem(5120, 17408, "w8"),
            "small-w4": MlpProblem(256, 1536, "w4", False), "small-w8": MlpProblem(192, 1024, "w8")}
FAM = MlpDecodeFamily()


@pytest.fixture(scope="module")
def device():
    from ninferc.runtime.kernels import device_arch, device_sm_count

    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as exc:  # no driver
        pytest.skip(f"no usable CUDA device: {exc}")
    return device_arch(), device_sm_count()


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_mlp_decode_on_the_device(device, name):
    from ninferc.runtime.kernels import DeviceKernel

    arch, sms = device
    p = PROBLEMS[name]
    spec = FAM.spec(p)
    built = compile_variants([spec], arch)
    ln = FAM.launch(p, 1, PlanContext(arch, sms, {u: r for u, (_, r) in built.items()}))
    k = DeviceKernel.from_spec(ln.kernel)
    assert k.driver_occupancy(ln.threads, ln.dynamic_smem_bytes) == ln.ctas_per_sm
    assert k.attributes().local_bytes == 0
    assert ln.ctas == min(ln.ctas_per_sm * sms, FAM.counts(p)[0])

    inputs, outputs, ref = make_case(p, len(name), FAM)
    h0 = outputs["h"].copy()
    dev = {n: cp.asarray(a) for n, a in {**inputs, **outputs}.items()}
    runs = []
    for _ in range(3):
        dev["h"][...] = cp.asarray(h0)
        k.launch(ln.grid, ln.block, kernel_args(p, ln, ss_parts=SS_PARTS, in_eps=IN_EPS, **dev),
                 smem=ln.dynamic_smem_bytes, cooperative=True)
        cp.cuda.Device().synchronize()
        runs.append({n: cp.asnumpy(dev[n]).copy() for n in ("y_gu", "h", "xs", "ss_out", "sync")})
    for r in runs:
        check(r, ref)  # (counters back to zero after every launch)
    for r in runs[1:]:
        for n in runs[0]:
            assert np.array_equal(r[n].view(np.uint8), runs[0][n].view(np.uint8)), f"{n} differs between launches"
