"""CPU tests of the fused-dequantisation GEMV (gemv with ``wfmt`` w8 / w4, issue 6): problem validation,
kernel identity (bf16 URIs and sources untouched, one URI per format), the ABI per format, the numpy
reference (= fp32 matmul with ``ninferc.ir.quant``'s dequantised weight), split limits per format, route
selection on every target, and the exactness of the integer -> fp32 conversion the template uses.
GPU twin: tests/targets/test_gemv_gpu.py (the ``Q*`` cases)."""

from __future__ import annotations

import dataclasses
import functools
import re

import ml_dtypes
import numpy as np
import pytest

from ninferc.errors import PlanError
from ninferc.ir.quant import GROUP_SIZE, quantize
from ninferc.targets.arch import ARCHS
from ninferc.targets.kernels import FAMILIES
from ninferc.targets.kernels.gemv import (WFORMATS, GemvFamily, GemvTuning, GemvProblem, dequantize_weight, kernel_args,
                                               mma_stages, reference, ring_fits)
from ninferc.targets.plan import PlanContext, check_launch, compile_variants
from ninferc.targets.skus import skus_for_arch

GEMV = FAMILIES["gemv"]
ALL_ARCHS = tuple(ARCHS)

@functools.lru_cache(maxsize=None)
def resources(arch: str):
    specs = [s for p in GEMV.sample_problems() for s in GEMV.variants(p)]
    return {uri: r for uri, (_, r) in compile_variants(specs, arch).items()}


def _quantized(k, rows, fmt, seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, k), dtype=np.float32) / np.float32(np.sqrt(k))).astype(ml_dtypes.bfloat16)
    return w, quantize(w, fmt)


# ------------------------------------------------------------------------------------------------
# problems and identity
# ------------------------------------------------------------------------------------------------


def test_problem_validation_names_value_and_limit():
    GemvProblem(5120, 64, "store", "w4")  # 5120 = 80 groups of 64
    GemvProblem(17408, 64, "residual_add", "w4")
    GemvProblem(48, 64, "store", "w8")
    with pytest.raises(PlanError, match=r"K = 5136 must be a positive multiple of 64 for wfmt = w4"):
        GemvProblem(5136, 64, "store", "w4")  # a multiple of 16, not of 64
    with pytest.raises(PlanError, match=r"K = 5128 must be a positive multiple of 16 for wfmt = w8"):
        GemvProblem(5128, 64, "store", "w8")  # a multiple of 8 (fine for bf16), not of 16
    GemvProblem(5128, 64, "store")
    with pytest.raises(PlanError, match=r"unknown weight format wfmt = 'w2'.*bf16, w8, w4"):
        GemvProblem(64, 64, "store", "w2")
    with pytest.raises(PlanError, match="K = 0"):
        GemvProblem(0, 64, "store", "w8")
    assert GROUP_SIZE == 64  # the template's kW4Group (checked against the rendered source below)


def test_bf16_kernels_have_no_format_parameter():
    """bf16 kernels carry no ``wfmt`` (their URIs are those of the format-free kernels) and take no scales: the fp32-FMA
    template with its bf16 branch (``kBf16``; the code conversions are discarded ``if constexpr`` branches), and at
    the tiles of ``bf16_mma_tiles`` (4 and 8 since 2026-12-06) the tensor-core template's bf16 branch."""
    for prob in GEMV.sample_problems():
        if prob.quantized:
            continue
        for spec in GEMV.variants(prob):
            assert "wfmt" not in dict(spec.params) and "wfmt" not in spec.uri
            mma = GEMV.mma_for(prob, spec.param("max_tokens"))
            assert spec.template == ("gemv_mma.cu.j2" if mma else "gemv_fma.cu.j2"), spec.uri
            src = spec.render()
            assert "constexpr bool kBf16 = true;" in src and "scales" not in _signature(spec)


