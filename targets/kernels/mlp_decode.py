"""One decode token's whole MLP in one persistent launch (template ``mlp_decode.cu.j2``).

Contract
--------
For one token (T = 1) with quantised MLP weights (w8 or w4, the formats of :mod:`ninferc.ir.quant`):

* ``y = bf16(silu(r * (W_gate x)) * (r * (W_up x)))`` -- the ``swiglu`` GEMV with ``in_norm parts``
  (:mod:`ninferc.targets.kernels.gemv`): ``x`` is the bf16 ``xs`` of the ``add_norm_parts`` GEMV before it,
  ``r = 1 / sqrt(sum(ss_in) / hidden + eps)`` the norm's factor;
* ``h += W_down y``, ``xs_out = bf16(h * (1 + norm_w))`` (``norm_w`` if not unit_offset), ``ss_out[b]`` = the sum of
  ``h^2`` over row block ``b`` -- the ``add_norm_parts`` GEMV.

So it replaces the decode step's gate|up and down GEMV launches, with the same dtypes and the same numerics up to
fp32 reassociation of down's sums (gemv's dp kernels round x and y to int16 under a power of two per 64
elements in the same way: :func:`ninferc.targets.kernels.gemv.dp_x`).

Why
---
Between the two GEMVs a decode step pays a kernel boundary: gate|up's last CTAs finishing, the PDL wait, down's
staging of the whole SwiGLU output (17,408 elements at the 27B shape) with DRAM idle. On the H200 the w4 pair took
~49 us per layer against ~36 us of weight streaming (bench/NOTES.md run 102). Down is linear in y, so this kernel
runs it split-K over *slices* of y as soon as each slice exists, with per-slice counters instead of a grid barrier.

Work list and synchronisation
-----------------------------
Items ``[0, n_gu)``: gate|up, one output per warp (``n_gu = ceil(inter / warps)``). Items ``n_gu + s * n_rb + b``:
down, slice ``s`` (``kslice`` elements of y) x row block ``b`` (``warps * dn_rows`` rows): each warp's dot products
of its rows with the slice go to ``parts[s, row]`` (fp32). CTA ``c`` runs item ``c`` first (its first weight
vectors loaded before the PDL wait, as every GEMV does), then items from a ticket counter (fetched one item ahead).
A gate|up item counts in at ``ready[slice]`` after its outputs are written (release); a down item's staging waits
until its slice's items have all counted in (acquire) -- with all gate|up items before all down items in the list,
that wait is normally already over. Each warp of a down item counts in at ``arrive[b]``; the warp that arrives
last for its row block sums ``parts[0..n_sl)[rows]`` in slice order -- a fixed order, so the result does not depend
on the schedule -- and writes h, xs and ss_out[b]. The counters (``sync``, uint32 ``[2 + n_sl + n_rb]``) are
zero before a launch and the last CTA to exit clears them.

A down item may wait for gate|up items of other CTAs, so every CTA must be resident at once: the launch is
cooperative and its grid is ``min(cap, n_gu)`` with ``cap`` the compiled kernel's resident CTAs/SM (registers and
shared memory, the occupancy calculator) x the SM count -- derived, never a constant; and a gate|up item never
waits, so each resident CTA finishes its own.

Status (H200, bench/NOTES.md runs 147-152): correct (emulator and GPU tests; the engine's goldens and fidelity tests
pass with it), but the 27B decode step is slower with it than with the two GEMVs -- w4 0.876x, w8 0.88x at 512 tokens
with the 64-register cap. Ruled out as the cause: the ticket counter (a static schedule: 1.003x), the cooperative
attribute (1.008x), the number of gate|up items (2 or 4 outputs per warp and item: no gain); the item-level fences
cost ~5-7 %; row-block-major down items and two-step slices were slower. What is left is the down phase's chain per
item (a slice's readiness check and its y load from L2 -- two dependent round trips -- then the conversion, a barrier
and the release of its partial sums) with one item in flight per CTA; a next version would keep two down items in
flight per CTA or hand the y slices to the down items already staged. So :attr:`MlpDecodeFamily.enabled` is False:
the plan keeps the two GEMVs and does not compile this kernel.

Runtime arguments (:meth:`MlpDecodeFamily.arg_names`): ``w_gu, s_gu, w_dn, s_dn, x_gu, ss_in, ss_parts, in_eps,
y, h, norm_w, xs, ss_out, parts, sync, hidden, inter``. ``Launch.workspace_bytes`` is ``ss_out`` (fp32 [n_rb],
the ``norm_ss`` workspace, as for an add_norm_parts GEMV: :meth:`MlpDecodeFamily.norm_parts`); ``parts`` and
``sync`` are the ``mlp_parts`` / ``mlp_sync`` workspaces (:meth:`MlpDecodeFamily.scratch_bytes`; ``mlp_sync``
zero-initialised once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import PlanError
from ninferc.targets.kernels.gemv import GemvProblem
from ninferc.targets.kernels.gemv import reference as gemv_reference
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

WARP = 32
#: K elements per 16-byte weight vector of each format (ninferc.ir.quant's layouts)
VEC_OF = {"w8": 16, "w4": 32}
#: K elements per power-of-two scale of the staged x / y (gemv_dp.cu.j2's blocks)
DP_BLOCK = 64


@dataclass(frozen=True)
class MlpProblem:
    """One MLP of a decode step: the gate|up GEMV (``hidden -> 2 * inter``, swiglu, in_norm parts) and the down
    GEMV (``inter -> hidden``, add_norm_parts), both in weight format ``wfmt``.

    Attributes:
        hidden: the model width (K of gate|up, N of down); a multiple of 64.
        inter: the MLP width (N of gate|up, K of down); a multiple of 64.
        wfmt: ``"bf16" | "w8" | "w4"`` -- only w8 / w4 have a fused kernel; a bf16 MLP is still described here so
            the route can fall back to the GEMVs.
        unit_offset: the norm after down scales by ``1 + w`` (True) or by ``w``.

    Raises:
        PlanError: a non-positive size (names it).
    """

    hidden: int
    inter: int
    wfmt: str = "w8"
    unit_offset: bool = True

    def __post_init__(self):
        if self.hidden <= 0 or self.inter <= 0:
            raise PlanError(f"mlp_decode: hidden {self.hidden} and inter {self.inter} must be positive")

    @property
    def gate_up(self) -> GemvProblem:
        """The gate|up GEMV this MLP's first half is (swiglu, in_norm parts)."""
        return GemvProblem(self.hidden, self.inter, "swiglu", self.wfmt, in_norm="parts")

    @property
    def down(self) -> GemvProblem:
        """The down GEMV (add_norm_parts)."""
        return GemvProblem(self.inter, self.hidden, "add_norm_parts", self.wfmt, unit_offset=self.unit_offset)


