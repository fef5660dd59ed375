"""The GEMV's integer-dot-product engine (template ``gemv_dp.cu.j2``): w8 / w4 codes against x staged as int16 under a
power of two per 64-element block, ``dp2a`` per weight vector (the package docstring,
:mod:`ninferc.targets.kernels.gemv`, describes it), by default persistent (one balanced wave of CTAs over the work items). Which problems it takes, its
CTA shapes, template parameters, shared memory and the x rounding the numpy reference reproduces (:func:`dp_x`).

Hardware facts: ``dp2a`` (PTX ISA, "Integer Arithmetic Instructions: dp2a"); 48 KiB of shared memory without the
dynamic opt-in (CUDA C Programming Guide, "Shared Memory").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ninferc.errors import PlanError
from ninferc.targets.kernels.gemv import mma
from ninferc.targets.kernels.gemv.problem import WARP, GemvProblem

if TYPE_CHECKING:
    from ninferc.targets.kernels.gemv.tuning import GemvTuning

#: K elements per int16 x scale of the dp variants (template ``kDpBlock``)
DP_BLOCK = 64
#: bytes of staged int16 x (+ its block scales and sums) per token of the tile the dp variants may keep in dynamic shared
#: memory by default (``GemvTuning.dp_x_bytes``): 40 KiB, so a one-token x stays under the 48 KiB a launch gets without
#: the opt-in (a longer one stays on the FMA kernels), and the 27B down's x at 4 tokens (w8 143,616 B, w4 152,320 B)
#: fits the 160 KiB of a 4-token tile -- in sm_90's 227 KiB per CTA; a target that cannot hold a variant's x, or a
#: longer x, takes ``GemvFamily.fallback``'s kernels (tiles of 2 to 8 tokens: the tensor-core ones)
DP_X_BYTES = 40 * 1024



def dp_x_bytes(wfmt: str, k: int, tile: int) -> int:
    """Dynamic shared memory of a dp variant, bytes: per token of the ``tile``-token tile, int16 x [K], fp32
    ``2^-e`` [K / 64] and, for ``wfmt`` w4, fp32 sums of the int16 x [K / 32] (template ``dp``). Pure arithmetic,
    no checks (:func:`applies` decides whether a problem has a dp variant)."""
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
        raise PlanError(f"gemv dp: K = {k} is not a multiple of {DP_BLOCK}")
    b = x32.reshape(t, k // DP_BLOCK, DP_BLOCK)
    m = np.abs(b).max(axis=-1, keepdims=True)
    ex = ((m.view(np.uint32) >> 23) & 0xFF).astype(np.int64) - 127
    e = np.clip(14 - ex, -126, 126)
    sc = np.ldexp(np.float32(1), e).astype(np.float32)
    q = np.rint(b * sc)  # exact product (power of two), round half to even
    return (q * np.ldexp(np.float32(1), -e).astype(np.float32)).astype(np.float32).reshape(t, k)


def _f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)  # no copy when already fp32


def applies(t: GemvTuning, problem: GemvProblem, tile: int) -> bool:
    """True when ``problem`` at token tile ``tile`` runs on the integer-dot-product variants: a w8 / w4 problem, a
    tile of ``t.w8_dp_tiles`` / ``t.w4_dp_tiles`` that is not an mma tile
    (:func:`ninferc.targets.kernels.gemv.mma.applies`), K a multiple of 64 and the staged x (:func:`dp_x_bytes`) within
    ``tile * t.dp_x_bytes`` (``DP_X_BYTES`` per token by default; above 48 KiB the launch opts in; where no variant is
    resident on the target, or the x exceeds that, a launch takes :meth:`~.family.GemvFamily.fallback`'s kernels)."""
    tiles = {"w8": t.w8_dp_tiles, "w4": t.w4_dp_tiles}.get(problem.wfmt, ())
    return (tile in tiles and problem.k % DP_BLOCK == 0 and not mma.applies(t, problem, tile)
            and dp_x_bytes(problem.wfmt, problem.k, tile) <= tile * t.dp_x_bytes)


def params(t: GemvTuning, problem: GemvProblem, threads: int, mode: str, carry: bool | None,
           ring: int | None, tile: int = 1) -> dict:
    """The engine's template parameters: ``dp``; with ``t.dp_persistent`` ``persist`` and ``carry`` (``carry``;
    None: the first of ``t.dp_carry``) or else a weight ``ring`` (``ring``; None: ``t.dp_ring``; 0: none); ``preload``
    when ``t.dp_preload`` is not "regs" and there is no carry, else ``depth`` 2 for the ``t.dp_deep_threads`` CTAs
    without carry or ring; ``min_ctas`` from the ``t.dp_min_ctas`` entry of its format, epilogue, ``tile`` and CTA size.

    Raises:
        PlanError: a coop ``mode`` (every CTA stages its tokens' whole x: plain only).
    """
    if mode != "plain":
        raise PlanError(f"gemv: the dp (integer dot product) variants run in plain mode only, not {mode!r}")
    out = {"dp": True}
    if t.dp_persistent:
        out["persist"] = True
        if (t.dp_carry[0] if carry is None else carry):
            out["carry"] = True
        elif t.dp_ring if ring is None else ring:
            out["ring"] = int(t.dp_ring if ring is None else ring)
    if t.dp_preload != "regs" and "carry" not in out:
        out["preload"] = t.dp_preload
    elif threads in t.dp_deep_threads and "carry" not in out and "ring" not in out:
        out["depth"] = 2
    cap = next((c for f, e, m, th, c in t.dp_min_ctas
                if (f, e, m, th) == (problem.wfmt, problem.epilogue, tile, threads)), 0)
    if cap > 1:
        out["min_ctas"] = cap
    return out


def dynamic_smem_bytes(problem: GemvProblem, tile: int, threads: int, rows_per_warp: int, ring: int) -> int:
    """Dynamic shared memory of a launch, bytes: :func:`dp_x_bytes`, plus for a variant with a weight ring of ``ring``
    stages (template ``ring``) that rounded up to 16 bytes and :func:`dp_ring_bytes`."""
    x = dp_x_bytes(problem.wfmt, problem.k, tile)
    if not ring:
        return x
    return -(-x // 16) * 16 + dp_ring_bytes(problem.wfmt, threads, rows_per_warp, ring)


def persistent_grid(items: int, cap: int) -> int:
    """CTAs of a persistent launch of ``items`` work items (row blocks x token chunks) when ``cap`` CTAs fit the device
    at once (resident CTAs/SM x SMs): every item once, in one wave -- ``ceil(items / ceil(items / cap))`` CTAs, each
    taking a contiguous range of ``floor(items / grid)`` items or one more (the template splits any grid that way);
    ``items`` itself when they all fit. A full grid (``min(items, cap)``, so 4 or 5 items per CTA instead of 5) was no
    faster for the w4 gate|up GEMV on the H200: 72.6 vs 71.1 us per GDN layer's four GEMVs, the CTAs with the extra
    item finishing last (bench/NOTES.md run 88).

    Raises:
        PlanError: items or cap below 1.
    """
    if items < 1 or cap < 1:
        raise PlanError(f"gemv: a persistent grid needs items >= 1 and a cap >= 1, got {items} / {cap}")
    per = -(-items // cap)
    return -(-items // per)
