"""GPU tier of embed and rmsnorm / add_rmsnorm (marked ``gpu``; skipped without CuPy or a device).

Fresh random inputs generated per case (never zeros), outputs poisoned first (NaN fp32, 0xFFFF bf16),
kernels compiled for the device arch and launched with the family's planned geometry. Both hidden sizes
(256 tiny, 5120 27B), T in {1, 7, 100, 1024}, every mode / unit_offset / gather combination. The embed
output and the residual sum are exact (bf16 widening and one fp32 add; for a w8 table one fp32 multiply
``q * scale[tok]``, i.e. ``ninferc.ir.quant.dequantize``); y is compared with the fp32 reference under
``BF16_ELEMENTWISE`` (per row and overall).
"""

from __future__ import annotations

import functools
import zlib

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from gpu_testlib_prefill import BF16_NAN, bf16_bits_to_f32, check, device_ctx, launch, rand_bf16  # noqa: E402
from ninferc.ir.quant import quantize  # noqa: E402
from ninferc.ir.tolerances import BF16_ELEMENTWISE  # noqa: E402
from ninferc.targets.kernels.elementwise import (EmbedFamily, EmbedProblem, RMSNormFamily,  # noqa: E402
                                                 RMSNormProblem, embed_kernel_args, embed_reference,
                                                 rmsnorm_kernel_args, rmsnorm_reference)

EMBED, NORM = EmbedFamily(), RMSNormFamily()
TOKENS = (1, 7, 100, 1024)


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("hidden,vocab", [(256, 4096), (5120, 248320)])
def test_embed(hidden, vocab, t):
    p = EmbedProblem(hidden, vocab)
    ctx = device_ctx(EMBED.variants(p))
    ln = EMBED.launch(p, t, ctx)
    table_bits = _table(vocab, hidden)
    rng = np.random.default_rng(t)
    tok = rng.integers(0, vocab, t).astype(np.int32)
    tok[0] = vocab - 1
    if t > 2:
        tok[1] = 0
    x = cp.full((t, hidden), np.nan, dtype=cp.float32)
    launch(ln, embed_kernel_args(p, ln, cp.asarray(tok), table_bits, x))
    got = cp.asnumpy(x)
    want = _rows(table_bits, tok)
    bad = np.argwhere(got != want)
    assert bad.shape[0] == 0, f"{ln.kernel.uri} T={t}: {bad.shape[0]} mismatches, first at {bad[:3].tolist()}"


@functools.lru_cache(maxsize=2)
def _table(vocab, hidden):
    """Random bf16 embedding table bits [vocab, hidden] on the device (cached per shape)."""
    return rand_bf16((vocab, hidden), 1.0, seed=hidden)[0]


def _rows(table_bits, tok):
    """table[tok] widened to fp32 on the host (the embedding's exact expected output)."""
    rows = cp.asnumpy(table_bits[cp.asarray(tok.astype(np.int64))]).view(ml_dtypes.bfloat16)
    return embed_reference(np.arange(len(tok)), rows)


def test_embed_out_of_range_tokens_write_nan():
    p = EmbedProblem(256, 4096)
    ln = EMBED.launch(p, 4, device_ctx(EMBED.variants(p)))
    table_bits, _ = rand_bf16((4096, 256), 1.0, seed=1)
    tok = np.array([5, -1, 4096, 4095], dtype=np.int32)
    x = cp.full((4, 256), 3.0, dtype=cp.float32)  # a non-NaN poison: rows 1, 2 must become NaN
    launch(ln, embed_kernel_args(p, ln, cp.asarray(tok), table_bits, x))
    got = cp.asnumpy(x)
    assert np.isnan(got[1:3]).all()
    np.testing.assert_array_equal(got[[0, 3]], _rows(table_bits, tok[[0, 3]]))


@functools.lru_cache(maxsize=2)
def _table_w8(vocab, hidden):
    """A w8 embedding table on the device: (codes int8 [vocab, hidden], scales fp32 [vocab]). The tiny
    table is ``ninferc.ir.quant.quantize`` of random bf16; the 27B one (1.3e9 codes, minutes to quantise
    with numpy) is random codes in [-127, 127] with random positive row scales, drawn on the device."""
    if vocab * hidden <= 1 << 24:
        rng = np.random.default_rng(hidden)
        w = rng.standard_normal((vocab, hidden), dtype=np.float32).astype(ml_dtypes.bfloat16)
        qt = quantize(w, "w8")
        return cp.asarray(qt.codes), cp.asarray(qt.scales)
    rs = cp.random.RandomState(hidden)
    codes = cp.empty((vocab, hidden), dtype=cp.int8)
    for r0 in range(0, vocab, 8192):
        r1 = min(vocab, r0 + 8192)
        codes[r0:r1] = rs.randint(-127, 128, size=(r1 - r0, hidden), dtype=np.int32).astype(cp.int8)
    return codes, rs.uniform(0.001, 0.05, size=vocab, dtype=np.float32)


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("hidden,vocab", [(256, 4096), (5120, 248320)])
def test_embed_w8(hidden, vocab, t):
    p = EmbedProblem(hidden, vocab, "w8")
    ctx = device_ctx(EMBED.variants(p))
    ln = EMBED.launch(p, t, ctx)
    assert ln.kernel.param("wfmt") == "w8"
    codes, scales = _table_w8(vocab, hidden)
    rng = np.random.default_rng(t + 17)
    tok = rng.integers(0, vocab, t).astype(np.int32)
    tok[0] = vocab - 1
    if t > 2:
        tok[1] = 0
    x = cp.full((t, hidden), np.nan, dtype=cp.float32)
    launch(ln, embed_kernel_args(p, ln, cp.asarray(tok), codes, x, scales=scales))
    got = cp.asnumpy(x)
    idx = cp.asarray(tok.astype(np.int64))  # reference on the gathered rows (exact: one fp32 multiply)
    want = embed_reference(np.arange(t), cp.asnumpy(codes[idx]), cp.asnumpy(scales[idx]))
    bad = np.argwhere(got != want)
    assert bad.shape[0] == 0, f"{ln.kernel.uri} T={t}: {bad.shape[0]} mismatches, first at {bad[:3].tolist()}"


