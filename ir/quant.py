"""Quantised weight formats, a deterministic quantiser, and recipes (issue 6, target-independent half).

Formats (one :class:`QuantTensor` per quantised ``nn.Linear``-type weight ``w[N, K]``: N output
channels, K input features; the embedding table ``[V, H]`` is treated the same way, one row per token):

``bf16``
    the checkpoint's values, unchanged (not a :class:`QuantTensor`).
``w8``
    symmetric int8, one fp32 scale per output channel (row):
    ``scale[n] = fl32(max_k |w[n, k]| / 127)``; ``q[n, k] = clip(rint(fl32(w[n, k] / scale[n])), -127, 127)``.
    ``codes`` int8 [N, K] (two's complement, row-major), ``scales`` fp32 [N], > 0.
``w4``
    int4 with codes in **[-8, 7]**, one fp32 scale per group of :data:`GROUP_SIZE` = 64 consecutive
    elements along K (K must be a multiple of 64). Per group, let ``big`` be the larger and ``small``
    the smaller of the two one-sided extremes ``max(w, 0)`` and ``max(-w, 0)``, and ``sign = +1`` when
    the negative side is the larger (ties included), ``-1`` otherwise. The absmax scale is
    ``mag_0 = max(fl32(big / 8), fl32(small / 7.5))``; the smallest scale that still clips nothing by
    more than half a step is ``lo = max(fl32(big / 8.5), fl32(small / 7.5))``. The quantiser tries the
    :data:`W4_SEARCH_STEPS` + 1 = 11 magnitudes ``mag_i = max(fl32(mag_0 - (mag_0 - lo) i / 10), lo)``
    (the expression in float64, one rounding), ``d_i = sign * mag_i``, ``q = clip(rint(fl32(w / d_i)),
    -8, 7)``, and keeps the one with the least squared error ``sum((fl32(w / d) - q)^2) (mag / mag_0)^2``
    over the group (fp32, summed in a fixed pairwise order; ties keep the larger scale) -- a
    least-squares scale search over a bound-preserving range, as llama.cpp's ``make_qx_quants`` does over
    a wider one. So the dominant extreme always lands on code -8 (``big / mag`` lies in [8, 8.5]), the
    other side reaches at most 7.5 (rounded and, at worst, clipped to 7 within the same half step), and
    negating a group negates its scale and leaves its codes unchanged. ``codes`` uint8 [N, K/2],
    ``scales`` fp32 [N, K/64] (row-major, signed).

    *Why [-8, 7] with a signed scale, not [-7, 7] with* ``max|w| / 7``: the step is ``max|w| / 8`` (or
    finer) for nearly every group (``max|w| / 7.5`` at worst, when both extremes are within 1/16 of each
    other) instead of ``max|w| / 7`` — 12.5 % finer, using all 16 codes — while keeping the
    ``|scale| / 2`` bound for every element. *Why the search*: rounding error, not the range, dominates
    int4; a slightly smaller step often lowers a group's squared error. Measured on the fixture
    (bench/quant_fidelity.py, the w4 recipe; bench/results/quant_fidelity_cpu.json): short goldens top-1
    agreement with the bf16 model / mean KL 0.867 / 0.091 with the symmetric [-7, 7] rule, 0.921 / 0.056
    with the [-8, 7] absmax scale, **0.929 / 0.046** with the search; long prompt (3,031 positions)
    0.831 / 0.122, 0.833 / 0.099, **0.845 / 0.087**. Relative weight RMSE 0.0748 -> 0.0721.
    The sign of the scale is free for a kernel (it multiplies by the scale either way); llama.cpp's
    Q4_0 uses the same signed ``max / -8`` scale, but clips the other side, which we avoid.

    *Packing (canonical layout)*: each code is stored as an offset-binary nibble ``u = q + 8`` (0..15).
    Byte ``j`` of row ``n`` holds element ``k = 2j`` in its low nibble and ``k = 2j + 1`` in its high
    nibble: ``byte = (q[n, 2j] + 8) | (q[n, 2j+1] + 8) << 4``. Offset binary makes the GPU
    dequantisation one mask and one subtract (or the exponent-bias trick of FasterTransformer/Marlin-
    style int4 converters) instead of a sign extension. Target-specific interleavings for coalesced
    16-byte GEMV loads are a permutation of this layout chosen by the lowering (a later step), not a
    different quantisation.

Rounding rule (both formats; this is what "deterministic" means here): the input is converted to fp32
(exact for bf16 checkpoint values); the extremes are exact maxima; each scale is a correctly rounded
fp32 quotient as written above; each code is ``rint(fl32(w / scale))`` — round half to even of the
correctly rounded fp32 quotient (a division, not a multiplication by a reciprocal) — then clipped. A
row/group whose scale is below the fp32 normal range (all zeros, or extremes under ~1e-36, where a
subnormal scale would lose precision) gets scale 1, so its codes are all 0. Every step is a correctly
rounded IEEE operation on fixed inputs, so the same input gives the same bytes on every machine.
Non-finite inputs are refused.

Error bound (:func:`error_bound`): ``|w - dequantize(q)| <= |scale| / 2`` per element, up to fp32
rounding of the scale, the quotient and the dequantising product; exactly,
``|w - fl32(q * scale)| <= |scale| * (1/2 + 4 * qabs * 2**-24)`` with ``qabs`` = 127 (w8) or 8 (w4).
Proof sketch: ``|w / scale| <= qabs + 1/2`` by construction (w8: ``amax / scale <= 127 (1 + 2^-24)``;
w4: ``big / |d| <= 8.5 (1 + 2^-24)``, ``small / |d| <= 7.5 (1 + 2^-24)``, as every candidate is
``>= lo``), so the fp32 quotient is off by at most ``(qabs + 1) 2^-24``; rounding adds at most 1/2 (a
clip from 8 to 7, or from -9 to -8, only happens at quotients within that rounding slack of 7.5 or -8.5,
so it too stays within 1/2 plus slack); ``fl(q * scale)`` adds at most
``qabs 2^-24`` scales.

Recipes (:func:`recipe`) map the tensor classes of :attr:`ninferc.ir.graph.ParamSpec.group`
(embedding, lm_head, attention, gdn, mlp, norm, other) to a format. Only matrix weights are quantised:
the Linear projections and the embedding / LM-head tables (:func:`is_matrix`); norms, the GDN conv
weight, ``A_log`` and ``dt_bias`` always stay as stored. A matrix that cannot take its recipe's format
(w4 with K not a multiple of 64) stays bf16 and :func:`assign_formats` reports it.

Sources: per-channel symmetric int8 as in LLM.int8()'s vector-wise quantisation (Dettmers et al. 2022);
group-wise int4 round-to-nearest as in the GPTQ/AWQ papers' RTN baselines (group 64, no zero point,
no calibration) and llama.cpp's Q4_0 (``ggml-quants.c``, ``quantize_row_q4_0_ref``). Fidelity is
measured by ``bench/quant_fidelity.py`` on the fixture's goldens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ninferc.errors import NinfercError
from ninferc.ir.graph import DTYPE_BYTES, W4_GROUP

F32 = np.float32
#: weight formats, narrowest last
FORMATS = ("bf16", "w8", "w4")
#: elements per w4 scale group along K
GROUP_SIZE = W4_GROUP
#: code range (lowest, highest) the quantiser produces per format
CODE_RANGE = {"w8": (-127, 127), "w4": (-8, 7)}
#: largest code magnitude per format (enters the error bound)
QABS = {"w8": 127, "w4": 8}
#: the tensor classes of ParamSpec.group a recipe assigns formats to
GROUPS = ("embedding", "lm_head", "attention", "gdn", "mlp", "mtp", "norm", "other")
#: classes that hold no matrix weight (norms, the GDN conv weight, A_log, dt_bias): always stored as given
NEVER_QUANTISED = ("norm", "other")

_TINY = np.finfo(F32).tiny  # smallest normal fp32, 2**-126
_BF16_ALL = {g: "bf16" for g in GROUPS}
#: built-in recipes (see :func:`recipe`; the w4 choice of lm_head/embedding is justified there)
RECIPES: dict[str, dict[str, str]] = {
    "bf16": dict(_BF16_ALL),
    "w8": {**_BF16_ALL, "attention": "w8", "gdn": "w8", "mlp": "w8", "mtp": "w8"},
    "w4": {**_BF16_ALL, "attention": "w4", "gdn": "w4", "mlp": "w4", "mtp": "w4", "lm_head": "w8", "embedding": "w8"},
}

# Matrix (nn.Linear-type or embedding-table) params by IR name (ninferc.ir.qwen3_5's naming table).
_MATRIX_NAME = re.compile(
    r"^(embed|lm_head|L\d+\.(attn\.[qkvo]|gdn\.(in_qkv|in_z|in_b|in_a|out)|mlp\.(gate|up|down))"
    r"|mtp\.fc|mtp\.L\d+\.(attn\.[qkvo]|mlp\.(gate|up|down)))$")


class QuantError(NinfercError, ValueError):
    """A tensor cannot be quantised as asked (names the tensor, the format, the offending value), or a
    recipe is malformed (names the group or format and lists the valid ones)."""


# ---------------------------------------------------------------------------------------------------
# the tensor type
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class QuantTensor:
    """A quantised matrix: pure data, no kernel layout.

    Attributes:
        format: ``"w8"`` or ``"w4"``.
        shape: the logical shape (N, K) of the weight it stands for.
        codes: ``w8``: int8 [N, K]; ``w4``: uint8 [N, K/2], two offset-binary nibbles per byte, element
            2j in the low nibble (see the module docstring).
        scales: fp32 — ``w8``: [N] (per output channel, > 0); ``w4``: [N, K/64] (per group of 64
            along K, signed: see the module docstring).
    """

    format: str
    shape: tuple[int, int]
    codes: np.ndarray
    scales: np.ndarray

    @property
    def nbytes(self) -> int:
        """Stored bytes: codes + scales."""
        return int(self.codes.nbytes + self.scales.nbytes)

    def q(self) -> np.ndarray:
        """The integer codes as int8 [N, K] (w4 unpacked), within :data:`CODE_RANGE`."""
        return self.codes if self.format == "w8" else unpack_int4(self.codes)

    def scale_per_element(self) -> np.ndarray:
        """fp32 [N, K]: the scale each element was quantised with (broadcast of ``scales``)."""
        N, K = self.shape
        if self.format == "w8":
            return np.broadcast_to(self.scales[:, None], (N, K))
        return np.repeat(self.scales, GROUP_SIZE, axis=1)

    def dequantize(self) -> np.ndarray:
        """fp32 [N, K] = fl32(q * scale); see :func:`dequantize`."""
        return dequantize(self)

    def error_bound(self) -> np.ndarray:
        """float64 [N, K]: per-element bound on |w - dequantize()|; see :func:`error_bound`."""
        return error_bound(self)


# ---------------------------------------------------------------------------------------------------
# int4 packing
# ---------------------------------------------------------------------------------------------------
def pack_int4(q: np.ndarray) -> np.ndarray:
    """Pack int4 codes two per byte: int [N, K] in [-8, 7] (K even) -> uint8 [N, K/2].

    Byte j of a row = ``(q[2j] + 8) | (q[2j+1] + 8) << 4`` (offset binary, element 2j in the low nibble).

    Raises:
        QuantError: K odd, or a code outside [-8, 7].
    """
    q = np.asarray(q)
    if q.ndim != 2 or q.shape[1] % 2:
        raise QuantError(f"pack_int4 needs [N, K] codes with K even, found shape {list(q.shape)}")
    if q.size and (int(q.min()) < -8 or int(q.max()) > 7):
        raise QuantError(f"pack_int4: codes must lie in [-8, 7], found [{int(q.min())}, {int(q.max())}]")
    u = (q.astype(np.int16) + 8).astype(np.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed, xp=np):
    """Inverse of :func:`pack_int4`: uint8 [N, K/2] -> int8 [N, K] in [-8, 7] (exact for all 16 nibbles).
    ``xp`` is ``numpy`` (default) or an array module with the same API (``cupy``, for device-side test
    references).

    Raises:
        QuantError: ``packed`` is not 2-D."""
    p = xp.asarray(packed, dtype=xp.uint8)
    if p.ndim != 2:
        raise QuantError(f"unpack_int4 needs a 2-D uint8 array, found shape {list(p.shape)}")
    out = xp.empty((p.shape[0], 2 * p.shape[1]), dtype=xp.int8)
    out[:, 0::2] = (p & 0x0F).astype(xp.int8) - 8
    out[:, 1::2] = (p >> 4).astype(xp.int8) - 8
    return out


# ---------------------------------------------------------------------------------------------------
# quantise / dequantise
# ---------------------------------------------------------------------------------------------------
def _as_f32_matrix(w, fmt: str, name: str) -> np.ndarray:
    a = np.asarray(w)
    if a.ndim != 2:
        raise QuantError(f"{name}: {fmt} quantises [N, K] matrices, found shape {list(a.shape)}")
    a = a.astype(F32)
    if not np.all(np.isfinite(a)):
        raise QuantError(f"{name}: {int(np.sum(~np.isfinite(a)))} non-finite values cannot be quantised")
    return a


def _w8_scales_and_codes(wf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """wf fp32 [N, K] -> (scales fp32 [N] > 0, codes int8 [N, K]) by the w8 rule."""
    amax = np.max(np.abs(wf), axis=-1)                        # exact
    scale = (amax / F32(127)).astype(F32)                      # fl32(amax / 127)
    scale = np.where(scale < _TINY, F32(1.0), scale).astype(F32)  # zero / subnormal scale -> 1
    quot = (wf / scale[:, None]).astype(F32)                   # fl32(w / scale)
    return scale, np.clip(np.rint(quot), -127, 127).astype(np.int8)  # round half to even, clip


def kv_int8_roundtrip(x, group: int = 64) -> np.ndarray:
    """What an int8 KV cache holds for fp32 K or V rows ``x`` [..., hd] (hd % ``group`` == 0): per ``group``
    consecutive elements the w8 rule -- ``scale = fl32(max|x| / 127)`` (1 below the fp32 normal range), ``code =
    clip(rint(fl32(x / scale)), -127, 127)`` -- read back as ``fl32(code * scale)``. Bit-exact with the attention
    kernels' quantiser (``ninferc.targets.kernels.attention.quantize_kv`` / ``dequantize_kv``, tested against each
    other), so the reference executor computes with the values an int8-KV artifact's kernels see.

    Raises:
        QuantError: hd not a multiple of ``group``.
    """
    a = np.asarray(x, F32)
    hd = a.shape[-1]
    if hd % group:
        raise QuantError(f"int8 KV: the head dim ({hd}) must be a multiple of {group}")
    g = a.reshape(-1, group)
    scale, codes = _w8_scales_and_codes(g)
    return (codes.astype(F32) * scale[:, None]).astype(F32).reshape(a.shape)


#: w4 scale candidates per group (see the module docstring): magnitudes mag_0 > ... > mag_N between the
#: absmax rule's scale and the smallest scale that still clips nothing beyond half a step
W4_SEARCH_STEPS = 10
#: elements quantised per block of rows (fits a CPU cache; the result does not depend on it)
_CHUNK_ELEMENTS = 1 << 18


def _w4_codes(wg: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Codes int8 [..., 64] = clip(rint(fl32(w / d)), -8, 7) for signed scales d [...]."""
    return np.clip(np.rint((wg / scale[..., None]).astype(F32)), -8, 7).astype(np.int8)