def test_uris_differ_per_format():
    """The w8 / w4 URIs of every CTA shape, mode and tile, derived from the bf16 fp32-FMA kernel's URI of the same
    shape (the registered family with bf16 on FMAs at every tile: its bf16 tensor-core tiles are plain-only kernels of
    another template)."""
    fma_bf16 = GemvFamily(dataclasses.replace(GEMV.tuning, bf16_mma_tiles=()))
    for ep in ("store", "residual_add", "swiglu", "add_norm_parts"):
        bf = GemvProblem(256, 704, ep)
        for spec in fma_bf16.variants(bf):
            th, mode = spec.threads, spec.param("mode")
            buri = spec.uri.replace("_unpack_w1", "")  # a bf16-only parameter (the weights converted once per vector)
            mt, kw = spec.param("max_tokens"), dict(spec.params).get("k_warps", 1)
            if GEMV.mma_for(GemvProblem(256, 704, ep, "w4"), mt) and not ring_fits(GEMV.tuning, th, mt):
                continue  # no tensor-core w4 variant of this CTA size (its rings exceed the 48 KiB budget)
            w8mma = GEMV.mma_for(GemvProblem(256, 704, ep, "w8"), mt)  # tensor-core w8 (1-token tile): plain only
            dp8 = GEMV.dp_for(GemvProblem(256, 704, ep, "w8"), mt)  # integer dot products: plain only
            dp4 = GEMV.dp_for(GemvProblem(256, 704, ep, "w4"), mt)  # (the registered family: w4 at one token)
            if (w8mma or dp8 or dp4) and mode != "plain":
                with pytest.raises(PlanError, match="plain mode only"):
                    GEMV.spec(GemvProblem(256, 704, ep, "w8" if (w8mma or dp8) else "w4"), th, mode, mt, kw)
                continue
            uris = {f: (spec.uri if f == "bf16" else GEMV.spec(GemvProblem(256, 704, ep, f), th, mode, mt, kw).uri)
                    for f in WFORMATS}
            assert len(set(uris.values())) == 3
            # quantised kernels differ by the format and by their rows per warp (quant_rows_per_warp)
            qbase = buri.replace(f"_rw{GEMV.rows_per_warp}_", f"_rw{GEMV.quant_rows_per_warp}_")
            # the dp flag is the first parameter of the URI, persist the one after the mode
            dbase = qbase.replace("gemv__", "gemv__dp1_").replace("_plain_", "_plain_persist1_")
            if w8mma:
                assert uris["w8"] == re.sub(r"_rw\d+_", "_rw16_", buri.replace(f"_tok{mt}_", f"_tok{mt}_mma1_")
                                            ) + "_wfmt-w8"
            else:
                # a dp_min_ctas entry for (w8, epilogue, tile, threads) adds its register cap, sorted before the mode
                cap = next((c for f, e, m, t, c in GEMV.dp_min_ctas if (f, e, m, t) == ("w8", ep, mt, th)), 0)
                d8 = dbase.replace("_plain_", f"_min_ctas{cap}_plain_") if cap > 1 else dbase
                assert uris["w8"] == (d8 if dp8 else qbase) + "_wfmt-w8"
            if GEMV.mma_for(GemvProblem(256, 704, ep, "w4"), mt):  # tensor-core w4 (4-token tile): 16 rows per warp
                mbase = re.sub(r"_rw\d+_", "_rw16_", buri.replace(
                    f"_tok{mt}_", f"_tok{mt}_mma1_mma_stages{mma_stages(th, tile=mt)}_"))
                assert uris["w4"] == mbase + "_wfmt-w4"
            else:
                assert uris["w4"] == (dbase if dp4 else qbase) + "_wfmt-w4"
    # sample problems cover every (epilogue, format) pair and both input modes, so CI compiles every template
    # parameter value
    assert {(p.epilogue, p.wfmt) for p in GEMV.sample_problems()} == {
        (e, f) for e in ("store", "residual_add", "swiglu", "add_norm_parts") for f in WFORMATS}
    assert {p.unit_offset for p in GEMV.sample_problems() if p.norm_out} == {True, False}
    assert {(p.epilogue, p.wfmt) for p in GEMV.sample_problems() if p.norm_in} == {
        (e, f) for e in ("store", "swiglu") for f in WFORMATS}


