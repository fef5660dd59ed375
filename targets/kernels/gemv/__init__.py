"""Decode-size GEMV: plain or cooperative split-K, on one of three compute engines -- fp32 FMAs (:mod:`.fma`, template
``gemv_fma.cu.j2``), integer dot products (:mod:`.dp`, ``gemv_dp.cu.j2``), tensor cores (:mod:`.mma`,
``gemv_mma.cu.j2``); the templates share ``gemv.inc.j2`` (jinja) and ``gemv_common.cuh`` (device code).

Modules: :mod:`.problem` (:class:`GemvProblem`), :mod:`.tuning` (:class:`GemvTuning`, the family's options),
:mod:`.cost` (:func:`estimate_us`), one per engine, :mod:`.family` (:class:`GemvFamily`: variants, routes,
launches) and :mod:`.reference` (:func:`kernel_args`, the numpy :func:`reference`). Everything public is importable
from this package.

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

Tensor-core w4 (template ``mma``; the token tiles of ``GemvTuning.w4_mma_tiles``, default the 4- and 8-token tiles)
---------------------------------------------------------------------------------------------------------------------
A warp owns 16 W rows, one ``mma.sync.m16n8k16`` A tile (rows g = lane / 4 and g + 8), and the chunk's tokens are
the B columns (column g = token g, zero past T; n = 8, so T <= 8). Per scale group of 64 K elements, lane
(g, q = lane % 4) takes codes 16q .. 16q + 15 of its two rows: each word of 8 codes gives the bf16 pairs
(q[e_i], q[e_i+4]) exactly (nibble under the exponent of 128, then one ``fma.rn.bf16x2`` subtracting 136; taking
the 136 off with a second mma per k-tile instead was slower on the H200, runs 35-43 run 43), and the four mma of
the group read K in that permuted order for A and B alike (B pairs by PRMT of x), so the sum is the same; each
group's fp32 sums are multiplied by its scale once (as the FMA path does). The warp streams chunks of 4 groups
(128 bytes of each row, their scales and the chunk's x of every token) through a private ``mma_stages``-deep
cp.async ring in dynamic shared memory (:func:`.mma.dynamic_smem_bytes`), XOR-swizzled for the fragment reads (the x
pieces through L2 only: copying them through L1 as well, one L2 read for the CTA's row groups, changed nothing on an
H100, bench/NOTES.md run 246); before the PDL wait only the first chunks' weight lines are prefetched into L2 (x is
the previous kernel's output). Same epilogues, input modes and routes as
the FMA kernels (each lane of the writer warp stores the outputs its mma fragments hold: rows g and g + 8 of tokens
2q and 2q + 1, templates/gemv_mma.inc.j2 -- w8 and bf16 alike); by default not add_norm_parts, whose
4-token GEMVs take the dp kernels (``GemvTuning.w4_mma_epilogues``) where the target holds their x.

Tensor-core w8 (template ``mma`` with ``wfmt`` w8; the token tiles of ``GemvFamily.w8_mma_tiles``, default none)
--------------------------------------------------------------------------------------------------------------------
The same 16-row warp tile, on ``mma.sync.m16n8k16`` with **fp16** inputs: int8 codes are not exact in bf16 (8
significant bits) but are in fp16 (11). Each CTA first converts its tokens' x into fp16 in dynamic shared memory
(``tile * K * 2`` bytes, or K segments of at most ``W8_MMA_X_BYTES`` converted in turn:
:meth:`GemvFamily.dynamic_smem_bytes`), each token scaled by the power of two
``2^e`` that puts ``max|x|`` in ``[2^14, 2^15)`` -- exact for every bf16 value down to ``2^-29 max|x|`` (smaller
ones land in fp16 subnormals, error <= ``2^-39 max|x|``), and no overflow whatever the activation range. Per
64-element block lane (g, q) streams 16 bytes of rows g and g + 8 straight from global memory (4 blocks per step);
one LOP3 per pair puts the offset-binary bytes u = q + 128 of elements (e, e + 2) under the fp16 exponent of 1024
and one ``add.rn.f16x2`` of -1152 gives q exactly, the mma reads K in that permuted order for A and B alike (x is
stored in shared memory with each quad permuted to match), and the row scale and ``2^-e`` multiply the warp's
fp32 totals. About 11 instructions per 8 codes (2 rows x 4) and k-tile against ~30 on fp32 FMAs. Plain route only
(a cooperative split would convert x once per split); same epilogues and input modes. Since 2026-12-06 every w8 tile
is a dp tile (the 8-token one: bench/NOTES.md run 254), so these run only where the target cannot hold a tile's dp x
and no smaller dp tile serves (``GemvFamily.fallback``, ``GemvFamily.chunk_fallback``).

Tensor-core bf16 (template ``mma`` without ``wfmt``; the token tiles of ``GemvTuning.bf16_mma_tiles``, default 4 and 8)
---------------------------------------------------------------------------------------------------------------------
The w8 kernel's structure with nothing to convert and nothing staged: per 64-element block lane (g, q) streams
elements 8q .. 8q + 7 and 32 + 8q .. 32 + 8q + 7 of rows g and g + 8 (two 16-byte loads each, a quad's four lanes side
by side; 4 blocks per step, 8 KiB of a warp's 16 rows in flight), reads the same elements of its token's x from global
memory (L1, as the FMA kernels read x) and feeds them to four ``mma.sync.m16n8k16`` bf16 as they lie: k-tile i's
k-slots (2q, 2q + 1) and (2q + 8, 2q + 9) are four consecutive elements of the lane's loads, for A and B alike. The
products are exact in the fp32 accumulators, as on FMAs; only the summation order differs. Plain route only, 128-thread
CTAs (``GemvTuning.bf16_mma_shapes``). Written for issue 38 (the 4-token bf16 GEMVs on fp32 FMAs cost 1.17-1.43x their
one-token time on an H100, bench/NOTES.md run 196); ``GemvTuning.bf16_mma_tiles`` says what it measured.

bf16 on fp32 FMAs, weights converted once (template ``fma`` with ``unpack_w``; ``GemvTuning.bf16_unpack_tiles``, default (4,))
---------------------------------------------------------------------------------------------------------------------------
At T tokens the FMA kernel above converts each 16-byte bf16 weight vector once per token (the per-token
``t < nt`` branch keeps ptxas from sharing the conversions): at 4 tokens ~173 instructions per KiB of weights a
warp streams, against ~43 at one token (``bench/sass_loop.py``). ``unpack_w`` converts each vector once for the
tile's tokens and lets every token slot compute (a slot past the chunk's tokens reads the chunk's last x and is never
stored): ~110 instructions per KiB, for ~104 registers instead of 80 (sm_90). Tiles 2..4 (at 8 tokens the
512-thread cooperative variants spill). On at the 4-token tile since an H100 A/B (bench/NOTES.md run 217): the 27B
4-sequence step 0.946x, the 4-token verify program 1.239x the one-token step against 1.304x. Since 2026-12-06 the
tensor-core bf16 variants take the 4- and 8-token tiles where K is a multiple of 64 (every 27B and fixture GEMV), so
these run only where K is not.

Integer dot products (template ``dp``; the tiles of ``GemvFamily.w4_dp_tiles`` / ``w8_dp_tiles``: 1 and 4 / 1, 4, 8)
---------------------------------------------------------------------------------------------------------------------
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
shared memory ``tile * K * (2 + 4/64 (+ 4/32 for w4))`` bytes, at most ``tile * GemvTuning.dp_x_bytes``
(``DP_X_BYTES``, 40 KiB per token, by default; a longer x at one token takes the FMA kernels, and at 2-8 tokens --
also where the target cannot hold the x -- ``GemvFamily.fallback``'s tensor-core ones, for w8 only after a smaller dp
tile in token chunks, ``GemvFamily.chunk_fallback``). Each
warp loads its first weight step into registers before the PDL wait and keeps one step in flight ahead of the one
it multiplies; warp 0 computes the ``in_norm`` factor once per staging. By default the dp variants are persistent
(template ``persist``): the grid is one balanced wave, :meth:`GemvFamily.persistent_grid` of the work items
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
  :attr:`GemvFamily.plain_shapes` is a candidate.
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

Runtime arguments (:meth:`GemvFamily.arg_names`, :func:`kernel_args`): bf16 ``w, x, y, ws, barrier, k,
n_out, t_total, splits``; w8 / w4 ``w, scales, x, y, ...`` -- pointers then int32; ``residual_add`` and
``add_norm_parts`` name ``y`` ``h``; ``add_norm_parts`` appends ``norm_w, xs, ss_out``, ``in_norm parts``
appends ``ss_in, ss_parts, in_eps``. The barrier counter is one zero-initialised uint32 per stream (left
reusable by the kernel); ``ws`` is ``Launch.workspace_bytes`` of scratch (coop only, no initialisation needed).
``add_norm_parts`` launches size ``ss_out`` instead (``Launch.workspace_bytes``, see :meth:`GemvFamily.norm_parts`).
"""

