"""Decode-size GEMV: plain or cooperative split-K, one template per compute engine (``gemv_fma.cu.j2``: fp32 FMAs,
``gemv_dp.cu.j2``: integer dot products, ``gemv_mma.cu.j2``: tensor cores; their shared jinja ``gemv.inc.j2`` and
device code ``gemv_common.cuh``).

Contract
--------
``acc[T, N_w] = X[T, K] (bf16, row-major) @ W[N_w, K]^T (row-major, nn.Linear layout)`` with fp32
accumulation, then an epilogue into ``Y[T, N]`` (dtypes per templates/README.md: Linear outputs fp32,
the SwiGLU output -- down_proj's input -- bf16):

* ``store``           ``Y = acc``, fp32                                   (N_w = N)
* ``residual_add``    ``H += acc``, fp32 (H is the residual stream)        (N_w = N)
* ``swiglu``          W stacks [gate; up] (N_w = 2N): ``Y[:, i] = bf16(silu(acc[:, i]) * acc[:, N + i])``
* ``add_norm_parts``  the residual add of the ``AddRMSNorm`` that follows the GEMV, and what the GEMV that reads
  that norm's output needs, so the decode step has no norm kernel and no grid barrier:
  ``H += acc``; ``XS = bf16(H * (1 + w))`` (``w`` if not ``unit_offset``; w = the norm's weight, fp32 [N]);
  ``SS[t, b] = sum(H[t, o]^2 for o in row block b)`` (fp32 [T, row_blocks], one part per CTA, a fixed
  summation order). Plain route only (each output has one owner CTA).

Input modes (``GemvProblem.in_norm``):

* ``none``   X is bf16.
* ``parts``  X is the ``XS`` of an ``add_norm_parts`` GEMV and the kernel finishes the RMSNorm: every dot product
  of token t is multiplied by ``1 / sqrt(sum(SS[t, :]) / K + eps)`` (the parts summed in a fixed order, so
  every CTA gets the same bits). Together: ``Y = RMSNorm(H) @ W^T`` with the norm's ``(1 + w)`` applied before
  the bf16 rounding of X and its per-token factor after the dot products -- the unfused pair (AddRMSNorm kernel,
  then the GEMV on its bf16 output) up to where X is rounded.

K must be a multiple of 8 (bf16), 16 (w8) or 64 (w4). Inputs 16-byte aligned.

Weight formats (``GemvProblem.wfmt``; the formats of :mod:`ninferc.ir.quant`, dequantised in registers)
-----------------------------------------------------------------------------------------------------------
* ``bf16``  W bf16 ``[N_w, K]``.
* ``w8``    W int8 codes ``[N_w, K]`` + fp32 ``scales[N_w]``: ``w[r, i] = q[r, i] * scales[r]``. The kernel
  accumulates ``sum(q * x)`` per row in fp32 and multiplies by the row scale once, before the warp sum.
* ``w4``    W uint8 ``[N_w, K/2]`` (byte j of a row: element 2j in the low nibble, 2j+1 in the high one,
  each nibble ``u = q + 8``) + fp32 ``scales[N_w, K/64]`` (signed): ``w[r, i] = q[r, i] * scales[r, i//64]``.
  Per 16-byte vector (32 elements, inside one group of 64) the kernel forms ``sum(q * x)`` per 8 elements
  in fp32 and adds it times the group's scale to the accumulator.

Codes become fp32 without I2F: the fp32 with bits ``0x4B000000 | u`` is ``2^23 + u``, so one PRMT and one
FADD of ``-(2^23 + bias)`` give ``q`` exactly (bias 128 for int8 read as offset binary, 8 for nibbles).

*Layout.* The per-target packing layout of both quantised formats is the canonical row-major layout of
:mod:`ninferc.ir.quant`, on every arch: no repacking. Each lane issues one 16-byte load of a W row per
step (8 bf16, 16 int8 or 32 int4 elements), consecutive lanes take consecutive 16-byte vectors, so a warp
reads 512 contiguous bytes of the row per step -- four full 128-byte lines, the same coalescing as bf16.

Tensor-core w4 (template ``mma``; the token tiles of ``GemvCoopFamily.w4_mma_tiles``, default the 4-token tile)
--------------------------------------------------------------------------------------------------------------
A warp owns 16 W rows, one ``mma.sync.m16n8k16`` A tile (rows g = lane / 4 and g + 8), and the chunk's tokens are
the B columns (column g = token g, zero past T; n = 8, so T <= 8). Per scale group of 64 K elements, lane
(g, q = lane % 4) takes codes 16q .. 16q + 15 of its two rows: each word of 8 codes gives the bf16 pairs
(q[e_i], q[e_i+4]) exactly (nibble under the exponent of 128, then one ``fma.rn.bf16x2`` subtracting 136; taking
the 136 off with a second mma per k-tile instead was slower on the H200, runs 35-43 run 43), and the four mma of
the group read K in that permuted order for A and B alike (B pairs by PRMT of x), so the sum is the same; each
group's fp32 sums are multiplied by its scale once (as the FMA path does). The warp streams chunks of 4 groups
(128 bytes of each row, their scales and the chunk's x of every token) through a private ``mma_stages``-deep
cp.async ring in shared memory, XOR-swizzled for the fragment reads; before the PDL wait only the first chunks'
weight lines are prefetched into L2 (x is the previous kernel's output). Same epilogues, input modes and routes as
the FMA kernels (the writer warp stores its 16 x T outputs in rounds of 32).

Tensor-core w8 (template ``mma`` with ``wfmt`` w8; the token tiles of ``GemvCoopFamily.w8_mma_tiles``, default 4)
-----------------------------------------------------------------------------------------------------------------
The same 16-row warp tile, on ``mma.sync.m16n8k16`` with **fp16** inputs: int8 codes are not exact in bf16 (8
significant bits) but are in fp16 (11). Each CTA first converts its tokens' x into fp16 in dynamic shared memory
(``tile * K * 2`` bytes, or K segments of at most ``W8_MMA_X_BYTES`` converted in turn:
:meth:`GemvCoopFamily.dynamic_smem_bytes`), each token scaled by the power of two
``2^e`` that puts ``max|x|`` in ``[2^14, 2^15)`` -- exact for every bf16 value down to ``2^-29 max|x|`` (smaller
ones land in fp16 subnormals, error <= ``2^-39 max|x|``), and no overflow whatever the activation range. Per
64-element block lane (g, q) streams 16 bytes of rows g and g + 8 straight from global memory (4 blocks per step);
one LOP3 per pair puts the offset-binary bytes u = q + 128 of elements (e, e + 2) under the fp16 exponent of 1024
and one ``add.rn.f16x2`` of -1152 gives q exactly, the mma reads K in that permuted order for A and B alike (x is
stored in shared memory with each quad permuted to match), and the row scale and ``2^-e`` multiply the warp's
fp32 totals. About 11 instructions per 8 codes (2 rows x 4) and k-tile against ~30 on fp32 FMAs. Plain route only
(a cooperative split would convert x once per split); same epilogues and input modes.

Integer dot products (template ``dp``; the tiles of ``GemvCoopFamily.w4_dp_tiles`` / ``w8_dp_tiles``: w4 1, w8 none)
-----------------------------------------------------------------------------------------------------------------
The fp32-FMA kernels above spend ~3.5 (w8) / ~7 (w4) instructions per weight byte converting codes and x to fp32
and multiplying, which caps them at ~3.3 / ~2.4 TB/s on the H200 against ~4.3 for bf16 (bench/NOTES.md runs 14,
45). The ``dp`` variants keep the FMA kernels' warp shape, layout and loads, but first stage the CTA's tokens' x in
dynamic shared memory as **int16** under one power of two per 64-element block (the ``2^e`` that puts the block's
``max|x|`` in ``[2^14, 2^15)``: :func:`dp_x`, exact for every element down to ``2^-7`` of its block's max, error
<= ``2^-15 max|block|`` below), then each 16-byte weight vector is 8 (w8) or 16 (w4) ``dp2a`` (PTX: two int16 x
int8 products plus an int32 add) per row and token -- an exact int32 ``sum(q * xq)`` that the block's ``2^-e``
(and the w4 group scale) turn into fp32. w4 nibbles are used as stored (``u = q + 8``; x is staged in the nibbles'
order and the offset comes off as ``8 * sum(xq)`` per 32 elements, exact). About 10 (w8) / 33 (w4) instructions
per 16-byte vector and row instead of ~56 / ~126. The only numerical difference from the FMA kernels is the int16
rounding of x, which :func:`reference` reproduces (``dp=True``). Plain route only; K a multiple of 64; dynamic
shared memory ``tile * K * (2 + 4/64 (+ 4/32 for w4))`` bytes, at most ``DP_X_BYTES`` (else the FMA kernels). Each
warp loads its first weight step into registers before the PDL wait and keeps one step in flight ahead of the one
it multiplies; warp 0 computes the ``in_norm`` factor once per staging. By default the dp variants are persistent
(template ``persist``): the grid is one balanced wave, :meth:`GemvCoopFamily.persistent_grid` of the work items
(row blocks x token chunks) under the compiled variant's resident CTAs/SM x the SM count, and each CTA takes a
contiguous range of items, staging x again only when its token chunk changes.

Kernel shape
------------
A warp owns ``rows_per_warp`` W rows (for swiglu: half gate rows, the matching half up rows) and streams them
along K, one 16-byte vector per lane per step. ``k_warps`` warps share one row group, each taking every
``k_warps``-th step (their sums are added through shared memory, in warp order); a CTA of ``threads`` holds
``threads / 32 / k_warps`` row groups. A CTA handles up to ``max_tokens`` tokens (a token chunk; the family
compiles tiles 1 and 4 and a launch of T tokens takes the smallest tile >= T). The grid is 1-D:
``row_blocks * splits * token_chunks`` CTAs (nothing on y/z, so no 65535 limit applies).

Routes and the cost model (chosen here, by the plan -- the kernel has no launch constants)
-----------------------------------------------------------------------------------------
* ``plain``: one split, epilogue from registers, no workspace, no barrier. Every (threads, k_warps) shape of
  :attr:`GemvCoopFamily.plain_shapes` is a candidate.
* ``coop_splitk``: the ``mode=coop`` variant, launched cooperatively: each CTA reduces one K slice into an fp32
  workspace ``[splits, T, N_w]``, a grid barrier, then the grid reduces and applies the epilogue. ``splits`` =
  the most with ``base * splits <= cap`` (``cap`` = resident CTAs/SM x SMs), at most ``K / VEC / 32``.
  Not for ``add_norm_parts``.

The launch is the candidate with the least :func:`estimate_us`, a streaming model of the kernel on the plan's
target: its inputs are the compiled variant's resident CTAs/SM (registers, shared memory: the occupancy
calculator), the SM count and the DRAM bandwidth per SM (the SKU's, the device's, or the arch's typical
figure), and the problem shape. A launch streams its weight bytes at the DRAM bandwidth when the warps it keeps
resident have enough bytes in flight (Little's law: bandwidth x a loaded latency of ``LATENCY_US``), slower in
proportion otherwise; each warp also spends ``OVERHEAD_STEPS`` (+ ``REDUCE_STEPS`` per doubling of k_warps) of
its K steps' time on start-up, the x loads and the reduction, and the last, partly filled wave of CTAs costs
one CTA duration at ``TAIL_STEP_US`` per step, scaled by how empty it is; a cooperative launch adds its barrier
and reduction pass. The constants were fitted to an H200 sweep of every GEMV shape x format of the 27B decode
step (``bench/gemv_ksplit_sweep.py``; ``bench/results/gemv_ksplit_sweep_h200_9965633.json``, 18 shape x format
cases, each over the five plain shapes): the model's pick is within 0.5 % of the fastest measured variant on
average and 6 % in the worst case (w4 down_proj), where the old rule (one K-streaming warp per row group,
cooperative split-K when two splits fit) lost up to 30 % (``..._2936e5d_proto.json``). On other cards the model
has the same inputs (their SM count, occupancy and bandwidth per SM) but no measurement behind its constants.

Runtime arguments (:meth:`GemvCoopFamily.arg_names`, :func:`kernel_args`): bf16 ``w, x, y, ws, barrier, k,
n_out, t_total, splits``; w8 / w4 ``w, scales, x, y, ...`` -- pointers then int32; ``residual_add`` and
``add_norm_parts`` name ``y`` ``h``; ``add_norm_parts`` appends ``norm_w, xs, ss_out``, ``in_norm parts``
appends ``ss_in, ss_parts, in_eps``. The barrier counter is one zero-initialised uint32 per stream (left
reusable by the kernel); ``ws`` is ``Launch.workspace_bytes`` of scratch (coop only, no initialisation needed).
``add_norm_parts`` launches size ``ss_out`` instead (``Launch.workspace_bytes``, see :meth:`GemvCoopFamily.norm_parts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.quant import GROUP_SIZE, QuantTensor
from ninferc.ir.reference import ref_rmsnorm
from ninferc.targets.kernels._weights import WFORMATS, check_weight_k
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

EPILOGUES = ("store", "residual_add", "swiglu", "add_norm_parts")
MODES = ("coop", "plain")
IN_NORMS = ("none", "parts")
WARP = 32  # threads per warp on every CUDA architecture
VEC = 8    # bf16 elements per 16-byte load
#: K elements per 16-byte weight load, per weight format
VEC_OF = {"bf16": VEC, "w8": 16, "w4": 32}

# ---- cost model constants (fitted on the H200: module docstring) ----
#: loaded DRAM latency, microseconds: bytes in flight needed = bandwidth x this (Little's law)
LATENCY_US = 1.0
#: per-warp fixed cost in K steps (start-up, x loads, warp reduction, epilogue)
OVERHEAD_STEPS = 3.0
#: extra per-warp cost in K steps per doubling of k_warps (the shared-memory reduction and its barrier)
REDUCE_STEPS = 1.0
#: microseconds per K step of a CTA running in the last, partly filled wave
TAIL_STEP_US = 0.2
#: nanoseconds per x element (and token) one dp CTA's staging costs its SM: on the H200 (bench/NOTES.md run 78,
#: ``bench/results/dp_stream_probe_h200_0fd6675.json``) skipping the staging saved 4.8 us of w4 down (K = 17,408)
#: and 1.8 us of GDN out (K = 6,144), each at 320 CTAs of 256 threads = 2.4 per SM: 0.115 / 0.122 ns
DP_STAGE_NS = 0.12
#: microseconds one boundary between two work items of a persistent dp CTA costs without the carry: on the H200
#: (bench/NOTES.md run 84) the carry took 640-thread CTAs of w4 gate|up (7 items each) from 35.9 to 33.1 us, GDN in
#: (4 items) 20.0 to 19.0, q|k|v (3 items) 16.3 to 15.7: 0.47 / 0.33 / 0.30 us per boundary
DP_ITEM_US = 0.4
#: rows of W a warp of the tensor-core (mma) w4 variants owns: one m16n8k16 A tile
MMA_ROWS = 16
#: stages of an mma warp's cp.async ring (template ``mma_stages``): ``MMA_STAGES - 1`` chunks in flight
MMA_STAGES = 3
#: scale groups per ring stage (``kChunk`` in the template): 4 x 32 bytes = one 128-byte line of each of the 16
#: rows (8 groups per stage were slower on the H200: bench/NOTES.md run 40)
MMA_CHUNK = 4
#: most tokens an mma variant's CTA takes: the n = 8 columns of the m16n8k16 tile
MMA_MAX_TOKENS = 8
#: static shared memory a kernel may declare (CUDA C Programming Guide, "Shared Memory": 48 KB without the
#: dynamic opt-in); the mma ring of a large CTA gets fewer stages to fit
STATIC_SMEM_LIMIT = 48 * 1024
#: bytes of fp16 x (token tile x K segment) the w8 mma variants keep in dynamic shared memory at most (under the
#: 48 KiB a launch gets without the opt-in, with the static buffers); a longer K is converted in segments
W8_MMA_X_BYTES = 40 * 1024
#: 64-element blocks per warp step of the w8 mma variants (template ``kMmaUnroll``)
W8_MMA_UNROLL = 4
#: K elements per int16 x scale of the dp variants (template ``kDpBlock``)
DP_BLOCK = 64
#: bytes of staged int16 x (+ its block scales and sums) the dp variants may keep in dynamic shared memory: as
#: ``W8_MMA_X_BYTES``, under the 48 KiB a launch gets without the opt-in; a longer x stays on the FMA kernels
DP_X_BYTES = 40 * 1024


def dp_x_bytes(wfmt: str, k: int, tile: int) -> int:
    """Dynamic shared memory of a dp variant, bytes: per token of the ``tile``-token tile, int16 x [K], fp32
    ``2^-e`` [K / 64] and, for ``wfmt`` w4, fp32 sums of the int16 x [K / 32] (template ``dp``). Pure arithmetic,
    no checks (:meth:`GemvCoopFamily.dp_for` decides whether a problem has a dp variant)."""
    return tile * (2 * k + 4 * (k // DP_BLOCK) + (4 * (k // 32) if wfmt == "w4" else 0))


def dp_ring_bytes(wfmt: str, threads: int, rows_per_warp: int, ring: int) -> int:
    """Dynamic shared memory of a persistent dp variant's weight rings (template ``ring``), bytes: per warp
    ``ring`` stages of ``rows_per_warp`` x 32 lanes x 16 bytes of codes (+ 4 bytes of group scale each for w4);
    0 without a ring. Pure arithmetic."""
    if not ring:
        return 0
    return (threads // WARP) * ring * rows_per_warp * WARP * (16 + (4 if wfmt == "w4" else 0))


def dp_x(x) -> np.ndarray:
    """The x a dp variant multiplies by, as fp32 [T, K]: per token and 64-element block, ``rint(x 2^e) 2^-e`` with
    ``e = 14 - floor(log2 max|block|)`` clamped to [-126, 126] (the template's staging; round half to even).

    Args:
        x: [T, K] bf16 values (``ml_dtypes.bfloat16`` or any float array holding bf16 values), K % 64 == 0.

    Raises:
        PlanError: K not a multiple of 64.
    """
    x32 = _f32(x)
    t, k = x32.shape
    if k % DP_BLOCK:
        raise PlanError(f"gemv_coop dp: K = {k} is not a multiple of {DP_BLOCK}")
    b = x32.reshape(t, k // DP_BLOCK, DP_BLOCK)
    m = np.abs(b).max(axis=-1, keepdims=True)
    ex = ((m.view(np.uint32) >> 23) & 0xFF).astype(np.int64) - 127
    e = np.clip(14 - ex, -126, 126)
    sc = np.ldexp(np.float32(1), e).astype(np.float32)
    q = np.rint(b * sc)  # exact product (power of two), round half to even
    return (q * np.ldexp(np.float32(1), -e).astype(np.float32)).astype(np.float32).reshape(t, k)


def mma_stage_bytes(tile: int) -> int:
    """Bytes of one mma ring stage for token tile ``tile`` (``kStageBytes``): ``MMA_CHUNK`` groups of the 16 rows'
    codes (32 B per row and group) and fp32 scales, plus the chunk's bf16 x of ``tile`` tokens (128 B per token
    and group)."""
    return MMA_ROWS * MMA_CHUNK * (GROUP_SIZE // 2 + 4) + tile * MMA_CHUNK * GROUP_SIZE * 2


def mma_stages(threads: int, tile: int) -> int:
    """Stages of each warp's cp.async ring in an mma variant of ``threads`` threads and token tile ``tile``:
    ``MMA_STAGES``, fewer when the CTA's rings would exceed ``STATIC_SMEM_LIMIT`` (1 token: 256 threads get 2;
    4 tokens: 128 threads get 2). Below 2 the variant does not exist: :meth:`GemvCoopFamily.shapes_for` and
    :meth:`GemvCoopFamily.coop_threads_for` leave it out, :meth:`GemvCoopFamily.spec` refuses it."""
    return min(MMA_STAGES, STATIC_SMEM_LIMIT // (threads // WARP * mma_stage_bytes(tile)))


@dataclass(frozen=True)
class GemvProblem:
    """One GEMV instance.

    Attributes:
        k: reduction length (columns of X and W); multiple of 8 (bf16), 16 (w8) or 64 (w4).
        n: output features (columns of Y). For swiglu W has 2n rows ([gate; up]).
        epilogue: ``"store" | "residual_add" | "swiglu" | "add_norm_parts"`` (module docstring).
        wfmt: weight format ``"bf16" | "w8" | "w4"`` (module docstring; :mod:`ninferc.ir.quant`).
        unit_offset: add_norm_parts only: scale by ``1 + w`` (zero-centred norm weights, the Qwen3.5 default)
            or by ``w``; ignored (and not part of the kernel's identity) for the other epilogues.
        in_norm: ``"none"`` or ``"parts"`` (X is an add_norm_parts GEMV's XS; module docstring).

    Raises:
        PlanError: unknown weight format, k not a positive multiple of its format's K multiple (the message
            names K, the format and the multiple), n not positive, an unknown epilogue or input mode, or
            add_norm_parts together with in_norm parts (both use the one parts workspace).
    """

    k: int
    n: int
    epilogue: str = "store"
    wfmt: str = "bf16"
    unit_offset: bool = True
    in_norm: str = "none"

    def __post_init__(self):
        check_weight_k("gemv_coop", self.k, self.wfmt)
        if self.n <= 0:
            raise PlanError(f"gemv_coop: N = {self.n} must be positive")
        if self.epilogue not in EPILOGUES:
            raise PlanError(f"gemv_coop: unknown epilogue {self.epilogue!r}; supported: {', '.join(EPILOGUES)}")
        if self.in_norm not in IN_NORMS:
            raise PlanError(f"gemv_coop: unknown in_norm {self.in_norm!r}; supported: {', '.join(IN_NORMS)}")
        if self.norm_out and self.norm_in:
            raise PlanError("gemv_coop: a GEMV cannot both write norm parts (add_norm_parts) and read them "
                            "(in_norm parts): they share one workspace")

    @property
    def w_rows(self) -> int:
        """Rows of W: 2n for swiglu, else n."""
        return 2 * self.n if self.epilogue == "swiglu" else self.n

    @property
    def norm_out(self) -> bool:
        """True for the ``add_norm_parts`` epilogue (plain only; extra arguments norm_w, xs, ss_out)."""
        return self.epilogue == "add_norm_parts"

    @property
    def norm_in(self) -> bool:
        """True for ``in_norm == "parts"`` (extra arguments ss_in, ss_parts, in_eps)."""
        return self.in_norm == "parts"

    @property
    def quantized(self) -> bool:
        """True for w8 / w4 (the kernel takes a ``scales`` argument)."""
        return self.wfmt != "bf16"

    @property
    def k_per_vec(self) -> int:
        """K elements per 16-byte weight vector: 8 (bf16), 16 (w8), 32 (w4)."""
        return VEC_OF[self.wfmt]

    @property
    def weight_bytes(self) -> int:
        """Bytes of W as stored (codes + fp32 scales for w8 / w4)."""
        n = self.w_rows * self.k
        return {"bf16": 2 * n, "w8": n + 4 * self.w_rows,
                "w4": n // 2 + 4 * self.w_rows * (self.k // GROUP_SIZE)}[self.wfmt]

    def weight_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """The weight arrays the kernel reads, name -> (shape, numpy dtype name): bf16 ``w`` [w_rows, K]
        (bf16 bits); w8 ``w`` int8 [w_rows, K] + ``scales`` float32 [w_rows]; w4 ``w`` uint8
        [w_rows, K/2] + ``scales`` float32 [w_rows, K/64]."""
        r, k = self.w_rows, self.k
        if self.wfmt == "w8":
            return {"w": ((r, k), "int8"), "scales": ((r,), "float32")}
        if self.wfmt == "w4":
            return {"w": ((r, k // 2), "uint8"), "scales": ((r, k // GROUP_SIZE), "float32")}
        return {"w": ((r, k), "bfloat16")}


def estimate_us(problem: GemvProblem, tokens: int, *, threads: int, k_warps: int, rows_per_warp: int, tile: int,
                ctas_per_sm: int, sms: int, bandwidth_per_sm_gbs: float, splits: int = 1, mma: bool = False,
                dp: bool = False, items_per_cta: int = 1, carry: bool = False) -> float:
    """Modelled time of one launch, microseconds (module docstring, "Routes and the cost model").

    Args:
        problem: the GEMV. tokens: T. threads, k_warps, rows_per_warp, tile: the variant (tile = max_tokens).
        ctas_per_sm: the variant's resident CTAs per SM (occupancy calculator). sms: SM count.
        bandwidth_per_sm_gbs: DRAM bandwidth per SM, GB/s. splits: K splits of a cooperative launch (1 = plain).
        mma: the tensor-core w4 variant: a warp step is the ``(mma_stages - 1) x MMA_CHUNK`` scale groups of its
            16 rows its cp.async ring holds in flight (4 KiB at 3 stages) instead of one 16-byte vector per lane
            and row.
        dp: an integer-dot-product variant: every resident CTA first converts its tokens' whole x (``tile x K``
            elements) before it streams, so each SM pays that once per CTA it holds -- ``DP_STAGE_NS`` per element
            and CTA per SM, on top of the streaming time.
        items_per_cta: work items each CTA of a persistent launch runs in a row; each boundary between two costs
            ``DP_ITEM_US`` (the next item's first weights are requested only after the previous item's epilogue
            and barrier) unless ``carry`` (the variant loads them in the previous item's last step).

    Returns:
        streaming time (weight bytes x token chunks at the bandwidth the resident warps can sustain) + the
        last wave's tail (+ the barrier and reduction pass when ``splits > 1``; + the x staging of a dp
        variant). Only its ordering between variants is used.
    """
    warps = threads // WARP
    groups = warps // k_warps
    outs = groups * (rows_per_warp // 2 if problem.epilogue == "swiglu" else rows_per_warp)
    chunks = -(-tokens // tile)
    ctas = -(-problem.n // outs) * chunks * splits
    cap = max(1, ctas_per_sm) * sms
    if mma and problem.wfmt == "w8":
        steps = -(-(problem.k // 64) // (k_warps * splits * W8_MMA_UNROLL))
        step_bytes = MMA_ROWS * 64 * W8_MMA_UNROLL
    elif mma:
        inflight_groups = (mma_stages(threads, tile) - 1) * MMA_CHUNK
        steps = -(-(problem.k // GROUP_SIZE) // (k_warps * splits * inflight_groups))
        step_bytes = MMA_ROWS * GROUP_SIZE // 2 * inflight_groups
    else:
        steps = -(-(problem.k // problem.k_per_vec) // (k_warps * WARP * splits))
        step_bytes = rows_per_warp * 16 * WARP
    over = OVERHEAD_STEPS + REDUCE_STEPS * math.log2(k_warps)
    bw = bandwidth_per_sm_gbs * sms * 1e3  # bytes per microsecond
    inflight = min(ctas, cap) * warps * step_bytes * steps / (steps + over)
    stream = problem.weight_bytes * chunks / (bw * min(1.0, inflight / (bw * LATENCY_US)))
    waves = ctas / cap
    tail = (steps + over) * TAIL_STEP_US * ((math.ceil(waves) - waves + 1) if waves > 1 else 1.0)
    barrier = (2 + splits) * LATENCY_US if splits > 1 else 0.0
    stage = min(ctas, cap) / sms * tile * problem.k * DP_STAGE_NS * 1e-3 if dp else 0.0
    boundaries = 0.0 if carry else (max(1, items_per_cta) - 1) * DP_ITEM_US
    return stream + tail + barrier + stage + boundaries


class GemvCoopFamily:
    """The ``gemv_coop`` kernel family (see module docstring).

    Args:
        plain_shapes: (threads, k_warps) of the plain variants (threads a multiple of 32; k_warps divides the
            CTA's warps). Default: 128 threads with 1, 2 or 4 warps per row group, 256 threads with 2 or 4 --
            on the H200 sweep these five hold the fastest variant of every 27B decode shape within 0.5 %
            (512-thread CTAs and 8-16 warps per row group never won).
        coop_threads: thread counts of the cooperative split-K variants (k_warps 1).
        token_tiles: the ``max_tokens`` variants (tokens per CTA, a template parameter; larger T adds token chunks
            to the grid). A launch for T tokens uses the smallest tile >= T, else the largest (:meth:`tile_for`):
            one-sequence decode (T = 1) gets the one-token kernel, whose single-token accumulators need fewer
            registers (w8 / w4: H200, runs 12-19: 27B w8 decode 84.5 -> 106 tok/s).
        rows_per_warp: W rows a warp accumulates at once (even), bf16 weights.
        quant_rows_per_warp: the same for w8 / w4 weights. Default 2, from the H200 sweep
            (runs 12-19's sweep, bench/results/gemv_sweep_h200_4086f82.json; 27B decode shapes, T = 1):
            with 2 rows a w4 warp needs 48 registers instead of 85-94 and the kernel time drops by 5-26 %.
        norm_rows_per_warp: the same for the add_norm_parts epilogue, every format. Default 2: on the H200 the
            bf16 27B down_proj / out_proj with it take 41 / 16 us against 62 / 24 us with 4 rows per warp at the
            same CTA shape (``bench/gemv_ksplit_sweep.py``, runs 27-34; 4 rows per warp are fine for the same
            GEMV with a plain residual add -- the difference was measured, not explained).
        prefetch_steps: K steps (16 bytes per lane per W row) each warp asks L2 to prefetch before its PDL
            wait (``prefetch.global.L2``; weights are constant); 0 = none. A template parameter only when
            not 1, so the default kernels keep their URI. Default 1 from same-process A/Bs on the H200
            (``bench/prefetch_ab.py``: bf16 0 -> 1 step 15.06 -> 14.83 ms/token; 4 and 8 steps slower).
        w4_mma_tiles: the token tiles whose w4 variants run on tensor cores (template ``mma``: 16 rows per warp,
            the dot products on mma.sync; every w4 variant of such a tile is an mma variant -- the cost model has
            no ALU term, so the two kinds are not compared by it). Default (4,), from the H200 sweep
            (``bench/gemv_ksplit_sweep.py``, runs 35-43 run 42, every 27B decode shape, best variant of each kind,
            ``bench/results/gemv_ksplit_sweep_w4_t4_h200_5149fc8.json``): at T = 4 the mma variants take 28.2 /
            15.1 / 48.8 / 35.6 / 24.8 / 265 us (GDN in, GDN out, gate|up, down, q|k|v, LM head) against 51.3 /
            26.5 / 110.6 / 62.3 / 51.0 / 533 us on fp32 FMAs (1.7-2.3x); at T = 1 they are at parity or slower
            (gate|up 42.7 vs 40.5 us, down 25.4 vs 22.2; the 27B w4 decode 125.3 vs 131 tok/s), so the 1-token
            tile keeps the FMA path.
        w8_mma_tiles: the token tiles whose w8 variants run on tensor cores (fp16 mma, module docstring), where K is
            a multiple of 64 and the tile's fp16 x fits ``W8_MMA_X_BYTES``. Default (4,), from the H200 sweeps: at T = 4
            they win 1.5-1.6x where they fit (runs 45-55 run 47,
            ``bench/results/gemv_ksplit_sweep_w8_t4_h200_13d5dd2.json``, best of each kind, mma vs FMA: GDN in 33.0 vs
            52.6 us, gate|up 65.1 vs 99.9, q|k|v 30.8 vs 45.3, an LM head at w8 351 vs 537; GDN out and down, K = 6,144
            / 17,408, then still needed more than 40 KiB of x at 4 tokens and stayed on FMAs; since run 53 a long K is
            converted in segments); at T = 1 they are correct and slower (runs 45-55 run 46, ``bench/results/gemv_ksplit_sweep_w8_t1_h200_c8764ba.json``, best
            variant of each kind, mma vs FMA: gate|up 54.2 vs 45.4 us, down 31.9 vs 23.0, GDN in 27.1 vs 24.2, GDN
            out 13.2 vs 9.6, q|k|v 24.1 vs 20.3; 27B w8 decode 99.6 vs ~118 tok/s), like the w4 mma variants at
            T = 1: both tensor-core kernels stream at most ~3.3 TB/s there.
        w8_dp_tiles / w4_dp_tiles: the token tiles whose w8 / w4 variants use integer dot products (template ``dp``,
            module docstring) where K is a multiple of 64, the staged x fits ``DP_X_BYTES`` and the tile is not an mma
            tile. Defaults: (1,) for both, the one-sequence decode GEMVs. From the H200 (bench/NOTES.md runs
            66-69, ``bench/results/dp_probe_h200_fcda2c0.json``, best variant of each kind at T = 1): w4 dp vs
            fp32 FMAs gate|up 30.8 vs 40.3 us, down 19.4 vs 22.1, GDN in 14.9 vs 20.5, GDN out 7.8 vs 9.3, q|k|v
            14.6 vs 18.8. w8 was mixed in isolation (GDN in 21.8 vs 24.2, gate|up 44.9 vs 45.3, down 24.8 vs 23.1)
            and stayed on FMAs until runs 93-99, when the persistent dp kernels (one balanced wave, since run 68)
            beat the FMA ones in the decode step itself -- even at the FMA kernels' best one-token shape (4 rows per
            warp, 2 warps per row group for the norm-input GEMVs, 1.040x over the cost model's pick, run 95; that
            special case was removed once dp replaced them): 27B w8 8.016 vs 8.122 ms per token in one process
            (1.013x, run 97, ``bench/results/family_ab_w8_dp_h200_f20a747.json``); per family in the graph
            profile (run 98) gate|up 2.98 vs 3.02 ms, GDN in 1.14 vs 1.22, GDN out 0.48 vs 0.51, attention o 0.155
            vs 0.166, down equal, q|k|v 0.36 vs 0.32 (the one loser).
        dp_shapes: the plain (threads, k_warps) shapes of the dp variants; the cost model (with its x-staging
            term, ``DP_STAGE_NS``) picks one per problem. Default 256 and 640 threads, one warp per row group. On
            the H200 probe (runs 59-65) the persistent dp variant at 2 rows per warp and 256 threads is within 3 % of
            the fastest of 16 variants (2 / 4 rows per warp x 4 shapes x persistent or not) on all four w4 decode
            shapes; a 640-thread CTA (one per SM: the staging of x once per SM, not per each of its 2-3 CTAs) takes
            w4 down (K = 17,408) from 20.0 to 17.3 us, ties GDN out (8.0), and loses on the K = 5,120 shapes
            (GDN in 20.0 vs 15.2, gate|up 35.9 vs 31.0, q|k|v 16.3 vs 14.3; 320 / 512 threads won nowhere by more
            than 3 %: bench/NOTES.md run 84, ``bench/results/dp_layer_probe_w4_h200_3cbe079.json``). With the
            staging term the model picks 640 threads for down and GDN out and 256 for the others.
        dp_persistent: the dp variants are persistent (template ``persist``): a grid of one balanced wave
            (:meth:`persistent_grid`) whose CTAs each take a contiguous range of row blocks and stage x once,
            instead of one CTA (and one staging of x) per row block.
            The grid fills every resident CTA slot: leaving 1/4 or 1/2 of them for the next kernel's CTAs (to load
            their first weights under PDL while this grid drains) took 94.7 / 118.4 instead of 74.9 us per GDN
            layer's four w4 GEMVs on the H200 (``bench/results/dp_layer_probe_h200_7b16357.json``).
        dp_carry: the item-boundary carry settings the persistent dp variants are compiled with (template
            ``carry``: each warp's last weight step of a work item also loads its first step of the CTA's next
            item, and the CTA meets at a barrier between items only where a shared buffer is reused; without it
            every item starts with its own loads and ends at a barrier). The cost model picks per problem: the
            carry saves ``DP_ITEM_US`` per item boundary, and where its registers cost a resident CTA per SM the
            bytes in flight decide. Default both: on the H200 the first carry build's registers cost the 256-thread
            kernels their 4th CTA per SM (GDN in 15.0 -> 16.9 us, gate|up 30.6 -> 31.3; bench/NOTES.md run 83), at 640
            threads it saved 0.3-0.5 us per boundary (run 84).
        dp_ring: stages of each warp's weight ring in the persistent dp variants without the carry (template
            ``ring``: cp.async into lane-private shared-memory slots, ``dp_ring - 1`` steps in flight across item
            boundaries, the first ones issued before the PDL wait; :func:`dp_ring_bytes` of dynamic shared memory per
            CTA). Default 0: weights through registers, one step ahead. Measured no faster on the H200 (bench/NOTES.md
            runs 88-90): 256-thread ring kernels lose their 4th CTA per SM to registers, or with a 64-register cap
            finish far apart; on the 640-thread w4 down / GDN out (one CTA per SM) no ring / 5 / 6 / 7 stages took
            71.9 / 72.5 / 72.9 / 75.0 us per GDN layer's four GEMVs -- a CTA with that much shared memory starts only
            once its SM is empty (GDN out's PDL wait 0.9 -> 2.3-3.8 us after GDN in's last exit).
        dp_preload: where the dp variants without the carry put their first weight steps before the PDL wait
            (template ``preload``): ``"regs"`` loads them (registers, or the ring's first stages), ``"late"`` only
            asks L2 for them and loads them after the staging of x.
        dp_deep_threads: the dp thread counts whose variants without carry, ring or late preload keep two weight
            steps in flight per warp instead of one (template ``depth`` 2). Meant for the 640-thread kernels, one
            CTA per SM (20 warps of 2 rows: ~25 KB in flight per SM vs ~40 KB for four 256-thread CTAs), which
            have registers to spare (at most 96 per thread for one 640-thread CTA per SM). Default (640,): on the
            H200 (bench/NOTES.md run 102) the w4 down / GDN out kernels' last CTA exit 17.8 -> 17.1 / 8.8 -> 8.3 us
            (72 registers on NVRTC 13.0, still one CTA per SM), 27B decode step 1.0105x (w4) and 1.0037x (w8) in
            one process (``bench/results/family_ab_{w4,w8}_deep_h200_2458298.json``); on the 256-thread kernels
            the registers cost the 4th CTA per SM (72.5 vs 70.9 us per GDN layer). The cost model does not count
            the second step (its in-flight term is one step per warp).
        dp_min_ctas: (wfmt, epilogue, threads, n) entries: the dp variants of that weight format, epilogue and CTA
            size compile with ``__launch_bounds__(threads, n)`` (template ``min_ctas``), a register cap of 65,536 /
            (threads x n) on the 64K-register SMs -- the occupancy and grid then follow the capped kernel's real
            register count. Default: the w8 ``store`` GEMVs (GDN in, q|k|v) at 4 CTAs of 256 threads per SM (64
            registers, no spills on NVRTC 13.0 / 13.5; 72 uncapped on 13.0, 3 CTAs/SM): on the H200 the w8 GDN in
            kernel's last CTA exit 23.9 -> 22.0 us; capping gate|up (swiglu) too cost it 1.0 us (bench/NOTES.md
            run 105: both capped, 27B w8 step 1.0075x).
        trace_epilogues: a probe's option (never planned by default): the dp variants of these epilogues (e.g.
            ``("swiglu",)``: every gate|up GEMV) are compiled with the template's ``trace`` records, so
            ``bench/attn_trace_probe.py --family gemv_coop`` can read their per-CTA timeline inside the graph-replayed
            step. The stamps cost registers: the plan's occupancy and grid follow the traced kernel's, and they can
            differ from the untraced plan's (NVRTC 13.5: the 27B w8 gate|up with the carry keeps 3 CTAs/SM on sm_90, the
            one without it drops to 2, and on sm_86 / sm_89 the carry one drops from 4 to 3); the probe prints the traced launch's CTAs/SM and grid to compare with ``ninferc
            plan``.
        mma_shapes: the plain (threads, k_warps) shapes of the mma variants, in place of ``plain_shapes``: a
            16-row warp tile leaves few row groups on a short N (5,120 outputs = 320 tiles), so more warps
            share each tile's K to keep enough bytes in flight. At most 256 threads: a 512-thread CTA's 128
            registers per thread make the 4-token variants spill (sm_86 / sm_89) and the 1-token one on sm_120a.

    Raises:
        PlanError: bad family parameters (names them).
    """

    name = "gemv_coop"
    #: the template of each compute engine (a variant's ``mma`` / ``dp`` parameter names it; else fp32 FMAs)
    engine_templates = {"fma": "gemv_fma.cu.j2", "dp": "gemv_dp.cu.j2", "mma": "gemv_mma.cu.j2"}
    template = engine_templates["fma"]
    templates = tuple(engine_templates.values())

    def __init__(self, plain_shapes: tuple[tuple[int, int], ...] = ((128, 1), (128, 2), (128, 4), (256, 2), (256, 4)),
                 coop_threads: tuple[int, ...] = (256, 512), token_tiles: tuple[int, ...] = (1, 4),
                 rows_per_warp: int = 4, quant_rows_per_warp: int = 2, norm_rows_per_warp: int = 2,
                 prefetch_steps: int = 1, w4_mma_tiles: tuple[int, ...] = (4,), w8_mma_tiles: tuple[int, ...] = (4,),
                 w8_dp_tiles: tuple[int, ...] = (1,), w4_dp_tiles: tuple[int, ...] = (1,), dp_persistent: bool = True,
                 dp_shapes: tuple[tuple[int, int], ...] = ((256, 1), (640, 1)),
                 dp_carry: tuple[bool, ...] = (False, True), dp_ring: int = 0, dp_preload: str = "regs",
                 dp_deep_threads: tuple[int, ...] = (640,),
                 dp_min_ctas: tuple[tuple[str, str, int, int], ...] = (("w8", "store", 256, 4),),
                 trace_epilogues: tuple[str, ...] = (),
                 mma_shapes: tuple[tuple[int, int], ...] = ((128, 1), (128, 2), (128, 4), (256, 4), (256, 8))):
        bad_shape = [s for s in (*plain_shapes, *mma_shapes, *dp_shapes)
                     if s[0] % WARP or s[0] <= 0 or s[1] < 1 or (s[0] // WARP) % s[1]]
        if (bad_shape or not plain_shapes or not mma_shapes or not dp_shapes or any(t % WARP or t <= 0 for t in coop_threads) or rows_per_warp % 2
                or quant_rows_per_warp % 2 or norm_rows_per_warp % 2
                or min(rows_per_warp, quant_rows_per_warp, norm_rows_per_warp) < 2 or not token_tiles
                or min(token_tiles) < 1):
            raise PlanError(
                f"gemv_coop: bad family parameters plain_shapes={plain_shapes}, mma_shapes={mma_shapes}, "
                f"dp_shapes={dp_shapes} "
                f"((threads, k_warps): threads a "
                f"multiple of {WARP}, k_warps dividing its warps), coop_threads={coop_threads}, rows_per_warp="
                f"{rows_per_warp}, quant_rows_per_warp={quant_rows_per_warp}, norm_rows_per_warp={norm_rows_per_warp} "
                f"(even, >= 2), "
                f"token_tiles={token_tiles} (each >= 1)")
        if prefetch_steps < 0:
            raise PlanError(f"gemv_coop: prefetch_steps = {prefetch_steps} must be >= 0")
        if any(t > MMA_MAX_TOKENS for t in (*w4_mma_tiles, *w8_mma_tiles)):
            raise PlanError(f"gemv_coop: w4_mma_tiles={w4_mma_tiles}, w8_mma_tiles={w8_mma_tiles}: the mma variants "
                            f"take at most {MMA_MAX_TOKENS} tokens per CTA (the m16n8k16 tile's n)")
        self.plain_shapes = tuple((int(t), int(k)) for t, k in plain_shapes)
        self.mma_shapes = tuple((int(t), int(k)) for t, k in mma_shapes)
        self.coop_threads = tuple(int(t) for t in coop_threads)
        self.token_tiles = tuple(sorted(set(int(t) for t in token_tiles)))
        self.max_tokens = self.token_tiles[-1]
        self.rows_per_warp = int(rows_per_warp)
        self.quant_rows_per_warp = int(quant_rows_per_warp)
        self.norm_rows_per_warp = int(norm_rows_per_warp)
        self.prefetch_steps = int(prefetch_steps)
        self.w4_mma_tiles = tuple(int(t) for t in w4_mma_tiles)
        self.w8_mma_tiles = tuple(int(t) for t in w8_mma_tiles)
        self.w8_dp_tiles = tuple(int(t) for t in w8_dp_tiles)
        self.w4_dp_tiles = tuple(int(t) for t in w4_dp_tiles)
        self.dp_persistent = bool(dp_persistent)
        self.dp_shapes = tuple((int(t), int(k)) for t, k in dp_shapes)
        if not dp_carry:
            raise PlanError(f"gemv_coop: dp_carry = {dp_carry!r} needs at least one setting (False and / or True)")
        self.dp_carry = tuple(dict.fromkeys(bool(c) for c in dp_carry))
        if dp_ring < 0 or dp_ring == 1:
            raise PlanError(f"gemv_coop: dp_ring = {dp_ring} must be 0 (no ring) or at least 2 stages")
        self.dp_ring = int(dp_ring)
        if dp_preload not in ("regs", "late"):
            raise PlanError(f"gemv_coop: dp_preload = {dp_preload!r}; supported: 'regs', 'late'")
        self.dp_preload = dp_preload
        if any(int(t) <= 0 or int(t) % WARP or int(t) > 1024 for t in dp_deep_threads):
            raise PlanError(f"gemv_coop: dp_deep_threads = {tuple(dp_deep_threads)} must be CTA sizes: multiples of "
                            f"{WARP} up to 1024")
        self.dp_deep_threads = tuple(int(t) for t in dp_deep_threads)
        bad = [e for e in dp_min_ctas if len(e) != 4 or e[0] not in ("w8", "w4") or e[1] not in EPILOGUES
               or int(e[2]) % WARP or int(e[3]) < 1]
        if bad:
            raise PlanError(f"gemv_coop: dp_min_ctas entries {bad} must be (wfmt 'w8' | 'w4', epilogue one of "
                            f"{', '.join(EPILOGUES)}, threads a multiple of {WARP}, min resident CTAs per SM >= 1)")
        self.dp_min_ctas = tuple((str(f), str(e), int(t), int(c)) for f, e, t, c in dp_min_ctas)
        bad = [e for e in trace_epilogues if e not in EPILOGUES]
        if bad:
            raise PlanError(f"gemv_coop: trace_epilogues {bad} must be epilogues ({', '.join(EPILOGUES)})")
        self.trace_epilogues = tuple(str(e) for e in trace_epilogues)

    @property
    def threads(self) -> tuple[int, ...]:
        """Every thread count the family compiles (plain, mma, dp and cooperative)."""
        return tuple(sorted({t for t, _ in (*self.plain_shapes, *self.mma_shapes, *self.dp_shapes)}
                            | set(self.coop_threads)))

    def coop_threads_for(self, problem: GemvProblem, tile: int) -> tuple[int, ...]:
        """The cooperative thread counts of ``problem`` at token tile ``tile``: ``coop_threads``; for the mma
        variants those and the smallest ``mma_shapes`` CTA, each only if its ring gets at least 2 stages
        (:func:`mma_stages`: at the 4-token tile only 128-thread mma CTAs fit)."""
        if self.dp_for(problem, tile) or (self.mma_for(problem, tile) and problem.wfmt == "w8"):
            return ()  # plain only: every CTA converts its tokens' whole x
        if self.mma_for(problem, tile):
            cands = sorted({*self.coop_threads, min(t for t, _ in self.mma_shapes)})
            return tuple(t for t in cands if mma_stages(t, tile) >= 2)
        return self.coop_threads

    def shapes_for(self, problem: GemvProblem, tile: int) -> tuple[tuple[int, int], ...]:
        """The plain (threads, k_warps) candidates of ``problem`` at token tile ``tile``: ``mma_shapes`` for the
        tensor-core variants, ``dp_shapes`` for the integer-dot-product ones, else ``plain_shapes``."""
        if self.mma_for(problem, tile) and problem.wfmt == "w8":
            return self.mma_shapes
        if self.dp_for(problem, tile):
            return self.dp_shapes
        if self.mma_for(problem, tile):
            return tuple(s for s in self.mma_shapes if mma_stages(s[0], tile) >= 2)
        return self.plain_shapes

    def carries_for(self, problem: GemvProblem, tile: int) -> tuple[bool | None, ...]:
        """The item-boundary carry settings of the plain variants of ``problem`` at token tile ``tile``:
        ``dp_carry`` for the persistent dp variants (the cost model picks), else ``(None,)`` (no such parameter)."""
        return self.dp_carry if self.persistent(problem, tile) else (None,)

    def mma_for(self, problem: GemvProblem, tile: int) -> bool:
        """True when ``problem`` at token tile ``tile`` runs on the tensor-core variants: a w4 problem and a tile
        of ``w4_mma_tiles``, or a w8 problem, a tile of ``w8_mma_tiles``, K a multiple of 64 and the tile's fp16 x
        within ``W8_MMA_X_BYTES`` of shared memory."""
        if problem.wfmt == "w8":
            return tile in self.w8_mma_tiles and problem.k % 64 == 0
        return problem.wfmt == "w4" and tile in self.w4_mma_tiles

    def dp_for(self, problem: GemvProblem, tile: int) -> bool:
        """True when ``problem`` at token tile ``tile`` runs on the integer-dot-product variants (module docstring):
        a w8 / w4 problem, a tile of ``w8_dp_tiles`` / ``w4_dp_tiles`` that is not an mma tile, K a multiple of 64
        and the staged x (:func:`dp_x_bytes`) within ``DP_X_BYTES``."""
        tiles = {"w8": self.w8_dp_tiles, "w4": self.w4_dp_tiles}.get(problem.wfmt, ())
        return (tile in tiles and problem.k % DP_BLOCK == 0 and not self.mma_for(problem, tile)
                and dp_x_bytes(problem.wfmt, problem.k, tile) <= DP_X_BYTES)

    def rows_for(self, problem: GemvProblem, tile: int) -> int:
        """W rows per warp for ``problem`` at token tile ``tile``: ``MMA_ROWS`` (16) for the tensor-core variants, else
        ``norm_rows_per_warp`` for the add_norm_parts epilogue, else ``quant_rows_per_warp`` (w8 / w4) or
        ``rows_per_warp`` (bf16)."""
        if self.mma_for(problem, tile):
            return MMA_ROWS
        if problem.norm_out:
            return self.norm_rows_per_warp
        return self.quant_rows_per_warp if problem.quantized else self.rows_per_warp

    def dynamic_smem_bytes(self, problem: GemvProblem, tile: int, spec: KernelSpec | None = None) -> int:
        """Dynamic shared memory of a launch of ``problem`` at token tile ``tile``, bytes: for the w8 mma variants
        the fp16 x of the tile's tokens over one K segment -- the whole K when ``tile * K * 2 <=
        W8_MMA_X_BYTES``, else the fewest equal segments (multiples of 64 elements) that fit; for the dp variants
        :func:`dp_x_bytes` (rounded up to 16 bytes) plus, for a ``spec`` with a weight ring (template ``ring``),
        :func:`dp_ring_bytes` -- else 0."""
        if self.dp_for(problem, tile):
            ring = int(dict(spec.params).get("ring", 0)) if spec is not None else 0
            x = dp_x_bytes(problem.wfmt, problem.k, tile)
            if not ring:
                return x
            return -(-x // 16) * 16 + dp_ring_bytes(problem.wfmt, spec.threads, self.rows_for(problem, tile), ring)
        if not (self.mma_for(problem, tile) and problem.wfmt == "w8"):
            return 0
        blocks = problem.k // 64
        segs = -(-tile * problem.k * 2 // W8_MMA_X_BYTES)
        return tile * -(-blocks // segs) * 64 * 2

    def tile_for(self, tokens: int) -> int:
        """The token tile (``max_tokens`` variant) a launch of T = ``tokens`` uses: the smallest tile >= T,
        else the largest."""
        return next((t for t in self.token_tiles if t >= tokens), self.max_tokens)

    # ---- identity ------------------------------------------------------------------------------

    def spec(self, problem: GemvProblem, threads: int, mode: str, max_tokens: int | None = None,
             k_warps: int = 1, carry: bool | None = None, ring: int | None = None) -> KernelSpec:
        """The kernel for (epilogue, input mode, weight format, threads, k_warps, mode, tile); K and N are
        runtime arguments, not identity. ``wfmt``, ``k_warps`` and ``in_norm`` are parameters only when not
        their defaults (bf16, 1, none), so those kernels keep a short URI. ``ring``: the weight-ring stages of a
        persistent dp variant without the carry (template ``ring``; None: ``dp_ring``; 0: none).

        Raises:
            PlanError: unknown mode, k_warps not dividing the CTA's warps, add_norm_parts in coop mode, or a ring
                of 1 stage or fewer than 0.
        """
        if mode not in MODES:
            raise PlanError(f"gemv_coop: unknown mode {mode!r}; supported: {', '.join(MODES)}")
        if k_warps < 1 or (threads // WARP) % k_warps:
            raise PlanError(f"gemv_coop: k_warps = {k_warps} must divide the {threads // WARP} warps of a "
                            f"{threads}-thread CTA")
        if problem.norm_out and mode != "plain":
            raise PlanError("gemv_coop: add_norm_parts runs in plain mode only (one CTA owns each output), "
                            f"not {mode!r}")
        if ring is not None and (ring < 0 or ring == 1):
            raise PlanError(f"gemv_coop: ring = {ring} must be 0 (no ring) or at least 2 stages")
        tile = self.max_tokens if max_tokens is None else int(max_tokens)
        params = {
            "threads": threads,
            "max_tokens": tile,
            "rows_per_warp": self.rows_for(problem, tile),
            "epilogue": problem.epilogue,
            "mode": mode,
        }
        if problem.quantized:
            params["wfmt"] = problem.wfmt
        if self.mma_for(problem, tile) and problem.wfmt == "w8":
            if mode != "plain":
                raise PlanError(f"gemv_coop: the w8 mma variants run in plain mode only, not {mode!r}")
            params["mma"] = True
        elif self.mma_for(problem, tile):
            if mma_stages(threads, tile) < 2:
                raise PlanError(f"gemv_coop: no w4 mma variant of {threads} threads at a {tile}-token tile: its "
                                f"cp.async rings ({threads // WARP} warps x 2 stages x {mma_stage_bytes(tile)} B) "
                                f"exceed the {STATIC_SMEM_LIMIT} B of static shared memory")
            params["mma"] = True
            params["mma_stages"] = mma_stages(threads, tile)
        elif self.dp_for(problem, tile):
            if mode != "plain":
                raise PlanError(f"gemv_coop: the dp (integer dot product) variants run in plain mode only, not {mode!r}")
            params["dp"] = True
            if self.dp_persistent:
                params["persist"] = True
                if (self.dp_carry[0] if carry is None else carry):
                    params["carry"] = True
                elif self.dp_ring if ring is None else ring:
                    params["ring"] = int(self.dp_ring if ring is None else ring)
            if self.dp_preload != "regs" and "carry" not in params:
                params["preload"] = self.dp_preload
            elif threads in self.dp_deep_threads and "carry" not in params and "ring" not in params:
                params["depth"] = 2
            cap = next((c for f, e, t, c in self.dp_min_ctas
                        if f == problem.wfmt and e == problem.epilogue and t == threads), 0)
            if cap > 1:
                params["min_ctas"] = cap
            if problem.epilogue in self.trace_epilogues:
                params["trace"] = True
        if problem.norm_out:
            params["unit_offset"] = bool(problem.unit_offset)
        if problem.norm_in:
            params["in_norm"] = problem.in_norm
        if k_warps != 1:
            params["k_warps"] = int(k_warps)
        if self.prefetch_steps != 1:
            params["prefetch_steps"] = self.prefetch_steps
        engine = "mma" if params.get("mma") else "dp" if params.get("dp") else "fma"
        return KernelSpec.make(self.name, self.engine_templates[engine], params, threads, cooperative=(mode == "coop"))

    def arg_names(self, problem: GemvProblem) -> tuple[str, ...]:
        """Kernel parameters in order (templates/README.md ABI): pointers w (bf16 [N_w, K]; w8: int8
        [N_w, K]; w4: uint8 [N_w, K/2]), for w8 / w4 only scales (fp32 [N_w] / [N_w, K/64]), x (bf16
        [T, K]), y (fp32 [T, N], bf16 for swiglu; named ``h`` -- the residual stream, updated in place -- for
        residual_add and add_norm_parts), ws (fp32 scratch, ``Launch.workspace_bytes`` of a coop launch),
        barrier (uint32 counter, zero-initialised once); int32 k, n_out (= N), t_total (= T), splits
        (= ``Launch.split_k``). add_norm_parts appends ``norm_w`` (fp32 [N]), ``xs`` (bf16 [T, N]), ``ss_out``
        (fp32 [T, row_blocks]); in_norm parts appends ``ss_in`` (fp32 [T, ss_parts]), int32 ``ss_parts`` and
        float ``in_eps``."""
        head = ("w", "scales") if problem.quantized else ("w",)
        y = "h" if problem.epilogue in ("residual_add", "add_norm_parts") else "y"
        tail = (("norm_w", "xs", "ss_out") if problem.norm_out else ()) + (
            ("ss_in", "ss_parts", "in_eps") if problem.norm_in else ())
        return (*head, "x", y, "ws", "barrier", "k", "n_out", "t_total", "splits", *tail)

    def variants(self, problem: GemvProblem) -> list[KernelSpec]:
        """Every kernel a launch for ``problem`` may use: each token tile x (each plain shape, and each
        cooperative thread count unless add_norm_parts)."""
        out = []
        for mt in self.token_tiles:
            out += [self.spec(problem, th, "plain", mt, kw, c) for th, kw in self.shapes_for(problem, mt)
                    for c in self.carries_for(problem, mt)]
            if not problem.norm_out:
                out += [self.spec(problem, th, "coop", mt) for th in self.coop_threads_for(problem, mt)]
        return out

    def sample_problems(self) -> list[GemvProblem]:
        """One small problem per epilogue, input mode and weight format (covers every template parameter value),
        and the w8 ones again with a K the w8 mma variants do not take (not a multiple of 64)."""
        out = [GemvProblem(256, 704, e, f) for f in WFORMATS for e in EPILOGUES]
        out += [GemvProblem(256, 704, e, f, in_norm="parts") for f in WFORMATS for e in ("store", "swiglu")]
        out += [GemvProblem(256, 704, "add_norm_parts", "bf16", unit_offset=False)]
        # whether a w8 launch runs on tensor cores depends on K (a multiple of 64): a K = 272 copy of each w8
        # problem gives the FMA variants of the mma tiles too, so these cover every K
        return out + [GemvProblem(272, p.n, p.epilogue, p.wfmt, unit_offset=p.unit_offset, in_norm=p.in_norm)
                      for p in out if p.wfmt == "w8"]

    # ---- geometry ------------------------------------------------------------------------------

    def outputs_per_cta(self, problem: GemvProblem, threads: int, k_warps: int = 1, tile: int = 1) -> int:
        """Outputs (columns of Y) one CTA of token tile ``tile`` produces: (warps / k_warps) row groups x outputs
        per warp."""
        rw = self.rows_for(problem, tile)
        per_warp = rw // 2 if problem.epilogue == "swiglu" else rw
        return threads // WARP // k_warps * per_warp

    def row_blocks(self, problem: GemvProblem, threads: int, k_warps: int = 1, tile: int = 1) -> int:
        """CTAs along N: ceil(n / outputs_per_cta) (at token tile ``tile``)."""
        return -(-problem.n // self.outputs_per_cta(problem, threads, k_warps, tile))

    def token_chunks(self, tokens: int, tile: int | None = None) -> int:
        """CTAs along T: ceil(T / tile) (default tile: the largest)."""
        return -(-tokens // (self.max_tokens if tile is None else tile))

    def max_splits(self, problem: GemvProblem) -> int:
        """Most K splits that still give every lane at least one 16-byte step per split:
        ``max(1, K / k_per_vec / 32)`` with k_per_vec = 8 (bf16), 16 (w8), 32 (w4)."""
        return max(1, problem.k // problem.k_per_vec // WARP)

    def workspace_bytes(self, problem: GemvProblem, tokens: int, splits: int) -> int:
        """Bytes a coop launch needs: fp32 partial sums [splits, T, w_rows]."""
        return 4 * splits * tokens * problem.w_rows

    def parts_bytes(self, problem: GemvProblem, tokens: int, row_blocks: int) -> int:
        """``Launch.workspace_bytes`` of a plain launch: the add_norm_parts ``ss_out``, fp32 [T, row_blocks]; 0 for
        every other epilogue."""
        return 4 * tokens * row_blocks if problem.norm_out else 0

    def persistent(self, problem: GemvProblem, tile: int) -> bool:
        """True when launches of ``problem`` at token tile ``tile`` use the persistent dp variants."""
        return self.dp_persistent and self.dp_for(problem, tile)

    @staticmethod
    def persistent_grid(items: int, cap: int) -> int:
        """CTAs of a persistent launch of ``items`` work items (row blocks x token chunks) when ``cap`` CTAs fit
        the device at once (resident CTAs/SM x SMs): every item once, in one wave -- ``ceil(items / ceil(items /
        cap))`` CTAs, each taking a contiguous range of ``floor(items / grid)`` items or one more (the template
        splits any grid that way); ``items`` itself when they all fit. A full grid (``min(items, cap)``, so 4 or 5
        items per CTA instead of 5) was no faster for the w4 gate|up GEMV on the H200: 72.6 vs 71.1 us per GDN
        layer's four GEMVs, the CTAs with the extra item finishing last (bench/NOTES.md run 88).

        Raises:
            PlanError: items or cap below 1.
        """
        if items < 1 or cap < 1:
            raise PlanError(f"gemv_coop: a persistent grid needs items >= 1 and a cap >= 1, got {items} / {cap}")
        per = -(-items // cap)
        return -(-items // per)

    def norm_parts(self, launch: Launch) -> int:
        """The ``ss_parts`` (row blocks) of an add_norm_parts launch: the consumer GEMV's ``ss_parts`` argument.

        Raises:
            PlanError: ``launch`` is not an add_norm_parts gemv_coop launch.
        """
        k = launch.kernel
        if k.family != self.name or k.param("epilogue") != "add_norm_parts":
            raise PlanError(f"{k.uri}: not an add_norm_parts GEMV launch (no norm parts)")
        return launch.workspace_bytes // (4 * launch.tokens)  # ss_out is fp32 [T, row_blocks] (parts_bytes)

    # ---- route selection -----------------------------------------------------------------------

    def _estimate(self, problem: GemvProblem, tokens: int, ctx: PlanContext, spec: KernelSpec, k_warps: int,
                  splits: int = 1, items_per_cta: int = 1) -> float:
        occ = ctx.occupancy(spec, self.dynamic_smem_bytes(problem, spec.param("max_tokens"), spec))
        return estimate_us(problem, tokens, threads=spec.threads, k_warps=k_warps,
                           rows_per_warp=self.rows_for(problem, spec.param("max_tokens")), tile=spec.param("max_tokens"),
                           ctas_per_sm=occ.ctas_per_sm, sms=ctx.sms, bandwidth_per_sm_gbs=ctx.bandwidth_per_sm_gbs,
                           splits=splits, mma=self.mma_for(problem, spec.param("max_tokens")),
                           dp=self.dp_for(problem, spec.param("max_tokens")), items_per_cta=items_per_cta,
                           carry=bool(dict(spec.params).get("carry", False)))

    def launch(self, problem: GemvProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The launch for T = ``tokens`` on ``ctx``: the candidate (every plain shape; every cooperative thread
        count with the most splits its cap allows, when that is >= 2; a persistent dp shape with each
        ``dp_carry`` setting) with the least :func:`estimate_us`; ties
        to the plain route, fewer k_warps, fewer threads.

        Raises:
            PlanError: T < 1, or no variant can be resident at all on this target.
        """
        if tokens < 1:
            raise PlanError(f"gemv_coop: T = {tokens} must be at least 1")
        tile = self.tile_for(tokens)
        chunks = self.token_chunks(tokens, tile)
        cands = []
        for th, kw in self.shapes_for(problem, tile):
            for carry in self.carries_for(problem, tile):
                spec = self.spec(problem, th, "plain", tile, kw, carry)
                dyn = self.dynamic_smem_bytes(problem, tile, spec)
                occ = ctx.occupancy(spec, dyn).ctas_per_sm
                if occ > 0:
                    grid = self._plain_grid(problem, th, kw, tile, chunks, occ * ctx.sms)
                    items = self.row_blocks(problem, th, kw, tile) * chunks
                    cands.append((self._estimate(problem, tokens, ctx, spec, kw, items_per_cta=-(-items // grid)),
                                  0, kw, th, spec, grid, 1))
        if not problem.norm_out:
            for th in self.coop_threads_for(problem, tile):
                spec = self.spec(problem, th, "coop", tile)
                cap = ctx.cap(spec)
                base = self.row_blocks(problem, th, 1, tile) * chunks
                splits = min(cap // base, self.max_splits(problem))
                if splits >= 2:
                    cands.append((self._estimate(problem, tokens, ctx, spec, 1, splits), 1, 1, th, spec,
                                  base * splits, splits))
        if not cands:
            raise PlanError(
                f"gemv_coop (K={problem.k}, N={problem.n}, {problem.epilogue}, {problem.wfmt}) on {ctx.arch.name}: "
                f"no variant ({', '.join(f'{t} threads' for t in self.threads)}) has a resident CTA per SM")
        _, coop, kw, _, spec, grid, splits = min(cands, key=lambda c: c[:4])
        if coop:
            return ctx.make_launch(spec, grid, route="coop_splitk", tokens=tokens, split_k=splits,
                                   workspace_bytes=self.workspace_bytes(problem, tokens, splits))
        return ctx.make_launch(spec, grid, route="plain", tokens=tokens,
                               dynamic_smem=self.dynamic_smem_bytes(problem, tile, spec),
                               workspace_bytes=self.parts_bytes(problem, tokens,
                                                                self.row_blocks(problem, spec.threads, kw, tile)))

    def _plain_grid(self, problem: GemvProblem, threads: int, k_warps: int, tile: int, chunks: int, cap: int) -> int:
        """CTAs of a plain launch: one per work item (row block x token chunk), or for the persistent dp variants
        :meth:`persistent_grid` of them under ``cap`` (resident CTAs/SM x SMs)."""
        items = self.row_blocks(problem, threads, k_warps, tile) * chunks
        return self.persistent_grid(items, cap) if self.persistent(problem, tile) else items

    def launch_variant(self, problem: GemvProblem, tokens: int, ctx: PlanContext, threads: int, mode: str,
                       splits: int | None = None, max_tokens: int | None = None, k_warps: int = 1,
                       carry: bool | None = None, ring: int | None = None) -> Launch:
        """A launch of one forced variant, bypassing route selection (tests and benchmarks).

        ``coop``: ``splits`` defaults to the most that fit the cooperative cap (may be 1); ``plain``:
        always one split. ``max_tokens``: the token tile (default the largest). ``k_warps``: warps per row group.
        ``carry``: a persistent dp variant's item-boundary carry (default: the first of ``dp_carry``).
        ``ring``: its weight-ring stages (None: ``dp_ring``; 0: none).

        Raises:
            PlanError: the cooperative grid cannot fit even with one split, or ``splits`` exceeds the cap; the
                spec's own errors (:meth:`spec`).
        """
        tile = self.max_tokens if max_tokens is None else max_tokens
        chunks = self.token_chunks(tokens, tile)
        base = self.row_blocks(problem, threads, k_warps, tile) * chunks
        spec = self.spec(problem, threads, mode, max_tokens, k_warps, carry, ring)
        if mode == "plain":
            dyn = self.dynamic_smem_bytes(problem, tile, spec)
            grid = self._plain_grid(problem, threads, k_warps, tile, chunks,
                                    max(1, ctx.occupancy(spec, dyn).ctas_per_sm) * ctx.sms)
            return ctx.make_launch(spec, grid, route="plain", tokens=tokens, dynamic_smem=dyn,
                                   workspace_bytes=self.parts_bytes(problem, tokens, base // chunks))
        cap = ctx.cap(spec)
        if splits is None:
            splits = min(cap // base, self.max_splits(problem))
        if splits < 1 or base * splits > cap:
            raise PlanError(
                f"{spec.uri} on {ctx.arch.name}: cooperative grid of {base} x {splits} splits = "
                f"{base * max(splits, 1)} CTAs exceeds the cooperative cap of {cap} CTAs"
            )
        return ctx.make_launch(spec, base * splits, route="coop_splitk", tokens=tokens, split_k=splits,
                               workspace_bytes=self.workspace_bytes(problem, tokens, splits))


def kernel_args(problem: GemvProblem, launch: Launch, w, x, y, ws=None, barrier=None, scales=None,
                norm_w=None, xs=None, ss_out=None, ss_in=None, ss_parts=None, in_eps=None) -> tuple:
    """Kernel argument tuple in :meth:`GemvCoopFamily.arg_names` order: bf16 ``w, x, y, ws, barrier, k,
    n_out, t_total, splits``; w8 / w4 ``w, scales, x, y, ...`` (``scales`` right after ``w``).

    Pointers are passed through (device arrays); an unused ``ws``/``barrier`` (plain route) becomes a
    64-bit null (``np.uint64(0)``, pointer-sized). Sizes become ``np.int32``. ``y`` is the residual stream
    for residual_add / add_norm_parts. add_norm_parts appends ``norm_w, xs, ss_out``; in_norm parts appends
    ``ss_in, ss_parts`` (int32), ``in_eps`` (float32).

    Raises:
        PlanError: ``scales`` missing for a w8 / w4 problem, or given for a bf16 one; a norm argument missing.
    """
    null = np.uint64(0)
    if problem.quantized and scales is None:
        raise PlanError(f"gemv_coop: a {problem.wfmt} problem needs its scales")
    if not problem.quantized and scales is not None:
        raise PlanError("gemv_coop: a bf16 problem takes no scales")
    head = (w, scales) if problem.quantized else (w,)
    args = (*head, x, y, ws if ws is not None else null, barrier if barrier is not None else null,
            np.int32(problem.k), np.int32(problem.n), np.int32(launch.tokens), np.int32(launch.split_k))
    if problem.norm_out:
        if norm_w is None or xs is None or ss_out is None:
            raise PlanError("gemv_coop: add_norm_parts needs norm_w, xs and ss_out")
        args += (norm_w, xs, ss_out)
    if problem.norm_in:
        if ss_in is None or ss_parts is None or in_eps is None:
            raise PlanError("gemv_coop: in_norm parts needs ss_in, ss_parts and in_eps")
        args += (ss_in, np.int32(ss_parts), np.float32(in_eps))
    return args


# ------------------------------------------------------------------------------------------------
# numpy reference (fp32 math on bf16 values)
# ------------------------------------------------------------------------------------------------


def _f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)  # no copy when already fp32


def dequantize_weight(problem: GemvProblem, codes, scales) -> np.ndarray:
    """fp32 [w_rows, K] = ``fl32(q * scale)`` of a w8 / w4 weight, exactly :func:`ninferc.ir.quant.dequantize`.

    Args:
        codes: w8 int8 [w_rows, K]; w4 uint8 [w_rows, K/2] (packed nibbles, :func:`ninferc.ir.quant.pack_int4`).
        scales: fp32 — w8 [w_rows]; w4 [w_rows, K/64].

    Raises:
        PlanError: a bf16 problem, or codes / scales of the wrong shape or dtype (names expected and found).
    """
    if not problem.quantized:
        raise PlanError("gemv_coop: dequantize_weight needs a w8 / w4 problem")
    want = problem.weight_shapes()
    codes, scales = np.asarray(codes), np.asarray(scales)
    got = {"w": (codes.shape, codes.dtype.name), "scales": (scales.shape, scales.dtype.name)}
    if got != want:
        raise PlanError(f"gemv_coop reference ({problem.wfmt}, K={problem.k}, w_rows={problem.w_rows}): expected "
                        f"codes/scales {want}, got {got}")
    return QuantTensor(problem.wfmt, (problem.w_rows, problem.k), codes, scales).dequantize()


def norm_input(h, norm_w, unit_offset: bool):
    """What an add_norm_parts GEMV hands the next GEMV for the residual stream ``h`` (fp32 [T, D]) and the norm
    weight ``norm_w`` (fp32 [D]): ``(xs, ss)`` with ``xs = bf16(h * (1 + w))`` (``w`` if not unit_offset;
    ``ml_dtypes.bfloat16`` [T, D]) and ``ss`` = fp32 [T, 1], the sum of ``h^2`` (one part)."""
    h = _f32(h)
    scale = (np.float32(1) + _f32(norm_w)) if unit_offset else _f32(norm_w)
    xs = (h * scale).astype(ml_dtypes.bfloat16)
    return xs, np.sum(h * h, axis=-1, keepdims=True, dtype=np.float32)


def reference(problem: GemvProblem, x, w, y_in=None, scales=None, norm_w=None, ss_in=None, in_eps=None,
              dp: bool = False):
    """Reference output of the GEMV + epilogue.

    Args:
        problem: the instance.
        x: [T, K] bf16 (``ml_dtypes.bfloat16``) or any float array holding bf16 values.
        w: bf16: [w_rows, K] same as x; w8 / w4: the codes (int8 [w_rows, K] / uint8 [w_rows, K/2]),
            dequantised with ``scales`` by :func:`dequantize_weight` (``fl32(q * scale)``).
        y_in: [T, N] fp32 residual stream (``residual_add`` / ``add_norm_parts``).
        scales: w8 / w4 only: fp32 [w_rows] / [w_rows, K/64].
        norm_w: add_norm_parts only: fp32 [N] weight of the norm that follows.
        ss_in, in_eps: in_norm parts only: fp32 [T, parts] partial sums of squares (any number of parts) and eps:
            ``acc[t] *= 1 / sqrt(sum(ss_in[t]) / K + in_eps)``.
        dp: the launch is a dp (integer dot product) variant: x is first rounded as its staging rounds it
            (:func:`dp_x`).

    Returns:
        [T, N]: ``acc`` (fp32), ``y_in + acc`` (fp32) or ``bf16(silu(gate) * up)`` (``ml_dtypes.bfloat16``),
        with ``acc = x @ w.T`` computed in fp32; add_norm_parts: ``(h, xs, ss)`` with ``h = y_in + acc`` and
        ``(xs, ss)`` = :func:`norm_input` of it (ss as one part per token).

    Raises:
        PlanError: shapes that do not match the problem; scales missing (w8 / w4) or given (bf16); a norm
            argument missing.
    """
    if problem.quantized:
        if scales is None:
            raise PlanError(f"gemv_coop reference: a {problem.wfmt} problem needs its scales")
        w = dequantize_weight(problem, w, scales)
    elif scales is not None:
        raise PlanError("gemv_coop reference: a bf16 problem takes no scales")
    x32, w32 = _f32(x), _f32(w)
    if x32.shape[1] != problem.k or w32.shape != (problem.w_rows, problem.k):
        raise PlanError(
            f"gemv_coop reference: expected x [T, {problem.k}] and w [{problem.w_rows}, {problem.k}], "
            f"got {x32.shape} and {w32.shape}"
        )
    if dp:
        x32 = dp_x(x32)
    acc = x32 @ w32.T
    if problem.norm_in:
        if ss_in is None or in_eps is None:
            raise PlanError("gemv_coop reference: in_norm parts needs ss_in and in_eps")
        total = np.sum(_f32(ss_in), axis=-1, keepdims=True, dtype=np.float32)
        acc = acc * (np.float32(1) / np.sqrt(total / np.float32(problem.k) + np.float32(in_eps)))
    if problem.epilogue == "store":
        return acc
    if problem.epilogue == "residual_add":
        return _f32(y_in) + acc
    if problem.norm_out:
        if norm_w is None:
            raise PlanError("gemv_coop reference: add_norm_parts needs norm_w")
        h = _f32(y_in) + acc
        return (h, *norm_input(h, norm_w, problem.unit_offset))
    gate, up = acc[:, : problem.n], acc[:, problem.n:]
    with np.errstate(over="ignore"):  # exp(-gate) = inf for gate < ~-88: silu's limit, gate / inf = -0, as on the GPU
        return ((gate / (np.float32(1) + np.exp(-gate))) * up).astype(ml_dtypes.bfloat16)


FAMILY = GemvCoopFamily()
"""The registered instance (discovered by :mod:`ninferc.targets.kernels`)."""
