"""Row-wise kernels around the GEMMs: token embedding (``embed.cu.j2``) and RMSNorm with the fused
residual add and output-row gather (``rmsnorm.cu.j2``). Two families, one per template.

Embedding
---------
``x[T, H] (fp32) = table[tokens]``; a token outside ``[0, V)`` writes a row of NaN (the runtime validates
ids; NaN makes a slip visible instead of reading out of bounds). H a multiple of 8, x 16-byte aligned.
Grid: T CTAs (one per token), ``threads`` per CTA striding over the H/8 chunks of 8 elements.
Table formats (``EmbedProblem.wfmt``, :mod:`ninferc.ir.quant`):

* ``bf16``: table bf16 ``[V, H]`` (16-byte aligned), widened exactly. Arguments (:func:`embed_arg_names`):
  ``tokens, table, x, t, h, vocab``.
* ``w8``: table int8 codes ``[V, H]`` (8-byte aligned) + fp32 ``scales[V]`` (one per row, i.e. per token):
  ``x[t, :] = fl32(q[tok, :] * scales[tok])`` -- one fp32 multiply, so exactly
  :func:`ninferc.ir.quant.dequantize`. Arguments: ``tokens, table, scales, x, t, h, vocab``.

``w4`` is refused: the recipes keep the embedding at bf16 or w8 (it is read one row per token, so its
format only sets artifact size; see :func:`ninferc.ir.quant.recipe`).

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
from ninferc.ir.quant import QuantTensor
from ninferc.ir.reference import ref_rmsnorm
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

WARP = 32  # threads per warp on every CUDA architecture
MAX_THREADS = 1024  # threads per CTA on every ninferc target (CUDA C Programming Guide)

# ------------------------------------------------------------------------------------------------
# embedding
# ------------------------------------------------------------------------------------------------


#: embedding table formats the kernel supports
EMBED_FORMATS = ("bf16", "w8")


@dataclass(frozen=True)
class EmbedProblem:
    """One embedding gather.

    Attributes:
        hidden: H, row length; positive multiple of 8. vocab: V rows of the table (>= 1).
        wfmt: table format, ``"bf16"`` or ``"w8"`` (module docstring).

    Raises:
        PlanError: H not a positive multiple of 8, V < 1, or a format other than bf16 / w8 (w4 is named
            as unsupported for the embedding, with the reason).
    """

    hidden: int
    vocab: int
    wfmt: str = "bf16"

    def __post_init__(self):
        if self.wfmt == "w4":
            raise PlanError("embed: a w4 embedding table is not supported (the recipes keep the embedding at "
                            "bf16 or w8: it is read one row per token); use w8 or bf16")
        if self.wfmt not in EMBED_FORMATS:
            raise PlanError(f"embed: unknown table format {self.wfmt!r}; supported: {', '.join(EMBED_FORMATS)}")
        if self.hidden <= 0 or self.hidden % 8:
            raise PlanError(f"embed: hidden = {self.hidden} must be a positive multiple of 8 (8-element chunks)")
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
        """The kernel for ``problem`` (H and V are runtime arguments; threads and the table format are
        identity -- ``wfmt`` is a parameter only for w8, so bf16 kernels keep their URI and source)."""
        th = self.threads_for(problem)
        params = {"threads": th}
        if problem.wfmt != "bf16":
            params["wfmt"] = problem.wfmt
        return KernelSpec.make(self.name, self.template, params, th, cooperative=False)

    def variants(self, problem: EmbedProblem) -> list[KernelSpec]:
        """The single kernel :meth:`launch` uses."""
        return [self.spec(problem)]

    def sample_problems(self) -> list[EmbedProblem]:
        """The tiny fixture's and the 27B's shapes (thread counts 32 and 256), in each table format."""
        return [EmbedProblem(h, v, f) for f in EMBED_FORMATS for h, v in ((256, 4096), (5120, 248320))]

    def launch(self, problem: EmbedProblem, tokens: int, ctx: PlanContext) -> Launch:
        """T CTAs, one per token.

        Raises:
            PlanError: T < 1.
        """
        if tokens < 1:
            raise PlanError(f"embed: T = {tokens} must be at least 1")
        return ctx.make_launch(self.spec(problem), tokens, route="row_per_cta", tokens=tokens)


def embed_arg_names(problem: EmbedProblem) -> tuple[str, ...]:
    """Kernel parameters in order: ``tokens`` (int32 [T]), ``table`` (bf16 [V, H]; w8: int8 [V, H]), for w8
    only ``scales`` (fp32 [V]), ``x`` (fp32 [T, H]), then int32 ``t, h, vocab``."""
    if problem.wfmt == "w8":
        return ("tokens", "table", "scales", "x", "t", "h", "vocab")
    return ("tokens", "table", "x", "t", "h", "vocab")


def embed_kernel_args(problem: EmbedProblem, launch: Launch, tokens, table, x, scales=None) -> tuple:
    """Argument tuple in :func:`embed_arg_names` order (T = ``launch.tokens``).

    Raises:
        PlanError: ``scales`` missing for a w8 table, or given for a bf16 one.
    """
    if (problem.wfmt == "w8") != (scales is not None):
        raise PlanError(f"embed: a {problem.wfmt} table {'needs' if problem.wfmt == 'w8' else 'takes no'} scales")
    head = (tokens, table, scales) if problem.wfmt == "w8" else (tokens, table)
    return (*head, x, np.int32(launch.tokens), np.int32(problem.hidden), np.int32(problem.vocab))


def embed_reference(tokens, table, scales=None) -> np.ndarray:
    """x[T, H] fp32 = table[tokens]; rows of out-of-range ids are NaN.

    Args:
        tokens: int [T] token ids.
        table: bf16 [V, H] (values widened exactly), or with ``scales`` the int8 w8 codes [V, H].
        scales: fp32 [V] (w8 only): rows are ``fl32(q * scales[tok])`` (:func:`ninferc.ir.quant.dequantize`).

    Raises:
        PlanError: w8 codes / scales of the wrong shape or dtype.
    """
    tok = np.asarray(tokens, dtype=np.int64).reshape(-1)
    tab = np.asarray(table)
    ok = (tok >= 0) & (tok < tab.shape[0])
    idx = np.where(ok, tok, 0)
    if scales is None:
        out = tab[idx].astype(np.float32)
    else:
        sc = np.asarray(scales)
        if tab.ndim != 2 or tab.dtype != np.int8 or sc.dtype != np.float32 or sc.shape != (tab.shape[0],):
            raise PlanError(f"embed reference (w8): expected int8 codes [V, H] and fp32 scales [V], got "
                            f"{tab.dtype} {list(tab.shape)} and {sc.dtype} {list(sc.shape)}")
        rows = QuantTensor("w8", (len(idx), tab.shape[1]), tab[idx], sc[idx])
        out = rows.dequantize()
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
        x_dtype: ``"f32"`` or ``"bf16"`` (mode ``rmsnorm`` only: x read as bf16 and widened exactly -- the MTP
            head's norm of the model's hidden state, which the final norm stores as bf16).
        ld_out: elements between output rows (0: ``dim``); a larger value writes a column slice of a wider row
            (the MTP head's two input norms write the halves of its fc's [N(embedding) | N(hidden)] row).

    Raises:
        PlanError: a value outside its range.
    """

    dim: int
    mode: str = "rmsnorm"
    unit_offset: bool = True
    gather: bool = False
    eps: float = 1e-6
    x_dtype: str = "f32"
    ld_out: int = 0

    def __post_init__(self):
        if self.dim <= 0 or self.dim % 4:
            raise PlanError(f"rmsnorm: dim = {self.dim} must be a positive multiple of 4 (16-byte fp32 loads)")
        if self.mode not in NORM_MODES:
            raise PlanError(f"rmsnorm: unknown mode {self.mode!r}; supported: {', '.join(NORM_MODES)}")
        if not self.eps > 0:
            raise PlanError(f"rmsnorm: eps = {self.eps} must be positive")
        if self.x_dtype not in ("f32", "bf16") or (self.x_dtype == "bf16" and self.mode != "rmsnorm"):
            raise PlanError(f"rmsnorm: x_dtype {self.x_dtype!r} with mode {self.mode!r}; supported: f32, and bf16 "
                            "with mode rmsnorm")
        if self.ld_out and (self.ld_out < self.dim or self.ld_out % 4):
            raise PlanError(f"rmsnorm: ld_out = {self.ld_out} must be 0 or a multiple of 4 of at least dim "
                            f"({self.dim})")


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
        if problem.x_dtype == "bf16":
            params["x_bf16"] = True
        if problem.ld_out and problem.ld_out != problem.dim:
            params["ld_out"] = int(problem.ld_out)
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
            out.append(RMSNormProblem(dim, "rmsnorm", True, False, x_dtype="bf16", ld_out=2 * dim))  # the MTP head's
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
    """Kernel parameters in order: ``x`` (fp32 [T, D], in/out; bf16 [T, D] for ``x_dtype`` bf16), ``d`` (fp32
    [T, D] or null), ``w`` (fp32 [D]), ``y`` (bf16 [rows, ld_out]), ``row_index`` (int32 [rows] or null), ``rows`` (int32), ``eps`` (fp32)."""
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
    x = np.asarray(x, dtype=np.float32)  # a bf16 x: pass its values widened (exact)
    s = (x + np.asarray(d, dtype=np.float32)).astype(np.float32) if problem.mode == "add_rmsnorm" else x
    src = np.asarray(row_index, dtype=np.int64) if problem.gather else np.arange(x.shape[0])
    y = ref_rmsnorm(s[src], np.asarray(w, dtype=np.float32), problem.eps, problem.unit_offset)
    x_after = s if (problem.mode == "add_rmsnorm" and not problem.gather) else x
    return x_after.copy(), y


FAMILIES = [EmbedFamily(), RMSNormFamily()]
