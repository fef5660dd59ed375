"""GPU tier for the fused decode MLP (mlp_decode; marked ``gpu``, skipped cleanly without CuPy or a device).

On the running device, with the device's plan (its arch, SM count and the compiled kernel's resources): the 27B
shapes (w4, w8) and two small ones (a partial last slice, hidden 192) against the numpy reference, outputs and
partial sums poisoned with NaN first. Each case runs three times on the same inputs (h restored): the counters must
come back zero every time and the outputs must be bit-identical (the row blocks are summed in slice order whatever
the schedule). The driver's resident CTAs/SM must equal the plan's (the grid is the cooperative cap), and the
kernel must have no local memory.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from ninferc.ir.quant import quantize  # noqa: E402
from ninferc.targets.kernels.mlp_decode import MlpDecodeFamily, MlpProblem, kernel_args, reference  # noqa: E402
from ninferc.targets.plan import PlanContext, compile_variants  # noqa: E402

BF16_NAN = 0x7FC0
#: h: fp32 sums of 17,408-long dot products in another order than numpy's (relative L2); bf16 outputs: one-ulp flips
F32_REL, BF16_REL = 1e-5, 2e-3
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


def _rel(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "non-finite output (an element never written, or NaN)"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _bf16_bits_to_f32(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) << 16).view(np.float32)


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
    n_gu, _, n_rb = FAM.counts(p)
    assert ln.ctas == min(ln.ctas_per_sm * sms, n_gu)

    rng = np.random.default_rng(len(name))
    w_gu = rng.standard_normal((2 * p.inter, p.hidden), dtype=np.float32) / np.float32(np.sqrt(p.hidden))
    w_dn = rng.standard_normal((p.hidden, p.inter), dtype=np.float32) / np.float32(np.sqrt(p.inter))
    q_gu, q_dn = quantize(w_gu.astype(ml_dtypes.bfloat16), p.wfmt), quantize(w_dn.astype(ml_dtypes.bfloat16), p.wfmt)
    x = (rng.standard_normal((1, p.hidden), dtype=np.float32) * np.float32(3)).astype(ml_dtypes.bfloat16)
    ss_in = np.abs(rng.standard_normal((1, 7), dtype=np.float32)) * np.float32(9 * p.hidden / 7)
    h0 = rng.standard_normal((1, p.hidden), dtype=np.float32)
    norm_w = rng.standard_normal(p.hidden, dtype=np.float32) * np.float32(0.2)
    y_ref, h_ref, xs_ref, ss_ref = reference(p, x, q_gu.codes, q_gu.scales, q_dn.codes, q_dn.scales, ss_in, 1e-6, h0,
                                             norm_w)
    scratch = FAM.scratch_bytes(p)
    dev = {"w_gu": cp.asarray(q_gu.codes), "s_gu": cp.asarray(q_gu.scales), "w_dn": cp.asarray(q_dn.codes),
           "s_dn": cp.asarray(q_dn.scales), "x_gu": cp.asarray(x.view(np.uint16)), "ss_in": cp.asarray(ss_in),
           "y_gu": cp.full((1, p.inter), BF16_NAN, cp.uint16), "h": cp.asarray(h0), "norm_w": cp.asarray(norm_w),
           "xs": cp.full((1, p.hidden), BF16_NAN, cp.uint16), "ss_out": cp.full(n_rb, cp.nan, cp.float32),
           "parts": cp.full(scratch["mlp_parts"] // 4, cp.nan, cp.float32),
           "sync": cp.zeros(scratch["mlp_sync"] // 4, cp.uint32)}
    runs = []
    for _ in range(3):
        dev["h"][...] = cp.asarray(h0)
        k.launch(ln.grid, ln.block, kernel_args(p, ln, ss_parts=7, in_eps=1e-6, **dev), smem=ln.dynamic_smem_bytes,
                 cooperative=True)
        cp.cuda.Device().synchronize()
        assert not int(dev["sync"].any()), f"counters left {cp.asnumpy(dev['sync']).tolist()}"
        runs.append({n: cp.asnumpy(dev[n]).copy() for n in ("y_gu", "h", "xs", "ss_out")})
    out = runs[0]
    assert _rel(_bf16_bits_to_f32(out["y_gu"]), y_ref.astype(np.float32)) < BF16_REL
    assert _rel(out["h"], h_ref) < F32_REL
    assert _rel(_bf16_bits_to_f32(out["xs"]), xs_ref.astype(np.float32)) < BF16_REL
    np.testing.assert_allclose(out["ss_out"].sum(), ss_ref[0, 0], rtol=1e-5)
    for r in runs[1:]:
        for n in out:
            assert np.array_equal(r[n].view(np.uint8), out[n].view(np.uint8)), f"{n} differs between launches"
