"""Gated full attention over a paged bf16 or int8 KV cache: four kernel families sharing one problem.

Contract (HF ``Qwen3_5Attention`` + ``eager_attention_forward``; composed exactly as
``ninferc.ir.qwen3_5._Builder.attention`` / the fused ``GatedAttentionBlock`` op):

    q_h   = RoPE(RMSNorm(q_h) * (1 + q_norm_w))          fp32        (ref_rmsnorm unit_offset, ref_partial_rope)
    k_h   = bf16(RoPE(RMSNorm(k_h) * (1 + k_norm_w)))    -> k_pages  (written at the token's position)
    v_h   = bf16(v_h)                                    -> v_pages  (int8 KV: quantised instead, below)
    o_h   = softmax(q_h K^T * hd^-0.5, causal) V          fp32 softmax over positions 0..pos (ref_attention)
    out   = bf16(o * sigmoid(gate))                       [T, Hq*hd]

``proj [T, Dp]`` fp32 is the fused q|gate / k / v projection (templates/README.md): per q head
``[q_h (hd) | gate_h (hd)]``, then k (Hkv*hd), then v (Hkv*hd). Query head h uses KV head h // G,
G = Hq / Hkv. KV pages are ``[num_pages, Hkv, P, hd]`` bf16 (or int8 codes plus scales, below); position p
of sequence b lives in page ``page_table[b, p // P]``, row ``p % P``. RoPE angles are fp32(pos * inv_freq)
with ``inv_freq`` from :func:`ninferc.ir.reference.rope_inv_freq` passed as a device array, so kernel and
oracle use identical frequencies; the kernel takes accurate ``sinf``/``cosf`` of that angle.

Every kernel reads only the KV rows of positions < the context (free pages and rows may hold any bits,
NaN included: rows past the context are skipped (decode) or zero-filled in shared memory (prefill)).
Requirements on the runtime: ``1 <= seq_ctx[b] <= max_context``; positions of a sequence's tokens are
increasing and contiguous; every page-table entry below ceil(ctx / P) is a valid page id.

Kernels (runtime ABI: argument order = :meth:`arg_names`; pointers, then int32 / fp32 scalars)
---------------------------------------------------------------------------------------------
``attn_prep``    (proj, q_norm_w, k_norm_w, inv_freq, tok_pos, tok_seq, page_table, q_out, k_pages,
                 v_pages, [k_scales, v_scales,] n_tokens, max_pages, eps)
                 grid (T, ceil((Hq + 2 Hkv) / warps)), one warp per head row; no dynamic smem.
``attn_decode``  (q, k_pages, v_pages, [k_scales, v_scales,] page_table, seq_ctx, ws, n_seqs, max_pages,
                 splits, pages_per_split, scale)               T = B: token t of the step is sequence t
                 (the verify mode, :meth:`AttnDecodeFamily.verify_launch`: row t is token t of the step, with its own
                 context and its sequence's page-table row)
                 grid (splits, Hkv, B); each CTA: the G q heads of one KV head over
                 ``pages_per_split`` pages; writes unnormalised partial outputs and (max, sum) to ``ws``
                 (fp32, ``[B, Hq, splits, hd]`` then ``[B, Hq, splits, 2]``); dynamic smem: none, or the staged
                 K/V tile (``AttnDecodeFamily.stage_kv``, :meth:`AttnDecodeFamily.dynamic_smem_bytes`).
``attn_combine`` (ws, proj, out, n_seqs, splits)
                 grid (Hq, B); merges the splits, applies the gate, writes bf16 ``out [B, Hq*hd]``;
                 dynamic smem = 4 * splits bytes (grows with max_context: checked at plan time).
``attn_prefill`` (q, proj, k_pages, v_pages, [k_scales, v_scales,] tok_pos, seq_start, page_table, out,
                 max_pages, scale)
                 grid (ceil(T / qtile), Hq, B): CTA (tile, h, b) handles query rows
                 ``seq_start[b] + tile*qtile ...`` of sequence b (CTAs past its tokens exit); K/V tiles
                 of ``ktile`` keys of one page staged in shared memory; fp32 online softmax; bf16
                 ``out [T, Hq*hd]``; dynamic smem = :func:`prefill_smem_bytes`. Two routes, same ABI:
                 ``mma`` (tensor cores, qtile = 16 x warps; preferred) and ``simt`` (CUDA cores).

The bracketed ``k_scales, v_scales`` are arguments of the int8 KV kernels only (``kv_dtype = "int8"``);
bf16 argument lists, template parameters, URIs and rendered sources are exactly those of the bf16-only
kernels. ``attn_combine`` does not touch the pool and is the same kernel for both.

Order per layer and step: ``attn_prep`` (writes this step's K/V) -> ``attn_decode`` + ``attn_combine``
(one token per sequence, or the verify step's K + 1 tokens per sequence as rows) or ``attn_prefill`` (chunks). ``attn_prep``'s ``q_out`` feeds the second
stage; ``proj`` is read again for the gate.

The split rule (``attn_decode``; fixed for a given (max_context, B), so a captured CUDA graph stays
valid while contexts grow: CTAs beyond a sequence's context write an empty partial)
----------------------------------------------------------------------------------------------------
``pages = max_pages`` (= ceil(max_context / P)); ``fill`` = resident CTAs/SM of the decode kernel x SMs
(one full wave, from the occupancy calculator); ``splits = max(fill // (B * Hkv), ceil(pages /
max_pages_per_split), 1)`` capped at ``pages``; then ``pages_per_split = ceil(pages / splits)`` and
``splits = ceil(pages / pages_per_split)`` (no split is empty at max_context). ``max_pages_per_split``
(family parameter, default 64 pages) bounds one CTA's serial work at long contexts. The keys each split covers
are decided by the kernel at run time from the sequence's context (``balance_keys`` / ``balance_keys_int8``,
default 16 for both KV dtypes: the live context spread over every split in ranges of :func:`split_keys` keys -- a
multiple of 16 that divides the page, or whole pages -- so a short context still gives every split work; 0:
``pages_per_split`` whole pages per split, so at 512 of 8,248 tokens only 8 of 129 splits have keys).

int8 KV cache (``AttentionProblem.kv_dtype = "int8"``, template parameter ``kv_dtype-int8`` in the URI)
-------------------------------------------------------------------------------------------------------
Pool per attention layer (:meth:`AttentionProblem.kv_pool_arrays`; bytes per page
:meth:`AttentionProblem.kv_page_bytes`): ``k_pages``, ``v_pages`` int8 codes ``[num_pages, Hkv, P, hd]``
and ``k_scales``, ``v_scales`` fp32 ``[num_pages, Hkv, P, hd / 64]``: one scale per token, KV head and
group of :data:`KV_GROUP` = 64 consecutive head_dim elements (group m = elements 64m .. 64m + 63).
A page of K is ``Hkv * P * (hd + 4 * hd / 64)`` bytes (hd + 16 bytes per row at hd = 256: 53 % of bf16).

Quantisation on append (``attn_prep``; :func:`quantize_kv` is its bit-exact numpy model), per token, KV
head and group, on the fp32 value the bf16 path would round to bf16 -- k after RMSNorm + RoPE, v as
projected -- with no bf16 rounding first:

    scale = fl32(max|x| / 127)                   (correctly rounded; 1 if below the fp32 normal range,
                                                  i.e. an all-zero group, whose codes are then 0)
    code  = clip(rint(fl32(x / scale)), -127, 127)   (round half to even of the correctly rounded quotient)

Why fp32 and not the bf16-rounded value: one rounding instead of two (the bf16 step would add up to
2^-9 |x| before a quantisation step of max|x| / 127, and could move a value across a code boundary),
nothing to round in the kernel, and the error bound is stated against the value the model computed.
It is the ``w8`` rule of :mod:`ninferc.ir.quant` applied per group of 64. Bound: ``|x - fl32(code *
scale)| <= scale * (1/2 + 4 * 127 * 2^-24)``. Every step is a correctly rounded IEEE operation, so the
same fp32 input gives the same bytes on every machine (v is bit-exact between kernel and numpy; k
differs only where the kernel's fp32 RMSNorm / RoPE rounds differently from numpy's, by one ulp of k,
which can move a code by one or a scale by one ulp).

Dequantisation on read: ``value = fl32(code * scale)``. ``attn_decode`` and the simt route of
``attn_prefill`` compute exactly that into fp32 registers and then run the bf16 path's fp32 math. The
mma route keeps the tensor-core operands exact instead of rounding the dequantised values to bf16: the
codes (exact in bf16) go into the shared-memory tiles; K's scale multiplies the fp32 partial score of each
group of 64 dims, and V's scale multiplies the probabilities before their bf16 hi + lo split (one split
per group of 64 output columns). So every route equals the numpy reference (attention over the
dequantised K/V) up to fp32 reassociation, under the same ``ATTENTION`` tolerance as bf16.

Numpy references (fp32, on the paged layout) are at the bottom: :func:`paged_scatter`,
:func:`gather_kv` (to the reference executor's contiguous K/V), :func:`reference_prep`,
:func:`reference_attention`, :func:`reference_decode_partials`, :func:`reference_combine`; for int8 KV,
:class:`Int8Pages` (codes + scales) in place of the fp32 page arrays, :func:`quantize_kv`,
:func:`dequantize_kv`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.reference import (
    _sigmoid,
    ref_attention,
    ref_partial_rope,
    ref_rmsnorm,
    rope_inv_freq,
)
from ninferc.targets.occupancy import l1_left
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

WARP = 32  # threads per warp on every CUDA architecture
F32 = np.float32
KV_DTYPES = ("bf16", "int8")
"""KV cache storage dtypes (``AttentionProblem.kv_dtype``)."""
KV_GROUP = 64
"""head_dim elements per int8 KV scale (per token and KV head)."""


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


# ------------------------------------------------------------------------------------------------
# the problem
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionProblem:
    """One gated-attention layer shape plus its KV-cache geometry.

    Attributes:
        heads_q: query heads Hq.
        heads_kv: KV heads Hkv (Hq % Hkv == 0).
        head_dim: hd: 64, 128 or a multiple of 256.
        rotary_dim: leading dims rotated by RoPE (even, <= hd).
        theta: RoPE base.
        eps: RMSNorm epsilon of q_norm / k_norm.
        page_size: KV page size P in tokens (multiple of 32).
        max_pages: pages per sequence = the page-table row stride; max context = max_pages * P tokens.
        kv_dtype: KV cache storage, one of :data:`KV_DTYPES`: ``"bf16"`` (pages hold bf16) or ``"int8"``
            (codes + one fp32 scale per token, KV head and group of :data:`KV_GROUP` elements; needs
            head_dim % 64 == 0). See the module docstring, "int8 KV cache".

    Raises:
        PlanError: any field out of range (names the value and the constraint).
    """

    heads_q: int
    heads_kv: int
    head_dim: int
    rotary_dim: int
    theta: float
    eps: float
    page_size: int = 64
    max_pages: int = 64
    kv_dtype: str = "bf16"

    def __post_init__(self):
        def bad(msg: str):
            raise PlanError(f"attention problem: {msg}")

        if self.heads_q <= 0 or self.heads_kv <= 0 or self.heads_q % self.heads_kv:
            bad(f"heads_q = {self.heads_q} must be a positive multiple of heads_kv = {self.heads_kv}")
        hd = self.head_dim
        if not (hd in (64, 128) or (hd > 0 and hd % 256 == 0)):
            bad(f"head_dim = {hd} must be 64, 128 or a positive multiple of 256 (attn_decode's warp-per-key loads)")
        if self.rotary_dim <= 0 or self.rotary_dim % 2 or self.rotary_dim > hd:
            bad(f"rotary_dim = {self.rotary_dim} must be even and in (0, head_dim = {hd}]")
        if self.page_size <= 0 or self.page_size % WARP:
            bad(f"page_size = {self.page_size} must be a positive multiple of {WARP}")
        if self.max_pages <= 0:
            bad(f"max_pages = {self.max_pages} must be positive")
        if self.max_context > 2**31 - 1:
            bad(f"max context {self.max_context} tokens exceeds the int32 limit {2**31 - 1}")
        if not (self.eps > 0 and self.theta > 0):
            bad(f"eps = {self.eps} and theta = {self.theta} must be positive")
        if self.kv_dtype not in KV_DTYPES:
            bad(f"kv_dtype = {self.kv_dtype!r} is not supported; choose from {', '.join(KV_DTYPES)}")
        if self.kv_dtype == "int8" and hd % KV_GROUP:
            bad(f"kv_dtype = 'int8' needs head_dim % {KV_GROUP} == 0 (one scale per {KV_GROUP} elements); "
                f"head_dim = {hd}")

    @classmethod
    def from_config(cls, cfg, *, page_size: int = 64, max_context: int = 4096,
                    kv_dtype: str = "bf16") -> "AttentionProblem":
        """The problem of a :class:`ninferc.ir.config.ModelConfig`'s attention layers with
        ``max_pages = ceil(max_context / page_size)``."""
        return cls(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim,
                   float(cfg.rope_theta), float(cfg.rms_norm_eps), page_size, _cdiv(max_context, page_size),
                   kv_dtype)

    @property
    def groups(self) -> int:
        """Query heads per KV head, G = Hq / Hkv."""
        return self.heads_q // self.heads_kv

    @property
    def max_context(self) -> int:
        """Largest context a sequence can hold: max_pages * page_size tokens."""
        return self.max_pages * self.page_size

    @property
    def proj_dim(self) -> int:
        """Columns of the fused projection: Hq*2*hd + 2*Hkv*hd."""
        return self.heads_q * 2 * self.head_dim + 2 * self.heads_kv * self.head_dim

    @property
    def k_offset(self) -> int:
        """First k column of proj."""
        return self.heads_q * 2 * self.head_dim

    @property
    def v_offset(self) -> int:
        """First v column of proj."""
        return self.k_offset + self.heads_kv * self.head_dim

    @property
    def scale(self) -> np.float32:
        """Softmax scale hd^-0.5 as fp32 (the kernels' ``scale`` argument; same value as the IR's)."""
        return F32(self.head_dim ** -0.5)

    def inv_freq(self) -> np.ndarray:
        """fp32 [rotary_dim / 2] RoPE inverse frequencies (the kernels' ``inv_freq`` argument)."""
        return rope_inv_freq(self.rotary_dim, self.theta)

    @property
    def kv_groups(self) -> int:
        """int8 KV scales per token and KV head: head_dim / KV_GROUP (0 for bf16)."""
        return self.head_dim // KV_GROUP if self.kv_dtype == "int8" else 0

    def page_bytes(self) -> int:
        """Bytes of one page of K (the same again for V): bf16 ``Hkv * P * hd * 2``; int8 codes plus
        scales, ``Hkv * P * hd + Hkv * P * (hd / 64) * 4`` (:meth:`kv_page_bytes` splits it)."""
        return sum(b for n, b in self.kv_page_bytes().items() if n.startswith("k_"))

    def kv_page_bytes(self) -> dict[str, int]:
        """Bytes of one page in each KV pool array of a layer, keyed by the kernels' argument names:
        bf16 ``{"k_pages": Hkv*P*hd*2, "v_pages": same}``; int8 ``{"k_pages": Hkv*P*hd (codes),
        "v_pages": same, "k_scales": Hkv*P*(hd/64)*4, "v_scales": same}``."""
        rows = self.heads_kv * self.page_size
        if self.kv_dtype == "bf16":
            return {"k_pages": rows * self.head_dim * 2, "v_pages": rows * self.head_dim * 2}
        codes, scales = rows * self.head_dim, rows * self.kv_groups * 4
        return {"k_pages": codes, "v_pages": codes, "k_scales": scales, "v_scales": scales}

    def kv_pool_arrays(self, num_pages: int) -> dict[str, tuple[tuple[int, ...], str]]:
        """Shape and numpy dtype name of each KV pool array of one layer with ``num_pages`` pages, keyed
        by the kernels' argument names (what the runtime allocates and binds):
        bf16 ``k_pages``/``v_pages`` ([num_pages, Hkv, P, hd], ``"uint16"`` = bf16 bits); int8 the same two
        as ``"int8"`` codes plus ``k_scales``/``v_scales`` ([num_pages, Hkv, P, hd/64], ``"float32"``).
        Free pages may hold any bits (the kernels never read rows past a sequence's context)."""
        rows = (int(num_pages), self.heads_kv, self.page_size)
        if self.kv_dtype == "bf16":
            return {"k_pages": (rows + (self.head_dim,), "uint16"), "v_pages": (rows + (self.head_dim,), "uint16")}
        return {"k_pages": (rows + (self.head_dim,), "int8"), "v_pages": (rows + (self.head_dim,), "int8"),
                "k_scales": (rows + (self.kv_groups,), "float32"), "v_scales": (rows + (self.kv_groups,), "float32")}

    def split_proj(self, proj: np.ndarray):
        """(q [T, Hq, hd], gate [T, Hq, hd], k [T, Hkv, hd], v [T, Hkv, hd]) views of proj [T, Dp]."""
        T = proj.shape[0]
        hd, Hq, Hkv = self.head_dim, self.heads_q, self.heads_kv
        qg = proj[:, : self.k_offset].reshape(T, Hq, 2 * hd)
        k = proj[:, self.k_offset: self.v_offset].reshape(T, Hkv, hd)
        v = proj[:, self.v_offset:].reshape(T, Hkv, hd)
        return qg[..., :hd], qg[..., hd:], k, v


def _shape_params(p: AttentionProblem) -> dict:
    return {"hd": p.head_dim, "hq": p.heads_q, "hkv": p.heads_kv}


def _kv_params(p: AttentionProblem) -> dict:
    """Template parameter of the KV storage: absent for bf16 (so bf16 URIs and sources are unchanged)."""
    return {} if p.kv_dtype == "bf16" else {"kv_dtype": p.kv_dtype}


def _kv_args(p: AttentionProblem) -> tuple[str, ...]:
    """The KV pool arguments of the kernels that touch the pool, in order."""
    return ("k_pages", "v_pages") if p.kv_dtype == "bf16" else ("k_pages", "v_pages", "k_scales", "v_scales")


def _check_threads(family: str, threads: int) -> None:
    if threads <= 0 or threads % WARP or threads > 1024:
        raise PlanError(f"{family}: threads = {threads} must be a multiple of {WARP} in [32, 1024]")


def _sample_problems() -> list[AttentionProblem]:
    """The tiny fixture's attention shape and the 27B one, each with a bf16 and an int8 KV cache (all
    covered by CI compiles)."""
    return [
        AttentionProblem(4, 2, 64, 16, 1e7, 1e-6, 64, 64),
        AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, 64, 64),
        AttentionProblem(4, 2, 64, 16, 1e7, 1e-6, 64, 64, kv_dtype="int8"),
        AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, 64, 64, kv_dtype="int8"),
    ]


