"""GPU tier of the gated-attention kernels: attn_prep, attn_decode + attn_combine and attn_prefill on the
device vs the numpy references of targets/kernels/attention.py, at the tiny-fixture and 27B shapes, with
the bf16 KV cache and (``*_int8`` tests, a smaller sweep of the same boundaries) the int8 one.

Every case: fresh random inputs, shuffled page tables, free pages / rows / page-table slots full of
garbage (+-1e4 with NaN and +-Inf sprinkled in), outputs and workspace poisoned (NaN / 0xFFFF) before each
launch, tolerances from ninferc.ir.tolerances. Failures print where the largest error is.

Each stage is checked on its own inputs from the device (q_out and pages written by attn_prep), so a
failure names the kernel that broke; the end-to-end output is also checked against the reference fed
with the reference's own prep. int8: attn_prep's v codes and scales must equal numpy's bit for bit (same
fp32 input); its k codes may differ by one and its k scales by a few ulps, as the kernel's fp32 RMSNorm /
RoPE rounds differently from numpy's (attn_cases.check_int8_rows states the bounds); attention is compared
with the same ATTENTION tolerance as bf16 (every route dequantises exactly, fl32(code * scale), or keeps the
products exact: module docstring of targets/kernels/attention.py).
"""

from __future__ import annotations

import dataclasses
import functools
import zlib

import numpy as np
import pytest

from attn_cases import (ALL_PROBLEMS, PROBLEMS, PROBLEMS_INT8, SPLIT_MODES, check_far_prep, check_int8_rows,
                        far_prep_case, make_cache, make_step, pool_bits, split_geometry)
from ninferc.ir.tolerances import ATTENTION, BF16_ELEMENTWISE, FP32_REORDER
from ninferc.targets.kernels import attention as A

pytestmark = pytest.mark.gpu

PREP, DECODE, COMBINE, PREFILL = A.FAMILIES
NAN_F32 = np.float32(np.nan)
POISON_BF16 = 0xFFFF  # a NaN bit pattern


def _cp():
    import cupy

    return cupy


# ------------------------------------------------------------------------------------------------
# device plumbing
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def device_kernel(spec):
    """The spec compiled for the running device and loaded (DeviceKernel), once per spec."""
    from ninferc.runtime.kernels import DeviceKernel

    return DeviceKernel.from_spec(spec)


@functools.lru_cache(maxsize=None)
def device_ctx():
    """PlanContext of the running device with the resources read from the cubins actually loaded."""
    from ninferc.runtime.kernels import device_arch, device_sm_count
    from ninferc.targets.cubin import read_resources
    from ninferc.targets.plan import PlanContext

    arch = device_arch()
    res = {}
    staged = [A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, DECODE.balance_keys,
                                 DECODE.balance_keys_int8, A.DecodeStaging(stage_kv=True, stage_keys=t),
                                 fuse_prep=False)
              for t in (0, 32)]
    for fam in (*A.FAMILIES, *staged):  # + the staged decode kernels (stage_kv), planned or not
        for p in ALL_PROBLEMS.values():
            for spec in fam.variants(p):
                k = device_kernel(spec)
                res[spec.uri] = read_resources(k.compiled.cubin, arch)[spec.entry]
    return PlanContext(arch, device_sm_count(), res)


def run(launch, args):
    """Launch a plan Launch's kernel with ``args`` and wait for it."""
    k = device_kernel(launch.kernel)
    k.launch(launch.grid, launch.block, args, smem=launch.dynamic_smem_bytes, cooperative=launch.cooperative)
    _cp().cuda.runtime.deviceSynchronize()


def seed(*parts) -> int:
    """A stable per-case seed (str hashes are salted per process)."""
    return zlib.crc32(repr(parts).encode())


def from_dev_bf16(x):
    return A.from_bf16_bits(_cp().asnumpy(x))


def poisoned_f32(shape):
    cp = _cp()
    return cp.full(shape, NAN_F32, dtype=cp.float32)