def test_embed_w8_out_of_range_tokens_write_nan():
    p = EmbedProblem(256, 4096, "w8")
    ln = EMBED.launch(p, 4, device_ctx(EMBED.variants(p)))
    codes, scales = _table_w8(4096, 256)
    tok = np.array([5, -1, 4096, 4095], dtype=np.int32)
    x = cp.full((4, 256), 3.0, dtype=cp.float32)  # a non-NaN poison: rows 1, 2 must become NaN
    launch(ln, embed_kernel_args(p, ln, cp.asarray(tok), codes, x, scales=scales))
    got = cp.asnumpy(x)
    assert np.isnan(got[1:3]).all()
    want = embed_reference(tok, cp.asnumpy(codes), cp.asnumpy(scales))
    np.testing.assert_array_equal(got[[0, 3]], want[[0, 3]])


def _norm_cases():
    out = []
    for dim in (256, 5120):
        for mode in ("rmsnorm", "add_rmsnorm"):
            for unit in (True, False):
                for gather in (False, True):
                    out.append(RMSNormProblem(dim, mode, unit, gather))
    return out


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("p", _norm_cases(), ids=lambda p: f"{p.dim}_{p.mode}_u{int(p.unit_offset)}_g{int(p.gather)}")
def test_rmsnorm(p, t):
    ctx = device_ctx(NORM.variants(p))
    seed = zlib.crc32(f"{p}/{t}".encode())
    rng = np.random.default_rng(seed)
    # rows of very different scales (the norm must not care), never zero
    x0 = (rng.standard_normal((t, p.dim)) * np.exp(rng.uniform(-3, 3, (t, 1)))).astype(np.float32)
    d = (rng.standard_normal((t, p.dim)) * 0.5).astype(np.float32) if p.mode == "add_rmsnorm" else None
    if p.unit_offset:
        w = (rng.standard_normal(p.dim) * 0.1).astype(np.float32)  # zero-centred
    else:
        w = (1.0 + rng.standard_normal(p.dim) * 0.1).astype(np.float32)
    if p.gather:
        rows = max(1, min(t, 5))
        idx = rng.integers(0, t, rows).astype(np.int32)
        idx[-1] = t - 1  # the last token (the final-norm use)
    else:
        rows, idx = t, None
    ln = NORM.launch(p, rows, ctx)
    x_dev = cp.asarray(x0)
    y = cp.full((rows, p.dim), BF16_NAN, dtype=cp.uint16)
    args = rmsnorm_kernel_args(p, ln, x_dev, cp.asarray(w), y, d=None if d is None else cp.asarray(d),
                               row_index=None if idx is None else cp.asarray(idx))
    launch(ln, args)
    x_want, y_want = rmsnorm_reference(p, x0, w, d=d, row_index=idx)
    x_got = cp.asnumpy(x_dev)
    bad = np.argwhere(x_got != x_want)
    assert bad.shape[0] == 0, f"{ln.kernel.uri}: residual x wrong at {bad[:3].tolist()} ({bad.shape[0]} elements)"
    check(bf16_bits_to_f32(y), cp.asarray(y_want), BF16_ELEMENTWISE, f"{ln.kernel.uri} rows={rows}")
    # every element is the bf16 rounding of a value within fp32 reassociation of the reference: at most
    # one bf16 ulp from round(reference) (catches a single wrong element a norm would average away)
    got_bits = cp.asnumpy(y)
    want_bits = y_want.astype(ml_dtypes.bfloat16).view(np.uint16)
    dist = np.abs(_ordered(got_bits) - _ordered(want_bits))
    r = np.unravel_index(np.argmax(dist), dist.shape)
    assert dist[r] <= 1, (f"{ln.kernel.uri}: element {r} is {dist[r]} bf16 ulps off "
                          f"(got {float(bf16_bits_to_f32(y)[r]):.6g}, want {float(y_want[r]):.6g})")


def _ordered(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns -> integers ordered like the values (ulp distance = difference)."""
    b = bits.astype(np.int64)
    return np.where(b & 0x8000, -(b & 0x7FFF), b)
