"""Gated DeltaNet (GDN) mixer kernels: decode (fused), prefill conv + ring update, chunked / recurrent core,
and the gated RMSNorm follow-up (templates ``gdn_recurrent.cu.j2``, ``gdn_conv.cu.j2``,
``gdn_ring_update.cu.j2``, ``gdn_chunk.cu.j2``, ``gdn_gated_norm.cu.j2``; helpers ``gdn_common.cuh``).

Contract (the IR's ``_Builder.gdn`` composition, ops of :mod:`ninferc.ir.ops`)
-------------------------------------------------------------------------------
Input ``proj [T, proj_dim]`` fp32 (templates/README.md): columns ``q (Hk*dk) | k (Hk*dk) | v (Hv*dv) |
z (Hv*dv) | b (Hv) | a (Hv)``. For each token and V head j (Q/K head ``j // (Hv/Hk)``):

1. ``CausalConv1d`` + SiLU over the ``conv_dim = 2*Hk*dk + Hv*dv`` channels ``q|k|v`` (weights
   ``conv_w [conv_dim, W]`` fp32), continuing from the previous ``W-1`` inputs of the sequence;
2. ``L2Norm`` of q and k per head (``l2_eps``, 1e-6), q scaled by ``scale`` (dk^-0.5);
3. ``GDNGating``: ``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta = sigmoid(b)``;
4. ``GatedDeltaRule`` on the fp32 state ``S [dk, dv]``: ``S <- S exp(g); S += k (beta (v - S^T k))^T;
   o = S^T q``;
5. ``GatedRMSNorm``: ``y = o * rsqrt(mean(o^2) + norm_eps) * w * silu(z)`` (plain ``w``), stored **bf16** in
   ``y [T, Hv*dv]``.

State (templates/README.md): ``conv_ring [slots, W, conv_dim]`` fp32, the conv *input* of position p in
row ``p % W`` (positions < 0 read as 0, never from the ring); ``rec_state [slots, Hv, dk, dv]`` fp32 (the
reference's ``[Hv, dk, dv]`` order). A sequence whose step starts at position 0 starts from S = 0 whatever
its slot holds. Batch metadata: ``tok_pos [T]``, ``tok_seq [T]``, ``seq_start [B+1]``, ``seq_slot [B]``
(int32).

Kernels and launch geometry (chosen here, never in the templates)
------------------------------------------------------------------
* ``gdn_recurrent`` mode ``decode`` (:class:`GdnRecurrentFamily`, ``gdn_recurrent.cu.j2``): T = B, one token per
  sequence (``t = seq_start[b]``). Grid ``(Hv, B)``, block ``threads`` (default the smallest valid count
  that leaves 32 state floats per thread: 128 for the tiny fixture, 512 for 27B). Fuses 1-5 and the ring
  write (q/k channels by the first V head of each group only; the ring row written is never read in the
  same step). State in registers, read once and written once.
* prefill step, several packed sequences: ``gdn_conv`` (grid ``(T, ceil(conv_dim/threads))``, reads the
  ring, writes ``conv_out [T, conv_dim]`` fp32) -> ``gdn_ring_update`` (grid ``(ceil(conv_dim/threads), B)``,
  writes the last ``min(W, n_b)`` inputs of each sequence; must follow ``gdn_conv``) -> the core, one of
  three routes:

  - ``wy`` (default): ``gdn_chunk_wy`` (:class:`GdnChunkWyFamily`, grid ``(chunks, Hv)`` -- every chunk of
    every sequence at once) computes each chunk's local part of the reference -- ``w``, ``u``, the
    decay-masked ``q k^T`` and the row factors -- into the fp32 records ``wy_ws [T, Hv, dk + dv + 64 + 4]``;
    then the ``gdn_chunk`` *scan* (``wy=1``, grid ``(Hv * dv/dv_block, B)``) runs only the reference's
    sequential loop body per chunk: ``v_new = u - w S``, ``o = qd S + P v_new``, ``S <- S e^(c_last) + kd^T
    v_new``. The triangular solve and the ``K K^T`` / ``Q K^T`` products leave the sequential path, which on
    the 27B shape ran on 96 CTAs of 132 SMs, and move to a launch of ``128 x 48`` CTAs per 8,192 tokens.
  - ``chunked``: ``gdn_chunk`` alone (``wy=0``, grid ``(Hv * dv/dv_block, B)``, block 256, dynamic shared
    memory from :func:`chunk_smem_bytes`), everything per chunk inside the sequential CTA (the route before
    ``wy``; kept as its A/B partner and for the tests).
  - ``recurrent`` (``gdn_recurrent`` mode ``prefill``, :meth:`GdnRecurrentFamily.prefill_spec`, grid ``(Hv, B)``),
    the simple oracle.

  Only when ``dv_block < dv`` (routes ``chunked_split``, ``wy_split``): ``gdn_gated_norm`` (grid ``(T, ceil(Hv / warps))``),
  reading the fp32 ``o_ws [T, Hv*dv]`` the chunk kernel wrote.
* ``dv_block`` of route ``chunked``: among the divisors of dv in {256, 128, 64, 32, 16} whose shared memory
  (static + dynamic) fits the arch's opt-in maximum with at least one resident CTA, the one with the least
  modelled time :func:`chunk_cost` on the plan's SM count (ties to the larger block). The chunk kernel is
  sequential over chunks inside a CTA, so its time is the busiest SM's: ``ceil(CTAs / SMs)`` CTAs of
  ``a + b * dv_block`` FMAs per chunk, where ``a`` (the K-side products ``K K^T`` and ``Q K^T``) is repeated
  by every column block and ``b * dv_block`` (``K S``, ``Q S``, the triangular solve, ``P Vn``, the state
  update) is split among them. 27B (48 V heads, one sequence): 64 on every target (96 CTAs; the 132-SM H200
  would otherwise run 48 CTAs of 128 columns on 36 % of its SMs); only 64 or smaller fit sm_86 / sm_89 /
  sm_120a's 99 KiB opt-in anyway. Route ``wy`` chooses its scan's block the same way by :func:`scan_cost`
  (FMA issue or shared-memory loads per chunk, whichever binds; nothing is repeated per block).
* verify step (speculative decoding: K + 1 tokens per sequence, each sequence owning K + 1 state slots):
  ``gdn_conv`` with ``verify`` (grid ``(ceil(conv_dim/threads), B)``: the conv, and the ring after token j of
  sequence b into slot ``seq_slot_out[b] + j``, in one launch; until 2026-12-05 the conv and a verify kernel of
  ``gdn_ring_update``, two launches per GDN layer) -> ``gdn_recurrent`` mode ``verify`` (grid ``(Hv * dv / dv_block, B)``,
  the recurrent prefill storing the state after token j into slot ``seq_slot_out[b] + j``;
  :meth:`GdnRecurrentFamily.verify_launch`; with ``dv_block < dv``, route ``verify_split``, each CTA walks the tokens
  over its own columns and writes o to ``o_ws``) -> ``gdn_gated_norm`` (route ``verify_split`` only). The step reads
  slot ``seq_slot[b]`` (which may be one of its output slots); the accepted count then names the slot the next
  step starts from -- no copy, no recompute (:func:`reference_verify`).
* Kernels with a grid over sequences loop ``b = blockIdx.y, blockIdx.y + gridDim.y, ...`` and exit past
  ``num_seqs``: any ``grid.y >= 1`` is correct; the runtime should set ``grid.y = B`` of the step (the plan
  is made for ``batch`` sequences, default 1 for prefill and T for decode).

Runtime ABI: :func:`arg_names` gives each kernel's parameters in order; :func:`kernel_args` builds the tuple
(pointers as given, ``num_seqs`` int32, ``scale``/``l2_eps``/``norm_eps`` float32 from the problem).

Numpy reference: :func:`reference_step` composes :mod:`ninferc.ir.reference` ops exactly as the IR does, on the
ring/slot layouts (converted with :func:`window_from_ring` / :func:`ring_from_window`);
:func:`layout_conv` re-implements the kernels' ring gather directly (tests show both agree).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.reference import (
    ref_causal_conv1d,
    ref_gated_delta_rule_chunked,
    ref_gated_delta_rule_recurrent,
    ref_gated_rmsnorm,
    ref_gdn_gating,
    ref_l2norm,
)
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

WARP = 32  # threads per warp on every CUDA architecture
F32 = np.float32

CHUNK = 64
"""Tokens per chunk of the chunked route (mirrors the IR's ``GatedDeltaRule`` attr ``chunk``)."""
CHUNK_THREADS = 256
"""Threads per CTA of ``gdn_chunk`` (its 16 x 16 thread grid)."""
DV_BLOCKS = (256, 128, 64, 32, 16)
"""``dv_block`` values the chunk kernel supports (it needs ``256 % dv_block == 0`` and a multiple of 16)."""
STATE_FLOATS_PER_THREAD = 32
"""Default register budget for the state in the recurrent kernels (fp32 values of S per thread)."""
ROUTES = ("wy", "chunked", "recurrent")
"""Prefill core routes: ``wy`` (gdn_chunk_wy, then the gdn_chunk scan; + gdn_gated_norm when split),
``chunked`` (gdn_chunk alone; + gdn_gated_norm when split) and ``recurrent``."""
WY_ROUTES = ("wy", "wy_split")
"""Core routes that read :class:`GdnChunkWyFamily`'s records (its launch must run before them)."""
SPLIT_ROUTES = ("chunked_split", "wy_split", "verify_split")
"""Core routes (prefill, and the verify step's) that write the fp32 ``o_ws`` and need :class:`GdnGatedNormFamily`
after them."""
WY_TILE = 64
"""Columns of ``X = [beta e^c k | beta v]`` per product tile of ``gdn_chunk_wy`` (its ``kXW``)."""


# ------------------------------------------------------------------------------------------------
# the problem
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GdnProblem:
    """One GDN layer's shapes and constants (every GDN layer of a model shares them).

    Attributes:
        hk: Q/K heads (``linear_num_key_heads``). hv: V heads (``linear_num_value_heads``), a multiple of hk.
        dk: key head dim. dv: value head dim (multiple of 4).
        width: causal-conv width W (``linear_conv_kernel_dim``).
        scale: q scale, default ``dk ** -0.5`` (the IR's ``GatedDeltaRule`` attr).
        l2_eps: eps of the q/k L2 norm (IR ``L2Norm`` attr, 1e-6).
        norm_eps: eps of the gated RMSNorm (``rms_norm_eps``).

    Raises:
        PlanError: a non-positive dim, hv not a multiple of hk, or dv not a multiple of 4 (names the value).
    """

    hk: int
    hv: int
    dk: int
    dv: int
    width: int = 4
    scale: float | None = None
    l2_eps: float = 1e-6
    norm_eps: float = 1e-6

    def __post_init__(self):
        for name in ("hk", "hv", "dk", "dv", "width"):
            if int(getattr(self, name)) <= 0:
                raise PlanError(f"gdn: {name} = {getattr(self, name)} must be positive")
        if self.hv % self.hk:
            raise PlanError(f"gdn: hv = {self.hv} is not a multiple of hk = {self.hk}")
        if self.dv % 4:
            raise PlanError(f"gdn: dv = {self.dv} must be a multiple of 4 (float4 state rows)")
        if self.scale is None:
            object.__setattr__(self, "scale", float(self.dk) ** -0.5)

    @classmethod
    def from_config(cls, cfg) -> "GdnProblem":
        """The problem of a :class:`ninferc.ir.config.ModelConfig` (scale dk^-0.5, l2 eps 1e-6 as the IR builds)."""
        return cls(hk=cfg.linear_num_key_heads, hv=cfg.linear_num_value_heads, dk=cfg.linear_key_head_dim,
                   dv=cfg.linear_value_head_dim, width=cfg.linear_conv_kernel_dim, norm_eps=float(cfg.rms_norm_eps))

    # ---- derived sizes (elements) and proj column offsets ----
    @property
    def group(self) -> int:
        """V heads per Q/K head (Hv / Hk)."""
        return self.hv // self.hk

    @property
    def key_dim(self) -> int:
        """Hk * dk (width of q and of k)."""
        return self.hk * self.dk

    @property
    def value_dim(self) -> int:
        """Hv * dv (width of v, z, o and y)."""
        return self.hv * self.dv

    @property
    def conv_dim(self) -> int:
        """Conv channels C = 2 * key_dim + value_dim (q | k | v)."""
        return 2 * self.key_dim + self.value_dim

    @property
    def proj_dim(self) -> int:
        """Row length of ``proj``: conv_dim + value_dim (z) + 2 * Hv (b, a)."""
        return self.conv_dim + self.value_dim + 2 * self.hv

    @property
    def off_q(self) -> int:
        """First proj column of q (0)."""
        return 0

    @property
    def off_k(self) -> int:
        """First proj column of k."""
        return self.key_dim

    @property
    def off_v(self) -> int:
        """First proj column of v."""
        return 2 * self.key_dim

    @property
    def off_z(self) -> int:
        """First proj column of z."""
        return self.conv_dim

    @property
    def off_b(self) -> int:
        """First proj column of b."""
        return self.conv_dim + self.value_dim

    @property
    def off_a(self) -> int:
        """First proj column of a."""
        return self.off_b + self.hv

    def dims(self) -> dict[str, int]:
        """Template parameters that fix the layout: hk, hv, dk, dv."""
        return {"hk": self.hk, "hv": self.hv, "dk": self.dk, "dv": self.dv}


# ------------------------------------------------------------------------------------------------
# geometry helpers
# ------------------------------------------------------------------------------------------------


def recurrent_threads_valid(p: GdnProblem, threads: int) -> bool:
    """Whether ``gdn_recurrent`` can be built with ``threads``: a multiple of 32 up to 1024, a multiple
    of dv/4 (threads across a state row, 4 columns each), and dk a multiple of the row groups."""
    cq = p.dv // 4
    if threads <= 0 or threads % WARP or threads > 1024 or threads % cq:
        return False
    return p.dk % (threads // cq) == 0


def recurrent_threads(p: GdnProblem, state_per_thread: int = STATE_FLOATS_PER_THREAD) -> int:
    """Threads per CTA for the recurrent kernels: the smallest valid count holding at most
    ``state_per_thread`` state values per thread, else the largest valid count.

    Raises:
        PlanError: no thread count up to 1024 is valid for (dk, dv).
    """
    valid = [t for t in range(WARP, 1025, WARP) if recurrent_threads_valid(p, t)]
    if not valid:
        raise PlanError(f"gdn_recurrent: no thread count <= 1024 fits dk = {p.dk}, dv = {p.dv} "
                        f"(needs a multiple of 32 and of dv/4 = {p.dv // 4} dividing dk * dv / 4)")
    fit = [t for t in valid if p.dk * p.dv // t <= state_per_thread]
    return fit[0] if fit else valid[-1]


def dk_tile(p: GdnProblem) -> int:
    """dk rows staged per tile in ``gdn_chunk``: 32 when it divides dk, else 16.

    Raises:
        PlanError: dk not a multiple of 16.
    """
    if p.dk % 32 == 0:
        return 32
    if p.dk % 16 == 0:
        return 16
    raise PlanError(f"gdn_chunk: dk = {p.dk} must be a multiple of 16")


def dv_blocks(p: GdnProblem) -> list[int]:
    """Candidate ``dv_block`` values for ``gdn_chunk``, largest first (divisors of dv in :data:`DV_BLOCKS`)."""
    return [d for d in DV_BLOCKS if d <= p.dv and p.dv % d == 0]


def chunk_smem_bytes(p: GdnProblem, dv_block: int, chunk: int = CHUNK, tile: int | None = None,
                     threads: int = CHUNK_THREADS, wy: bool = False) -> int:
    """Dynamic shared memory (bytes) of ``gdn_chunk`` -- the same layout as the template's constants:
    ``S [dk][dv_block] | P, Lm [chunk][chunk+1] | KT [tile][chunk+1] | union(QT [tile][chunk+1],
    R [chunk][RS]) | 4 vectors [chunk]`` with ``RS = roundup32(dv_block) + 32 / (threads / dv_block)``;
    the scan of route ``wy`` (``wy=True``) has no ``Lm``. 27B: 93824 B at dv_block 64, 145024 B at 128
    (scan: 77184 / 128384 B)."""
    tile = tile or dk_tile(p)
    tpc = threads // dv_block
    rs = -(-dv_block // 32) * 32 + WARP // tpc
    floats = (p.dk * dv_block + (1 if wy else 2) * chunk * (chunk + 1) + tile * (chunk + 1)
              + max(tile * (chunk + 1), chunk * rs) + 4 * chunk)
    return 4 * floats


def wy_smem_bytes(p: GdnProblem, chunk: int = CHUNK, tile: int | None = None) -> int:
    """Dynamic shared memory (bytes) of ``gdn_chunk_wy`` -- the template's layout: ``A0, A [chunk][chunk+1] |
    union(QT, KT [tile][chunk+1] each, X [chunk][WY_TILE+1]) | 4 vectors [chunk]``. 27B: 51200 B."""
    tile = tile or dk_tile(p)
    floats = 2 * chunk * (chunk + 1) + max(2 * tile * (chunk + 1), chunk * (WY_TILE + 1)) + 4 * chunk
    return 4 * floats


def wy_record_floats(p: GdnProblem, chunk: int = CHUNK) -> int:
    """fp32 values of one ``gdn_chunk_wy`` record (per token and V head; ``gdn::WyRecord``): w [dk] | u [dv] |
    P row [chunk] | qf, kf, e^(c_last), c."""
    return p.dk + p.dv + chunk + 4


def wy_chunks(tokens: int, batch: int, chunk: int = CHUNK) -> int:
    """Grid x of ``gdn_chunk_wy``: an upper bound on ``sum_b ceil(n_b / chunk)`` over ``batch`` non-empty
    sequences of ``tokens`` tokens in all, ``floor((tokens + batch (chunk - 1)) / chunk)`` (CTAs past the
    last chunk exit at once)."""
    return (tokens + batch * (chunk - 1)) // chunk


def chunk_cost(p: GdnProblem, dv_block: int, sms: int, batch: int = 1, chunk: int = CHUNK) -> int:
    """Modelled time of one ``gdn_chunk`` launch, in FMAs per chunk on the busiest SM (module docstring):
    ``ceil(Hv * dv / dv_block * batch / sms) * (2 C^2 dk + dv_block (3 C dk + 1.5 C^2))`` with C = ``chunk``
    (G = K K^T and P = Q K^T: C^2 dk each; K S and Q S: C dk dv_block each; the solve C^2/2 dv_block; P Vn
    C^2 dv_block; the state update dk C dv_block). A relative number for comparing column blocks.

    Raises:
        PlanError: sms or batch < 1.
    """
    if sms < 1 or batch < 1:
        raise PlanError(f"gdn_chunk cost: need sms >= 1 and batch >= 1 (sms = {sms}, batch = {batch})")
    ctas = p.hv * (p.dv // dv_block) * batch
    per_cta = 2 * chunk * chunk * p.dk + dv_block * (3 * chunk * p.dk) + (3 * chunk * chunk * dv_block) // 2
    return _ceil(ctas, sms) * per_cta


def scan_cost(p: GdnProblem, dv_block: int, sms: int, batch: int = 1, chunk: int = CHUNK) -> float:
    """Modelled time of one ``gdn_chunk`` scan launch (route ``wy``), in SM cycles per chunk on the busiest SM:
    ``ceil(CTAs / sms)`` CTAs, each ``max(FMAs / 128, shared loads / 32)`` -- FMA issue (128 fp32 lanes per SM)
    or shared-memory words (32 banks per clock), whichever binds (CUDA C Programming Guide, "Arithmetic
    Instructions" throughput table and "Shared Memory"). Per chunk and thread of the 16 x 16 grid (rows r =
    chunk / 16, columns n = dv_block / 16): ``w S`` and ``Qe S`` take dk (2 r + n) loads for 2 dk r n FMAs, ``P v_new``
    chunk (r + n) for chunk r n, the state update (dk / dk_tile) chunk (dk_tile / 16 + n) for (dk / 16) n chunk. Unlike the
    ``chunked`` route nothing is repeated per column block, so small blocks only lose arithmetic intensity.

    Raises:
        PlanError: sms or batch < 1.
    """
    if sms < 1 or batch < 1:
        raise PlanError(f"gdn scan cost: need sms >= 1 and batch >= 1 (sms = {sms}, batch = {batch})")
    r, n, threads = chunk // 16, max(1, dv_block // 16), CHUNK_THREADS
    fma = 2 * p.dk * r * n + chunk * r * n + (p.dk // 16) * n * chunk
    tile = dk_tile(p)
    loads = p.dk * (2 * r + n) + chunk * (r + n) + (p.dk // tile) * chunk * (tile // 16 + n)
    per_cta = threads * max(fma / 128, loads / 32)
    ctas = p.hv * (p.dv // dv_block) * batch
    return _ceil(ctas, sms) * per_cta


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------------------------------------
# families
# ------------------------------------------------------------------------------------------------


class GdnRecurrentFamily:
    """``gdn_recurrent`` (template ``gdn_recurrent.cu.j2``): the GDN mixer one token at a time with the state in
    registers. Mode ``decode`` (:meth:`spec`, :meth:`launch`): the fused one-token-per-sequence step (conv + ring
    write + norms + gating + delta rule + gated RMSNorm), the plan's decode kernel. Mode ``prefill``
    (:meth:`prefill_spec`): the recurrent route of :class:`GdnChunkFamily`, reading ``gdn_conv``'s outputs, the
    prefill's simple oracle. The per-CTA timeline probe (``bench/attn_trace_probe.py --family gdn_recurrent``) is no
    parameter of this family: it renders the decode kernel with the template's trace hooks defined.

    Args:
        state_per_thread: state values per thread the thread count aims for (see :func:`recurrent_threads`).
        prewait: the kernel's pre-PDL-wait work beyond the state's L2 prefetch (the conv ring rows into L2, the conv
            taps and gating constants into registers; template parameter ``prewait``, absent = true). False
            renders the earlier kernel, the A/B baseline of bench/family_ab.py.
        preload: with ``prewait``, load the first sequence's recurrent state and the conv ring inputs straight into
            registers before the PDL wait, not only into L2 (template parameter ``preload``, absent = false; safe
            because both were last written at least two launches back: templates/ninfer_common.cuh section 7).
            Default on: with the balanced attention split, the 27B decode step on the H200 is 1.010x (w8, 512 of
            8,248 tokens) and 1.004x (w4) faster than with the split alone (bench/NOTES.md, runs 107-111).
        one_pass: the delta rule with one shared-memory reduction of the state instead of two (template parameter
            ``onepass``, absent = false): S^T k and S^T q of the raw conv outputs in the same pass, the q / k norms
            and q.k per warp, o = e^g rq scale S^T q + (k'.q') delta and the gated norm's sum as a warp sum -- two
            barriers after the conv's instead of seven (the template's header gives the identities). fp32
            reassociation against the two-pass order (GDN_STATE / BF16_ELEMENTWISE bounds). Needs dv / 4 to divide
            32 (a row group inside one warp). "auto" (default): on where dv allows it, else the two-pass kernel;
            True: :meth:`spec` raises where dv does not allow it. On the H200 the 27B step with it is 1.012x
            (w8) / 1.008x (w4) faster at 512 of 8,248 tokens (bench/NOTES.md run 141).
        one_pass_tree: with one_pass, reduce the partials over the whole CTA (template parameter ``tree``: transposed
            partials, two rows per thread, a shuffle tree, a third barrier) instead of every thread summing every row
            group (256 KB of shared-memory reads per CTA at 27B); used where threads / (dv / 4) is twice a power of two
            up to 64, else the per-thread sum.
        verify_split: the verify kernel's CTAs per V head (template parameter ``dv_block`` = dv / split: each CTA
            walks the step's tokens over its own state columns, and :class:`GdnGatedNormFamily` normalises o
            afterwards, since the norm sums over all of dv). "auto" (default): :meth:`choose_verify_block`; an int:
            that split, which :meth:`verify_blocks` must offer (1 = the fused kernel of one CTA per head). Why: the
            verify step walks its K + 1 tokens one after another in each CTA, and at one sequence the 27B's 48 CTAs
            occupy 48 of an H100's 132 SMs (bench/NOTES.md run 210: the 4-token verify core 1.65 ms over 49
            layers against 0.48 ms for the one-token decode kernel). Split (4 CTAs per head there), run 212 on one
            H100: the core 0.78 ms + the norm 0.29 ms; the w4 verify step of 4 tokens 10.83 -> 10.02 ms
            (``bench/results/batch_ab_w4_t4_{whole,split}_h100_7d4bf8b.json``).

    Raises:
        PlanError: ``one_pass`` not True, False or "auto", or ``verify_split`` not "auto" or a positive int (names
            the value).
    """

    name = "gdn_recurrent"
    template = "gdn_recurrent.cu.j2"

    def __init__(self, state_per_thread: int = STATE_FLOATS_PER_THREAD, prewait: bool = True, preload: bool = True,
                 one_pass: bool | str = "auto", one_pass_tree: bool = True, verify_split: int | str = "auto"):
        self.state_per_thread = int(state_per_thread)
        if verify_split != "auto" and not (isinstance(verify_split, int) and verify_split >= 1):
            raise PlanError(f"{self.name}: verify_split = {verify_split!r} must be 'auto' or a positive int")
        self.verify_split = verify_split
        self.prewait = bool(prewait)
        self.preload = bool(preload)
        if one_pass not in (True, False, "auto"):
            raise PlanError(f"{self.name}: one_pass = {one_pass!r} must be True, False or 'auto'")
        self.one_pass = one_pass
        self.one_pass_tree = bool(one_pass_tree)

    def spec(self, problem: GdnProblem, threads: int | None = None) -> KernelSpec:
        """The decode kernel for ``problem`` (threads default :func:`recurrent_threads`).

        Raises:
            PlanError: ``threads`` invalid for (dk, dv); ``one_pass`` True where dv / 4 does not divide 32 (names dv).
        """
        th = threads or recurrent_threads(problem, self.state_per_thread)
        if not recurrent_threads_valid(problem, th):
            raise PlanError(f"gdn_recurrent: threads = {th} invalid for dk = {problem.dk}, dv = {problem.dv}")
        params = {**problem.dims(), "width": problem.width, "threads": th, "mode": "decode"}
        if not self.prewait:
            params["prewait"] = False
        elif self.preload:
            params["preload"] = True
        params.update(self._one_pass_params(problem, th))
        return KernelSpec.make(self.name, self.template, params, th, cooperative=False)

    def _one_pass_params(self, problem: GdnProblem, th: int) -> dict:
        """The ``onepass`` / ``tree`` template parameters of a decode or verify kernel of ``th`` threads (empty where
        ``one_pass`` is off or "auto" and dv does not allow it).

        Raises:
            PlanError: ``one_pass`` True where dv / 4 does not divide 32 (names dv)."""
        col_quads = problem.dv // 4
        one_pass_ok = WARP % col_quads == 0
        if self.one_pass is True and not one_pass_ok:
            raise PlanError(f"gdn_recurrent one_pass: dv / 4 = {col_quads} must divide the warp's {WARP} lanes "
                            f"(dv = {problem.dv}; row group 0 must lie inside warp 0)")
        if not (self.one_pass and one_pass_ok):
            return {}
        params = {"onepass": True}
        row_groups = th // col_quads  # the tree: row_groups / 2 lanes per result, a power of two dividing 32
        if self.one_pass_tree and row_groups % 2 == 0 and WARP % (row_groups // 2) == 0:
            params["tree"] = True
        return params

    def prefill_spec(self, problem: GdnProblem, mode: str = "prefill", dv_block: int | None = None) -> KernelSpec:
        """The recurrent prefill kernel (mode ``prefill``; threads :func:`recurrent_threads`), or with ``mode``
        ``"verify"`` the speculative verify step's kernel: the same recurrence, storing the state after token j of
        sequence b in slot ``seq_slot_out[b] + j`` (:func:`reference_verify`), with the decode kernel's one-pass
        reduction where ``one_pass`` allows it (a verify step walks its K + 1 tokens one after another in each CTA:
        three barriers per token instead of seven). The prefill oracle keeps the two-pass order. ``dv_block``
        (verify; default dv): the state columns of each CTA, one of :meth:`verify_blocks`; below dv the kernel writes
        o (fp32) to ``o_ws`` for :class:`GdnGatedNormFamily`, and its threads hold ``state_per_thread`` values of the
        CTA's dk x dv_block state as at dv, or fewer where that leaves under 4 warps.

        Raises:
            PlanError: another mode; as :meth:`spec` for ``one_pass`` True (verify); a ``dv_block`` not offered by
                :meth:`verify_blocks` (names it and the offered ones)."""
        if mode not in ("prefill", "verify"):
            raise PlanError(f"{self.name}: prefill_spec mode {mode!r}; supported: prefill, verify")
        d = problem.dv if dv_block is None else int(dv_block)
        if d != problem.dv and (mode != "verify" or d not in self.verify_blocks(problem)):
            raise PlanError(f"{self.name} {mode}: dv_block = {d} not offered for dv = {problem.dv} (verify offers "
                            f"{self.verify_blocks(problem)})")
        cols = replace(problem, dv=d)  # the CTA's columns: its thread count and reduction as for a head of dv_block
        th = recurrent_threads(cols, self.state_per_thread)
        if d != problem.dv:  # a split CTA keeps 4 warps where a count allows: the fixture's 64-thread split kernel
            # spilled 8 B at 80 registers on sm_86 / sm_89 (ptxas of NVRTC 13.0), its 128-thread one none
            th = max(th, next((t for t in range(4 * WARP, 1025, WARP) if recurrent_threads_valid(cols, t)), th))
        params = {**problem.dims(), "width": problem.width, "threads": th, "mode": mode}
        if mode == "verify":
            params.update(self._one_pass_params(cols, th))
            if d != problem.dv:
                params["dv_block"] = d
        return KernelSpec.make(self.name, self.template, params, th, cooperative=False)

    def verify_blocks(self, problem: GdnProblem) -> list[int]:
        """The verify kernel's ``dv_block`` values, largest first: dv, and where the one-pass kernel runs (the split
        kernel writes o from row group 0, which needs it), dv / 2 and dv / 4 while they are multiples of 32 whose
        quarter divides the warp (at most 4 CTAs per head: each CTA loads the head's whole q and k, so a finer split
        repeats that work); ``verify_split`` other than "auto" offers dv / verify_split alone (checked the same way).

        Raises:
            PlanError: a forced ``verify_split`` whose block is not offered (names it and the offered ones)."""
        one_pass = self.one_pass is not False and WARP % (problem.dv // 4) == 0
        blocks = [problem.dv]
        for split in (2, 4):
            d = problem.dv // split
            if one_pass and problem.dv % split == 0 and d % 32 == 0 and WARP % (d // 4) == 0 and \
                    any(recurrent_threads_valid(replace(problem, dv=d), t) for t in range(WARP, 1025, WARP)):
                blocks.append(d)
        if self.verify_split == "auto":
            return blocks
        d = problem.dv // self.verify_split
        if problem.dv % self.verify_split or d not in blocks:
            raise PlanError(f"{self.name}: verify_split = {self.verify_split} (dv_block {problem.dv / self.verify_split:g}) "
                            f"not offered for dv = {problem.dv}; dv_block may be {blocks}")
        return [d]

    def choose_verify_block(self, problem: GdnProblem, ctx: PlanContext, batch: int = 1) -> int:
        """The verify kernel's ``dv_block`` for ``batch`` sequences, from :meth:`verify_blocks` and each block's grid
        (Hv * dv / dv_block x B CTAs) against ``ctx.sms`` and its one-wave cap (``ctx.cap``: resident CTAs per SM x
        SMs): the largest block whose grid fills every SM within one wave; else, where some grid fits one wave, the
        one with the most CTAs (the smallest such block); else (every grid needs several waves: every SM busy) the
        whole head. Each CTA's tokens are a serial chain, so CTAs beyond one per SM shorten no chain, a second wave
        doubles one, and a split costs a ``gdn_gated_norm`` launch.

        Raises:
            PlanError: as :meth:`verify_blocks`."""
        blocks = self.verify_blocks(problem)
        one_wave = [d for d in blocks
                    if problem.hv * (problem.dv // d) * batch <= ctx.cap(self.prefill_spec(problem, "verify", d))]
        filling = [d for d in one_wave if problem.hv * (problem.dv // d) * batch >= ctx.sms]
        if filling:
            return filling[0]
        return one_wave[-1] if one_wave else blocks[0]

    def variants(self, problem: GdnProblem) -> list[KernelSpec]:
        """The decode kernel, the recurrent prefill kernel and the verify kernels (one per :meth:`verify_blocks`)."""
        return [self.spec(problem), self.prefill_spec(problem)] + [self.prefill_spec(problem, "verify", d)
                                                                    for d in self.verify_blocks(problem)]

    def verify_launch(self, problem: GdnProblem, tokens: int, ctx: PlanContext, batch: int = 1) -> Launch:
        """The verify kernel over T = ``tokens`` tokens of ``batch`` sequences: grid (Hv * dv / dv_block, B) with
        :meth:`choose_verify_block`'s block, route ``verify`` (y written), or ``verify_split`` (o written to the fp32
        workspace ``o_ws [T, Hv*dv]`` = ``workspace_bytes``; follow with :class:`GdnGatedNormFamily`).

        Raises:
            PlanError: T < B or B < 1, or B over the grid's y limit; as :meth:`verify_blocks`.
        """
        if not 1 <= batch <= tokens:
            raise PlanError(f"gdn_recurrent verify: need 1 <= B ({batch}) <= T ({tokens})")
        if batch > ctx.arch.max_grid_dims[1]:
            raise PlanError(f"gdn_recurrent verify on {ctx.arch.name}: B = {batch} sequences exceeds the grid y limit "
                            f"of {ctx.arch.max_grid_dims[1]}")
        d = self.choose_verify_block(problem, ctx, batch)
        split = d < problem.dv
        return ctx.make_launch(self.prefill_spec(problem, "verify", d), (problem.hv * (problem.dv // d), batch, 1),
                               route="verify_split" if split else "verify", tokens=tokens,
                               workspace_bytes=4 * tokens * problem.value_dim if split else 0)

    def sample_problems(self) -> list[GdnProblem]:
        """The tiny fixture's GDN (2 Q/K heads, 6 V heads, 64 x 64, W 4)."""
        return [TINY]

    def arg_names(self, problem: GdnProblem, mode: str = "decode") -> tuple[str, ...]:
        """Kernel parameters in order of mode ``mode`` (see :func:`arg_names`)."""
        return arg_names(self.name, mode)

    def launch(self, problem: GdnProblem, tokens: int, ctx: PlanContext) -> Launch:
        """Grid (Hv, B = tokens), route ``decode``.

        Raises:
            PlanError: tokens < 1, or B over the grid's y limit.
        """
        if tokens < 1:
            raise PlanError(f"gdn_recurrent decode: T = {tokens} must be at least 1")
        if tokens > ctx.arch.max_grid_dims[1]:
            raise PlanError(f"gdn_recurrent decode on {ctx.arch.name}: B = {tokens} sequences exceeds the grid y limit "
                            f"of {ctx.arch.max_grid_dims[1]}")
        return ctx.make_launch(self.spec(problem), (problem.hv, tokens, 1), route="decode", tokens=tokens)


class _OneKernelFamily:
    """Shared shape of the GDN families with exactly one kernel per problem: ``threads`` per CTA, the
    problem's dims (plus the conv width where the kernel needs it) as the kernel's identity.

    Args:
        threads: threads per CTA.
    """

    name = ""
    template = ""
    with_width = True

    def __init__(self, threads: int = 256):
        self.threads = int(threads)

    def spec(self, problem: GdnProblem) -> KernelSpec:
        """The family's kernel for ``problem``."""
        params = {**problem.dims(), "threads": self.threads}
        if self.with_width:
            params["width"] = problem.width
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=False)

    def variants(self, problem: GdnProblem) -> list[KernelSpec]:
        """The one kernel."""
        return [self.spec(problem)]

    def sample_problems(self) -> list[GdnProblem]:
        """The tiny fixture's GDN."""
        return [TINY]

    def arg_names(self, problem: GdnProblem) -> tuple[str, ...]:
        """Kernel parameters in order (see :func:`arg_names`)."""
        return arg_names(self.name)


class GdnConvFamily(_OneKernelFamily):
    """``gdn_conv``: prefill causal conv + SiLU over all channels of all tokens (reads the ring only);
    one thread per channel. Its ``verify`` kernel (template parameter ``verify``) computes the same ``conv_out`` and
    writes, for every token j of sequence b, the conv ring after token j into slot ``seq_slot_out[b] + j`` (the
    speculative verify step's K + 1 state slots; :func:`reference_verify`): the prefill step's conv and
    ``gdn_ring_update`` in one launch, each thread owning one (channel, sequence) with its window in registers."""

    name = "gdn_conv"
    template = "gdn_conv.cu.j2"

    def spec(self, problem: GdnProblem, verify: bool = False) -> KernelSpec:
        """The conv kernel (``verify``: the verify step's conv with its per-token rings)."""
        if not verify:
            return super().spec(problem)
        params = {**problem.dims(), "threads": self.threads, "width": problem.width, "verify": True}
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=False)

    def variants(self, problem: GdnProblem) -> list[KernelSpec]:
        """The conv kernel and its verify kernel."""
        return [self.spec(problem), self.spec(problem, verify=True)]

    def launch(self, problem: GdnProblem, tokens: int, ctx: PlanContext, batch: int = 1,
               verify: bool = False) -> Launch:
        """Grid (T, ceil(conv_dim / threads)), route ``conv``; the verify kernel: grid (ceil(conv_dim / threads), B)
        (B capped at the grid's y limit; the kernel loops over the rest), route ``conv_verify``. Workspace =
        conv_out [T, conv_dim] fp32.

        Raises:
            PlanError: T < 1; verify: B outside 1..T."""
        if tokens < 1:
            raise PlanError(f"gdn_conv: T = {tokens} must be at least 1")
        if verify:
            if not 1 <= batch <= tokens:
                raise PlanError(f"gdn_conv verify: need 1 <= B ({batch}) <= T ({tokens})")
            grid = (_ceil(problem.conv_dim, self.threads), min(batch, ctx.arch.max_grid_dims[1]), 1)
        else:
            grid = (tokens, _ceil(problem.conv_dim, self.threads), 1)
        return ctx.make_launch(self.spec(problem, verify), grid, route="conv_verify" if verify else "conv",
                               tokens=tokens, workspace_bytes=4 * tokens * problem.conv_dim)


class GdnRingUpdateFamily(_OneKernelFamily):
    """``gdn_ring_update``: writes the last ``min(W, n_b)`` conv inputs of each sequence into its ring
    (after ``gdn_conv``); one thread per channel. (The verify step's per-token rings come from ``gdn_conv``'s verify
    kernel.)"""

    name = "gdn_ring_update"
    template = "gdn_ring_update.cu.j2"

    def launch(self, problem: GdnProblem, tokens: int, ctx: PlanContext, batch: int = 1) -> Launch:
        """Grid (ceil(conv_dim / threads), batch), route ``ring``."""
        if tokens < 1 or not 1 <= batch <= tokens:
            raise PlanError(f"gdn_ring_update: need 1 <= batch ({batch}) <= T ({tokens})")
        batch = min(batch, ctx.arch.max_grid_dims[1])  # the kernel loops over the rest
        grid = (_ceil(problem.conv_dim, self.threads), batch, 1)
        return ctx.make_launch(self.spec(problem), grid, route="ring", tokens=tokens)


class GdnChunkFamily:
    """``gdn_chunk`` (template ``gdn_chunk.cu.j2``), the prefill core: route ``wy`` (the chunk kernel's scan,
    ``wy=1``, after :class:`GdnChunkWyFamily`), ``chunked`` (the chunk kernel alone) or ``recurrent``
    (:class:`GdnRecurrentFamily`'s prefill kernel), all reading ``conv_out`` from ``gdn_conv``.

    Args:
        route: ``"wy"`` (default), ``"chunked"`` or ``"recurrent"`` (the simple oracle route).
        dv_block: force the chunk kernel's column block (default: the cheapest that fits by
            :func:`chunk_cost`, see module doc).
        chunk: tokens per chunk (64).
        state_per_thread: for the recurrent route's thread count.

    Raises:
        PlanError: unknown route.
    """

    name = "gdn_chunk"
    template = "gdn_chunk.cu.j2"

    def __init__(self, route: str = "wy", dv_block: int | None = None, chunk: int = CHUNK,
                 state_per_thread: int = STATE_FLOATS_PER_THREAD):
        if route not in ROUTES:
            raise PlanError(f"gdn_chunk: unknown route {route!r}; supported: {', '.join(ROUTES)}")
        self.route, self.dv_block, self.chunk = route, dv_block, int(chunk)
        self.state_per_thread = int(state_per_thread)

    def chunk_spec(self, problem: GdnProblem, dv_block: int, wy: bool = False) -> KernelSpec:
        """The chunk kernel with ``dv_block`` state columns per CTA: the whole chunked core (``wy=False``) or the
        scan of route ``wy`` (``wy=True``, reading :class:`GdnChunkWyFamily`'s records).

        Raises:
            PlanError: dv_block not a supported divisor of dv, or dk not a multiple of 16.
        """
        if dv_block not in dv_blocks(problem):
            raise PlanError(f"gdn_chunk: dv_block = {dv_block} must divide dv = {problem.dv} and be one of "
                            f"{DV_BLOCKS}")
        params = {**problem.dims(), "dv_block": dv_block, "chunk": self.chunk, "dk_tile": dk_tile(problem),
                  "threads": CHUNK_THREADS}
        if wy and self.chunk != CHUNK:
            raise PlanError(f"gdn_chunk: route wy needs chunk {CHUNK} (gdn_chunk_wy's records are per {CHUNK}-token "
                            f"chunk), found chunk = {self.chunk}")
        if wy:
            # min_ctas 1 is only a register-allocation hint (any launch has one resident CTA): without it ptxas
            # (CUDA 13) holds the scan to ~48 registers and spills 8-24 bytes of its register blocks
            params.update(wy=1, min_ctas=1)
        return KernelSpec.make(self.name, self.template, params, CHUNK_THREADS, cooperative=False)

    def recurrent_spec(self, problem: GdnProblem) -> KernelSpec:
        """The recurrent route's kernel: :meth:`GdnRecurrentFamily.prefill_spec` (this family's
        ``state_per_thread``)."""
        return GdnRecurrentFamily(state_per_thread=self.state_per_thread).prefill_spec(problem)

    def variants(self, problem: GdnProblem) -> list[KernelSpec]:
        """Chunk kernels (scan and whole) for every candidate dv_block (or the forced one); the recurrent route's
        kernel is :class:`GdnRecurrentFamily`'s."""
        blocks = [self.dv_block] if self.dv_block else dv_blocks(problem)
        return [self.chunk_spec(problem, d, wy=True) for d in blocks] + [self.chunk_spec(problem, d) for d in blocks]

    def sample_problems(self) -> list[GdnProblem]:
        """The tiny fixture's GDN."""
        return [TINY]

    def arg_names(self, problem: GdnProblem, route: str | None = None) -> tuple[str, ...]:
        """Kernel parameters in order for ``route`` (default the family's)."""
        return arg_names(self.name) if (route or self.route) != "recurrent" else arg_names("gdn_recurrent", "prefill")

    def choose_dv_block(self, problem: GdnProblem, ctx: PlanContext, batch: int = 1, wy: bool = False) -> int:
        """The forced dv_block, or among the candidates whose static + dynamic shared memory fits the arch's
        opt-in maximum with at least one resident CTA per SM, the one of least modelled time -- :func:`chunk_cost`
        (route ``chunked``) or :func:`scan_cost` (``wy``) for ``ctx.sms`` SMs and ``batch`` sequences (ties to
        the larger block).

        Raises:
            PlanError: nothing fits (lists every candidate's bytes and the limit).
        """
        tried, fits = [], []
        for d in ([self.dv_block] if self.dv_block else dv_blocks(problem)):
            spec = self.chunk_spec(problem, d, wy=wy)
            dyn = chunk_smem_bytes(problem, d, self.chunk, wy=wy)
            total = ctx.resources_of(spec).static_smem_bytes + dyn
            if total <= ctx.arch.max_smem_per_cta_optin and ctx.occupancy(spec, dyn).ctas_per_sm >= 1:
                cost = (scan_cost if wy else chunk_cost)(problem, d, ctx.sms, batch, self.chunk)
                fits.append((cost, -d))
            else:
                tried.append(f"dv_block {d}: {total} B")
        if fits:
            return -min(fits)[1]
        raise PlanError(f"gdn_chunk (dk {problem.dk}, dv {problem.dv}) on {ctx.arch.name}: no dv_block fits the "
                        f"opt-in shared-memory maximum of {ctx.arch.max_smem_per_cta_optin} B ({'; '.join(tried)})")

    def launch(self, problem: GdnProblem, tokens: int, ctx: PlanContext, batch: int = 1,
               route: str | None = None) -> Launch:
        """The core launch for a prefill step of T = ``tokens`` over ``batch`` sequences.

        Routes: ``chunked`` (dv_block == dv: y written, fused norm), ``chunked_split`` (dv_block < dv: o
        written to the fp32 workspace ``o_ws [T, Hv*dv]`` = ``workspace_bytes``; follow with
        :class:`GdnGatedNormFamily`), ``wy`` / ``wy_split`` (the same two, as the scan after
        :class:`GdnChunkWyFamily`), ``recurrent``.

        Raises:
            PlanError: T < 1, batch outside [1, T], unknown route, or no dv_block fits.
        """
        route = route or self.route
        if tokens < 1 or not 1 <= batch <= tokens:
            raise PlanError(f"gdn_chunk: need T >= 1 and 1 <= batch <= T (T = {tokens}, batch = {batch})")
        batch = min(batch, ctx.arch.max_grid_dims[1])  # the kernels loop over the rest
        if route == "recurrent":
            return ctx.make_launch(self.recurrent_spec(problem), (problem.hv, batch, 1), route="recurrent",
                                   tokens=tokens)
        if route not in ("chunked", "wy"):
            raise PlanError(f"gdn_chunk: unknown route {route!r}; supported: {', '.join(ROUTES)}")
        wy = route == "wy"
        d = self.choose_dv_block(problem, ctx, batch, wy=wy)
        split = d < problem.dv
        return ctx.make_launch(self.chunk_spec(problem, d, wy=wy), (problem.hv * (problem.dv // d), batch, 1),
                               route=route + "_split" if split else route, tokens=tokens,
                               dynamic_smem=chunk_smem_bytes(problem, d, self.chunk, wy=wy),
                               workspace_bytes=4 * tokens * problem.value_dim if split else 0)


class GdnChunkWyFamily(_OneKernelFamily):
    """``gdn_chunk_wy``: the chunk-local half of route ``wy`` (``gdn_chunk_wy.cu.j2``): per (chunk, V head), all
    chunks of every sequence in one launch, the reference's ``w``, ``u``, decay-masked ``q k^T`` and row factors,
    written as one record of :func:`wy_record_floats` fp32 per (token, V head) into ``wy_ws [T, Hv, rec]`` for the
    ``gdn_chunk`` scan. Requires chunk 64 and dk, dv multiples of 16.

    Args:
        chunk: tokens per chunk (64).
    """

    name = "gdn_chunk_wy"
    template = "gdn_chunk_wy.cu.j2"

    def __init__(self, chunk: int = CHUNK):
        super().__init__(CHUNK_THREADS)
        self.chunk = int(chunk)

    def spec(self, problem: GdnProblem) -> KernelSpec:
        """The kernel for ``problem``.

        Raises:
            PlanError: chunk other than 64, or dk / dv not multiples of 16 (names the value).
        """
        if self.chunk != CHUNK:
            raise PlanError(f"gdn_chunk_wy: chunk = {self.chunk}; the kernel's solve maps 4 lanes to each of "
                            f"{CHUNK} columns, so only chunk {CHUNK} is supported")
        for name in ("dk", "dv"):
            if getattr(problem, name) % 16:
                raise PlanError(f"gdn_chunk_wy: {name} = {getattr(problem, name)} must be a multiple of 16")
        params = {**problem.dims(), "chunk": self.chunk, "dk_tile": dk_tile(problem), "threads": self.threads}
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=False)

    def launch(self, problem: GdnProblem, tokens: int, ctx: PlanContext, batch: int = 1) -> Launch:
        """Grid (:func:`wy_chunks` (T, batch), Hv), route ``wy``; workspace = ``wy_ws`` (4 T Hv rec bytes).

        Raises:
            PlanError: T < 1, batch outside [1, T], or the grid over the arch's limits.
        """
        if tokens < 1 or not 1 <= batch <= tokens:
            raise PlanError(f"gdn_chunk_wy: need T >= 1 and 1 <= batch <= T (T = {tokens}, batch = {batch})")
        n = wy_chunks(tokens, batch, self.chunk)
        if n > ctx.arch.max_grid_dims[0] or problem.hv > ctx.arch.max_grid_dims[1]:
            raise PlanError(f"gdn_chunk_wy on {ctx.arch.name}: grid ({n}, {problem.hv}) exceeds the grid limits "
                            f"{ctx.arch.max_grid_dims[:2]}")
        return ctx.make_launch(self.spec(problem), (n, problem.hv, 1), route="wy", tokens=tokens,
                               dynamic_smem=wy_smem_bytes(problem, self.chunk),
                               workspace_bytes=4 * tokens * problem.hv * wy_record_floats(problem, self.chunk))


class GdnGatedNormFamily(_OneKernelFamily):
    """``gdn_gated_norm``: y (bf16) = RMSNorm(o) * w * silu(z) per (token, V head) from the fp32 ``o_ws``;
    needed after the ``chunked_split`` / ``wy_split`` routes and the ``verify_split`` verify core only (one warp per
    (token, V head))."""

    name = "gdn_gated_norm"
    template = "gdn_gated_norm.cu.j2"
    with_width = False

    def launch(self, problem: GdnProblem, tokens: int, ctx: PlanContext) -> Launch:
        """Grid (T, ceil(Hv / warps)): one warp per (token, V head), route ``gated_norm``. Until 2026-12-05 the grid
        was (T,), each warp walking Hv / warps heads in turn: at the 27B shape (6 heads per warp) 12.7 us per launch
        at T = 4 on an H100, 0.62 ms over the 49 GDN layers of a 4-token verify step (bench/NOTES.md run 211).

        Raises:
            PlanError: T < 1, or T over the grid's x limit."""
        if tokens < 1:
            raise PlanError(f"gdn_gated_norm: T = {tokens} must be at least 1")
        if tokens > ctx.arch.max_grid_dims[0]:
            raise PlanError(f"gdn_gated_norm on {ctx.arch.name}: T = {tokens} exceeds the grid x limit of "
                            f"{ctx.arch.max_grid_dims[0]}")
        warps = self.threads // WARP
        return ctx.make_launch(self.spec(problem), (tokens, _ceil(problem.hv, warps), 1), route="gated_norm",
                               tokens=tokens)


TINY = GdnProblem(hk=2, hv=6, dk=64, dv=64, width=4)
"""The tiny fixture's GDN shape (qwen35-tiny-code)."""
QWEN38_27B = GdnProblem(hk=16, hv=48, dk=128, dv=128, width=4)
"""The 27B preset's GDN shape."""

FAMILIES = [GdnRecurrentFamily(), GdnConvFamily(), GdnRingUpdateFamily(), GdnChunkWyFamily(), GdnChunkFamily(),
            GdnGatedNormFamily()]
"""The GDN families (discovered by ``targets/kernels/__init__.py``)."""
BY_NAME = {f.name: f for f in FAMILIES}
"""The GDN families by name."""


def layer_launches(problem: GdnProblem, tokens: int, ctx: PlanContext, *, decode: bool, batch: int | None = None,
                   route: str = "wy") -> list[tuple[str, Launch]]:
    """The ordered launches of one GDN layer for one step (same stream, in this order).

    Args:
        problem: the layer shapes.
        tokens: T of the step.
        ctx: plan context holding resources of every variant of the GDN families.
        decode: one token per sequence (T = B): the single fused ``gdn_recurrent`` decode launch.
        batch: B for prefill (default 1).
        route: prefill core route (``wy`` | ``chunked`` | ``recurrent``).

    Returns:
        [(kernel name, Launch)]: decode -> [decode]; prefill -> [conv, ring_update, (chunk_wy for route wy), core,
        (gated_norm when the core route is ``chunked_split`` or ``wy_split``)].
    """
    if decode:
        return [("gdn_recurrent", BY_NAME["gdn_recurrent"].launch(problem, tokens, ctx))]
    batch = batch or 1
    core = GdnChunkFamily(route=route).launch(problem, tokens, ctx, batch=batch)
    out = [("gdn_conv", BY_NAME["gdn_conv"].launch(problem, tokens, ctx)),
           ("gdn_ring_update", BY_NAME["gdn_ring_update"].launch(problem, tokens, ctx, batch=batch))]
    if core.route in WY_ROUTES:
        out.append(("gdn_chunk_wy", BY_NAME["gdn_chunk_wy"].launch(problem, tokens, ctx, batch=batch)))
    out.append((core.kernel.family, core))
    if core.route in SPLIT_ROUTES:
        out.append(("gdn_gated_norm", BY_NAME["gdn_gated_norm"].launch(problem, tokens, ctx)))
    return out


# ------------------------------------------------------------------------------------------------
# runtime ABI
# ------------------------------------------------------------------------------------------------

_ARGS = {
    "gdn_recurrent/decode": ["proj", "conv_w", "A_log", "dt_bias", "norm_w", "conv_ring", "rec_state", "y",
                   "tok_pos", "seq_start", "seq_slot", "num_seqs", "scale", "l2_eps", "norm_eps"],
    "gdn_recurrent/prefill": ["conv_out", "proj", "A_log", "dt_bias", "norm_w", "rec_state", "y",
                              "tok_pos", "seq_start", "seq_slot", "num_seqs", "scale", "l2_eps", "norm_eps"],
    "gdn_conv": ["proj", "conv_w", "conv_ring", "conv_out", "tok_pos", "tok_seq", "seq_start", "seq_slot"],
    "gdn_recurrent/verify": ["conv_out", "proj", "A_log", "dt_bias", "norm_w", "rec_state", "y", "o_ws",
                             "tok_pos", "seq_start", "seq_slot", "seq_slot_out", "num_seqs", "scale", "l2_eps",
                             "norm_eps"],
    "gdn_conv/verify": ["proj", "conv_w", "conv_ring", "conv_out", "tok_pos", "seq_start", "seq_slot", "seq_slot_out",
                        "num_seqs"],
    "gdn_ring_update": ["proj", "conv_ring", "tok_pos", "seq_start", "seq_slot", "num_seqs"],
    "gdn_chunk": ["conv_out", "proj", "A_log", "dt_bias", "norm_w", "rec_state", "y", "o_ws", "wy_ws",
                  "tok_pos", "seq_start", "seq_slot", "num_seqs", "scale", "l2_eps", "norm_eps"],
    "gdn_chunk_wy": ["conv_out", "proj", "A_log", "dt_bias", "wy_ws", "seq_start", "num_seqs", "scale", "l2_eps"],
    "gdn_gated_norm": ["o_ws", "proj", "norm_w", "y", "norm_eps"],
}
_INT_ARGS = {"num_seqs"}
_FLOAT_ARGS = {"scale", "l2_eps", "norm_eps"}
_OPTIONAL_PTRS = {"gdn_chunk": {"y", "o_ws", "wy_ws"}, "gdn_recurrent": {"o_ws"}}


def kernel_mode(spec: KernelSpec) -> str | None:
    """The :func:`arg_names` mode of a GDN kernel: ``gdn_recurrent``'s ``mode`` parameter, ``"verify"`` for the
    verify kernel of ``gdn_conv``, None for the others."""
    if spec.family == "gdn_recurrent":
        return spec.param("mode")
    if spec.family == "gdn_conv" and dict(spec.params).get("verify"):
        return "verify"
    return None


def arg_names(kernel: str, mode: str | None = None) -> tuple[str, ...]:
    """Parameter names, in order, of a GDN kernel (``KernelSpec.family``: gdn_recurrent with its ``mode``
    ``"decode"``, ``"prefill"`` or ``"verify"``, gdn_conv (mode None or ``"verify"``), gdn_ring_update, gdn_chunk_wy,
    gdn_chunk, gdn_gated_norm; :func:`kernel_mode` gives a kernel's mode).

    Pointer dtypes/shapes: proj fp32 [T, proj_dim]; conv_out fp32 [T, conv_dim]; conv_w fp32 [conv_dim, W];
    A_log, dt_bias fp32 [Hv]; norm_w fp32 [dv]; conv_ring fp32 [slots, W, conv_dim]; rec_state fp32
    [slots, Hv, dk, dv]; y bf16 (uint16) [T, Hv*dv]; o_ws fp32 [T, Hv*dv]; wy_ws fp32 [T, Hv, rec]
    (:func:`wy_record_floats`); tok_pos, tok_seq int32 [T];
    seq_start int32 [B+1]; seq_slot int32 [B]; seq_slot_out int32 [B] (verify: the first output slot of each
    sequence). Scalars: num_seqs int32 (B); scale, l2_eps, norm_eps fp32.

    Raises:
        KeyError: unknown kernel name (lists the known ones).
    """
    key = f"{kernel}/{mode}" if kernel == "gdn_recurrent" or mode == "verify" else kernel
    try:
        return tuple(_ARGS[key])
    except KeyError:
        raise KeyError(f"no GDN kernel {key!r}; known: {', '.join(_ARGS)}") from None


def kernel_args(launch: Launch, problem: GdnProblem, buffers: Mapping[str, Any]) -> tuple:
    """The argument tuple of ``launch``'s kernel in ABI order.

    Args:
        launch: a launch of one of the GDN kernels.
        problem: supplies ``scale``, ``l2_eps``, ``norm_eps`` when ``buffers`` does not.
        buffers: name -> device array / pointer, plus ``num_seqs`` (B). For ``gdn_chunk`` an absent ``y``
            (split route), ``o_ws`` (fused route) or ``wy_ws`` (route ``chunked``) is passed as a null pointer, and so
            is an absent ``o_ws`` of the ``gdn_recurrent`` verify kernel (route ``verify``, which writes y).

    Raises:
        KeyError: a required buffer is missing (names it and the kernel).
    """
    fam = launch.kernel.family
    out = []
    for name in arg_names(fam, kernel_mode(launch.kernel)):
        if name in _FLOAT_ARGS:
            out.append(np.float32(buffers.get(name, getattr(problem, name))))
        elif name in _INT_ARGS:
            if name not in buffers:
                raise KeyError(f"{fam}: argument {name!r} missing")
            out.append(np.int32(buffers[name]))
        elif name in buffers:
            out.append(buffers[name])
        elif name in _OPTIONAL_PTRS.get(fam, ()):
            out.append(np.uint64(0))
        else:
            raise KeyError(f"{fam}: argument {name!r} missing")
    return tuple(out)


# ------------------------------------------------------------------------------------------------
# layouts: ring <-> reference window, slot <-> reference state
# ------------------------------------------------------------------------------------------------


def window_from_ring(ring: np.ndarray, length: int) -> np.ndarray:
    """The reference executor's conv window ``[C, W-1]`` (inputs of positions length-W+1 .. length-1,
    oldest first, 0 for positions < 0) read from one slot's ring ``[W, C]`` (row p % W = position p)."""
    W, C = ring.shape
    win = np.zeros((C, W - 1), F32)
    for d in range(W - 1):
        p = length - (W - 1) + d
        if p >= 0:
            win[:, d] = ring[p % W]
    return win


def ring_from_window(window: np.ndarray, length: int, fill: float = np.nan) -> np.ndarray:
    """One slot's ring ``[W, C]`` holding the window ``[C, W-1]`` of a sequence of ``length`` tokens;
    rows no reader needs (position ``length - W`` and positions < 0) are set to ``fill`` (garbage)."""
    C, Wm1 = window.shape
    W = Wm1 + 1
    ring = np.full((W, C), fill, F32)
    for d in range(W - 1):
        p = length - (W - 1) + d
        if p >= 0:
            ring[p % W] = window[:, d]
    return ring


def state_to_slot(rec_state: np.ndarray, slot: int, state: np.ndarray) -> None:
    """Store a reference state ``[Hv, dk, dv]`` into ``rec_state[slot]`` (same element order)."""
    rec_state[slot] = state


def state_from_slot(rec_state: np.ndarray, slot: int) -> np.ndarray:
    """The reference state ``[Hv, dk, dv]`` held in ``rec_state[slot]`` (a copy)."""
    return np.array(rec_state[slot], dtype=F32)


# ------------------------------------------------------------------------------------------------
# batch metadata
# ------------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """Host-side batch metadata of one step (templates/README.md), int32 arrays.

    Attributes:
        tok_pos [T], tok_seq [T], seq_start [B+1], seq_slot [B].
    """

    tok_pos: np.ndarray
    tok_seq: np.ndarray
    seq_start: np.ndarray
    seq_slot: np.ndarray

    @classmethod
    def make(cls, starts: Sequence[int], lengths: Sequence[int], slots: Sequence[int]) -> "Batch":
        """Sequence b has ``lengths[b]`` tokens at positions ``starts[b] ..`` and uses slot ``slots[b]``.

        Raises:
            ValueError: mismatched lengths, a negative start, or an empty sequence list.
        """
        if not (len(starts) == len(lengths) == len(slots)) or not starts:
            raise ValueError(f"starts {starts}, lengths {lengths}, slots {slots} must be equal-length and non-empty")
        if min(starts) < 0 or min(lengths) < 0:
            raise ValueError(f"starts {starts} and lengths {lengths} must be non-negative")
        pos = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)]).astype(np.int32)
        seq = np.concatenate([np.full(n, b) for b, n in enumerate(lengths)]).astype(np.int32)
        st = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return cls(pos, seq, st, np.asarray(slots, np.int32))

    @property
    def num_seqs(self) -> int:
        """B."""
        return int(self.seq_slot.shape[0])

    @property
    def tokens(self) -> int:
        """T."""
        return int(self.tok_pos.shape[0])


# ------------------------------------------------------------------------------------------------
# numpy references
# ------------------------------------------------------------------------------------------------


def layout_conv(problem: GdnProblem, proj: np.ndarray, conv_w: np.ndarray, conv_ring: np.ndarray,
                batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' conv logic on the ring layout, in numpy (gdn_conv + gdn_ring_update, and the decode
    kernel's fused conv): each input is gathered from proj (this step), the ring (earlier positions) or 0
    (positions < 0), then SiLU; the last ``min(W, n_b)`` inputs of each sequence are written to its ring.

    Args:
        proj: fp32 [T, proj_dim]. conv_w: fp32 [conv_dim, W]. conv_ring: fp32 [slots, W, conv_dim] (not
            modified). batch: the step's metadata.

    Returns:
        (conv_out fp32 [T, conv_dim], new conv_ring).
    """
    W, C = problem.width, problem.conv_dim
    T = batch.tokens
    x = proj[:, :C].astype(F32)
    wf = conv_w.astype(F32)
    out = np.empty((T, C), F32)
    ring = conv_ring.copy()
    for b in range(batch.num_seqs):
        t0, t1 = int(batch.seq_start[b]), int(batch.seq_start[b + 1])
        if t1 <= t0:
            continue
        slot, pos0 = int(batch.seq_slot[b]), int(batch.tok_pos[t0])
        for t in range(t0, t1):
            p = int(batch.tok_pos[t])
            acc = np.zeros(C, F32)
            for j in range(W):
                pj = p - (W - 1) + j
                if pj < 0:
                    u = np.zeros(C, F32)
                elif pj >= pos0:
                    u = x[t0 + pj - pos0]
                else:
                    u = conv_ring[slot, pj % W]
                acc += u * wf[:, j]
            out[t] = acc * (F32(1) / (F32(1) + np.exp(-acc)))
        for t in range(max(t0, t1 - W), t1):
            ring[slot, int(batch.tok_pos[t]) % W] = x[t]
    return out, ring


def reference_step(problem: GdnProblem, proj: np.ndarray, weights: Mapping[str, np.ndarray],
                   conv_ring: np.ndarray, rec_state: np.ndarray, batch: Batch, *, mode: str = "auto",
                   chunk: int = CHUNK) -> dict[str, np.ndarray]:
    """The GDN mixer of one step on the GPU layouts, composed from :mod:`ninferc.ir.reference` ops exactly as
    the IR's ``_Builder.gdn`` composes them (per sequence: conv window from the ring, state from the slot or
    zeros at position 0, CausalConv1d, View q/k/v, L2Norm, GDNGating, GatedDeltaRule, GatedRMSNorm).

    Args:
        problem: shapes and constants.
        proj: fp32 [T, proj_dim].
        weights: ``conv_w`` [conv_dim, W], ``A_log`` [Hv], ``dt_bias`` [Hv], ``norm_w`` [dv] (fp32).
        conv_ring: fp32 [slots, W, conv_dim]; rec_state: fp32 [slots, Hv, dk, dv] (neither modified).
        batch: the step's metadata.
        mode: delta-rule form, ``"recurrent"``, ``"chunked"`` or ``"auto"`` (the executor's rule: recurrent
            for a one-token step of a sequence with state, chunked otherwise).
        chunk: chunk length of the chunked form.

    Returns:
        dict with ``y`` fp32 [T, Hv*dv] (the kernels store it as bf16), ``o`` fp32 [T, Hv*dv] (delta-rule
        output before the norm), ``conv_out`` fp32 [T, conv_dim], ``conv_ring`` and ``rec_state`` (new copies),
        ``windows`` {b: the executor's conv window [conv_dim, W-1] after the step}.

    Raises:
        ValueError: unknown mode.
    """
    if mode not in ("auto", "recurrent", "chunked"):
        raise ValueError(f"mode must be auto|recurrent|chunked, found {mode!r}")
    p = problem
    T = batch.tokens
    W, C, kd = p.width, p.conv_dim, p.key_dim
    ring = conv_ring.copy()
    rs = rec_state.copy()
    y = np.zeros((T, p.value_dim), F32)
    o_all = np.zeros((T, p.value_dim), F32)
    conv_out = np.zeros((T, C), F32)
    windows = {}
    for b in range(batch.num_seqs):
        t0, t1 = int(batch.seq_start[b]), int(batch.seq_start[b + 1])
        if t1 <= t0:
            continue
        n = t1 - t0
        slot, pos0 = int(batch.seq_slot[b]), int(batch.tok_pos[t0])
        pr = proj[t0:t1].astype(F32)
        window = window_from_ring(conv_ring[slot], pos0)
        c, new_window = ref_causal_conv1d(pr[:, :C], weights["conv_w"], window)
        conv_out[t0:t1] = c
        q = c[:, :kd].reshape(n, p.hk, p.dk)
        k = c[:, kd:2 * kd].reshape(n, p.hk, p.dk)
        v = c[:, 2 * kd:].reshape(n, p.hv, p.dv)
        qn, kn = ref_l2norm(q, p.l2_eps), ref_l2norm(k, p.l2_eps)
        g, beta = ref_gdn_gating(pr[:, p.off_a:p.off_a + p.hv], pr[:, p.off_b:p.off_b + p.hv],
                                 weights["A_log"], weights["dt_bias"])
        S0 = np.zeros((p.hv, p.dk, p.dv), F32) if pos0 == 0 else state_from_slot(rec_state, slot)
        m = mode
        if m == "auto":
            m = "recurrent" if (n == 1 and pos0 > 0) else "chunked"
        if m == "recurrent":
            o, S = ref_gated_delta_rule_recurrent(qn, kn, v, g, beta, S0, p.scale)
        else:
            o, S = ref_gated_delta_rule_chunked(qn, kn, v, g, beta, S0, p.scale, chunk=chunk)
        z = pr[:, p.off_z:p.off_z + p.value_dim].reshape(n, p.hv, p.dv)
        yy = ref_gated_rmsnorm(o, z, weights["norm_w"], p.norm_eps)
        y[t0:t1] = yy.reshape(n, -1)
        o_all[t0:t1] = o.reshape(n, -1)
        state_to_slot(rs, slot, S)
        # ring: the kernels store the conv inputs of the last min(W, n) positions (rows pos % W); the
        # other rows keep positions before the step, which window_from_ring(.., pos0 + n) still reads
        for t in range(max(t0, t1 - W), t1):
            ring[slot, int(batch.tok_pos[t]) % W] = proj[t, :C]
        windows[b] = new_window
    return {"y": y, "o": o_all, "conv_out": conv_out, "conv_ring": ring, "rec_state": rs, "windows": windows}


def reference(problem: GdnProblem, proj: np.ndarray, weights: Mapping[str, np.ndarray], conv_ring: np.ndarray,
              rec_state: np.ndarray, batch: Batch, *, mode: str = "auto") -> dict[str, np.ndarray]:
    """The family's numpy reference (templates/README.md): :func:`reference_step` (same arguments and result)."""
    return reference_step(problem, proj, weights, conv_ring, rec_state, batch, mode=mode)


def reference_verify(problem: GdnProblem, proj: np.ndarray, weights: Mapping[str, np.ndarray], conv_ring: np.ndarray,
                     rec_state: np.ndarray, batch: Batch, slot_out: Sequence[int]) -> dict:
    """The verify step's numpy reference: the recurrent GDN step of ``batch`` (:func:`reference_step`, mode
    ``recurrent``), keeping the state after every token -- the recurrent state and the conv ring after token j of
    sequence b go to slot ``slot_out[b] + j`` (each is :func:`reference_step` over that sequence's first j + 1
    tokens). Slot ``seq_slot[b]`` is read, and is changed only where it is one of those slots.

    Args:
        problem, proj, weights, conv_ring, rec_state, batch: as :func:`reference_step` (nothing is modified).
        slot_out: int, one per sequence: its first output slot (``slot_out[b] + n_b - 1`` must be a slot).

    Returns:
        dict with ``y`` fp32 [T, Hv*dv], ``conv_out`` fp32 [T, conv_dim], ``rec_state`` and ``conv_ring`` (new
        copies holding the per-token slots; rows of a ring that no later step reads are NaN), ``windows``
        {(b, j): the executor's conv window [conv_dim, W-1] after token j of sequence b}.
    """
    out = reference_step(problem, proj, weights, conv_ring, rec_state, batch, mode="recurrent")
    rs, ring, windows = rec_state.copy(), conv_ring.copy(), {}
    for b in range(batch.num_seqs):
        t0, t1 = int(batch.seq_start[b]), int(batch.seq_start[b + 1])
        slot, pos0 = int(batch.seq_slot[b]), int(batch.tok_pos[t0]) if t1 > t0 else 0
        for j in range(t1 - t0):
            sub = Batch(batch.tok_pos[t0:t0 + j + 1], np.zeros(j + 1, np.int32), np.array([0, j + 1], np.int32),
                        np.array([slot], np.int32))
            r = reference_step(problem, proj[t0:t0 + j + 1], weights, conv_ring, rec_state, sub, mode="recurrent")
            rs[int(slot_out[b]) + j] = r["rec_state"][slot]
            ring[int(slot_out[b]) + j] = ring_from_window(r["windows"][0], pos0 + j + 1, fill=np.nan)
            windows[(b, j)] = r["windows"][0]
    return {"y": out["y"], "conv_out": out["conv_out"], "rec_state": rs, "conv_ring": ring, "windows": windows}


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round fp32 to bf16 (nearest even) and back to fp32, as the kernels' bf16 stores do."""
    import ml_dtypes

    return np.asarray(x, F32).astype(ml_dtypes.bfloat16).astype(F32)