def test_rendered_quant_source_matches_the_format_constants():
    fma = GemvFamily(GemvTuning(w8_dp_tiles=(), w4_dp_tiles=()))
    w4 = fma.spec(GemvProblem(256, 704, "store", "w4"), 256, "coop", 1).render()
    w8 = fma.spec(GemvProblem(256, 704, "store", "w8"), 256, "coop", 1).render()  # FMAs (the 1-token tile)
    w4_dp = GEMV.spec(GemvProblem(256, 704, "store", "w4"), 128, "plain", 1).render()  # dp2a (the 1-token tile)
    w8_dp = GemvFamily(GemvTuning(w8_dp_tiles=(1,))).spec(GemvProblem(256, 704, "store", "w8"), 128, "plain", 1).render()
    w4_mma = GEMV.spec(GemvProblem(256, 704, "store", "w4"), 128, "coop", 4).render()  # tensor cores (4-token tile)
    w8_mma = GemvFamily(GemvTuning(w8_mma_tiles=(1,))).spec(GemvProblem(256, 704, "store", "w8"), 128, "plain", 1).render()
    assert f"constexpr int kW4Group = {GROUP_SIZE};" in w4
    assert "constexpr bool kW4 = true;" in w4 and "constexpr bool kW4 = false;" in w8
    # one template per compute engine: fp32 FMAs, tensor cores (mma), integer dot products (dp)
    assert all("rendered by ninferc from gemv_fma.cu.j2" in src for src in (w4, w8))
    assert all("rendered by ninferc from gemv_mma.cu.j2" in src for src in (w4_mma, w8_mma))
    assert all("rendered by ninferc from gemv_dp.cu.j2" in src for src in (w4_dp, w8_dp))
    for src in (w4, w8):
        assert "ld_stream_v4(wrow[j]" in src and "codes_to_f32(wv[j]" in src  # 16-byte loads, fp32 codes
    assert "cp_async16(" in w4_mma and "mma_bf16_16816(" in w4_mma  # whole 16-byte pieces into the ring
    assert "mma_f16_16816(" in w8_mma and "ld_stream_v4(ra " in w8_mma and "mma_w4_ktile<" not in w8_mma.split(
        'extern "C"')[1]
    for src in (w4_dp, w8_dp):
        assert "ld_stream_v4(wrow[j]" in src and "dp2a_lo(" in src
    assert "dp_w4x8(wv[j].x" in w4_dp and "dp_w8x16(wv[j]" in w8_dp
    for src in (w4, w8, w4_mma, w8_mma):
        assert "dp_w8x16" not in src


# ------------------------------------------------------------------------------------------------
# ABI
# ------------------------------------------------------------------------------------------------


def _signature(spec):
    src = spec.render()
    sig = re.search(rf"{spec.entry}\(([^)]*)\)", src).group(1)
    return tuple(p.split()[-1].strip("*") for p in sig.replace("__restrict__", "").split(","))


@pytest.mark.parametrize("fmt", WFORMATS)
def test_arg_names_per_format(fmt):
    prob = GemvProblem(256, 704, "swiglu", fmt)
    names = GEMV.arg_names(prob)
    if fmt == "bf16":
        assert names == ("w", "x", "y", "ws", "barrier", "k", "n_out", "t_total", "splits")
    else:
        assert names == ("w", "scales", "x", "y", "ws", "barrier", "k", "n_out", "t_total", "splits")
    for spec in GEMV.variants(prob):
        assert _signature(spec) == names, spec.uri
    ctx = PlanContext("sm_90", 132, resources("sm_90"))
    ln = GEMV.launch(prob, 3, ctx)
    scales = "S" if fmt != "bf16" else None
    args = kernel_args(prob, ln, "W", "X", "Y", "WS", "B", scales=scales)
    assert len(args) == len(names)
    assert args[:names.index("k")] == (("W", "S", "X", "Y", "WS", "B") if scales else ("W", "X", "Y", "WS", "B"))
    assert [int(a) for a in args[-4:]] == [256, 704, 3, ln.split_k]
    # positional bf16 callers keep working; an unused ws/barrier becomes a 64-bit null
    if fmt == "bf16":
        assert kernel_args(prob, ln, "W", "X", "Y")[3:5] == (np.uint64(0), np.uint64(0))


def test_kernel_args_scales_errors():
    ctx = PlanContext("sm_90", 132, resources("sm_90"))
    for fmt in ("w8", "w4"):
        p = GemvProblem(256, 704, "store", fmt)
        with pytest.raises(PlanError, match=f"{fmt} problem needs its scales"):
            kernel_args(p, GEMV.launch(p, 1, ctx), "W", "X", "Y")
    p = GemvProblem(256, 704)
    with pytest.raises(PlanError, match="bf16 problem takes no scales"):
        kernel_args(p, GEMV.launch(p, 1, ctx), "W", "X", "Y", scales="S")


def test_weight_shapes():
    assert GemvProblem(128, 8, "swiglu", "w8").weight_shapes() == {"w": ((16, 128), "int8"),
                                                                  "scales": ((16,), "float32")}
    assert GemvProblem(128, 8, "store", "w4").weight_shapes() == {"w": ((8, 64), "uint8"),
                                                                 "scales": ((8, 2), "float32")}
    assert GemvProblem(128, 8).weight_shapes() == {"w": ((8, 128), "bfloat16")}