from ninferc.targets.kernels._weights import WFORMATS
from ninferc.targets.kernels.gemv.cost import (DP_ITEM_US, DP_STAGE_NS, LATENCY_US, OVERHEAD_STEPS, REDUCE_STEPS,
                                               TAIL_STEP_US, estimate_us)
from ninferc.targets.kernels.gemv.dp import DP_BLOCK, DP_X_BYTES, dp_ring_bytes, dp_x, dp_x_bytes
from ninferc.targets.kernels.gemv.family import GemvFamily
from ninferc.targets.kernels.gemv.mma import (MMA_CHUNK, MMA_MAX_TOKENS, MMA_ROWS, MMA_STAGES, STATIC_SMEM_LIMIT,
                                              W8_MMA_UNROLL, W8_MMA_X_BYTES, mma_stage_bytes, mma_stages,
                                              ring_fits)
from ninferc.targets.kernels.gemv.problem import EPILOGUES, IN_NORMS, MODES, VEC, VEC_OF, WARP, GemvProblem
from ninferc.targets.kernels.gemv.reference import dequantize_weight, kernel_args, norm_input, reference
from ninferc.targets.kernels.gemv.tuning import GemvTuning

__all__ = ["DP_BLOCK", "DP_ITEM_US", "DP_STAGE_NS", "DP_X_BYTES", "EPILOGUES", "IN_NORMS", "LATENCY_US", "MMA_CHUNK",
           "MMA_MAX_TOKENS", "MMA_ROWS", "MMA_STAGES", "MODES", "OVERHEAD_STEPS", "REDUCE_STEPS", "STATIC_SMEM_LIMIT",
           "TAIL_STEP_US", "VEC", "VEC_OF", "W8_MMA_UNROLL", "W8_MMA_X_BYTES", "WARP", "WFORMATS", "FAMILY",
           "GemvFamily", "GemvProblem", "GemvTuning", "dequantize_weight", "dp_ring_bytes", "dp_x", "dp_x_bytes",
           "estimate_us", "kernel_args", "mma_stage_bytes", "mma_stages", "norm_input", "reference", "ring_fits"]

FAMILY = GemvFamily()
"""The registered instance (discovered by :mod:`ninferc.targets.kernels`)."""
