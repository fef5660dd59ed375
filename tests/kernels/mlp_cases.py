"""Shared by the fused decode MLP's emulator and GPU tests (test_mlp_decode.py, test_mlp_decode_gpu.py): one case's
random inputs (quantised weights from ninferc.ir.quant, bf16 x, the norm's parts, the residual stream), its outputs
and scratch poisoned with NaN (counters zero), the numpy reference, and the checks."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ninferc.ir.quant import quantize
from ninferc.targets.kernels.mlp_decode import MlpDecodeFamily, MlpProblem
from ninferc.targets.kernels.mlp_decode import reference as mlp_reference

BF16_NAN = 0x7FC0
#: h: fp32 sums of K-long dot products in another order than numpy's (relative L2); bf16 outputs: one-ulp flips
F32_REL, BF16_REL = 1e-5, 2e-3
SS_PARTS, IN_EPS = 7, 1e-6  # the norm parts the case's producer wrote, and the norm's eps


def bf16_bits_to_f32(a: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> fp32."""
    return (a.astype(np.uint32) << 16).view(np.float32)


def rel(out, ref) -> float:
    """Relative L2 error of ``out`` against ``ref``; fails on a non-finite output (an element never written)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "non-finite output (an element never written, or NaN)"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def make_case(p: MlpProblem, seed: int, fam: MlpDecodeFamily):
    """``(inputs, outputs, ref)``: host arrays by kernel argument name (inputs: weights, scales, x_gu, ss_in; outputs:
    y_gu, h, xs, ss_out, parts, sync, norm_w -- poisoned, h the residual stream before the launch) and the reference
    ``(y, h_new, xs, ss)`` of :func:`ninferc.targets.kernels.mlp_decode.reference`."""
    rng = np.random.default_rng(seed)
    w_gu = rng.standard_normal((2 * p.inter, p.hidden), dtype=np.float32) / np.float32(np.sqrt(p.hidden))
    w_dn = rng.standard_normal((p.hidden, p.inter), dtype=np.float32) / np.float32(np.sqrt(p.inter))
    q_gu, q_dn = quantize(w_gu.astype(ml_dtypes.bfloat16), p.wfmt), quantize(w_dn.astype(ml_dtypes.bfloat16), p.wfmt)
    x = (rng.standard_normal((1, p.hidden), dtype=np.float32) * np.float32(3)).astype(ml_dtypes.bfloat16)
    ss_in = np.abs(rng.standard_normal((1, SS_PARTS), dtype=np.float32)) * np.float32(9 * p.hidden / SS_PARTS)
    h = rng.standard_normal((1, p.hidden), dtype=np.float32)
    norm_w = rng.standard_normal(p.hidden, dtype=np.float32) * np.float32(0.2)
    _, _, n_rb = fam.counts(p)
    scratch = fam.scratch_bytes(p)
    inputs = {"w_gu": np.ascontiguousarray(q_gu.codes), "s_gu": np.ascontiguousarray(q_gu.scales),
              "w_dn": np.ascontiguousarray(q_dn.codes), "s_dn": np.ascontiguousarray(q_dn.scales),
              "x_gu": np.ascontiguousarray(x.view(np.uint16)), "ss_in": ss_in}
    outputs = {"y_gu": np.full((1, p.inter), BF16_NAN, np.uint16), "h": h.copy(),
               "xs": np.full((1, p.hidden), BF16_NAN, np.uint16), "ss_out": np.full(n_rb, np.nan, np.float32),
               "parts": np.full(scratch["mlp_parts"] // 4, np.nan, np.float32),
               "sync": np.zeros(scratch["mlp_sync"] // 4, np.uint32), "norm_w": norm_w}
    ref = mlp_reference(p, x, q_gu.codes, q_gu.scales, q_dn.codes, q_dn.scales, ss_in, IN_EPS, h, norm_w)
    return inputs, outputs, ref


def check(out, ref) -> None:
    """The outputs (host arrays by name) against the reference; the counters must be back to zero."""
    y_ref, h_ref, xs_ref, ss_ref = ref
    assert rel(bf16_bits_to_f32(out["y_gu"]), y_ref.astype(np.float32)) < BF16_REL
    assert rel(out["h"], h_ref) < F32_REL
    assert rel(bf16_bits_to_f32(out["xs"]), xs_ref.astype(np.float32)) < BF16_REL
    np.testing.assert_allclose(out["ss_out"].sum(), ss_ref[0, 0], rtol=1e-5)  # the row blocks cover h once
    assert not out["sync"].any(), f"counters left {out['sync'].tolist()} (the next launch needs them zero)"
