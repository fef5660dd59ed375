"""Op-level reference semantics: GDN forms agree, norm conventions, partial RoPE."""

import ml_dtypes
import numpy as np
import pytest

from ninferc.ir.config import preset
from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.reference import (
    ref_gated_delta_rule_chunked,
    ref_gated_delta_rule_recurrent,
    ref_gated_rmsnorm,
    ref_l2norm,
    ref_partial_rope,
    ref_rmsnorm,
)
from ninferc.ir.tolerances import FP32_REORDER

rng = np.random.default_rng(1234)


def _gdn_inputs(T, Hk=2, Hv=6, dk=16, dv=8):
    q = ref_l2norm(rng.standard_normal((T, Hk, dk)).astype(np.float32))
    k = ref_l2norm(rng.standard_normal((T, Hk, dk)).astype(np.float32))
    v = rng.standard_normal((T, Hv, dv)).astype(np.float32)
    g = -np.abs(rng.standard_normal((T, Hv))).astype(np.float32) * 0.5
    beta = rng.uniform(0.05, 0.95, (T, Hv)).astype(np.float32)
    S0 = rng.standard_normal((Hv, dk, dv)).astype(np.float32) * 0.3
    return q, k, v, g, beta, S0


@pytest.mark.parametrize("T", [1, 7, 63, 64, 65, 130])
def test_gdn_chunked_equals_recurrent(T):
    q, k, v, g, beta, S0 = _gdn_inputs(T)
    o_r, S_r = ref_gated_delta_rule_recurrent(q, k, v, g, beta, S0, scale=16 ** -0.5)
    o_c, S_c = ref_gated_delta_rule_chunked(q, k, v, g, beta, S0, scale=16 ** -0.5, chunk=16)
    FP32_REORDER.check(o_c, o_r, f"output T={T}")
    FP32_REORDER.check(S_c, S_r, f"state T={T}")


def test_gdn_recurrent_one_step_formula():
    """One token by hand: S' = S*exp(g) + k (beta (v - (S*exp(g))^T k))^T, o = S'^T q*scale."""
    q, k, v, g, beta, S0 = _gdn_inputs(1, Hk=1, Hv=1, dk=4, dv=3)
    S = S0[0] * np.exp(g[0, 0])
    kk, vv, qq = k[0, 0].astype(np.float64), v[0, 0].astype(np.float64), q[0, 0].astype(np.float64)
    S1 = S + np.outer(kk, beta[0, 0] * (vv - S.T @ kk))
    o, Sn = ref_gated_delta_rule_recurrent(q, k, v, g, beta, S0, scale=0.5)
    np.testing.assert_allclose(Sn[0], S1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o[0, 0], S1.T @ (qq * 0.5), rtol=1e-5, atol=1e-6)


def test_gdn_value_heads_use_key_head_j_div_ratio():
    """V head j reads Q/K head j // (Hv/Hk) (repeat_interleave), not j % Hk."""
    q, k, v, g, beta, S0 = _gdn_inputs(3, Hk=2, Hv=6)
    o, _ = ref_gated_delta_rule_recurrent(q, k, v, g, beta, S0, scale=1.0)
    for j in range(6):
        oj, _ = ref_gated_delta_rule_recurrent(q[:, [j // 3]], k[:, [j // 3]], v[:, [j]], g[:, [j]],
                                               beta[:, [j]], S0[[j]], scale=1.0)
        np.testing.assert_allclose(o[:, j], oj[:, 0], rtol=1e-6)


NORM_TABLE = {  # op-name suffix -> (kind, unit_offset)
    "input_norm": ("RMSNorm", True),
    "post_norm": ("RMSNorm", True),
    "attn.q_norm": ("RMSNorm", True),
    "attn.k_norm": ("RMSNorm", True),
    "final_norm": ("RMSNorm", True),
    "gdn.norm": ("GatedRMSNorm", None),
}


def test_norm_table_in_graph():
    """input, post-attention, q/k and final norms use (1 + w); the GDN output norm uses plain w."""
    g = build_graph(preset("qwen3.8-27b"))
    seen = {k: 0 for k in NORM_TABLE}
    for op in g.ops():
        for suffix, (kind, unit) in NORM_TABLE.items():
            if op.name == suffix or op.name.endswith("." + suffix):
                assert op.kind == kind, op.name
                if kind == "RMSNorm":
                    assert op.attrs["unit_offset"] is unit, op.name
                else:
                    assert "unit_offset" not in op.attrs
                seen[suffix] += 1
    assert seen == {"input_norm": 65, "post_norm": 65, "attn.q_norm": 16, "attn.k_norm": 16,
                    "final_norm": 1, "gdn.norm": 49}


def test_unit_offset_scale_is_one_plus_w_in_fp32():
    """w = 0.003 stored in bf16 (= 0.0030059814453125): the applied scale is 1 + w computed in fp32 (1.003006),
    not 1.0 (what (1 + w) rounded to bf16 would give) and not 0.003."""
    w = np.full(64, 0.003, dtype=ml_dtypes.bfloat16)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    y = ref_rmsnorm(x, w, 1e-6, unit_offset=True)
    xn = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6)
    scale = y / xn
    expect = np.float32(1.0) + np.float32(w[0])
    assert float(w[0]) == 0.0030059814453125 and abs(expect - 1.0030059814453125) < 1e-7
    np.testing.assert_allclose(scale, expect, rtol=2e-6)
    assert np.all(np.abs(scale - 1.0) > 2e-3)
    # the GDN output norm uses plain w
    z = rng.standard_normal((3, 64)).astype(np.float32)
    yg = ref_gated_rmsnorm(x, z, w, 1e-6)
    silu = z / (1 + np.exp(-z))
    np.testing.assert_allclose(yg / (xn * silu), np.float32(w[0]), rtol=2e-5)


@pytest.mark.parametrize("pos", [0, 1, 700, 2355, 100000])
def test_partial_rope_256_dims_64_rotated(pos):
    hd, rd, theta = 256, 64, 1e7
    x = rng.standard_normal((1, 3, hd)).astype(np.float32)
    y = ref_partial_rope(x, np.array([pos]), rd, theta)
    np.testing.assert_array_equal(y[..., rd:], x[..., rd:])  # untouched, bit for bit
    # HF formula written out independently: inv_freq_i = 1/theta^(2i/rd) (fp32), angle = fp32(pos*inv),
    # out[i] = x[i] cos a_i - x[i+rd/2] sin a_i ; out[i+rd/2] = x[i+rd/2] cos a_i + x[i] sin a_i
    half = rd // 2
    # (torch: fp32 exponent, fp32 power, fp32 reciprocal — each rounded to fp32)
    expo = np.arange(0, rd, 2, dtype=np.float32) / np.float32(rd)
    inv = np.float32(1.0) / (theta ** expo.astype(np.float64)).astype(np.float32)
    a = (np.float32(pos) * inv).astype(np.float64)
    x1, x2 = x[..., :half].astype(np.float64), x[..., half:rd].astype(np.float64)
    exp1 = x1 * np.cos(a) - x2 * np.sin(a)
    exp2 = x2 * np.cos(a) + x1 * np.sin(a)
    np.testing.assert_allclose(y[..., :half], exp1, atol=2e-6)
    np.testing.assert_allclose(y[..., half:rd], exp2, atol=2e-6)
    if pos == 0:
        np.testing.assert_allclose(y, x, atol=0)
    else:
        assert np.max(np.abs(y[..., :rd] - x[..., :rd])) > 1e-3