# ------------------------------------------------------------------------------------------------
# numpy reference
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["w8", "w4"])
@pytest.mark.parametrize("epilogue", ["store", "residual_add", "swiglu"])
def test_reference_is_the_dequantised_matmul(fmt, epilogue):
    k, n = 192, 24
    prob = GemvProblem(k, n, epilogue, fmt)
    w, qt = _quantized(k, prob.w_rows, fmt, seed=1)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    y0 = rng.standard_normal((5, n), dtype=np.float32) if epilogue == "residual_add" else None
    got = reference(prob, x, qt.codes, y0, scales=qt.scales)
    wdq = qt.dequantize()
    np.testing.assert_array_equal(dequantize_weight(prob, qt.codes, qt.scales), wdq)
    want = reference(GemvProblem(k, n, epilogue), x, wdq, y0)  # the bf16 path on the fl32(q * s) weights
    assert got.dtype == want.dtype and got.shape == (5, n)
    np.testing.assert_array_equal(got, want)
    if epilogue == "store":  # and it is x @ dequant(w).T in fp32
        np.testing.assert_array_equal(got, x.astype(np.float32) @ wdq.T)
        # sanity: quantisation moves the result by about its error bound, not more
        exact = x.astype(np.float32) @ w.astype(np.float32).T
        rel = np.linalg.norm(got - exact) / np.linalg.norm(exact)
        assert rel < (0.01 if fmt == "w8" else 0.15), rel


def test_reference_errors():
    k, n = 128, 8
    x = np.zeros((1, k), np.float32)
    _, q8 = _quantized(k, n, "w8")
    _, q4 = _quantized(k, n, "w4")
    p8, p4 = GemvProblem(k, n, "store", "w8"), GemvProblem(k, n, "store", "w4")
    with pytest.raises(PlanError, match="needs its scales"):
        reference(p8, x, q8.codes)
    with pytest.raises(PlanError, match="takes no scales"):
        reference(GemvProblem(k, n), x, q8.codes.astype(np.float32), scales=q8.scales)
    with pytest.raises(PlanError, match=r"expected codes/scales"):
        reference(p4, x, q8.codes, scales=q8.scales)  # w8 data for a w4 problem
    with pytest.raises(PlanError, match=r"expected codes/scales"):
        reference(p8, x, q8.codes[:, :64], scales=q8.scales)
    with pytest.raises(PlanError, match=r"expected codes/scales"):
        reference(p4, x, q4.codes, scales=q4.scales.astype(np.float64))


# ------------------------------------------------------------------------------------------------
# split limits and routes
# ------------------------------------------------------------------------------------------------


