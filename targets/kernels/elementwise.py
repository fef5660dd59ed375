"""Row-wise kernels around the GEMMs: token embedding (``embed.cu.j2``) and RMSNorm with the fused
residual add and output-row gather (``rmsnorm.cu.j2``). Two families, one per template.

Embedding
---------
``x[T, H] (fp32) = table[tokens] (bf16 [V, H])``; a token outside ``[0, V)`` writes a row of NaN (the
runtime validates ids; NaN makes a slip visible instead of reading out of bounds). H a multiple of 8
(16-byte loads), table and x 16-byte aligned. Grid: T CTAs (one per token), ``threads`` per CTA
striding over the H/8 16-byte chunks. Arguments (:func:`embed_arg_names`): ``tokens, table, x, t, h,
vocab``.

RMSNorm
-------
One CTA per output row; the row (D fp32) is held in registers, so D is a template parameter.

* ``rmsnorm``:     ``y[r] = norm(x[src])``
* ``add_rmsnorm``: ``s = x[src] + d[src]`` (fp32, exact), ``x[src] = s`` (the residual stream, in place),
  ``y[r] = norm(s)``
* ``gather``: ``src = row_index[r]`` (int32 [R]) instead of ``r`` -- the final norm, so only the last
  token of each sequence reaches the LM head. With ``add_rmsnorm`` + gather the sum is *not* written
  back (x is unchanged; the residual stream is dead after the final norm and repeated indices stay
  race-free).

``norm(s) = s * (1 / sqrt(mean(s^2) + eps)) * (1 + w if unit_offset else w)``, w fp32 [D], y **bf16**
(round to nearest even). HF ``Qwen3_5RMSNorm`` / ``ninferc.ir.reference.ref_rmsnorm``. D a multiple of
4. Grid: ``rows`` CTAs (T, or R with gather). Arguments (:func:`rmsnorm_arg_names`): ``x, d, w, y,
row_index, rows, eps``; ``d`` and ``row_index`` may be null (0) where the variant does not use them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.reference import ref_rmsnorm
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

WARP = 32  # threads per warp on every CUDA architecture
MAX_THREADS = 1024  # threads per CTA on every ninferc target (CUDA C Programming Guide)

# ------------------------------------------------------------------------------------------------
# embedding
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbedProblem:
    """One embedding gather.

    Attributes:
        hidden: H, row length; positive multiple of 8. vocab: V rows of the table (>= 1).

    Raises:
        PlanError: H not a positive multiple of 8, or V < 1.
    """

    hidden: int
    vocab: int

    def __post_init__(self):
        if self.hidden <= 0 or self.hidden % 8:
            raise PlanError(f"embed: hidden = {self.hidden} must be a positive multiple of 8 (16-byte loads)")
        if self.vocab < 1:
            raise PlanError(f"embed: vocab = {self.vocab} must be at least 1")


class EmbedFamily:
    """The ``embed`` kernel family (see module docstring). One variant per problem: threads = the
    16-byte chunks of a row halved, rounded up to a warp, clamped to [32, 256]."""

    name = "embed"
    template = "embed.cu.j2"

    @staticmethod
    def threads_for(problem: EmbedProblem) -> int:
        """Threads per CTA: clamp(round_up(H / 16, 32), 32, 256) (each thread copies ~2 chunks)."""
        want = -(-problem.hidden // 16)
        return max(WARP, min(256, -(-want // WARP) * WARP))

    def spec(self, problem: EmbedProblem) -> KernelSpec:
        """The kernel for ``problem`` (H and V are runtime arguments; threads is identity)."""
        th = self.threads_for(problem)
        return KernelSpec.make(self.name, self.template, {"threads": th}, th, cooperative=False)

    def variants(self, problem: EmbedProblem) -> list[KernelSpec]:
        """The single kernel :meth:`launch` uses."""
        return [self.spec(problem)]

    def sample_problems(self) -> list[EmbedProblem]:
        """The tiny fixture's and the 27B's shapes (thread counts 32 and 256)."""
        return [EmbedProblem(256, 4096), EmbedProblem(5120, 248320)]

    def launch(self, problem: EmbedProblem, tokens: int, ctx: PlanContext) -> Launch:
        """T CTAs, one per token.

        Raises:
            PlanError: T < 1.
        """
        if tokens < 1:
            raise PlanError(f"embed: T = {tokens} must be at least 1")
        return ctx.make_launch(self.spec(problem), tokens, route="row_per_cta", tokens=tokens)


def embed_arg_names(problem: EmbedProblem) -> tuple[str, ...]:
    """Kernel parameters in order: ``tokens`` (int32 [T]), ``table`` (bf16 [V, H]), ``x`` (fp32 [T, H]),
    then int32 ``t, h, vocab``."""
    return ("tokens", "table", "x", "t", "h", "vocab")


def embed_kernel_args(problem: EmbedProblem, launch: Launch, tokens, table, x) -> tuple:
    """Argument tuple in :func:`embed_arg_names` order (T = ``launch.tokens``)."""
    return (tokens, table, x, np.int32(launch.tokens), np.int32(problem.hidden), np.int32(problem.vocab))


def embed_reference(tokens, table) -> np.ndarray:
    """x[T, H] fp32 = table[tokens] (bf16 values widened exactly); rows of out-of-range ids are NaN."""
    tok = np.asarray(tokens, dtype=np.int64).reshape(-1)
    tab = np.asarray(table)
    ok = (tok >= 0) & (tok < tab.shape[0])
    out = tab[np.where(ok, tok, 0)].astype(np.float32)
    out[~ok] = np.nan
    return out


# ------------------------------------------------------------------------------------------------
# RMSNorm
# ------------------------------------------------------------------------------------------------

NORM_MODES = ("rmsnorm", "add_rmsnorm")


@dataclass(frozen=True)
class RMSNormProblem:
    """One RMSNorm instance.

    Attributes:
        dim: D, the normalised length; positive multiple of 4.
        mode: ``"rmsnorm" | "add_rmsnorm"``.
        unit_offset: scale by (1 + w) (True: zero-centred weights) or by w.
        gather: output rows come from ``row_index`` (R rows) instead of all T rows.
        eps: epsilon (runtime argument, not identity).

    Raises:
        PlanError: a value outside its range.
    """

    dim: int
    mode: str = "rmsnorm"
    unit_offset: bool = True
    gather: bool = False
    eps: float = 1e-6

    def __post_init__(self):
        if self.dim <= 0 or self.dim % 4:
            raise PlanError(f"rmsnorm: dim = {self.dim} must be a positive multiple of 4 (16-byte fp32 loads)")
        if self.mode not in NORM_MODES:
            raise PlanError(f"rmsnorm: unknown mode {self.mode!r}; supported: {', '.join(NORM_MODES)}")
        if not self.eps > 0:
            raise PlanError(f"rmsnorm: eps = {self.eps} must be positive")


class RMSNormFamily:
    """The ``rmsnorm`` kernel family (see module docstring). One variant per problem: threads =
    D/16 rounded up to a warp (about four float4 per thread), at most 1024."""

    name = "rmsnorm"
    template = "rmsnorm.cu.j2"

    @staticmethod
    def threads_for(problem: RMSNormProblem) -> int:
        """Threads per CTA: clamp(round_up(D / 16, 32), 32, 1024) -- 320 for D = 5120, 32 for D = 256."""
        want = -(-problem.dim // 16)
        return max(WARP, min(MAX_THREADS, -(-want // WARP) * WARP))

    def spec(self, problem: RMSNormProblem) -> KernelSpec:
        """The kernel for ``problem`` (dim, mode, unit_offset, gather are identity; eps is an argument)."""
        th = self.threads_for(problem)
        params = {"threads": th, "dim": problem.dim, "mode": problem.mode, "unit_offset": bool(problem.unit_offset),
                  "gather": bool(problem.gather)}
        return KernelSpec.make(self.name, self.template, params, th, cooperative=False)

    def variants(self, problem: RMSNormProblem) -> list[KernelSpec]:
        """The single kernel :meth:`launch` uses."""
        return [self.spec(problem)]

    def sample_problems(self) -> list[RMSNormProblem]:
        """Every mode x unit_offset x gather value, at the tiny (256) and 27B (5120) hidden sizes."""
        out = []
        for dim in (256, 5120):
            for mode in NORM_MODES:
                for gather in (False, True):
                    out.append(RMSNormProblem(dim, mode, True, gather))
            out.append(RMSNormProblem(dim, "rmsnorm", False, False))
        return out

    def launch(self, problem: RMSNormProblem, tokens: int, ctx: PlanContext) -> Launch:
        """One CTA per output row. ``tokens`` is the number of output rows: T, or R (e.g. the batch size
        B for the final norm) for a gather problem.

        Raises:
            PlanError: tokens < 1.
        """
        if tokens < 1:
            raise PlanError(f"rmsnorm: rows = {tokens} must be at least 1")
        return ctx.make_launch(self.spec(problem), tokens, route="row_per_cta", tokens=tokens)


def rmsnorm_arg_names(problem: RMSNormProblem) -> tuple[str, ...]:
    """Kernel parameters in order: ``x`` (fp32 [T, D], in/out), ``d`` (fp32 [T, D] or null), ``w`` (fp32
    [D]), ``y`` (bf16 [rows, D]), ``row_index`` (int32 [rows] or null), ``rows`` (int32), ``eps`` (fp32)."""
    return ("x", "d", "w", "y", "row_index", "rows", "eps")


def rmsnorm_kernel_args(problem: RMSNormProblem, launch: Launch, x, w, y, d=None, row_index=None) -> tuple:
    """Argument tuple in :func:`rmsnorm_arg_names` order (rows = ``launch.tokens``); unused pointers -> 0.

    Raises:
        PlanError: ``d`` missing for add_rmsnorm, or ``row_index`` missing for a gather problem.
    """
    if problem.mode == "add_rmsnorm" and d is None:
        raise PlanError("rmsnorm: add_rmsnorm needs the addend d")
    if problem.gather and row_index is None:
        raise PlanError("rmsnorm: a gather problem needs row_index")
    return (x, d if d is not None else 0, w, y, row_index if row_index is not None else 0,
            np.int32(launch.tokens), np.float32(problem.eps))


def rmsnorm_reference(problem: RMSNormProblem, x, w, d=None, row_index=None) -> tuple[np.ndarray, np.ndarray]:
    """Reference (fp32, :func:`ninferc.ir.reference.ref_rmsnorm`) before the bf16 rounding of y.

    Args:
        x: fp32 [T, D]; w: fp32 [D]; d: fp32 [T, D] (add_rmsnorm); row_index: int [R] (gather).

    Returns:
        (x_after [T, D] fp32: x + d for add_rmsnorm without gather, else x unchanged;
         y [rows, D] fp32 before rounding to bf16).
    """
    x = np.asarray(x, dtype=np.float32)
    s = (x + np.asarray(d, dtype=np.float32)).astype(np.float32) if problem.mode == "add_rmsnorm" else x
    src = np.asarray(row_index, dtype=np.int64) if problem.gather else np.arange(x.shape[0])
    y = ref_rmsnorm(s[src], np.asarray(w, dtype=np.float32), problem.eps, problem.unit_offset)
    x_after = s if (problem.mode == "add_rmsnorm" and not problem.gather) else x
    return x_after.copy(), y


FAMILIES = [EmbedFamily(), RMSNormFamily()]
