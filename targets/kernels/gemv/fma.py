"""The GEMV's fp32-FMA engine (template ``gemv_fma.cu.j2``): bf16 weights, and w8 / w4 codes converted to fp32 exactly
in registers (the package docstring, :mod:`ninferc.targets.kernels.gemv`, describes it); plain or cooperative split-K.
The engine of every problem the tensor-core and integer-dot-product engines do not take. Pure functions of the tuning
(:class:`~ninferc.targets.kernels.gemv.tuning.GemvTuning`) and the problem.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ninferc.targets.kernels.gemv.problem import GemvProblem

if TYPE_CHECKING:
    from ninferc.targets.kernels.gemv.tuning import GemvTuning


def shapes(t: GemvTuning, problem: GemvProblem, tile: int) -> tuple[tuple[int, int], ...]:
    """The plain (threads, k_warps) candidates: ``t.plain_shapes`` (every problem and tile)."""
    return t.plain_shapes


def coop_threads(t: GemvTuning, problem: GemvProblem, tile: int) -> tuple[int, ...]:
    """The cooperative split-K thread counts (k_warps 1): ``t.coop_threads`` (none for add_norm_parts, whose outputs
    each need one owner CTA: the family leaves coop out there)."""
    return t.coop_threads


def rows(t: GemvTuning, problem: GemvProblem) -> int:
    """W rows per warp (also the integer-dot-product engine's): ``t.norm_rows_per_warp`` for the add_norm_parts
    epilogue, else ``t.quant_rows_per_warp`` (w8 / w4) or ``t.rows_per_warp`` (bf16)."""
    if problem.norm_out:
        return t.norm_rows_per_warp
    return t.quant_rows_per_warp if problem.quantized else t.rows_per_warp