def _group_sum(e: np.ndarray) -> np.ndarray:
    """Sum fp32 [..., 64] over the last axis in a fixed pairwise order (adjacent pairs, six levels), so the
    result is the same on every machine and numpy build (a plain ``np.sum`` may reassociate per SIMD width)."""
    while e.shape[-1] > 1:
        e = e[..., 0::2] + e[..., 1::2]
    return e[..., 0]


def _w4_scales_and_codes(wg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """wg fp32 [..., 64] -> (signed scales fp32 [...], codes int8 [..., 64] in [-8, 7]) by the w4 rule:
    the least-squares choice among W4_SEARCH_STEPS + 1 bound-preserving scale candidates."""
    pos = np.maximum(np.max(wg, axis=-1), F32(0))              # largest positive value (exact)
    neg = np.maximum(-np.min(wg, axis=-1), F32(0))             # largest negative magnitude (exact)
    neg_dominant = neg >= pos
    big = np.where(neg_dominant, neg, pos)
    small = np.where(neg_dominant, pos, neg)
    mag0 = np.maximum((big / F32(8)).astype(F32), (small / F32(7.5)).astype(F32))      # absmax rule
    lo = np.maximum((big / F32(8.5)).astype(F32), (small / F32(7.5)).astype(F32))      # no clip past 1/2 step
    tiny = mag0 < _TINY                                        # zero / subnormal scale -> +1
    sign = np.where(neg_dominant, F32(1), F32(-1))
    best = np.where(tiny, F32(1.0), sign * mag0).astype(F32)
    if W4_SEARCH_STEPS:
        best_e = None
        m0, span = mag0.astype(np.float64), mag0.astype(np.float64) - lo.astype(np.float64)
        for i in range(W4_SEARCH_STEPS + 1):
            # mag_i = fl32(mag0 - (mag0 - lo) i / N) (float64 of exact inputs, one rounding), never below lo
            mag = np.maximum((m0 - span * (i / W4_SEARCH_STEPS)).astype(F32), lo)
            scale = np.where(tiny, F32(1.0), sign * mag).astype(F32)
            t = (wg / scale[..., None]).astype(F32)            # fl32(w / d)
            r = t - np.clip(np.rint(t), F32(-8), F32(7))      # quotient error, in steps
            ratio = np.where(tiny, F32(1), mag / np.where(tiny, F32(1), mag0)).astype(F32)
            err = _group_sum(r * r) * (ratio * ratio)          # ~ sum (w - q d)^2 / mag0^2, fp32, fixed order
            if best_e is None:
                best_e = err
            else:
                better = err < best_e                          # strict: ties keep the larger scale
                best = np.where(better, scale, best)
                best_e = np.where(better, err, best_e)
    return best.astype(F32), _w4_codes(wg, best)


def quantize(w, fmt: str, *, name: str = "tensor") -> QuantTensor:
    """Quantise a matrix ``w`` [N, K] (bf16 via ml_dtypes, fp32, ...) to ``fmt`` (``w8`` or ``w4``).

    Follows the module docstring's rounding rule exactly; deterministic (same input, same bytes).

    Raises:
        QuantError: not 2-D; non-finite values; unknown format; ``w4`` with K not a multiple of 64
            (the message names K); ``name`` is used in the messages.
    """
    if fmt not in CODE_RANGE:
        raise QuantError(f"{name}: unknown quantised format {fmt!r}; choose from {sorted(CODE_RANGE)}")
    wf = _as_f32_matrix(w, fmt, name)
    N, K = wf.shape
    if fmt == "w8":
        scales, q = _w8_scales_and_codes(wf)
        return QuantTensor("w8", (N, K), np.ascontiguousarray(q), np.ascontiguousarray(scales))
    if K % GROUP_SIZE:
        raise QuantError(f"{name}: w4 needs K (input features) to be a multiple of {GROUP_SIZE}, "
                         f"found K = {K} (shape {[N, K]})")
    wg = wf.reshape(N, K // GROUP_SIZE, GROUP_SIZE)
    rows = max(1, _CHUNK_ELEMENTS // K)  # row blocks that stay in cache (rows are independent: same bytes)
    parts = [_w4_scales_and_codes(wg[r:r + rows]) for r in range(0, N, rows)]
    scales = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, K // GROUP_SIZE), F32)
    q = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, K // GROUP_SIZE, GROUP_SIZE), np.int8)
    return QuantTensor("w4", (N, K), pack_int4(q.reshape(N, K)), np.ascontiguousarray(scales))


def dequantize(qt: QuantTensor) -> np.ndarray:
    """fp32 [N, K] = fl32(q * scale) of a :class:`QuantTensor` (what a fused-dequant kernel computes
    before its fp32 multiply-accumulate)."""
    return dequantize_codes(qt.format, qt.codes, qt.scales)


def dequantize_codes(fmt: str, codes, scales, xp=np):
    """fp32 [N, K] = fl32(q * scale) from stored arrays: ``w8`` codes int8 [N, K] with scales fp32 [N];
    ``w4`` packed uint8 [N, K/2] with scales fp32 [N, K/64]. ``xp``: ``numpy`` or ``cupy``.

    Raises:
        QuantError: an unknown format, or scales whose shape does not match the codes.
    """
    codes = xp.asarray(codes)
    sc = xp.asarray(scales, dtype=xp.float32)
    if fmt == "w8":
        q, want = codes.view(xp.int8), (codes.shape[0],)
    elif fmt == "w4":
        q = unpack_int4(codes, xp)
        want = (codes.shape[0], q.shape[1] // GROUP_SIZE)
    else:
        raise QuantError(f"dequantize: unknown format {fmt!r}; quantised formats are w8 and w4")
    if tuple(sc.shape) != want:
        raise QuantError(f"dequantize {fmt}: scales {list(sc.shape)} do not match codes {list(codes.shape)} "
                         f"(expected {list(want)})")
    per = sc[:, None] if fmt == "w8" else xp.repeat(sc, GROUP_SIZE, axis=1)
    return (q.astype(xp.float32) * per).astype(xp.float32)


def error_bound(qt: QuantTensor) -> np.ndarray:
    """float64 [N, K]: the bound on ``|w - dequantize(qt)|`` per element,
    ``|scale| * (1/2 + 4 * qabs * 2**-24)`` (qabs = 127 for w8, 8 for w4) — |scale|/2 plus the fp32
    rounding of the scale, the quotient w/scale and the product q*scale (derivation in the module
    docstring)."""
    return np.abs(qt.scale_per_element().astype(np.float64)) * (0.5 + 4 * QABS[qt.format] * 2.0 ** -24)


def nbytes_as(shape: tuple[int, ...], fmt: str, dtype_bytes: int = 2) -> int:
    """Stored bytes of a tensor of ``shape`` in ``fmt`` without materialising it: ``bf16`` ->
    numel x ``dtype_bytes`` (as stored); ``w8`` -> N*K + 4N; ``w4`` -> N*K/2 + 4*N*K/64.

    Raises:
        QuantError: a quantised format for a non-2-D shape or (w4) K not a multiple of 64.
    """
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if fmt == "bf16":
        return numel * dtype_bytes
    if fmt not in CODE_RANGE or len(shape) != 2:
        raise QuantError(f"cannot size shape {list(shape)} as {fmt!r}")
    N, K = shape
    if fmt == "w8":
        return N * K + 4 * N
    if K % GROUP_SIZE:
        raise QuantError(f"w4 needs K to be a multiple of {GROUP_SIZE}, found K = {K}")
    return N * K // 2 + 4 * N * (K // GROUP_SIZE)


# ---------------------------------------------------------------------------------------------------
# recipes
# ---------------------------------------------------------------------------------------------------
def recipe(name: str) -> dict[str, str]:
    """The format per tensor class (group -> format) of a named recipe, with optional overrides.

    ``name`` is a base recipe — ``bf16`` (everything bf16), ``w8`` (attention, GDN and MLP projections
    int8 per channel; embedding, LM head and norms bf16) or ``w4`` (attention, GDN — including the small
    in_b/in_a gate rows — and MLP projections int4 group-64; LM head and embedding int8 per row) —
    optionally followed by ``,group=format`` overrides, e.g. ``"w4,lm_head=bf16"``. The MTP head's matrices
    (class ``mtp``: its fc and its decoder layer's projections) follow the projections' format.

    Why (measured by bench/quant_fidelity.py on the fixture's goldens.json, 240 positions; mean
    KL(bf16 || quant) in nats — top-1 agreement moves in steps of 1/240 and mostly at near-ties, so KL
    is the finer signal):

    * w8 keeps LM head and embedding bf16: each at w8 adds only ~0.5e-4 / ~1e-4 KL to w8's 3.7e-4, but
      w8 sits at issue 6's 0.98 edge (0.983) and an int8 LM head alone drops it to 0.979.
    * w4 puts the LM head at w8: w4 with LM head bf16 or w8 is indistinguishable (KL 0.0465 vs 0.0463
      under the scale search; 0.0565 vs 0.0563 before it), LM head at w4 adds +0.003 (+7 %); at the 27B shape the LM head is 2.54 GB of bf16, so w8 saves
      1.27 GB per decoded token (roofline 253 -> 275 tok/s) for nothing measurable, and w4 would save
      0.56 GB more (-> 285 tok/s) at a measurable cost.
    * w4 puts the embedding at w8: it is read one row per token (no decode bandwidth), so its format
      only sets artifact size; w8 costs nothing measurable and halves it, while w4 costs +0.012 KL
      (+25 %, the largest single-class cost after MLP and GDN).

    Norms (and every other non-matrix param) are never quantised.

    Raises:
        QuantError: unknown base recipe, group or format, a malformed override (lists valid ones), or a
            quantised format for ``norm`` / ``other`` (never quantised).
    """
    parts = [p.strip() for p in str(name).split(",") if p.strip()]
    if not parts or parts[0] not in RECIPES:
        raise QuantError(f"unknown weight recipe {name!r}; base recipes: {sorted(RECIPES)} "
                         "(optionally followed by ,group=format overrides)")
    return _with_overrides(parts[0], parts[1:], f"recipe {name!r}")


def _with_overrides(base: str, overrides: list[str], where: str) -> dict[str, str]:
    """``RECIPES[base]`` with each ``group=format`` of ``overrides`` applied; ``where`` names the user's text in
    errors (e.g. ``"--recipe 'mlp=w8'"``).

    Raises:
        QuantError: a malformed override, an unknown group or format, a quantised format for ``norm`` / ``other``,
            or a group given twice.
    """
    out = dict(RECIPES[base])
    given: dict[str, str] = {}
    for ov in overrides:
        group, eq, fmt = ov.partition("=")
        group, fmt = group.strip(), fmt.strip()
        if not eq or group not in GROUPS:
            raise QuantError(f"{where}: bad override {ov!r}; expected group=format with group in "
                             f"{', '.join(g for g in GROUPS if g not in NEVER_QUANTISED)} (and "
                             f"{', '.join(NEVER_QUANTISED)}, which only take bf16)")
        if fmt not in FORMATS:
            raise QuantError(f"{where}: unknown format {fmt!r} for {group}; choose from "
                             f"{', '.join(FORMATS)}")
        if group in NEVER_QUANTISED and fmt != "bf16":
            raise QuantError(f"{where}: {group} tensors are never quantised (only matrix weights are: "
                             f"{', '.join(g for g in GROUPS if g not in NEVER_QUANTISED)}); {group}={fmt} would do "
                             "nothing")
        if group in given:
            raise QuantError(f"{where}: {group} is given twice ({group}={given[group]} and {group}={fmt}); "
                             "give each class once")
        given[group] = fmt
        out[group] = fmt
    return out


def recipe_name(base: str, overrides: str | None = None) -> str:
    """The recipe string of the CLI's ``--weights BASE [--recipe OVERRIDES]``: ``"base"`` or
    ``"base,overrides"`` (spaces around each override removed), checked as :func:`recipe` checks it so a malformed
    one fails before any work. Errors quote ``--recipe`` as the user wrote it (not the joined string).

    Raises:
        QuantError: unknown base recipe, group or format, a malformed override, an empty ``--recipe`` or an empty
            item between commas, or a class given twice (see :func:`recipe`).
    """
    if base not in RECIPES:
        raise QuantError(f"unknown weight format {base!r}; choose from {sorted(RECIPES)}")
    if overrides is None:
        return base
    parts = []
    for item in str(overrides).split(","):
        group, eq, fmt = item.partition("=")
        parts.append(f"{group.strip()}={fmt.strip()}" if eq else item.strip())
    if not any(parts) or not all(parts):
        raise QuantError(f"--recipe {overrides!r}: expected class=format overrides separated by single commas, "
                         "e.g. 'lm_head=bf16,embedding=w8'")
    _with_overrides(base, parts, f"--recipe {overrides!r}")  # the same checks recipe() makes of the joined name
    return ",".join([base, *parts])  # normalised: no spaces, as stored in the artifact and shown by inspect


def _as_recipe(r) -> dict[str, str]:
    if isinstance(r, str):
        return recipe(r)
    bad = {g: f for g, f in dict(r).items() if f not in FORMATS}
    if bad:
        raise QuantError(f"recipe has unknown formats {bad}; choose from {list(FORMATS)}")
    return dict(r)


def is_matrix(spec) -> bool:
    """True for params a recipe may quantise: 2-D Linear weights ([N, K]) and the embedding / LM-head
    tables, recognised by IR name (:mod:`ninferc.ir.qwen3_5`'s table); a fused param qualifies when all
    its parts do. Norms, the GDN conv weight, A_log and dt_bias are not matrices in this sense."""
    if len(spec.shape) != 2:
        return False
    if spec.parts:
        return all(is_matrix(p) for p in spec.parts)
    return bool(_MATRIX_NAME.match(spec.name))


@dataclass(frozen=True)
class FormatPlan:
    """The outcome of applying a recipe to a set of params.

    Attributes:
        formats: param name -> format (``bf16``, ``w8``, ``w4``) for every param.
        fallbacks: param name -> why it stays bf16 although its group's recipe format is narrower
            (matrices only, e.g. w4 with K not a multiple of 64). Non-matrix params (norms, conv,
            A_log, dt_bias) are bf16 by definition and not listed.
        recipe: the group -> format dict that was applied.
    """

    formats: dict[str, str]
    fallbacks: dict[str, str] = field(default_factory=dict)
    recipe: dict[str, str] = field(default_factory=dict)

    def nbytes(self, specs: Mapping) -> dict[str, int]:
        """Stored bytes per param name under this plan (codes + scales for quantised params; unquantised
        params at their spec dtype)."""
        return {n: nbytes_as(s.shape, self.formats[n], DTYPE_BYTES[s.dtype]) for n, s in specs.items()}


def assign_formats(specs: Mapping, recipe_or_name) -> FormatPlan:
    """Apply a recipe to ``specs`` (name -> :class:`~ninferc.ir.graph.ParamSpec`): each matrix param
    gets its group's format; a matrix that cannot take it (w4 with K % 64 != 0) stays bf16 and is
    reported in :attr:`FormatPlan.fallbacks`; every other param stays bf16.

    Raises:
        QuantError: malformed recipe (see :func:`recipe`).
    """
    r = _as_recipe(recipe_or_name)
    formats, fallbacks = {}, {}
    for name, spec in specs.items():
        want = r.get(spec.group, "bf16")
        if want == "bf16" or not is_matrix(spec):
            formats[name] = "bf16"
        elif want == "w4" and spec.shape[1] % GROUP_SIZE:
            formats[name] = "bf16"
            fallbacks[name] = (f"w4 needs K to be a multiple of {GROUP_SIZE}, found K = {spec.shape[1]} "
                               f"(shape {list(spec.shape)}); kept bf16")
        else:
            formats[name] = want
    return FormatPlan(formats, fallbacks, r)


def quantize_weights(specs: Mapping, weights: Mapping, recipe_or_name) -> dict:
    """Quantise ``weights`` (name -> array, e.g. a Checkpoint or GraphWeights) per recipe.

    Returns a dict name -> the original array (``bf16`` params, untouched) or a :class:`QuantTensor`,
    for every name in ``specs``. Pure data: storage layout and kernels are a later step. Quantisation
    is row-wise (w8) / row-and-group-wise (w4), so quantising a fused param (rows concatenated) equals
    concatenating the quantised parts.

    Raises:
        QuantError: malformed recipe, non-finite weights.
        KeyError: a param missing from ``weights``.
    """
    plan = assign_formats(specs, recipe_or_name)
    out = {}
    for name in specs:
        fmt = plan.formats[name]
        out[name] = weights[name] if fmt == "bf16" else quantize(weights[name], fmt, name=name)
    return out


class FakeQuantWeights(Mapping):
    """Read-only mapping name -> fp32 array: quantised params dequantised (``fl32(q * scale)``), the rest
    converted to fp32 exactly. Computed lazily per access (the reference executor caches its fp32 copy).

    Attributes:
        plan: the :class:`FormatPlan` applied.
    """

    def __init__(self, weights: Mapping, specs: Mapping, recipe_or_name):
        self.weights, self.specs = weights, specs
        self.plan = assign_formats(specs, recipe_or_name)

    def __getitem__(self, name: str) -> np.ndarray:
        """fp32 array for ``name`` (quantised then dequantised when its format is w8/w4). Raises KeyError
        for a name missing from the weights, QuantError for non-finite values."""
        fmt = self.plan.formats.get(name, "bf16")
        if fmt == "bf16":
            return np.asarray(self.weights[name]).astype(F32)
        return quantize(self.weights[name], fmt, name=name).dequantize()

    def __iter__(self):
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)


def fake_quant(weights_mapping: Mapping, specs: Mapping, recipe_or_name) -> FakeQuantWeights:
    """fp32 weights of the quantised model under the same names (see :class:`FakeQuantWeights`), so
    :class:`ninferc.ir.reference.ReferenceExecutor` can run it: ``ReferenceExecutor(graph,
    fake_quant(ckpt, ckpt.specs, "w4"))``.

    Raises:
        QuantError: malformed recipe (at once); non-finite weights (on access).
    """
    return FakeQuantWeights(weights_mapping, specs, recipe_or_name)