class MlpDecodeFamily:
    """The fused decode MLP (module docstring).

    Attributes:
        enabled: the route takes this kernel where it applies (:meth:`serves`), and a model plan compiles it. Default
            False: on the H200 the 27B decode step is slower with it (module docstring, "Status"); ``bench/family_ab.py``
            A/Bs it as ``fused:mlp_decode.enabled=True``.
        threads: threads per CTA.
        kslice: down's slice of y per format, K elements (whole warp steps: a multiple of 32 x 16 (w8) / 32 (w4)).
        dn_rows: W_down rows per warp and down item.
        min_ctas: per format, the kernel's ``__launch_bounds__`` min resident CTAs per SM (a register cap; 1 = none).
            Default w4 4 (64 registers, no local memory on any target with NVRTC 13.0 / 13.5: 4 CTAs/SM for 256
            threads, 1.08x over the uncapped 76-80 registers at 3 CTAs/SM on the H200; bench/NOTES.md run 150) and w8 3
            (at 4 NVRTC 13.5 spills 8 B on sm_86 / sm_89; uncapped it takes 85 registers on NVRTC 13.0, 2 CTAs/SM).
    """

    name = "mlp_decode"
    template = "mlp_decode.cu.j2"

    def __init__(self, enabled: bool = False, threads: int = 256, kslice: dict | None = None, dn_rows: int = 4,
                 min_ctas: dict | None = None):
        self.enabled = enabled
        self.min_ctas = dict(min_ctas or {"w8": 3, "w4": 4})
        self.threads = threads
        self.kslice = dict(kslice or {"w8": 512, "w4": 1024})
        self.dn_rows = dn_rows

    # ---- geometry ------------------------------------------------------------------------------

    @property
    def warps(self) -> int:
        """Warps per CTA."""
        return self.threads // WARP

    def slice_of(self, p: MlpProblem) -> int:
        """Down's slice length (K elements of y) for ``p``'s format."""
        return int(self.kslice[p.wfmt])

    def counts(self, p: MlpProblem) -> tuple[int, int, int]:
        """``(n_gu, n_sl, n_rb)``: gate|up items (one output per warp), slices of y, row blocks of down."""
        ks = self.slice_of(p)
        return -(-p.inter // self.warps), -(-p.inter // ks), -(-p.hidden // (self.warps * self.dn_rows))

    def dynamic_smem_bytes(self, p: MlpProblem) -> int:
        """x staged (int16 [hidden] + fp32 2^-e [hidden / 64] (+ w4 fp32 sums [hidden / 32])) and two slice buffers
        staged the same way, then 16 bytes (the ticket ring and the norm factor), bytes (the template's layout)."""
        def staged(n):  # rounded up to 16 bytes (each region is 16-byte aligned)
            return -(-(2 * n + 4 * (n // DP_BLOCK) + (4 * (n // 32) if p.wfmt == "w4" else 0)) // 16) * 16
        return staged(p.hidden) + 2 * staged(self.slice_of(p)) + 16

    def scratch_bytes(self, p: MlpProblem) -> dict[str, int]:
        """The workspaces besides ``ss_out``: ``mlp_parts`` fp32 [n_sl, hidden], ``mlp_sync`` uint32
        [2 + n_sl + n_rb] (zero-initialised once; every launch leaves it zero)."""
        _, n_sl, n_rb = self.counts(p)
        return {"mlp_parts": 4 * n_sl * p.hidden, "mlp_sync": 4 * (2 + n_sl + n_rb)}

    def check(self, p: MlpProblem) -> str:
        """Why ``p`` has no fused kernel ('' when it has one): a bf16 MLP, or sizes the template does not take."""
        if p.wfmt not in VEC_OF:
            return f"weights {p.wfmt} (fused for w8 / w4 only)"
        ks = self.slice_of(p)
        if p.hidden % DP_BLOCK or p.inter % DP_BLOCK:
            return f"hidden {p.hidden} / inter {p.inter} not multiples of {DP_BLOCK}"
        if ks % (WARP * VEC_OF[p.wfmt]) or ks % self.warps or ks % DP_BLOCK:
            return f"slice {ks} not whole warp steps of {WARP * VEC_OF[p.wfmt]} elements"
        if self.warps * self.dn_rows > self.threads:
            return f"row block {self.warps * self.dn_rows} rows over {self.threads} threads"
        return ""

    # ---- kernels -------------------------------------------------------------------------------

    def spec(self, p: MlpProblem) -> KernelSpec:
        """The kernel for ``p``.

        Raises:
            PlanError: ``p`` has no fused kernel (:meth:`check` says why).
        """
        why = self.check(p)
        if why:
            raise PlanError(f"mlp_decode (hidden {p.hidden}, inter {p.inter}): no fused kernel: {why}")
        params = {"threads": self.threads, "wfmt": p.wfmt, "kslice": self.slice_of(p), "dn_rows": self.dn_rows,
                  "unit_offset": bool(p.unit_offset)}
        if self.min_ctas.get(p.wfmt, 1) > 1:
            params["min_ctas"] = int(self.min_ctas[p.wfmt])
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=True)

    def variants(self, p: MlpProblem) -> list[KernelSpec]:
        """The fused kernel for ``p`` (none for a bf16 MLP or sizes it does not take). CI compiles it for every
        target; a model plan only when the family is enabled (:class:`ninferc.targets.lower.MlpRoute`)."""
        return [] if self.check(p) else [self.spec(p)]

    def sample_problems(self) -> list[MlpProblem]:
        """Small problems covering every template parameter value (both formats, both norm forms)."""
        return [MlpProblem(256, 2048, f, u) for f in VEC_OF for u in (True, False)]

    def arg_names(self, p: MlpProblem) -> tuple[str, ...]:
        """Kernel parameters in order: ``w_gu`` (codes [2 inter, hidden(/2)]), ``s_gu``, ``w_dn`` (codes
        [hidden, inter(/2)]), ``s_dn``, ``x_gu`` (bf16 [hidden]), ``ss_in`` (fp32 [ss_parts]), int32 ``ss_parts``,
        float ``in_eps``, ``y_gu`` (bf16 [inter], the SwiGLU output), ``h`` (fp32 [hidden], in place), ``norm_w`` (fp32 [hidden]),
        ``xs`` (bf16 [hidden]), ``ss_out`` (fp32 [n_rb]), ``parts`` (fp32 [n_sl, hidden]), ``sync`` (uint32
        [2 + n_sl + n_rb]), int32 ``hidden``, ``inter``."""
        return ("w_gu", "s_gu", "w_dn", "s_dn", "x_gu", "ss_in", "ss_parts", "in_eps", "y_gu", "h", "norm_w", "xs",
                "ss_out", "parts", "sync", "hidden", "inter")

    # ---- launch --------------------------------------------------------------------------------

    def serves(self, p: MlpProblem, tokens: int, ctx: PlanContext) -> bool:
        """True when a step of ``tokens`` runs this kernel: enabled, one token, a kernel for ``p``, and at least
        one resident CTA per SM on ``ctx``."""
        if not self.enabled or tokens != 1 or self.check(p):
            return False
        return ctx.occupancy(self.spec(p), self.dynamic_smem_bytes(p)).ctas_per_sm > 0

    def launch(self, p: MlpProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The cooperative launch for one token: ``min(cap, n_gu)`` CTAs, ``cap`` = the compiled kernel's resident
        CTAs/SM x SMs (every CTA resident at once: module docstring).

        Raises:
            PlanError: tokens != 1, no kernel for ``p``, or no CTA resident per SM on this target (names the
                kernel, its registers and shared memory).
        """
        if tokens != 1:
            raise PlanError(f"mlp_decode: one token per launch, got T = {tokens}")
        spec = self.spec(p)
        dyn = self.dynamic_smem_bytes(p)
        occ = ctx.occupancy(spec, dyn)
        if occ.ctas_per_sm < 1:
            res = ctx.resources_of(spec)
            raise PlanError(f"{spec.uri} on {ctx.arch.name}: no CTA fits an SM ({res.registers} registers x "
                            f"{spec.threads} threads, {res.static_smem_bytes + dyn} B shared memory; limiter "
                            f"{occ.limiter})")
        n_gu, _, n_rb = self.counts(p)
        grid = min(occ.ctas_per_sm * ctx.sms, n_gu)
        return ctx.make_launch(spec, grid, route="fused_mlp", tokens=1, dynamic_smem=dyn, workspace_bytes=4 * n_rb)

    def norm_parts(self, launch: Launch) -> int:
        """The ``ss_parts`` (row blocks) a launch writes: the next in_norm GEMV's ``ss_parts`` argument.

        Raises:
            PlanError: not an mlp_decode launch.
        """
        if launch.kernel.family != self.name:
            raise PlanError(f"{launch.kernel.uri}: not an mlp_decode launch")
        return launch.workspace_bytes // 4


def kernel_args(p: MlpProblem, launch: Launch, *, w_gu, s_gu, w_dn, s_dn, x_gu, ss_in, ss_parts, in_eps, y_gu, h,
                norm_w, xs, ss_out, parts, sync) -> tuple:
    """The argument tuple in :meth:`MlpDecodeFamily.arg_names` order (pointers passed through, sizes as np.int32,
    ``in_eps`` as np.float32)."""
    return (w_gu, s_gu, w_dn, s_dn, x_gu, ss_in, np.int32(ss_parts), np.float32(in_eps), y_gu, h, norm_w, xs, ss_out,
            parts, sync, np.int32(p.hidden), np.int32(p.inter))


def reference(p: MlpProblem, x_gu, w_gu, s_gu, w_dn, s_dn, ss_in, in_eps, h, norm_w):
    """numpy reference: gemv's gate|up reference (swiglu, in_norm parts, dp rounding of x) then its down
    reference (add_norm_parts, dp rounding of y).

    Args:
        x_gu: bf16 [1, hidden]; w_gu / s_gu, w_dn / s_dn: codes and scales (gemv's layouts); ss_in: fp32
            [1, parts]; h: fp32 [1, hidden] (not modified); norm_w: fp32 [hidden].

    Returns:
        ``(y, h_new, xs, ss)``: bf16 [1, inter], fp32 [1, hidden], bf16 [1, hidden], fp32 [1, 1] (ss as one part).
    """
    y = gemv_reference(p.gate_up, x_gu, w_gu, scales=s_gu, ss_in=ss_in, in_eps=in_eps, dp=True)
    h_new, xs, ss = gemv_reference(p.down, y, w_dn, y_in=h, scales=s_dn, norm_w=norm_w, dp=True)
    return y, h_new, xs, ss


FAMILY = MlpDecodeFamily()
"""The registered instance (discovered by :mod:`ninferc.targets.kernels`)."""