def test_max_splits_per_format():
    """Every lane gets at least one 16-byte weight vector per split: K / (8, 16, 32 elements) / 32 lanes."""
    want = {5120: {"bf16": 20, "w8": 10, "w4": 5}, 17408: {"bf16": 68, "w8": 34, "w4": 17},
            6144: {"bf16": 24, "w8": 12, "w4": 6}, 256: {"bf16": 1, "w8": 1, "w4": 1}}
    for k, per in want.items():
        for fmt, s in per.items():
            assert GEMV.max_splits(GemvProblem(k, 64, "store", fmt)) == s, (k, fmt)
    assert GEMV.max_splits(GemvProblem(64, 64, "store", "w4")) == 1  # fewer vectors than lanes: one split


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_quant_routes_respect_caps_and_format_split_limits(arch):
    res = resources(arch)
    shapes = [(5120, 16480, "store"), (6144, 5120, "residual_add"), (5120, 17408, "swiglu"),
              (17408, 5120, "residual_add"), (5120, 248320, "store"), (2048, 256, "residual_add")]
    for sku in skus_for_arch(arch):
        ctx = PlanContext(arch, sku.sms, res)
        for k, n, ep in shapes:
            for fmt in ("w8", "w4"):
                prob = GemvProblem(k, n, ep, fmt)
                kvec = k // prob.k_per_vec
                for t in (1, 2, 3, 4, 5, 8, 16, 33):
                    ln = GEMV.launch(prob, t, ctx)
                    check_launch(ln, arch, res[ln.kernel.uri], ctx.sms)
                    assert ln.kernel.param("wfmt") == fmt
                    assert 1 <= ln.split_k <= GEMV.max_splits(prob)
                    assert -(-kvec // ln.split_k) >= 32  # every lane has a vector in every split
                    if ln.cooperative:
                        assert ln.route == "coop_splitk" and ln.split_k >= 2 and ln.ctas <= ln.coop_cap
                        assert ln.workspace_bytes == GEMV.workspace_bytes(prob, t, ln.split_k)
                    else:
                        assert ln.route == "plain" and ln.split_k == 1 and ln.workspace_bytes == 0


def test_fewer_splits_for_narrower_formats_on_a_long_k():
    """A narrow N with a long K is split as far as the format allows: the split count is capped at
    K/(32 x vector length), so w4 gets at most a quarter of bf16's splits."""
    fma = GemvFamily(GemvTuning(w8_dp_tiles=(), w4_dp_tiles=()))  # the FMA kernels of every format (dp: plain only)
    specs = [fma.spec(GemvProblem(17408, 256, "residual_add", f), 256, "coop", 1) for f in WFORMATS]
    ctx = PlanContext("sm_90", 132, {u: r for u, (_, r) in compile_variants(specs, "sm_90").items()})
    got = {f: fma.launch_variant(GemvProblem(17408, 256, "residual_add", f), 1, ctx, 256, "coop",
                                  max_tokens=1) for f in WFORMATS}
    assert all(g.split_k >= 2 for g in got.values())
    assert got["w4"].split_k <= 17 and got["w8"].split_k <= 34
    assert got["w4"].split_k <= got["w8"].split_k <= got["bf16"].split_k


# ------------------------------------------------------------------------------------------------
# the integer -> fp32 conversion of the template (numpy model of PRMT + FADD)
# ------------------------------------------------------------------------------------------------


def _byte_perm(x: np.ndarray, y: int, sel: int) -> np.ndarray:
    """CUDA __byte_perm(x, y, s) (default mode): result byte n = byte (s >> 4n) & 7 of the pool y:x."""
    pool = (y << 32) | x.astype(np.uint64)
    out = np.zeros_like(x, dtype=np.uint64)
    for n in range(4):
        b = (sel >> (4 * n)) & 7
        out |= ((pool >> np.uint64(8 * b)) & np.uint64(0xFF)) << np.uint64(8 * n)
    return out.astype(np.uint32)


def _magic(v: np.ndarray, i: int, bias: float) -> np.ndarray:
    return (_byte_perm(v, 0x4B000000, 0x7440 | i).view(np.float32) - np.float32(8388608.0 + bias)).astype(np.float32)


def test_magic_number_dequant_is_exact_for_every_code():
    words = np.arange(256, dtype=np.uint32) * np.uint32(0x01010101)  # every byte value in every lane
    q8 = (words & 0xFF).astype(np.uint8).view(np.int8).astype(np.float32)
    for i in range(4):  # w8: codes read as offset binary u = q + 128
        np.testing.assert_array_equal(_magic(words ^ np.uint32(0x80808080), i, 128.0), q8)
    rng = np.random.default_rng(3)
    packed = rng.integers(0, 256, size=(64, 4), dtype=np.uint8)  # 64 rows of 8 nibble codes
    word = packed.view(np.uint32).reshape(-1)
    lo, hi = word & np.uint32(0x0F0F0F0F), (word >> np.uint32(4)) & np.uint32(0x0F0F0F0F)
    got = np.stack([_magic(lo if e % 2 == 0 else hi, e // 2, 8.0) for e in range(8)], axis=1)
    from ninferc.ir.quant import unpack_int4

    np.testing.assert_array_equal(got, unpack_int4(packed).astype(np.float32))


def test_trace_probe_is_a_bench_tool_not_a_family_option():
    """The per-CTA trace of the dp GEMVs is bench/dp_trace_probe.py's (``trace_gemv``, used by bench/attn_trace_probe.py
    --family gemv): the family has no trace option and plans no traced kernel, its dp kernels carry the template's
    empty hooks; the probe's gate|up kernels define them (the record array, its URI says ``trace1``), only for the named
    epilogues, and compile for sm_90 without spills."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from dp_trace_probe import trace_gemv

    gu = GemvProblem(5120, 17408, "swiglu", "w8", in_norm="parts")
    store = GemvProblem(5120, 14336, "store", "w8", in_norm="parts")
    assert "trace_epilogues" not in GemvTuning.__dataclass_fields__

    def has(s, name):
        return bool(dict(s.params).get(name))

    plain = GemvFamily().variants(gu)
    assert any(has(s, "dp") for s in plain) and not any(has(s, "trace") for s in plain)
    src = next(s for s in plain if has(s, "dp")).render()
    assert "#ifndef GEMV_TRACE_BEGIN" in src and "gemv_trace[" not in src
    fam = GemvFamily()
    trace_gemv(fam, ("swiglu",))
    assert all(has(s, "trace") == has(s, "dp") for s in fam.variants(gu))
    assert not any(has(s, "trace") for s in fam.variants(store))
    traced = [s for s in fam.variants(gu) if has(s, "trace")]
    assert all("__device__ unsigned long long gemv_trace[" in s.render() for s in traced)
    for uri, (_, r) in compile_variants(traced, "sm_90").items():
        assert r.local_bytes == 0, f"{uri} spills {r.local_bytes} B"