def _check_smem(family: str, spec: KernelSpec, ctx: PlanContext, dynamic: int, what: str) -> None:
    """Raise PlanError when static + dynamic shared memory exceeds the arch's opt-in maximum."""
    static = ctx.resources_of(spec).static_smem_bytes
    limit = ctx.arch.max_smem_per_cta_optin
    if static + dynamic > limit:
        raise PlanError(
            f"{family} ({spec.uri}) on {ctx.arch.name}: {what} needs {dynamic} B of dynamic shared memory "
            f"(+ {static} B static) = {static + dynamic} B per CTA, over the opt-in limit of {limit} B"
        )


# ------------------------------------------------------------------------------------------------
# attn_prep
# ------------------------------------------------------------------------------------------------


class _OneKernelFamily:
    """Shared by the attention families whose launch uses a single kernel per problem: ``variants`` is
    that kernel, ``sample_problems`` the tiny-fixture and 27B shapes (both dtypes)."""

    def variants(self, problem: AttentionProblem) -> list[KernelSpec]:
        """The one kernel of this family for ``problem``."""
        return [self.spec(problem)]

    def sample_problems(self) -> list[AttentionProblem]:
        """Tiny-fixture and 27B shapes."""
        return _sample_problems()


class AttnPrepFamily(_OneKernelFamily):
    """``attn_prep``: Q/K RMSNorm + partial RoPE, q to fp32, k/v to bf16 pages (module docstring).

    Args:
        threads: threads per CTA (one warp per head row).
    """

    name = "attn_prep"
    template = "attn_prep.cu.j2"

    def __init__(self, threads: int = 128):
        _check_threads(self.name, threads)
        self.threads = int(threads)

    def spec(self, problem: AttentionProblem) -> KernelSpec:
        """The kernel for ``problem`` (shape, rotary dim and page size are its identity)."""
        params = {**_shape_params(problem), "rot": problem.rotary_dim, "page": problem.page_size,
                  "threads": self.threads, **_kv_params(problem)}
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=False)

    def arg_names(self, problem: AttentionProblem) -> tuple[str, ...]:
        """Kernel parameters in order (see the module docstring for dtypes and shapes); int8 KV adds
        ``k_scales, v_scales`` after ``v_pages``."""
        return ("proj", "q_norm_w", "k_norm_w", "inv_freq", "tok_pos", "tok_seq", "page_table", "q_out",
                *_kv_args(problem), "n_tokens", "max_pages", "eps")

    def launch(self, problem: AttentionProblem, tokens: int, ctx: PlanContext) -> Launch:
        """Grid (T, ceil((Hq + 2 Hkv) / warps)).

        Raises:
            PlanError: T < 1.
        """
        if tokens < 1:
            raise PlanError(f"{self.name}: T = {tokens} must be at least 1")
        rows = problem.heads_q + 2 * problem.heads_kv
        grid = (int(tokens), _cdiv(rows, self.threads // WARP), 1)
        return ctx.make_launch(self.spec(problem), grid, route="prep", tokens=tokens)

    def kernel_args(self, problem: AttentionProblem, launch: Launch, arrays: Mapping[str, Any]) -> tuple:
        """Argument tuple in :meth:`arg_names` order from device ``arrays`` (keyed by name); scalars
        ``n_tokens`` (= launch.tokens), ``max_pages`` and ``eps`` are filled in unless given."""
        scalars = {"n_tokens": np.int32(launch.tokens), "max_pages": np.int32(problem.max_pages),
                   "eps": F32(problem.eps)}
        return _args(self.arg_names(problem), arrays, scalars)


# ------------------------------------------------------------------------------------------------
# attn_decode + attn_combine
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeStaging:
    """The staged ``attn_decode`` kernel's options (:class:`AttnDecodeFamily` ``staging``): whether K/V tiles go
    through shared memory, how many keys a tile holds, the tensor-core loops, the launch bound and the ``"auto"``
    rule's threshold. Frozen: a family's options change by replacing the whole object (``dataclasses.replace``; the
    family's ``stage_*`` attributes do that when set).

    Args:
        stage_kv: K/V tiles through shared memory (template ``stage``): each page's K and V rows of the CTA's
            range are copied by cp.async into dynamic shared memory (:meth:`AttnDecodeFamily.dynamic_smem_bytes`, one page of K
            and one of V), the first tile's rows of earlier positions before the PDL wait and the next tile's K
            / V while this tile's softmax / scores run, so a CTA keeps a whole tile in flight instead of the few
            keys its warps' loads reach. True / False force it; ``"auto"`` (default) stages bf16 KV pages wherever
            the staged kernel, with its dynamic shared memory, keeps at least ``stage_min_resident`` resident CTAs
            per SM on the target (:meth:`AttnDecodeFamily.choose`), and reads int8 pages from global memory (their staged kernel
            is not planned: it spills 16-24 bytes on NVRTC 13.5). On the H200 (3 CTAs/SM staged) the 27B w8 step
            is 1.008x faster at 512 of 8,248 tokens and 1.010-1.011x at 8,192 (bench/NOTES.md runs 121-122); the
            100-KB-per-SM targets (sm_86 / sm_89 / sm_120a: 1 CTA/SM staged) keep the global-memory kernel -- not
            measured there.
        stage_mma: the staged bf16-KV kernel's scores and P.V on tensor cores (template ``mma``: mma.sync m16n8k16 with
            q and P split into bf16 hi + lo; needs G <= 8 and head_dim a multiple of 64; a tile of few keys splits
            the scores' k-steps over the warps). Default False: on the H200 the 27B w8 step with it is 0.993x at 512
            of 8,248 tokens, 1.000x at 8,192 of 8,448 and 1.005x at 32,768 of 33,024 (bench/NOTES.md runs 132, 134): a
            plan cannot choose it by the live context, and it costs at short ones. Its kernel ends ~4 us sooner
            per layer at 8,192 (run 131) without a faster step; not measured why (a guess: the step there is bound
            by the DRAM traffic the attention shares with the next GEMV's pre-wait weight stream).
        stage_min_resident: the ``"auto"`` rule's resident-CTA threshold (default 3, the H200's staged occupancy
            that was measured).
        stage_keys: keys per staged tile (template ``tile``). A smaller tile needs less shared memory per CTA, so
            more CTAs are resident and the split rule keeps more splits. 0 (default): the page, or for the verify
            step's kernel (and the decode step's from ``stage_l1_batch`` sequences on, which stays staged) where the
            page tile's resident CTAs leave less than ``stage_l1_keep`` of the SM's L1, the
            half-page tile, and where that one keeps fewer than ``stage_min_resident`` CTAs (or also leaves too
            little L1) the global-memory kernel (:meth:`AttnDecodeFamily.tile_candidates`, chosen in
            :meth:`AttnDecodeFamily.choose`; on the H100 the unstaged verify step was as fast as the half-page one,
            20.38 against 20.41 ms, and faster than the page tile's 21.83, run 237).
        stage_l1_keep: bytes of L1 data cache (:func:`ninferc.targets.occupancy.l1_left`) the verify step's staged
            kernel's resident CTAs must leave per SM where ``stage_keys`` is 0 (0: no such rule), and the decode
            step's from ``stage_l1_batch`` sequences on (:meth:`AttnDecodeFamily.l1_rule`). The SM keeps its L1 /
            shared split while programmatic dependent launch chains the kernels after the attention, and the step's
            GEMVs read their x through L1: with the 27B page tile (3 CTAs/SM, 28 KiB of L1 left on sm_90) the bf16
            4-token verify step took 21.83 ms on an H100, with the half-page tile (4 CTAs/SM, 92 KiB left) 20.41,
            and the attention layers' GEMVs their GDN-layer times (bench/NOTES.md runs 236-237). Default 64 KiB,
            between the 60 KiB ``attn_prefill`` leaves (the 4-token prefill program's down after it 13.7 us slower
            than in a GDN layer, run 236) and the 92 KiB measured as enough -- on sm_90; on the 128 KiB-per-SM sm_86 /
            sm_89 / sm_120a the threshold is not measured (there it changes no 27B plan; the fixture's decode step
            of 8 or 16 sequences takes the half-page tile on sm_120a).
        stage_l1_batch: the fewest sequences of a decode step whose kernel takes the ``stage_l1_keep`` rule too (0:
            the verify step's kernel only). Default 5, the first batch whose GEMVs take the 8-token tile: on an
            H100 (bench/NOTES.md runs 260 and 264, ``bench/results/batch_ab_{bf16,w8,w4}_b8_l1_h100_058733a.json``) the
            27B bf16 8-sequence step took 21.40 ms with the half-page tile against 24.83 with the page tile (1.160x;
            the attention layers' gate|up and down had taken 178 / 116 us there against 138 / 69 in a GDN layer,
            run 252), w8 and w4 the same within 0.3 % (their GEMVs stage x in shared memory); at 4 sequences the rule
            cost bf16 0.8 % (``batch_ab_bf16_b4_l1_h100_058733a.json``). Batches 5-7 take it unmeasured.
        stage_min_ctas: for the staged bf16-KV kernel, the launch bound's minimum CTAs per SM (template
            ``min_ctas``; 0 = none): a register budget for ptxas, 65,536 / (min_ctas x threads) registers. Default 4
            (128 registers at 128 threads): without it this machine's NVRTC 13.5 gives the 27B staged kernel 96
            registers and an 8-byte spill on sm_86 / sm_89 / sm_120a (126-127 registers, no spill, with it).
            The occupancy the plan uses is still the one computed from the compiled kernel.


    Raises:
        PlanError: ``stage_kv`` not True, False or "auto", ``stage_min_resident`` < 1, ``stage_keys``,
            ``stage_min_ctas``, ``stage_l1_keep`` or ``stage_l1_batch`` < 0 (each names the value).
    """

    stage_kv: bool | str = "auto"
    stage_keys: int = 0
    stage_min_ctas: int = 4
    stage_min_resident: int = 3
    stage_mma: bool = False
    stage_l1_keep: int = 64 * 1024
    stage_l1_batch: int = 5

    def __post_init__(self):
        name = "attn_decode"  # (AttnDecodeFamily.name; this class is defined first)
        if self.stage_kv not in (True, False, "auto"):
            raise PlanError(f"{name}: stage_kv = {self.stage_kv!r} must be True, False or 'auto'")
        if self.stage_min_resident < 1:
            raise PlanError(f"{name}: stage_min_resident = {self.stage_min_resident} must be >= 1")
        if self.stage_keys < 0:
            raise PlanError(f"{name}: stage_keys = {self.stage_keys} must be >= 0 (0 = one page per tile)")
        if self.stage_min_ctas < 0:
            raise PlanError(f"{name}: stage_min_ctas = {self.stage_min_ctas} must be >= 0 (0 = no launch bound)")
        if self.stage_l1_keep < 0:
            raise PlanError(f"{name}: stage_l1_keep = {self.stage_l1_keep} must be >= 0 (0 = no L1 rule)")
        if self.stage_l1_batch < 0:
            raise PlanError(f"{name}: stage_l1_batch = {self.stage_l1_batch} must be >= 0 (0 = the verify step's "
                            f"kernel only)")
        for f in ("stage_keys", "stage_min_ctas", "stage_min_resident", "stage_l1_keep", "stage_l1_batch"):
            object.__setattr__(self, f, int(getattr(self, f)))
        object.__setattr__(self, "stage_mma", bool(self.stage_mma))


def _staging_field(field: str) -> property:
    """A family attribute that reads ``staging.<field>`` and, when set, replaces ``staging`` by a copy with the new
    value (validated by :class:`DecodeStaging`): what ``bench/family_ab.py``'s ``--set attn_decode.stage_mma=True``
    and the GPU tests' per-run overrides do."""
    return property(lambda self: getattr(self.staging, field),
                    lambda self, v: setattr(self, "staging", dataclasses.replace(self.staging, **{field: v})),
                    doc=f"``staging.{field}`` (:class:`DecodeStaging`); settable.")


class AttnDecodeFamily(_OneKernelFamily):
    """``attn_decode``: split-KV flash-decoding, one query token per sequence (T = B).

    Args:
        threads: threads per CTA.
        max_pages_per_split: upper bound on the pages one CTA reads (see the split rule).
        balance_keys: keys granule of the balanced split (template parameter ``balance``; 0 = page-aligned
            splits of ``pages_per_split`` pages): the kernel spreads the *live* context over all ``splits`` at run
            time, :func:`split_keys` keys per split, so that at a context below ``max_context`` every split's CTA
            has work (the split count itself stays fixed by ``max_context``, so a captured graph stays valid).
            Default 16: on the H200 the 27B w8 decode step (bf16 KV) is 1.091x faster at 2,048 of 32,768 tokens
            and 1.007x at 512 of 8,248 (bench/NOTES.md, runs 107-111). Applies to bf16 KV pages.
        balance_keys_int8: the same for int8 KV pages; default 16: on the H200 the 27B w8 decode step with int8 KV
            is 1.124x faster at 2,048 of 32,768 tokens than with page-aligned splits (bench/NOTES.md run 116), once
            the int8 P.V loop's unroll 8 had removed the balanced kernel's 8-byte spill on sm_120a.
        staging: the staged kernel's options (:class:`DecodeStaging`: whether K/V tiles go through shared memory,
            their keys, the tensor-core loops, the launch bound, the "auto" rule's threshold). Each field is also
            an attribute of the family under its old name (``stage_kv``, ``stage_keys``, ``stage_mma``,
            ``stage_min_ctas``, ``stage_min_resident``, ``stage_l1_keep``, ``stage_l1_batch``); setting one replaces
            :attr:`staging` by a copy with it.
        fuse_prep: fold ``attn_prep`` into the decode kernel (template ``prep``; bf16 KV, staged, not ``stage_mma``):
            every CTA computes its KV group's queries from ``proj`` (q_norm + RoPE, attn_prep's arithmetic) and the
            CTA whose key range ends at the context also the new K / V row, written to the page and into its
            staged tile -- one launch less per attention layer and decode step (the plan drops the decode step's
            ``attn_prep`` where the decode launch is fused: :func:`ninferc.targets.lower.drop_unneeded_steps`;
            prefill keeps it). True forces it (and the staged kernel); ``"auto"`` fuses wherever the staged bf16
            kernel without ``stage_mma`` is chosen (default); False never. On the H200 the 27B step with it is
            1.0056x (w8) and 1.0088x (w4) at 512 of 8,248 tokens, 1.0017x (w8) at 8,192, the logits bit-equal to
            the attn_prep launch's (bench/NOTES.md run 135). Both kernels take RoPE's cos / sin from
            ``attn_common.cuh rope_cos_sin`` (no sinf / cosf slow path, so no local memory).

    Raises:
        PlanError: ``threads`` not a positive multiple of 32, ``max_pages_per_split`` < 1, a granule < 0, ``fuse_prep``
            not True, False or "auto" (each names the value; :class:`DecodeStaging` checks its own);
            :meth:`spec` names what a forced ``fuse_prep`` or ``stage_mma`` cannot take.
    """

    name = "attn_decode"
    template = "attn_decode.cu.j2"
    stage_kv = _staging_field("stage_kv")
    stage_keys = _staging_field("stage_keys")
    stage_min_ctas = _staging_field("stage_min_ctas")
    stage_min_resident = _staging_field("stage_min_resident")
    stage_mma = _staging_field("stage_mma")
    stage_l1_keep = _staging_field("stage_l1_keep")
    stage_l1_batch = _staging_field("stage_l1_batch")

    def __init__(self, threads: int = 128, max_pages_per_split: int = 64, balance_keys: int = 16,
                 balance_keys_int8: int = 16, staging: DecodeStaging = DecodeStaging(),
                 fuse_prep: bool | str = "auto"):
        _check_threads(self.name, threads)
        if max_pages_per_split < 1:
            raise PlanError(f"{self.name}: max_pages_per_split = {max_pages_per_split} must be >= 1")
        for what, v in (("balance_keys", balance_keys), ("balance_keys_int8", balance_keys_int8)):
            if v < 0:
                raise PlanError(f"{self.name}: {what} = {v} must be >= 0 (0 = page-aligned splits)")
        self.threads = int(threads)
        self.max_pages_per_split = int(max_pages_per_split)
        self.balance_keys = int(balance_keys)
        self.balance_keys_int8 = int(balance_keys_int8)
        if not isinstance(staging, DecodeStaging):
            raise PlanError(f"{self.name}: staging = {staging!r} must be a DecodeStaging")
        self.staging = staging
        if fuse_prep not in (True, False, "auto"):
            raise PlanError(f"{self.name}: fuse_prep = {fuse_prep!r} must be True, False or 'auto'")
        self.fuse_prep = fuse_prep

    def tile_keys(self, problem: AttentionProblem, tile: int | None = None) -> int:
        """Keys per staged tile for ``problem``: ``tile`` where given (one of :meth:`tile_candidates`, as
        :meth:`choose` passes it), else ``stage_keys``, or the page size when 0.

        Raises:
            PlanError: the tile does not divide the page size, or its int8 scales are not whole 16-byte
                chunks (the cp.async unit)."""
        t = tile or self.stage_keys or problem.page_size
        if problem.page_size % t:
            raise PlanError(f"{self.name}: stage_keys = {t} must divide the page size {problem.page_size}")
        if problem.kv_dtype != "bf16" and t * problem.kv_groups * 4 % 16:
            raise PlanError(f"{self.name}: stage_keys = {t}: a tile's int8 scales ({t} x {problem.kv_groups} x 4 B) "
                            "must be a multiple of 16 bytes")
        return t

    def _staged(self, staged: bool | None) -> bool:
        """``staged`` if given, else whether ``stage_kv`` forces staging (``"auto"``: the unstaged kernel)."""
        return self.stage_kv is True if staged is None else bool(staged)

    def dynamic_smem_bytes(self, problem: AttentionProblem, staged: bool | None = None, tile: int | None = None) -> int:
        """Dynamic shared memory of the decode kernel, bytes: 0 unless staged (``staged``; None: ``stage_kv is
        True``); then one tile of K rows and one of V rows (:meth:`tile_keys` of ``tile`` x hd elements each: bf16 2
        bytes, int8 1 byte), plus for int8 KV the tile's K scales and V scales (tile x hd / 64 fp32 each)."""
        if not self._staged(staged):
            return 0
        p, t = problem, self.tile_keys(problem, tile)
        if p.kv_dtype == "bf16":
            return 2 * t * p.head_dim * 2
        return 2 * t * p.head_dim + 2 * t * (p.head_dim // KV_GROUP) * 4

    def granule(self, problem: AttentionProblem) -> int:
        """The balanced split's keys granule for ``problem``'s KV dtype (0 = page-aligned splits)."""
        return self.balance_keys if problem.kv_dtype == "bf16" else self.balance_keys_int8

    def l1_rule(self, prep: bool = True, batch: int | None = None) -> bool:
        """Whether :meth:`choose`'s L1 rule (``stage_l1_keep``) applies to the kernel of a step of ``batch`` rows
        (None: of some batch): the verify step's (``prep`` False) always, the decode step's from ``stage_l1_batch``
        sequences on; never without ``stage_l1_keep`` or with ``stage_keys`` set."""
        if not self.stage_l1_keep or self.stage_keys:
            return False
        return not prep or (self.stage_l1_batch > 0 and (batch is None or batch >= self.stage_l1_batch))

    def tile_candidates(self, problem: AttentionProblem, prep: bool = True,
                        batch: int | None = None) -> tuple[int, ...]:
        """The staged tiles (keys) the ``"auto"`` rule of :meth:`choose` may take for ``problem`` in a step of
        ``batch`` rows (None: of any, the tiles the plan compiles), in its order of preference: ``stage_keys`` where
        set; else the page, and where the L1 rule applies (:meth:`l1_rule`) to bf16 KV also the half page (at least
        16 keys: pages are multiples of 32) where the staged kernel takes it."""
        if self.stage_keys:
            return (self.stage_keys,)
        page = problem.page_size
        if not self.l1_rule(prep, batch) or problem.kv_dtype != "bf16":
            return (page,)
        try:  # a half page the staged kernel cannot take (stage_mma's tile rules) is no candidate
            self.spec(problem, True, prep=False, tile=page // 2)
        except PlanError:
            return (page,)
        return (page, page // 2)

    def variants(self, problem: AttentionProblem, prep: bool = True) -> list[KernelSpec]:
        """The kernels :meth:`choose` may pick for ``problem``: the staged one, the global-memory one, or (``stage_kv``
        ``"auto"``, bf16 KV) both, the staged one per :meth:`tile_candidates`; ``prep=False``: those without the
        folded prep (:meth:`verify_launch`'s)."""
        if self.fuse_prep is True:
            return [self.spec(problem, True, prep=prep)]
        if self.stage_kv == "auto":
            return [self.spec(problem, False)] + ([self.spec(problem, True, prep=prep, tile=t)
                                                   for t in self.tile_candidates(problem, prep)]
                                                  if problem.kv_dtype == "bf16" else [])
        return [self.spec(problem, prep=prep)]

    def choose(self, problem: AttentionProblem, ctx: PlanContext, prep: bool = True,
               batch: int = 1) -> tuple[KernelSpec, int]:
        """(kernel, dynamic shared memory bytes) the plan launches for ``problem`` on ``ctx``'s target: the one
        ``stage_kv`` forces (tiles of ``stage_keys`` or a page), or under ``"auto"``, for bf16 KV, the staged kernel
        of the first of :meth:`tile_candidates` that, with its dynamic shared memory, keeps >= ``stage_min_resident``
        resident CTAs per SM (occupancy calculator on the compiled kernel's registers and shared memory) -- and, for
        the verify step's kernel, leaves those CTAs' SM >= ``stage_l1_keep`` bytes of L1
        (:func:`ninferc.targets.occupancy.l1_left`); else the global-memory kernel. ``prep=False``: the verify
        step's kernel (:meth:`verify_launch`): without the folded prep whatever ``fuse_prep`` says.

        The L1 rule is the verify step's (``prep`` False) and, from ``stage_l1_batch`` sequences, the decode step's
        (:meth:`l1_rule`), as measured (bench/NOTES.md runs 236-238, H100, 27B): the bf16 4-token verify step took
        21.00 ms with the half-page tile against 22.56 with the page tile (1.153x against 1.242x the one-token step),
        while the decode step kept the page tile's speed or was faster with it at 4 sequences (20.64 against 20.62
        ms) and one (1.004x (w8) / 1.005x (w4) faster with the page tile); at 8 sequences the bf16 step took 21.40 ms
        with the half-page tile against 24.83 (run 260; ``stage_l1_batch``).
        Where no staged tile leaves that L1, the verify step's kernel reads K / V from global memory and the decode
        step's keeps the first staged tile that stays resident (its folded prep needs one; the global-memory kernel
        would put ``attn_prep`` back into the decode step).
        ``batch``: the step's rows (sequences of a decode step; a verify step's tokens).

        Raises:
            PlanError: a forced staged kernel whose shared memory exceeds the target's opt-in limit."""
        tile = None
        if self.fuse_prep is True:
            staged = True  # the folded prep needs the staged tile (spec() names what else it needs)
        elif self.stage_kv == "auto":
            staged = False
            rule, resident = self.l1_rule(prep, batch), []
            for t in self.tile_candidates(problem, prep, batch) if problem.kv_dtype == "bf16" else ():
                spec, dyn = self.spec(problem, True, prep=prep, tile=t), self.dynamic_smem_bytes(problem, True, t)
                if ctx.resources_of(spec).static_smem_bytes + dyn > ctx.arch.max_smem_per_cta_optin:
                    continue
                occ = ctx.occupancy(spec, dyn)
                if occ.ctas_per_sm < self.stage_min_resident:
                    continue
                resident.append(t)
                if not rule or l1_left(ctx.arch, occ) >= self.stage_l1_keep:
                    staged, tile = True, t
                    break
            if not staged and prep and resident:  # the decode step's kernel stays staged (the fused prep needs it)
                staged, tile = True, resident[0]
        else:
            staged = self.stage_kv
        spec, dyn = self.spec(problem, staged, prep=prep, tile=tile), self.dynamic_smem_bytes(problem, staged, tile)
        if dyn:
            _check_smem(self.name, spec, ctx, dyn, f"the staged K/V tile ({self.tile_keys(problem, tile)} keys x "
                                                   f"head_dim {problem.head_dim}, {problem.kv_dtype})")
        return spec, dyn

    def spec(self, problem: AttentionProblem, staged: bool | None = None, prep: bool = True,
             tile: int | None = None) -> KernelSpec:
        """The kernel for ``problem``: staged (``staged``; None: ``stage_kv is True``) with tiles of
        :meth:`tile_keys` (``tile``) keys, or not; with the prep folded in where :meth:`fused_prep` says so, unless
        ``prep`` is False (then never).

        Raises:
            PlanError: ``threads`` and the P.V column units (bf16: hd/2 pairs; int8: hd/4 quads) do not
                divide one another.
        """
        staged = self._staged(staged)
        if self.fuse_prep is True and prep:
            for ok, what in ((staged, "the global-memory kernel (it needs the staged tile)"),
                             (problem.kv_dtype == "bf16", f"{problem.kv_dtype} KV pages (bf16 only)"),
                             (not self.stage_mma, "stage_mma")):
                if not ok:
                    raise PlanError(f"{self.name}: fuse_prep cannot take {what}")
        if staged and self.stage_mma and problem.kv_dtype == "bf16":
            t, warps = self.tile_keys(problem, tile), self.threads // WARP
            for ok, what in ((problem.groups <= 8, f"{problem.groups} q heads per KV head (at most 8)"),
                             (problem.head_dim % 64 == 0, f"head_dim {problem.head_dim} (a multiple of 64)"),
                             (t % (8 * warps) == 0 and t % 16 == 0,
                              f"a tile of {t} keys over {warps} warps (a multiple of {max(8 * warps, 16)})"),
                             (problem.head_dim % (8 * warps) == 0,
                              f"head_dim {problem.head_dim} over {warps} warps (a multiple of {8 * warps})")):
                if not ok:
                    raise PlanError(f"{self.name}: stage_mma cannot take {what}")
        what, units = ("head_dim / 2", problem.head_dim // 2) if problem.kv_dtype == "bf16" else \
            ("head_dim / 4", problem.head_dim // 4)
        if (self.threads % units) if self.threads >= units else (units % self.threads):
            raise PlanError(f"{self.name}: threads = {self.threads} and {what} = {units} must divide one another")
        params = {**_shape_params(problem), "page": problem.page_size, "threads": self.threads,
                  **_kv_params(problem), **({"balance": self.granule(problem)} if self.granule(problem) else {}),
                  **({"stage": True} if staged else {}),
                  **({"tile": self.tile_keys(problem, tile)}
                     if staged and self.tile_keys(problem, tile) != problem.page_size else {}),
                  **({"min_ctas": self.stage_min_ctas} if staged and self.stage_min_ctas and
                     problem.kv_dtype == "bf16" else {}),
                  **({"mma": True} if staged and self.stage_mma and problem.kv_dtype == "bf16" else {}),
                  **({"prep": True, "rot": problem.rotary_dim} if prep and self.fused_prep(problem, staged) else {})}
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=False)

    def fused_prep(self, problem: AttentionProblem, staged: bool | None = None) -> bool:
        """Whether the decode kernel for ``problem`` (staged: ``staged``; None: ``stage_kv is True``) computes its
        own q and new K / V row (``fuse_prep``: True, or "auto" and a staged bf16 kernel without ``stage_mma``)."""
        if self.fuse_prep == "auto":
            return self._staged(staged) and problem.kv_dtype == "bf16" and not self.stage_mma
        return self.fuse_prep is True

    def arg_names(self, problem: AttentionProblem, spec: KernelSpec | None = None) -> tuple[str, ...]:
        """Kernel parameters in order (see the module docstring) of ``spec`` (None: the kernel :meth:`spec` gives
        for ``problem``); int8 KV adds ``k_scales, v_scales`` after ``v_pages``; a fused-prep kernel (template
        ``prep``) takes ``proj, q_norm_w, k_norm_w, inv_freq`` instead of ``q`` and appends ``eps``."""
        if dict((spec or self.spec(problem)).params).get("prep"):
            return ("proj", "q_norm_w", "k_norm_w", "inv_freq", *_kv_args(problem), "page_table", "seq_ctx", "ws",
                    "n_seqs", "max_pages", "splits", "pages_per_split", "scale", "eps")
        return ("q", *_kv_args(problem), "page_table", "seq_ctx", "ws", "n_seqs", "max_pages", "splits",
                "pages_per_split", "scale")

    def splits(self, problem: AttentionProblem, batch: int, ctx: PlanContext, prep: bool = True) -> tuple[int, int]:
        """(splits, pages_per_split) for B = ``batch`` sequences (or verify rows) at ``problem.max_context`` (module
        docstring: the split rule), for the kernel :meth:`choose` gives with ``prep``. Depends only on (problem, B,
        target, SM count), never on the current contexts.

        Raises:
            PlanError: B < 1, or the decode kernel cannot be resident on this target.
        """
        if batch < 1:
            raise PlanError(f"{self.name}: B = {batch} must be at least 1")
        spec, dyn = self.choose(problem, ctx, prep, batch)
        occ = ctx.occupancy(spec, dyn)
        if occ.ctas_per_sm < 1:
            raise PlanError(f"{spec.uri} on {ctx.arch.name}: 0 resident CTAs per SM (limited by {occ.limiter})")
        pages = problem.max_pages
        fill = occ.ctas_per_sm * ctx.sms
        want = max(1, fill // (batch * problem.heads_kv), _cdiv(pages, self.max_pages_per_split))
        want = min(want, pages)
        per = _cdiv(pages, want)
        return _cdiv(pages, per), per

    def workspace_bytes(self, problem: AttentionProblem, batch: int, splits: int) -> int:
        """fp32 partials: B*Hq*splits*hd outputs + B*Hq*splits*2 (max, sum), times 4 bytes."""
        return 4 * batch * problem.heads_q * splits * (problem.head_dim + 2)

    def launch(self, problem: AttentionProblem, tokens: int, ctx: PlanContext, prep: bool = True) -> Launch:
        """Grid (splits, Hkv, B) with B = ``tokens``; ``split_k`` = splits; workspace as above. ``prep=False``:
        the kernel without the folded prep (:meth:`verify_launch`).

        Raises:
            PlanError: B < 1 or over the grid-z limit; the kernel cannot be resident.
        """
        splits, _ = self.splits(problem, tokens, ctx, prep)
        if tokens > ctx.arch.max_grid_dims[2]:
            raise PlanError(f"{self.name} on {ctx.arch.name}: B = {tokens} exceeds the grid z limit "
                            f"{ctx.arch.max_grid_dims[2]}")
        spec, dyn = self.choose(problem, ctx, prep, tokens)
        return ctx.make_launch(spec, (splits, problem.heads_kv, int(tokens)), route="split_kv",
                               tokens=tokens, split_k=splits, dynamic_smem=dyn,
                               workspace_bytes=self.workspace_bytes(problem, tokens, splits))

    def verify_launch(self, problem: AttentionProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The speculative verify step's attention (and a multi-token step's, T <= K + 1 per sequence): every
        token of the step is one row of the split-KV kernel, with its own context (its position + 1) and its
        sequence's page-table row (the batch metadata ``tok_ctx`` / ``tok_pages``), so a sequence's K + 1 queries
        are split over the keys like K + 1 decode rows instead of one ``attn_prefill`` CTA per query head walking
        the whole context. The kernel is never the fused-prep one: ``attn_prep`` has written every token's K / V
        row before any row reads them (a row's own CTA would write its key while the next row's reads it). Grid
        (splits, Hkv, T) as :meth:`launch` with B = T.

        Raises:
            PlanError: as :meth:`launch`."""
        return self.launch(problem, tokens, ctx, prep=False)

    def kernel_args(self, problem: AttentionProblem, launch: Launch, arrays: Mapping[str, Any],
                    pages_per_split: int) -> tuple:
        """Argument tuple in :meth:`arg_names` order; ``n_seqs`` = launch.tokens, ``splits`` =
        launch.split_k, ``max_pages``, ``scale`` and ``pages_per_split`` filled in unless given."""
        scalars = {"n_seqs": np.int32(launch.tokens), "max_pages": np.int32(problem.max_pages),
                   "splits": np.int32(launch.split_k), "pages_per_split": np.int32(pages_per_split),
                   "scale": problem.scale, "eps": np.float32(problem.eps)}
        return _args(self.arg_names(problem, launch.kernel), arrays, scalars)


class AttnCombineFamily(_OneKernelFamily):
    """``attn_combine``: merges ``attn_decode``'s splits, applies the sigmoid gate, writes bf16.

    Its launch uses the same split rule as ``attn_decode`` (through ``decode``), so its
    :meth:`variants` include the decode kernel: the plan then has that kernel's resources even when
    the combine is planned on its own.

    Args:
        threads: threads per CTA.
        decode: the decode family whose split rule this combine follows.
        dim_ctas: CTAs per head along head_dim (template ``dctas``; 1 = one CTA per head whose threads each walk
            every live split): more CTAs, and several threads per column over disjoint subsets of the splits, so
            each thread's chain of dependent partial loads is ``dim_ctas`` x threads / head_dim times shorter.
            Default 4: on the H200 the 27B w8 step is 1.0063x faster at 512 of 8,248 tokens and 1.0015x at 8,192
            than with one CTA per head; 8 was 1.0074x at 512 but 0.983x at 8,192 (bench/NOTES.md run 124).
            The parts (head_dim / dim_ctas columns) must divide ``threads``; :meth:`spec` refuses other values.

    Raises:
        PlanError: ``threads`` not a positive multiple of 32; ``dim_ctas`` < 1.
    """

    name = "attn_combine"
    template = "attn_combine.cu.j2"

    def __init__(self, threads: int = 128, decode: AttnDecodeFamily | None = None, dim_ctas: int = 4):
        _check_threads(self.name, threads)
        if dim_ctas < 1:
            raise PlanError(f"{self.name}: dim_ctas = {dim_ctas} must be >= 1")
        self.threads = int(threads)
        self.decode = decode or AttnDecodeFamily()
        self.dim_ctas = int(dim_ctas)

    def spec(self, problem: AttentionProblem) -> KernelSpec:
        """The kernel for ``problem``.

        Raises:
            PlanError: ``dim_ctas`` > 1 does not split head_dim into parts of a size dividing ``threads``."""
        params = {**_shape_params(problem), "threads": self.threads}
        if self.dim_ctas > 1:
            cols = problem.head_dim // self.dim_ctas
            if problem.head_dim % self.dim_ctas or cols > self.threads or self.threads % cols:
                raise PlanError(f"{self.name}: dim_ctas = {self.dim_ctas} must split head_dim {problem.head_dim} into "
                                f"parts whose size divides threads = {self.threads}")
            params["dctas"] = self.dim_ctas
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=False)

    def variants(self, problem: AttentionProblem) -> list[KernelSpec]:
        """[combine kernel, the decode kernel whose split count it needs]."""
        return [self.spec(problem), *self.decode.variants(problem)]

    def sample_problems(self) -> list[AttentionProblem]:
        """Tiny-fixture and 27B shapes."""
        return _sample_problems()

    def arg_names(self, problem: AttentionProblem) -> tuple[str, ...]:
        """Kernel parameters in order (see the module docstring)."""
        return ("ws", "proj", "out", "n_seqs", "splits")

    def dynamic_smem_bytes(self, splits: int) -> int:
        """Dynamic shared memory of the combine: one fp32 weight per split."""
        return 4 * int(splits)

    def launch(self, problem: AttentionProblem, tokens: int, ctx: PlanContext, prep: bool = True) -> Launch:
        """Grid (Hq * dim_ctas, B) with B = ``tokens``; dynamic smem = 4 * splits (of the decode launch with
        ``prep``: False after :meth:`AttnDecodeFamily.verify_launch`).

        Raises:
            PlanError: the split count at ``problem.max_context`` needs more shared memory than the
                arch's opt-in maximum (names kernel, target, max_context, value and limit); B over the
                grid-y limit.
        """
        splits, _ = self.decode.splits(problem, tokens, ctx, prep)
        spec = self.spec(problem)
        dyn = self.dynamic_smem_bytes(splits)
        _check_smem(self.name, spec, ctx, dyn,
                    f"max_context {problem.max_context} ({problem.max_pages} pages of {problem.page_size}) "
                    f"at B = {tokens} -> {splits} splits")
        if tokens > ctx.arch.max_grid_dims[1]:
            raise PlanError(f"{self.name} on {ctx.arch.name}: B = {tokens} exceeds the grid y limit "
                            f"{ctx.arch.max_grid_dims[1]}")
        return ctx.make_launch(spec, (problem.heads_q * self.dim_ctas, int(tokens), 1), route="combine", tokens=tokens,
                               split_k=splits, dynamic_smem=dyn)

    def kernel_args(self, problem: AttentionProblem, launch: Launch, arrays: Mapping[str, Any]) -> tuple:
        """Argument tuple in :meth:`arg_names` order; ``n_seqs`` and ``splits`` from the launch."""
        scalars = {"n_seqs": np.int32(launch.tokens), "splits": np.int32(launch.split_k)}
        return _args(self.arg_names(problem), arrays, scalars)


# ------------------------------------------------------------------------------------------------
# attn_prefill
# ------------------------------------------------------------------------------------------------


PREFILL_ROUTES = ("mma", "simt")
"""Routes of ``attn_prefill``: tensor cores (mma.sync m16n8k16 bf16, q and P split into bf16 hi + lo) or CUDA
cores (fp32 dot products)."""


def prefill_smem_bytes(problem: AttentionProblem, qtile: int, ktile: int, route: str = "simt") -> int:
    """Dynamic shared memory of ``attn_prefill`` (mirrors the template's layout).

    bf16 KV -- simt: q tile fp32 [qtile, hd] + K tile bf16 [ktile, hd + 8] + V tile bf16 [ktile, hd] +
    probabilities fp32 [qtile, ktile] + per-row factors fp32 [qtile].  mma: q hi and q lo bf16
    [qtile, hd + 8] each + one K-then-V tile bf16 [ktile, hd + 8].

    int8 KV -- simt: as bf16 with the K tile int8 [ktile, hd + 8] and the V tile int8 [ktile, hd], plus
    the K and V scales fp32 [ktile, hd / 64] each.  mma: as bf16 (the K/V tile holds the codes as exact
    bf16) plus the K and V scales fp32 [ktile, hd / 64] each.
    """
    hd = problem.head_dim
    scales = 2 * ktile * problem.kv_groups * 4
    if route == "mma":
        return 2 * qtile * (hd + 8) * 2 + ktile * (hd + 8) * 2 + scales
    if problem.kv_dtype == "int8":
        return qtile * hd * 4 + ktile * (hd + 8) + ktile * hd + scales + qtile * ktile * 4 + qtile * 4
    return qtile * hd * 4 + ktile * (hd + 8) * 2 + ktile * hd * 2 + qtile * ktile * 4 + qtile * 4


class AttnPrefillFamily:
    """``attn_prefill``: causal attention of T query tokens per sequence over the paged context.

    Routes (tried in ``routes`` order; the first whose shared memory fits the arch's opt-in maximum and
    that has a resident CTA per SM is launched):

    * ``mma``: tensor cores; a warp owns 16 query rows end to end, so qtile = 16 * threads / 32;
      ``mma_ktile`` keys per K/V tile.
    * ``simt``: CUDA cores; ``qtile`` query rows and ``ktile`` keys per tile.

    Args:
        threads: threads per CTA (both routes).
        qtile: simt query rows per CTA (multiple of threads / 32).
        ktile: simt keys per tile (multiple of 32 dividing the page size).
        mma_ktile: mma keys per tile (multiple of 16 dividing the page size).
        routes: route preference order, a non-empty subset of :data:`PREFILL_ROUTES`.
    """

    name = "attn_prefill"
    template = "attn_prefill.cu.j2"

    def __init__(self, threads: int = 128, qtile: int = 16, ktile: int = 32, mma_ktile: int = 32,
                 routes: tuple[str, ...] = PREFILL_ROUTES):
        _check_threads(self.name, threads)
        if qtile <= 0 or qtile % (threads // WARP) or ktile <= 0 or ktile % WARP or mma_ktile <= 0 or mma_ktile % 16:
            raise PlanError(f"{self.name}: qtile = {qtile} must be a multiple of warps = {threads // WARP}, "
                            f"ktile = {ktile} a multiple of {WARP} and mma_ktile = {mma_ktile} a multiple of 16")
        if not routes or any(r not in PREFILL_ROUTES for r in routes):
            raise PlanError(f"{self.name}: routes {routes!r} must be a non-empty subset of {PREFILL_ROUTES}")
        self.threads, self.qtile, self.ktile, self.mma_ktile = int(threads), int(qtile), int(ktile), int(mma_ktile)
        self.routes = tuple(routes)

    def tiles(self, route: str) -> tuple[int, int]:
        """(query rows, keys) per CTA tile of ``route``."""
        if route == "mma":
            return 16 * (self.threads // WARP), self.mma_ktile
        return self.qtile, self.ktile

    def spec(self, problem: AttentionProblem, route: str = "simt") -> KernelSpec:
        """The kernel of ``route`` for ``problem``.

        Raises:
            PlanError: unknown route, ktile does not divide the page size, or (simt) qtile*hd/2 is not a
                multiple of threads.
        """
        if route not in PREFILL_ROUTES:
            raise PlanError(f"{self.name}: unknown route {route!r}; routes: {', '.join(PREFILL_ROUTES)}")
        qtile, ktile = self.tiles(route)
        if problem.page_size % ktile:
            raise PlanError(f"{self.name}: ktile = {ktile} must divide page_size = {problem.page_size}")
        if route == "simt" and (qtile * problem.head_dim // 2) % self.threads:
            raise PlanError(f"{self.name}: qtile * head_dim / 2 = {qtile * problem.head_dim // 2} must be a "
                            f"multiple of threads = {self.threads}")
        params = {**_shape_params(problem), "page": problem.page_size, "qtile": qtile, "ktile": ktile,
                  "route": route, "threads": self.threads, **_kv_params(problem)}
        return KernelSpec.make(self.name, self.template, params, self.threads, cooperative=False)

    def variants(self, problem: AttentionProblem) -> list[KernelSpec]:
        """One kernel per route in :attr:`routes`."""
        return [self.spec(problem, r) for r in self.routes]

    def sample_problems(self) -> list[AttentionProblem]:
        """Tiny-fixture and 27B shapes."""
        return _sample_problems()

    def arg_names(self, problem: AttentionProblem) -> tuple[str, ...]:
        """Kernel parameters in order (same for both routes; see the module docstring); int8 KV adds
        ``k_scales, v_scales`` after ``v_pages``."""
        return ("q", "proj", *_kv_args(problem), "tok_pos", "seq_start", "page_table", "out", "max_pages",
                "scale")

    def dynamic_smem_bytes(self, problem: AttentionProblem, route: str = "simt") -> int:
        """:func:`prefill_smem_bytes` for ``route``'s tiles."""
        qtile, ktile = self.tiles(route)
        return prefill_smem_bytes(problem, qtile, ktile, route)

    def launch(self, problem: AttentionProblem, tokens: int, ctx: PlanContext, batch: int = 1,
               route: str | None = None) -> Launch:
        """Grid (ceil(T / qtile), Hq, B) for T = ``tokens`` packed tokens of ``batch`` sequences (each
        sequence gets ceil(T / qtile) tile slots; slots past its tokens exit at once). ``route`` forces a
        route; by default the first of :attr:`routes` that fits.

        Raises:
            PlanError: T or B < 1; B over the grid-z limit; no route fits (shared memory over the opt-in
                maximum or no resident CTA), naming each route's need and the limit.
        """
        if tokens < 1 or batch < 1:
            raise PlanError(f"{self.name}: T = {tokens} and B = {batch} must be at least 1")
        if batch > ctx.arch.max_grid_dims[2]:
            raise PlanError(f"{self.name} on {ctx.arch.name}: B = {batch} exceeds the grid z limit "
                            f"{ctx.arch.max_grid_dims[2]}")
        why = []
        for r in ((route,) if route else self.routes):
            spec = self.spec(problem, r)
            dyn = self.dynamic_smem_bytes(problem, r)
            try:
                _check_smem(self.name, spec, ctx, dyn, f"route {r} (head_dim {problem.head_dim}, tiles "
                            f"{self.tiles(r)})")
            except PlanError as exc:
                why.append(str(exc))
                continue
            occ = ctx.occupancy(spec, dyn)
            if occ.ctas_per_sm < 1:
                why.append(f"{spec.uri} on {ctx.arch.name}: 0 resident CTAs per SM (limited by {occ.limiter})")
                continue
            qtile, _ = self.tiles(r)
            return ctx.make_launch(spec, (_cdiv(tokens, qtile), problem.heads_q, int(batch)), route=r,
                                   tokens=tokens, dynamic_smem=dyn)
        raise PlanError("; ".join(why))

    def kernel_args(self, problem: AttentionProblem, launch: Launch, arrays: Mapping[str, Any]) -> tuple:
        """Argument tuple in :meth:`arg_names` order; ``max_pages`` and ``scale`` filled in unless given."""
        scalars = {"max_pages": np.int32(problem.max_pages), "scale": problem.scale}
        return _args(self.arg_names(problem), arrays, scalars)


def _args(names: Sequence[str], arrays: Mapping[str, Any], scalars: Mapping[str, Any]) -> tuple:
    missing = [n for n in names if n not in arrays and n not in scalars]
    if missing:
        raise PlanError(f"kernel arguments missing: {', '.join(missing)} (expected {', '.join(names)})")
    return tuple(arrays[n] if n in arrays else scalars[n] for n in names)


_DECODE = AttnDecodeFamily()
FAMILIES = [AttnPrepFamily(), _DECODE, AttnCombineFamily(decode=_DECODE), AttnPrefillFamily()]
"""Default instances of the four families (registered by ``ninferc.targets.kernels`` discovery)."""


# ------------------------------------------------------------------------------------------------
# numpy references on the paged layout (fp32 math on bf16-stored K/V)
# ------------------------------------------------------------------------------------------------


def round_bf16(x) -> np.ndarray:
    """fp32 array rounded to the nearest bf16 (ties to even), returned as fp32."""
    import ml_dtypes

    return np.asarray(x, F32).astype(ml_dtypes.bfloat16).astype(F32)


def bf16_bits(x) -> np.ndarray:
    """fp32 values -> uint16 bf16 bit patterns (round to nearest even), the kernels' storage."""
    import ml_dtypes

    return np.asarray(x, F32).astype(ml_dtypes.bfloat16).view(np.uint16)


def from_bf16_bits(u) -> np.ndarray:
    """uint16 bf16 bit patterns -> fp32 (exact)."""
    return (np.asarray(u, np.uint16).astype(np.uint32) << 16).view(F32)


def _page_slot(problem: AttentionProblem, page_table: np.ndarray, b: int, pos: int) -> tuple[int, int]:
    lp = int(pos) // problem.page_size
    if not 0 <= lp < problem.max_pages:
        raise PlanError(f"position {pos} of sequence {b} is outside its page table "
                        f"({problem.max_pages} pages of {problem.page_size})")
    return int(page_table[b, lp]), int(pos) % problem.page_size


_TINY = np.finfo(F32).tiny  # smallest normal fp32, 2**-126


def quantize_kv(x) -> tuple[np.ndarray, np.ndarray]:
    """The int8 KV quantiser (module docstring, "int8 KV cache"), bit-exact with ``attn_prep``'s on the
    same fp32 input.

    Args:
        x: [..., hd] values (converted to fp32), hd % 64 == 0; one group = 64 consecutive elements of the
            last axis.

    Returns:
        (codes int8 [..., hd] in [-127, 127], scales fp32 [..., hd / 64] > 0):
        ``scale = fl32(max|x| / 127)`` (1 where that is below the fp32 normal range),
        ``code = clip(rint(fl32(x / scale)), -127, 127)`` (round half to even).

    Raises:
        PlanError: the last axis is not a multiple of 64.
    """
    x = np.asarray(x, F32)
    hd = x.shape[-1]
    if hd % KV_GROUP:
        raise PlanError(f"int8 KV: the last axis ({hd}) must be a multiple of {KV_GROUP}")
    xg = x.reshape(x.shape[:-1] + (hd // KV_GROUP, KV_GROUP))
    amax = np.max(np.abs(xg), axis=-1)                               # exact
    scale = (amax / F32(127)).astype(F32)                             # fl32(max|x| / 127)
    scale = np.where(scale < _TINY, F32(1), scale).astype(F32)       # zero / subnormal -> 1 (codes 0)
    quot = (xg / scale[..., None]).astype(F32)                        # fl32(x / scale)
    codes = np.clip(np.rint(quot), -127, 127).astype(np.int8)        # round half to even, clip
    return codes.reshape(x.shape), scale


def dequantize_kv(codes, scales) -> np.ndarray:
    """fp32 [..., hd] = fl32(code * scale) of int8 KV codes [..., hd] and scales [..., hd / 64] (what the
    decode and simt prefill kernels load; the mma route applies the same scales outside its products)."""
    codes = np.asarray(codes)
    scales = np.asarray(scales, F32)
    per = np.repeat(scales, KV_GROUP, axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):  # garbage rows of free pages may hold NaN / Inf
        return (codes.astype(F32) * per).astype(F32)


class Int8Pages(NamedTuple):
    """One of K / V of an int8 paged KV cache in numpy (the device pool's two arrays).

    Attributes:
        codes: int8 [num_pages, Hkv, P, hd].
        scales: fp32 [num_pages, Hkv, P, hd / 64].
    """

    codes: np.ndarray
    scales: np.ndarray

    def copy(self) -> "Int8Pages":
        """Deep copy (the references never modify their inputs)."""
        return Int8Pages(np.array(self.codes, np.int8), np.array(self.scales, F32))

    def dequantize(self, pages=None) -> np.ndarray:
        """fp32 [n, Hkv, P, hd] of the pages ``pages`` (int indices; all pages when None)."""
        if pages is None:
            return dequantize_kv(self.codes, self.scales)
        return dequantize_kv(self.codes[pages], self.scales[pages])


def _check_pages(problem: AttentionProblem, pages) -> None:
    want = Int8Pages if problem.kv_dtype == "int8" else np.ndarray
    if not isinstance(pages, want):
        raise PlanError(f"kv_dtype {problem.kv_dtype!r}: pages must be {want.__name__}, got {type(pages).__name__}")


def _copy_pages(problem: AttentionProblem, pages):
    _check_pages(problem, pages)
    return pages.copy() if problem.kv_dtype == "int8" else np.array(pages, F32)


def paged_scatter(problem: AttentionProblem, k_pages, v_pages, page_table: np.ndarray,
                  tok_seq, tok_pos, k: np.ndarray, v: np.ndarray) -> None:
    """Write k, v [T, Hkv, hd] (fp32) into the pages at each token's
    (page_table[tok_seq[t], pos // P], :, pos % P), in place.

    bf16: ``k_pages`` / ``v_pages`` are fp32 arrays [num_pages, Hkv, P, hd] holding bf16 values; k and v
    are rounded to bf16. int8: they are :class:`Int8Pages`; each row is quantised with
    :func:`quantize_kv` from the fp32 value (no bf16 rounding first) and its codes and scales written.

    Raises:
        PlanError: a position outside the sequence's page table; pages of the wrong kind for kv_dtype.
    """
    _check_pages(problem, k_pages)
    _check_pages(problem, v_pages)
    if problem.kv_dtype == "int8":
        (kc, ks), (vc, vs) = quantize_kv(k), quantize_kv(v)
    else:
        k, v = round_bf16(k), round_bf16(v)
    for t, (b, pos) in enumerate(zip(np.asarray(tok_seq), np.asarray(tok_pos))):
        page, row = _page_slot(problem, page_table, int(b), int(pos))
        if problem.kv_dtype == "int8":
            k_pages.codes[page, :, row], k_pages.scales[page, :, row] = kc[t], ks[t]
            v_pages.codes[page, :, row], v_pages.scales[page, :, row] = vc[t], vs[t]
        else:
            k_pages[page, :, row] = k[t]
            v_pages[page, :, row] = v[t]


def gather_kv(problem: AttentionProblem, k_pages, v_pages, page_table: np.ndarray,
              b: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous (K, V) [length, Hkv, hd] fp32 of sequence b, positions 0..length-1, read through the
    page table: the layout of :class:`ninferc.ir.reference.SequenceState` ``kv`` entries. Pages as in
    :func:`paged_scatter`; int8 pages are dequantised (:func:`dequantize_kv`).

    Raises:
        PlanError: length beyond the page table; pages of the wrong kind for kv_dtype.
    """
    if length > problem.max_context:
        raise PlanError(f"context {length} of sequence {b} exceeds max_context {problem.max_context}")
    _check_pages(problem, k_pages)
    _check_pages(problem, v_pages)
    P = problem.page_size
    n = _cdiv(length, P)
    pages = np.asarray(page_table[b, :n], np.int64)
    if problem.kv_dtype == "int8":
        Kp, Vp = k_pages.dequantize(pages), v_pages.dequantize(pages)
    else:
        Kp, Vp = np.asarray(k_pages, F32)[pages], np.asarray(v_pages, F32)[pages]
    K = Kp.transpose(0, 2, 1, 3).reshape(n * P, problem.heads_kv, -1)[:length]
    V = Vp.transpose(0, 2, 1, 3).reshape(n * P, problem.heads_kv, -1)[:length]
    return np.ascontiguousarray(K), np.ascontiguousarray(V)


def reference_prep(problem: AttentionProblem, proj: np.ndarray, q_norm_w: np.ndarray, k_norm_w: np.ndarray,
                   tok_pos, tok_seq, page_table: np.ndarray, k_pages, v_pages):
    """``attn_prep`` in numpy.

    Args:
        proj: [T, Dp] fp32; q_norm_w, k_norm_w: [hd] fp32 (zero-centred); tok_pos, tok_seq: [T] ints;
        page_table: [B, max_pages] ints; k_pages, v_pages: bf16 -- fp32 [num_pages, Hkv, P, hd]; int8 --
        :class:`Int8Pages` (not modified).

    Returns:
        (q_out [T, Hq, hd] fp32, k_pages', v_pages') -- copies of the pages with this step's rows written
        (int8: the fp32 k after RMSNorm + RoPE and the fp32 v quantised by :func:`quantize_kv`).

    Raises:
        PlanError: pages of the wrong kind for kv_dtype; a position outside its page table.
    """
    q, _, k, v = problem.split_proj(np.asarray(proj, F32))
    pos = np.asarray(tok_pos, np.int64)
    qn = ref_partial_rope(ref_rmsnorm(q, q_norm_w, problem.eps, True), pos, problem.rotary_dim, problem.theta)
    kn = ref_partial_rope(ref_rmsnorm(k, k_norm_w, problem.eps, True), pos, problem.rotary_dim, problem.theta)
    kp, vp = _copy_pages(problem, k_pages), _copy_pages(problem, v_pages)
    paged_scatter(problem, kp, vp, page_table, tok_seq, pos, kn, v)
    return qn.astype(F32), kp, vp


def reference_attention(problem: AttentionProblem, q: np.ndarray, proj: np.ndarray, k_pages: np.ndarray,
                        v_pages: np.ndarray, page_table: np.ndarray, tok_pos, seq_start) -> np.ndarray:
    """Gated causal attention of every token over its sequence's paged context (decode and prefill).

    Args:
        q: [T, Hq, hd] fp32 (attn_prep's q_out); proj: [T, Dp] fp32 (for the gate);
        k_pages, v_pages: fp32 [num_pages, Hkv, P, hd] (bf16 values) or :class:`Int8Pages` (int8 KV: read
        dequantised, fl32(code * scale)); page_table: [B, max_pages];
        tok_pos: [T]; seq_start: [B+1] (decode: arange(B+1), tok_pos = seq_ctx - 1).

    Returns:
        [T, Hq*hd] fp32 = ref_attention(q, K, V) * sigmoid(gate), before the kernels' bf16 rounding;
        token t at position p attends to positions 0..p of its sequence.
    """
    q = np.asarray(q, F32)
    _, gate, _, _ = problem.split_proj(np.asarray(proj, F32))
    pos = np.asarray(tok_pos, np.int64)
    ss = np.asarray(seq_start, np.int64)
    T = q.shape[0]
    out = np.zeros((T, problem.heads_q * problem.head_dim), F32)
    for b in range(len(ss) - 1):
        a, e = int(ss[b]), int(ss[b + 1])
        if e <= a:
            continue
        L = int(pos[a:e].max()) + 1
        K, V = gather_kv(problem, k_pages, v_pages, page_table, b, L)
        o = ref_attention(q[a:e], K, V, pos[a:e], float(problem.scale), problem.groups)
        out[a:e] = (o.reshape(e - a, -1) * _sigmoid(gate[a:e].reshape(e - a, -1))).astype(F32)
    return out


def split_keys(ctx: int, splits: int, max_keys: int, granule: int, page: int) -> int:
    """Keys per split of ``attn_decode`` (``ninfer_attn::split_keys`` in attn_common.cuh, the same integer math).

    Args:
        ctx: the sequence's context (keys) this step, >= 1.
        splits: the launch's split count (``gridDim.x``).
        max_keys: ``pages_per_split * page`` (what a page-aligned split covers).
        granule: the kernel's ``balance`` (keys); 0 = page-aligned splits.
        page: the KV page size P (tokens).

    Returns:
        ``max_keys`` when ``granule`` is 0; else ``n = ceil(ctx / splits)`` rounded up to ``granule * 2**i`` while
        that divides ``page`` (so no split's key range crosses a page), otherwise to a multiple of ``page``; capped
        at ``max_keys``. ``splits * result >= ctx`` whenever ``splits * max_keys >= ctx``.
    """
    if granule <= 0:
        return max_keys
    per = -(-ctx // splits)
    k = granule
    if page % k == 0:
        while k < per and page % (2 * k) == 0:
            k *= 2
    if k < per or page % k:
        k = -(-per // page) * page
    return min(k, max_keys)


def reference_decode_partials(problem: AttentionProblem, q: np.ndarray, k_pages: np.ndarray, v_pages: np.ndarray,
                              page_table: np.ndarray, seq_ctx, splits: int, pages_per_split: int, balance: int = 0):
    """``attn_decode``'s workspace in numpy (for diagnosing decode vs combine on the GPU); pages as in
    :func:`reference_attention`; ``balance`` is the kernel's keys granule (:func:`split_keys`).

    Returns:
        (o [B, Hq, splits, hd], ml [B, Hq, splits, 2]) fp32: unnormalised sum_j exp(s_j - m) v_j, and
        (m, l) = (max score, sum_j exp(s_j - m)) over the split's keys; empty splits give (-inf, 0), o = 0.
    """
    q = np.asarray(q, F32)
    B = len(seq_ctx)
    Hq, hd, G = problem.heads_q, problem.head_dim, problem.groups
    o = np.zeros((B, Hq, splits, hd), F32)
    ml = np.zeros((B, Hq, splits, 2), F32)
    ml[..., 0] = -np.inf
    for b in range(B):
        ctx = int(seq_ctx[b])
        span = split_keys(ctx, splits, pages_per_split * problem.page_size, balance, problem.page_size)
        K, V = gather_kv(problem, k_pages, v_pages, page_table, b, ctx)
        for s in range(splits):
            lo, hi = s * span, min(ctx, (s + 1) * span)
            if hi <= lo:
                continue
            for h in range(Hq):
                sc = (K[lo:hi, h // G] @ q[b, h]).astype(F32) * problem.scale
                m = sc.max()
                p = np.exp(sc - m).astype(F32)
                o[b, h, s] = p @ V[lo:hi, h // G]
                ml[b, h, s] = (m, p.sum(dtype=F32))
    return o, ml


def reference_combine(problem: AttentionProblem, o: np.ndarray, ml: np.ndarray, proj: np.ndarray) -> np.ndarray:
    """``attn_combine`` in numpy: merge (o [B, Hq, S, hd], ml [B, Hq, S, 2]) and apply the gate.

    Returns:
        [B, Hq*hd] fp32 = (sum_s w_s o_s) / (sum_s w_s l_s) * sigmoid(gate), w_s = exp(m_s - max m)
        (0 for empty splits); token b of proj is sequence b. Before the kernel's bf16 rounding.
    """
    m, l = ml[..., 0], ml[..., 1]
    M = m.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        w = np.where(np.isneginf(m), F32(0), np.exp(m - M)).astype(F32)  # [B, Hq, S]
    num = np.einsum("bhs,bhsd->bhd", w, o.astype(F32))
    den = (w * l).sum(axis=-1, dtype=F32)[..., None]
    B = o.shape[0]
    _, gate, _, _ = problem.split_proj(np.asarray(proj, F32)[:B])
    return ((num / den).reshape(B, -1) * _sigmoid(gate.reshape(B, -1))).astype(F32)