def poisoned_bf16(shape):
    cp = _cp()
    return cp.full(shape, POISON_BF16, dtype=cp.uint16)


# ------------------------------------------------------------------------------------------------
# diagnostics
# ------------------------------------------------------------------------------------------------


def where_worst(got, ref, dims: str) -> str:
    """Location, values and error of the largest |got - ref| (NaN counts as worst), e.g. 't=2 h=5 d=17'."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    err = np.abs(got - ref)
    err = np.where(np.isfinite(err), err, np.inf)
    i = np.unravel_index(int(np.argmax(err)), err.shape)
    loc = " ".join(f"{n}={v}" for n, v in zip(dims.split(), i))
    bad = int(np.sum(~np.isfinite(got)))
    return (f"worst at {loc}: got {got[i]!r}, ref {ref[i]!r} (|err| {err[i]:.3g}); non-finite outputs: {bad}; "
            f"max |ref| {np.max(np.abs(ref)):.3g}")


def check(tol, got, ref, what: str, dims: str) -> None:
    """tol.check with the worst element's location appended on failure."""
    try:
        tol.check(got, ref, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n  {where_worst(got, ref, dims)}") from None


# ------------------------------------------------------------------------------------------------
# one attention step on the device
# ------------------------------------------------------------------------------------------------


def upload_pages(p, k_pages, v_pages) -> dict:
    """Device KV pool arrays by argument name: bf16 bits, or int8 codes + fp32 scales."""
    cp = _cp()
    return {k: cp.asarray(v) for k, v in pool_bits(p, k_pages, v_pages).items()}


def download_pages(p, dev):
    """(k_pages, v_pages) on the host in the references' form: fp32 arrays of bf16 values, or Int8Pages."""
    cp = _cp()
    if p.kv_dtype == "int8":
        return (A.Int8Pages(cp.asnumpy(dev["k_pages"]), cp.asnumpy(dev["k_scales"])),
                A.Int8Pages(cp.asnumpy(dev["v_pages"]), cp.asnumpy(dev["v_scales"])))
    return from_dev_bf16(dev["k_pages"]), from_dev_bf16(dev["v_pages"])


def device_step(p, cache, st):
    """Upload the cache and the step, run attn_prep; returns the dict of device arrays by argument name."""
    cp = _cp()
    T = st["proj"].shape[0]
    dev = {
        "proj": cp.asarray(st["proj"]),
        "q_norm_w": cp.asarray(st["q_norm_w"]),
        "k_norm_w": cp.asarray(st["k_norm_w"]),
        "inv_freq": cp.asarray(p.inv_freq()),
        "tok_pos": cp.asarray(st["tok_pos"]),
        "tok_seq": cp.asarray(st["tok_seq"]),
        "seq_start": cp.asarray(st["seq_start"]),
        "seq_ctx": cp.asarray(st["seq_ctx"]),
        "page_table": cp.asarray(cache.page_table),
        **upload_pages(p, cache.k_pages, cache.v_pages),
        "q_out": poisoned_f32((T, p.heads_q, p.head_dim)),
    }
    ln = PREP.launch(p, T, device_ctx())
    run(ln, PREP.kernel_args(p, ln, dev))
    return dev


def check_prep(p, cache, st, dev):
    """attn_prep vs reference_prep: q (fp32), written K rows (bf16), V rows (exact), untouched rows (bitwise);
    int8: see :func:`check_prep_int8`. Returns (q_ref, kp_ref, vp_ref, q_dev, kp_dev, vp_dev), pages in the
    references' form."""
    cp = _cp()
    q_ref, kp_ref, vp_ref = A.reference_prep(p, st["proj"], st["q_norm_w"], st["k_norm_w"], st["tok_pos"],
                                             st["tok_seq"], cache.page_table, cache.k_pages, cache.v_pages)
    q_dev = cp.asnumpy(dev["q_out"])
    check(FP32_REORDER, q_dev, q_ref, "attn_prep q_out", "t h d")
    if p.kv_dtype == "int8":
        return (q_ref, kp_ref, vp_ref, q_dev) + check_prep_int8(p, cache, st, dev, kp_ref, vp_ref)
    k_bits, v_bits = cp.asnumpy(dev["k_pages"]), cp.asnumpy(dev["v_pages"])
    rows = [(cache.page_table[b, ps // p.page_size], ps % p.page_size) for b, ps in zip(st["tok_seq"], st["tok_pos"])]
    pg = np.array([r[0] for r in rows])
    rw = np.array([r[1] for r in rows])
    k_dev = A.from_bf16_bits(k_bits[pg, :, rw])
    check(BF16_ELEMENTWISE, k_dev, kp_ref[pg, :, rw], "attn_prep k rows", "t kvh d")
    np.testing.assert_array_equal(v_bits[pg, :, rw], A.bf16_bits(vp_ref[pg, :, rw]), "attn_prep v rows")
    keep = np.ones(k_bits.shape[:1] + k_bits.shape[2:3], bool)
    keep[pg, rw] = False
    k0, v0 = A.bf16_bits(cache.k_pages), A.bf16_bits(cache.v_pages)
    assert np.array_equal(k_bits.transpose(0, 2, 1, 3)[keep], k0.transpose(0, 2, 1, 3)[keep]), \
        "attn_prep changed K rows outside this step's positions"
    assert np.array_equal(v_bits.transpose(0, 2, 1, 3)[keep], v0.transpose(0, 2, 1, 3)[keep]), \
        "attn_prep changed V rows outside this step's positions"
    return q_ref, kp_ref, vp_ref, q_dev, A.from_bf16_bits(k_bits), A.from_bf16_bits(v_bits)


def check_prep_int8(p, cache, st, dev, kp_ref, vp_ref):
    """attn_prep's int8 rows vs reference_prep (:func:`attn_cases.check_int8_rows`); returns the device pages
    (Int8Pages) as (kp_dev, vp_dev)."""
    kp_dev, vp_dev = download_pages(p, dev)
    check_int8_rows(p, cache, st, kp_dev, vp_dev, kp_ref, vp_ref)
    return kp_dev, vp_dev


# ------------------------------------------------------------------------------------------------
# tests
# ------------------------------------------------------------------------------------------------


def test_driver_occupancy_matches_the_calculator():
    ctx = device_ctx()
    staged = [A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, DECODE.balance_keys,
                                 DECODE.balance_keys_int8, A.DecodeStaging(stage_kv=True, stage_keys=t),
                                 fuse_prep=False)
              for t in (0, 32)]
    for fam in (*A.FAMILIES, *staged):
        for p in PROBLEMS.values():
            for spec in fam.variants(p):
                dyn = PREFILL.dynamic_smem_bytes(p, spec.param("route")) if fam is PREFILL else \
                    DECODE.dynamic_smem_bytes(p, staged=True) if dict(spec.params).get("stage") and \
                    spec.family == "attn_decode" else 0
                want = ctx.occupancy(spec, dyn).ctas_per_sm
                got = device_kernel(spec).driver_occupancy(spec.threads, dyn)
                assert got == want, f"{spec.uri} on {ctx.arch.name}: driver {got} CTAs/SM, calculator {want}"


DECODE_CTXS = [(63,), (64,), (65,), (4096,), (63, 64, 65), (1, 4096, 129)]


@pytest.mark.parametrize("name", list(ALL_PROBLEMS))
def test_prep_rope_at_far_positions(name):
    """attn_prep on the device at positions up to 2^18 - 1 (past sinf / cosf's fast path): q matches numpy's RoPE of
    the same fp32 angles (rope_cos_sin's double reduction and the device's sincospif); rows past the page table
    are not written (attn_cases.far_prep_case / check_far_prep)."""
    cp = _cp()
    p = ALL_PROBLEMS[name]
    cache, host = far_prep_case(p, np.random.default_rng(seed("far", name)))
    dev = {k: cp.asarray(v) for k, v in host.items()}
    ln = PREP.launch(p, len(host["tok_pos"]), device_ctx())
    run(ln, PREP.kernel_args(p, ln, dev))
    check_far_prep(p, cache, {k: cp.asnumpy(v) for k, v in dev.items()}, FP32_REORDER)


@pytest.mark.parametrize("stage", [0, 64, 32, -64], ids=["global", "staged", "staged32", "staged-mma"])
@pytest.mark.parametrize("split_mode", SPLIT_MODES)
@pytest.mark.parametrize("ctxs", DECODE_CTXS, ids=lambda c: "ctx" + "-".join(map(str, c)))
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_decode_step(name, ctxs, split_mode, stage):
    """prep + decode + combine for B = len(ctxs) sequences, one token each (the token at ctx - 1).
    split_mode: the device plan's split count, a single split, or one page per split (every split
    count between is exercised by the plans of other SKUs; the kernel takes it at run time), or the plan's
    split count with the live context balanced over it (BALANCED: the kernel's keys granule). stage: the decode
    kernel's K/V tiles through shared memory (``AttnDecodeFamily.stage_kv``; tiles of a page, or 32 keys; -64: page
    tiles with the tensor-core scores and P.V, ``stage_mma``, bf16 KV only -- int8 ignores it)."""
    decode_case(name, ctxs, split_mode, stage)


#: int8 KV: the page boundaries (63/64/65 in one batch, 129) and the long context, B = 3
DECODE_CTXS_INT8 = [(63, 64, 65), (1, 4096, 129)]


@pytest.mark.parametrize("stage", [0, 64, 32, -64], ids=["global", "staged", "staged32", "staged-mma"])
@pytest.mark.parametrize("split_mode", SPLIT_MODES)
@pytest.mark.parametrize("ctxs", DECODE_CTXS_INT8, ids=lambda c: "ctx" + "-".join(map(str, c)))
@pytest.mark.parametrize("name", list(PROBLEMS_INT8))
def test_decode_step_int8(name, ctxs, split_mode, stage):
    """As test_decode_step with the int8 KV cache (quantised on append, dequantised in attn_decode)."""
    decode_case(name, ctxs, split_mode, stage)


def decode_case(name, ctxs, split_mode, stage=0):
    """The body of the decode tests for problem ``ALL_PROBLEMS[name]``."""
    cp = _cp()
    p = ALL_PROBLEMS[name]
    rng = np.random.default_rng(seed(name, ctxs, split_mode))  # the same data staged or not
    B = len(ctxs)
    prev = [c - 1 for c in ctxs]
    cache = make_cache(p, prev, ctxs, rng)
    st = make_step(p, prev, [1] * B, rng)
    dev = device_step(p, cache, st)
    q_ref, kp_ref, vp_ref, q_dev, kp_dev, vp_dev = check_prep(p, cache, st, dev)

    ctx = device_ctx()
    ln_d = DECODE.launch(p, B, ctx)
    splits, pps, granule = split_geometry(p, B, ctx, split_mode, DECODE)
    fam = A.AttnDecodeFamily(DECODE.threads, DECODE.max_pages_per_split, granule, granule,
                             A.DecodeStaging(stage_kv=stage != 0, stage_keys=abs(stage) % 64, stage_mma=stage < 0),
                             fuse_prep=False)
    ln_d = dataclasses.replace(ln_d, kernel=fam.spec(p), grid=(splits, p.heads_kv, B), split_k=splits,
                               workspace_bytes=DECODE.workspace_bytes(p, B, splits),
                               dynamic_smem_bytes=fam.dynamic_smem_bytes(p))
    ln_c = dataclasses.replace(COMBINE.launch(p, B, ctx), split_k=splits,
                               dynamic_smem_bytes=COMBINE.dynamic_smem_bytes(splits))
    dev["ws"] = poisoned_f32(ln_d.workspace_bytes // 4)
    dev["out"] = poisoned_bf16((B, p.heads_q * p.head_dim))
    dev["q"] = dev["q_out"]
    run(ln_d, DECODE.kernel_args(p, ln_d, dev, pps))
    ws = cp.asnumpy(dev["ws"])
    n_o = B * p.heads_q * splits * p.head_dim
    o_dev = ws[:n_o].reshape(B, p.heads_q, splits, p.head_dim)
    ml_dev = ws[n_o:].reshape(B, p.heads_q, splits, 2)

    # decode partials vs numpy on the device's own q and pages
    o_ref, ml_ref = A.reference_decode_partials(p, q_dev, kp_dev, vp_dev, cache.page_table, st["seq_ctx"], splits, pps,
                                                granule)
    assert not np.isnan(ws).any(), f"attn_decode left {int(np.isnan(ws).sum())} workspace floats unwritten / NaN"
    empty = np.isneginf(ml_ref[..., 0])
    assert np.array_equal(np.isneginf(ml_dev[..., 0]), empty), "attn_decode: empty splits differ from the reference"
    assert np.all(ml_dev[..., 1][empty] == 0) and np.all(o_dev[empty] == 0), "attn_decode: empty split not (−inf, 0, 0)"
    check(FP32_REORDER, np.where(empty, 0, ml_dev[..., 0]), np.where(empty, 0, ml_ref[..., 0]), "attn_decode max",
          "b h s")
    check(ATTENTION, ml_dev[..., 1], ml_ref[..., 1], "attn_decode sum", "b h s")
    check(ATTENTION, o_dev, o_ref, "attn_decode partial outputs", "b h s d")

    run(ln_c, COMBINE.kernel_args(p, ln_c, dev))
    out = from_dev_bf16(dev["out"])
    # combine on its own (numpy merge of the device's workspace), then the whole stage and end to end
    check(ATTENTION, out, A.reference_combine(p, o_dev, ml_dev, st["proj"]), "attn_combine vs merge of ws", "b c")
    ref_dev_in = A.reference_attention(p, q_dev, st["proj"], kp_dev, vp_dev, cache.page_table, st["tok_pos"],
                                       st["seq_start"])
    check(ATTENTION, out, ref_dev_in, f"decode+combine ({splits} splits x {pps} pages)", "b c")
    ref = A.reference_attention(p, q_ref, st["proj"], kp_ref, vp_ref, cache.page_table, st["tok_pos"],
                                st["seq_start"])
    check(ATTENTION, out, ref, "prep+decode+combine end to end", "b c")
    if stage == 0:  # the combine spread over dim_ctas CTAs per head, on the same workspace
        for dc in (4, 8):
            comb = A.AttnCombineFamily(COMBINE.threads, fam, dim_ctas=dc)
            ln_x = dataclasses.replace(ln_c, kernel=comb.spec(p), grid=(p.heads_q * dc, B, 1))
            dev["out"] = poisoned_bf16((B, p.heads_q * p.head_dim))
            run(ln_x, comb.kernel_args(p, ln_x, dev))
            check(ATTENTION, from_dev_bf16(dev["out"]), ref_dev_in, f"decode + combine over {dc} CTAs per head", "b c")


PREFILL_CASES = [
    ((130,), (1,)), ((130,), (63,)), ((64,), (64,)), ((130,), (65,)), ((70,), (200,)), ((0,), (200,)),
    ((63,), (1,)), ((130, 64, 0), (65, 1, 200)), ((63, 4000, 1), (63, 96, 64)),
]


@pytest.mark.parametrize("route", A.PREFILL_ROUTES)
@pytest.mark.parametrize("prev,new", PREFILL_CASES, ids=lambda v: "-".join(map(str, v)))
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_prefill_chunk(name, prev, new, route):
    """prep + prefill (``route``) of a chunk of new[b] tokens after prev[b] earlier positions (context
    spans earlier pages), B = len(prev) packed sequences of different lengths."""
    prefill_case(name, prev, new, route)


#: int8 KV: a chunk crossing the 64/128 boundaries, a first chunk of 200, a page-aligned chunk, and the
#: packed batch with the long (4000 + 96) context
PREFILL_CASES_INT8 = [((130,), (65,)), ((0,), (200,)), ((64,), (64,)), ((63, 4000, 1), (63, 96, 64))]


@pytest.mark.parametrize("route", A.PREFILL_ROUTES)
@pytest.mark.parametrize("prev,new", PREFILL_CASES_INT8, ids=lambda v: "-".join(map(str, v)))
@pytest.mark.parametrize("name", list(PROBLEMS_INT8))
def test_prefill_chunk_int8(name, prev, new, route):
    """As test_prefill_chunk with the int8 KV cache (both routes dequantise inside attn_prefill)."""
    prefill_case(name, prev, new, route)


def prefill_case(name, prev, new, route):
    """The body of the prefill tests for problem ``ALL_PROBLEMS[name]``."""
    p = ALL_PROBLEMS[name]
    rng = np.random.default_rng(seed(name, prev, new, route))
    B, T = len(prev), int(sum(new))
    cache = make_cache(p, prev, [a + b for a, b in zip(prev, new)], rng)
    st = make_step(p, prev, new, rng)
    dev = device_step(p, cache, st)
    q_ref, kp_ref, vp_ref, q_dev, kp_dev, vp_dev = check_prep(p, cache, st, dev)

    ln = PREFILL.launch(p, max(new), device_ctx(), batch=B, route=route)
    assert ln.route == route
    dev["q"] = dev["q_out"]
    dev["out"] = poisoned_bf16((T, p.heads_q * p.head_dim))
    run(ln, PREFILL.kernel_args(p, ln, dev))
    out = from_dev_bf16(dev["out"])
    ref_dev_in = A.reference_attention(p, q_dev, st["proj"], kp_dev, vp_dev, cache.page_table, st["tok_pos"],
                                       st["seq_start"])
    check(ATTENTION, out, ref_dev_in, f"attn_prefill {route} ({ln.grid} CTAs)", "t c")
    ref = A.reference_attention(p, q_ref, st["proj"], kp_ref, vp_ref, cache.page_table, st["tok_pos"],
                                st["seq_start"])
    check(ATTENTION, out, ref, "prep+prefill end to end", "t c")


@pytest.mark.parametrize("name", list(PROBLEMS_INT8))
def test_prep_int8_zero_tiny_and_large_rows(name):
    """attn_prep's quantiser on rows the rule treats specially, every group checked bit for bit against numpy
    (check_prep): an all-zero v row and a v row of magnitude ~1e-38 (subnormal values: the scale would be
    subnormal, so it is 1 and the codes 0), and rows of magnitude 1e-30 and 1e30 (scales far from 1)."""
    p = PROBLEMS_INT8[name]
    rng = np.random.default_rng(seed("prep-int8", name))
    prev, new = [0, 63, 129], [5, 1, 70]
    cache = make_cache(p, prev, [a + b for a, b in zip(prev, new)], rng)
    st = make_step(p, prev, new, rng)
    hd, v0 = p.head_dim, p.v_offset
    st["proj"][0, v0: v0 + hd] = 0.0                                   # token 0 (seq 0, pos 0), v head 0
    st["proj"][1, v0: v0 + hd] *= np.float32(1e-38)                    # token 1 (seq 0, pos 1), v head 0
    st["proj"][2, v0: v0 + hd] *= np.float32(1e-30)                    # token 2, v head 0
    st["proj"][3, v0 + (p.heads_kv - 1) * hd:] *= np.float32(1e30)     # token 3, last v head
    dev = device_step(p, cache, st)
    _, _, _, _, _, vp_dev = check_prep(p, cache, st, dev)
    page = cache.page_table[0, 0]
    for row in (0, 1):
        assert np.all(vp_dev.codes[page, 0, row] == 0) and np.all(vp_dev.scales[page, 0, row] == 1.0), row
    assert np.all(vp_dev.scales[page, 0, 2] < 1e-30) and np.all(vp_dev.scales[page, -1, 3] > 1e27)
