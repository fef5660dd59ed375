"""The GEMV's tensor-core engine (template ``gemv_mma.cu.j2``): w4 on ``mma.sync.m16n8k16`` with bf16 codes through
each warp's cp.async ring, w8 with fp16 codes streamed from global memory and the tokens' x as fp16 in dynamic shared
memory, bf16 with the weights streamed the same way as A fragments as they are and each lane's x fragments read from
global memory (the package docstring, :mod:`ninferc.targets.kernels.gemv`, describes them). Which problems it takes, its CTA
shapes, template parameters and shared memory; every function is pure arithmetic on the tuning
(:class:`~ninferc.targets.kernels.gemv.tuning.GemvTuning`) and the problem.

Hardware facts: the m16n8k16 tile (PTX ISA, "Matrix Fragments for mma.m16n8k16"); 48 KiB of static shared memory per
kernel (CUDA C Programming Guide, "Shared Memory": the w4 rings' budget, ``STATIC_SMEM_LIMIT``, and the w8 x's bound);
what a target holds beyond it (dynamic shared memory, opted in per launch) its occupancy calculation decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ninferc.errors import PlanError
from ninferc.ir.quant import GROUP_SIZE
from ninferc.targets.kernels.gemv.problem import WARP, GemvProblem

if TYPE_CHECKING:
    from ninferc.targets.kernels.gemv.tuning import GemvTuning

#: rows of W a warp of the tensor-core (mma) w4 variants owns: one m16n8k16 A tile
MMA_ROWS = 16
#: stages of an mma warp's cp.async ring (template ``mma_stages``): ``MMA_STAGES - 1`` chunks in flight
MMA_STAGES = 3
#: scale groups per ring stage (``kChunk`` in the template): 4 x 32 bytes = one 128-byte line of each of the 16
#: rows (8 groups per stage were slower on the H200: bench/NOTES.md run 40)
MMA_CHUNK = 4
#: most tokens an mma variant's CTA takes: the n = 8 columns of the m16n8k16 tile
MMA_MAX_TOKENS = 8
#: the w4 mma rings' shared-memory budget per CTA, bytes: a ring gets more than 2 stages only within it, and a CTA
#: larger than the smallest of ``mma_shapes`` exists only where its 2-stage rings fit it. 48 KiB, the static shared
#: memory a kernel may declare without the dynamic opt-in (CUDA C Programming Guide, "Shared Memory"), under which
#: the rings lived and every w4 mma variant was measured (runs 35-43, 229-232); since 2026-12-06 the rings are dynamic
#: shared memory, so the smallest CTA's 2 stages may exceed it (the 8-token tile: 4 warps x 2 x 6,400 B)
STATIC_SMEM_LIMIT = 48 * 1024
#: bytes of fp16 x (token tile x K segment) the w8 mma variants keep in dynamic shared memory at most (under the
#: 48 KiB a launch gets without the opt-in, with the static buffers); a longer K is converted in segments
W8_MMA_X_BYTES = 40 * 1024
#: 64-element blocks per warp step of the w8 mma variants (template ``kMmaUnroll``)
W8_MMA_UNROLL = 4
#: 64-element blocks per warp step of the bf16 mma variants (template ``kMmaUnroll``): 8 KiB of a warp's 16 rows in
#: flight (at 4 tokens on an H100 the 27B gate|up / down took 129.7-130.7 / 66.6-67.2 us at 128 threads with 4 against
#: 130.5-141.3 / 76.1-84.6 with 2 blocks, except the 1-warp-per-row-group down, 80.3 us against 131.5:
#: bench/NOTES.md run 232, ``bench/results/gemv_tokens_probe_sweep_h100_04ccdfc.json``)
BF16_MMA_UNROLL = 4

#: the formats whose mma variants stream W from global memory (plain route only)
STREAMED = ("w8", "bf16")
#: the formats whose mma variants stage the tokens' x in dynamic shared memory (w8: as fp16 under a power of two)
STAGED_X = ("w8",)


def mma_stage_bytes(tile: int) -> int:
    """Bytes of one mma ring stage for token tile ``tile`` (``kStageBytes``): ``MMA_CHUNK`` groups of the 16 rows'
    codes (32 B per row and group) and fp32 scales, plus the chunk's bf16 x of ``tile`` tokens (128 B per token
    and group)."""
    return MMA_ROWS * MMA_CHUNK * (GROUP_SIZE // 2 + 4) + tile * MMA_CHUNK * GROUP_SIZE * 2


def mma_stages(threads: int, tile: int) -> int:
    """Stages of each warp's cp.async ring in a w4 mma variant of ``threads`` threads and token tile ``tile``:
    ``MMA_STAGES``, fewer when the CTA's rings would exceed ``STATIC_SMEM_LIMIT`` (1 token: 256 threads get 2;
    4 tokens: 128 threads get 2), and never fewer than 2 (the 8-token tile's 128-thread CTA: 51,200 B). Whether the
    variant exists at all: :func:`ring_fits`."""
    return max(2, min(MMA_STAGES, STATIC_SMEM_LIMIT // (threads // WARP * mma_stage_bytes(tile))))


def smallest_cta(t: GemvTuning) -> int:
    """Threads of the smallest CTA of ``t.mma_shapes``: the one every tile has (:func:`ring_fits`), and a cooperative
    candidate (:func:`coop_threads`)."""
    return min(th for th, _ in t.mma_shapes)


def ring_fits(t: GemvTuning, threads: int, tile: int) -> bool:
    """True when a w4 mma variant of ``threads`` threads exists at token tile ``tile``: the smallest CTA of
    ``t.mma_shapes`` always (its rings may exceed ``STATIC_SMEM_LIMIT``: dynamic shared memory, checked against the
    target by the occupancy calculator), a larger one where its 2-stage rings fit ``STATIC_SMEM_LIMIT`` (the 256-thread
    CTAs at 4 tokens, 68 KiB, were never measured)."""
    return threads <= smallest_cta(t) or \
        threads // WARP * 2 * mma_stage_bytes(tile) <= STATIC_SMEM_LIMIT


def applies(t: GemvTuning, problem: GemvProblem, tile: int) -> bool:
    """True when ``problem`` at token tile ``tile`` runs on the tensor-core variants: a w4 problem at a tile of
    ``t.w4_mma_tiles`` with an epilogue of ``t.w4_mma_epilogues`` (which part the tile's problems between these
    kernels and the dp ones where it is also a tile of ``t.w4_dp_tiles``; at any other tile of ``w4_mma_tiles`` every
    epilogue takes tensor cores), or a w8 (bf16) problem, a tile of ``t.w8_mma_tiles`` (``t.bf16_mma_tiles``) and K a multiple
    of 64 (the 64-element blocks; w8 stages the tile's fp16 x in K segments of at most ``W8_MMA_X_BYTES``:
    :func:`dynamic_smem_bytes`)."""
    if problem.wfmt == "w8":
        return tile in t.w8_mma_tiles and problem.k % 64 == 0
    if problem.wfmt == "bf16":
        return tile in t.bf16_mma_tiles and problem.k % 64 == 0
    return problem.wfmt == "w4" and tile in t.w4_mma_tiles and \
        (problem.epilogue in t.w4_mma_epilogues or tile not in t.w4_dp_tiles)


def shapes(t: GemvTuning, problem: GemvProblem, tile: int) -> tuple[tuple[int, int], ...]:
    """The plain (threads, k_warps) candidates: ``t.mma_shapes`` (w4: those whose ring gets at least 2 stages)."""
    if problem.wfmt == "bf16":
        return t.bf16_mma_shapes
    if problem.wfmt in STAGED_X:
        return t.mma_shapes
    return tuple(s for s in t.mma_shapes if ring_fits(t, s[0], tile))


def coop_threads(t: GemvTuning, problem: GemvProblem, tile: int) -> tuple[int, ...]:
    """The cooperative thread counts: none for w8 and bf16 (plain only: their template branch has no split-K
    route; a w8 split would stage every token's x once per split); for w4
    ``t.coop_threads`` and the smallest ``t.mma_shapes`` CTA, each only if its ring gets at least 2 stages (at the
    4-token tile only 128-thread CTAs fit)."""
    if problem.wfmt in STREAMED:
        return ()
    cands = sorted({*t.coop_threads, smallest_cta(t)})
    return tuple(th for th in cands if ring_fits(t, th, tile))


def params(t: GemvTuning, problem: GemvProblem, threads: int, mode: str, tile: int) -> dict:
    """The engine's template parameters: ``mma`` (and w4 ``mma_stages``).

    Raises:
        PlanError: a w8 or bf16 variant in coop mode, or a w4 variant that does not exist (:func:`ring_fits`).
    """
    if problem.wfmt in STREAMED:
        if mode != "plain":
            raise PlanError(f"gemv: the {problem.wfmt} mma variants run in plain mode only, not {mode!r}")
        return {"mma": True}
    if not ring_fits(t, threads, tile):
        raise PlanError(f"gemv: no w4 mma variant of {threads} threads at a {tile}-token tile: its "
                        f"cp.async rings ({threads // WARP} warps x 2 stages x {mma_stage_bytes(tile)} B) "
                        f"exceed the {STATIC_SMEM_LIMIT} B budget of a CTA larger than the smallest of mma_shapes "
                        f"({smallest_cta(t)} threads)")
    return {"mma": True, "mma_stages": mma_stages(threads, tile)}


def dynamic_smem_bytes(problem: GemvProblem, tile: int, threads: int) -> int:
    """Dynamic shared memory of a launch of a ``threads``-thread CTA, bytes: w8, the fp16 x of the tile's tokens over
    one K segment -- the whole K when ``tile * K * 2 <= W8_MMA_X_BYTES``, else the fewest equal segments (multiples
    of 64 elements) that fit; w4, the warps' cp.async rings (``threads / 32 x mma_stages x mma_stage_bytes``); bf16
    none (x is read from global memory)."""
    if problem.wfmt == "w4":
        return threads // WARP * mma_stages(threads, tile) * mma_stage_bytes(tile)
    if problem.wfmt not in STAGED_X:
        return 0
    blocks = problem.k // 64
    segs = -(-tile * problem.k * 2 // W8_MMA_X_BYTES)
    return tile * -(-blocks // segs) * 64 * 2
