"""Cooperative split-K GEMV for decode-size token counts (template ``gemv_coop.cu.j2``).

Contract
--------
``acc[T, N_w] = X[T, K] (bf16, row-major) @ W[N_w, K]^T (row-major, nn.Linear layout)`` with fp32
accumulation, then an epilogue into ``Y[T, N]`` (dtypes per templates/README.md: Linear outputs fp32,
the SwiGLU output -- down_proj's input -- bf16):

* ``store``         ``Y = acc``, fp32                                   (N_w = N)
* ``residual_add``  ``Y += acc``, fp32 (Y is the residual stream)         (N_w = N)
* ``swiglu``        W stacks [gate; up] (N_w = 2N): ``Y[:, i] = bf16(silu(acc[:, i]) * acc[:, N + i])``
* ``add_rmsnorm``   ``Y += acc`` as residual_add, then the next layer's RMSNorm of the updated rows into a
  second output: ``XN[t] = bf16(Y[t] / sqrt(mean(Y[t]^2) + eps) * (1 + w))`` (``w`` if not
  ``unit_offset``) -- the ``add_rmsnorm`` of ``rmsnorm.cu.j2`` fused into the GEMV that produces its
  input, so a decode step has no separate norm launch (130 fewer launches per 27B token). Cooperative
  only (route ``coop_norm``), one output per thread (the grid covers ``T * N``; the planner checks it,
  the kernel traps otherwise): after the split-K reduction each CTA adds its outputs into Y and stores
  its sum of squares per token it touches in the workspace (after the split partials); the CTAs that
  hold outputs meet at a second barrier (``ninfer::group_barrier`` on barrier word 1) and each sums the
  partials of its token in CTA order (every CTA gets the same bits) and writes its outputs of ``XN``.
  Same result as the unfused pair up to the order of the sum of squares.

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
The nibble order inside a byte is what the kernel unpacks (two masks), and a 32-element w4 vector starts
at a multiple of 32, so it never straddles a scale group. Interleaved layouts (Marlin-style) exist to feed
tensor-core fragments; this CUDA-core GEMV gains nothing from them.

*Cost.* Per element and row: PRMT + FADD once (the codes of a sub-chunk are dequantised once for all of a
CTA's tokens), plus one FFMA per token. At T = 1 that is about 3.5 (w8) / 7 (w4) lane instructions per
weight byte against bf16's ~1.1, so on a card with many bytes/clock per SM (H200) the w4 kernel may be
issue-bound rather than bandwidth-bound; measure before tuning (bench/). Registers: w8 ~90-98, w4 ~126
per thread (bf16: 60-64), i.e. 2 CTAs of 256 threads per SM; the plan's caps and splits follow.

Kernel shape
------------
A warp owns ``rows_per_warp`` W rows (for swiglu: half gate rows, the matching half up rows) and
streams them along K, one 16-byte vector per lane per step (8 bf16 / 16 int8 / 32 int4 elements; a warp
reads 512 contiguous bytes per row per step);
a CTA of ``threads`` owns ``threads/32 * outputs_per_warp`` outputs (a row block). A CTA handles up
to ``max_tokens`` tokens (a token chunk; for w8 / w4 the family compiles token tiles 1 and 4 and a launch
of T tokens takes the smallest tile >= T, so one-sequence decode runs the one-token kernel; bf16 has the
4-token tile only). The grid is 1-D:
``row_blocks * splits * token_chunks`` CTAs (nothing on y/z, so no 65535 limit applies).

Routes (chosen here, by the plan -- the kernel has no launch constants)
------------------------------------------------------------------------
* ``coop_splitk``: the ``mode=coop`` variant, launched cooperatively. Each CTA reduces one K slice
  into an fp32 workspace ``[splits, T, N_w]``; a grid barrier (``ninfer::grid_barrier``, counter left
  reusable) separates that from the in-kernel reduction + epilogue. ``splits`` = the largest number
  such that ``base * splits <= cap`` where ``base = row_blocks * token_chunks`` and ``cap`` = resident
  CTAs/SM x SMs of that variant, capped at ``K/VEC/32`` with VEC = 8, 16 or 32 K elements per 16-byte
  vector for bf16, w8, w4 (:meth:`GemvCoopFamily.max_splits`: every lane gets at least one 16-byte
  step), so the grid fills one wave of resident CTAs. Used when that gives ``splits >= 2``.
* ``plain``: the ``mode=plain`` variant, non-cooperative, one split, epilogue from registers, no
  workspace and no barrier. Used as soon as no variant fits two splits -- i.e. exactly at the T (or N)
  where ``2 * base > cap`` for every thread-count variant.

Among candidates of the chosen route the variant with the best SM fill wins (coop: ``grid / cap``;
plain: ``grid / (waves * cap)``), ties to fewer threads.

Runtime arguments (:meth:`GemvCoopFamily.arg_names`, :func:`kernel_args`): bf16 ``w, x, y, ws, barrier, k,
n_out, t_total, splits``; w8 / w4 ``w, scales, x, y, ws, barrier, k, n_out, t_total, splits`` -- pointers
then int32.
The barrier counter is one zero-initialised uint32 per stream (left reusable by the kernel); ``ws`` is
``Launch.workspace_bytes`` of scratch (no initialisation needed), unused by ``plain``.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.quant import GROUP_SIZE, QuantTensor
from ninferc.ir.reference import ref_rmsnorm
from ninferc.targets.kernels._weights import WFORMATS, check_weight_k
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

EPILOGUES = ("store", "residual_add", "swiglu", "add_rmsnorm")
MODES = ("coop", "plain")
WARP = 32  # threads per warp on every CUDA architecture
VEC = 8    # bf16 elements per 16-byte load
#: K elements per 16-byte weight load, per weight format
VEC_OF = {"bf16": VEC, "w8": 16, "w4": 32}


@dataclass(frozen=True)
class GemvProblem:
    """One GEMV instance.

    Attributes:
        k: reduction length (columns of X and W); multiple of 8 (bf16), 16 (w8) or 64 (w4).
        n: output features (columns of Y). For swiglu W has 2n rows ([gate; up]).
        epilogue: ``"store" | "residual_add" | "swiglu" | "add_rmsnorm"``.
        wfmt: weight format ``"bf16" | "w8" | "w4"`` (module docstring; :mod:`ninferc.ir.quant`).
        unit_offset: add_rmsnorm only: scale by ``1 + w`` (zero-centred norm weights, the Qwen3.5 default)
            or by ``w``; ignored (and not part of the kernel's identity) for the other epilogues.

    Raises:
        PlanError: unknown weight format, k not a positive multiple of its format's K multiple (the message
            names K, the format and the multiple), n not positive, or an unknown epilogue.
    """

    k: int
    n: int
    epilogue: str = "store"
    wfmt: str = "bf16"
    unit_offset: bool = True

    def __post_init__(self):
        check_weight_k("gemv_coop", self.k, self.wfmt)
        if self.n <= 0:
            raise PlanError(f"gemv_coop: N = {self.n} must be positive")
        if self.epilogue not in EPILOGUES:
            raise PlanError(f"gemv_coop: unknown epilogue {self.epilogue!r}; supported: {', '.join(EPILOGUES)}")

    @property
    def w_rows(self) -> int:
        """Rows of W: 2n for swiglu, else n."""
        return 2 * self.n if self.epilogue == "swiglu" else self.n

    @property
    def fused_norm(self) -> bool:
        """True for the ``add_rmsnorm`` epilogue (cooperative only, extra arguments)."""
        return self.epilogue == "add_rmsnorm"

    def unfused(self) -> "GemvProblem":
        """The same GEMV with a plain ``store`` epilogue instead of ``add_rmsnorm`` (the route taken when
        the fused kernel's cooperative grid does not fit; the norm then runs as its own kernel)."""
        return GemvProblem(self.k, self.n, "store", self.wfmt) if self.fused_norm else self

    @property
    def quantized(self) -> bool:
        """True for w8 / w4 (the kernel takes a ``scales`` argument)."""
        return self.wfmt != "bf16"

    @property
    def k_per_vec(self) -> int:
        """K elements per 16-byte weight vector: 8 (bf16), 16 (w8), 32 (w4)."""
        return VEC_OF[self.wfmt]

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


class GemvCoopFamily:
    """The ``gemv_coop`` kernel family (see module docstring).

    Args:
        threads: thread-count variants (multiples of 32, each <= 1024).
        token_tiles: the ``max_tokens`` variants (tokens per CTA, a template parameter; larger T adds
            token chunks to the grid) of the quantised formats. A launch for T tokens uses the smallest
            tile >= T, else the largest (:meth:`tile_for`): a w8/w4 decode step of one sequence (T = 1)
            gets the one-token kernel, whose single-token accumulators need fewer registers (sm_90, K=5120
            gate|up coop, 256 threads: w8 74 vs 98, w4 92 vs 125). Measured on the H200 (bench/NOTES.md,
            session 2): 27B w8 decode 84.5 -> 106 tok/s, w4 + int8 KV 97 -> 109 tok/s; bf16 did not gain
            (62-65 tok/s either way, within run-to-run spread), so bf16 keeps only the largest tile.
        rows_per_warp: W rows a warp accumulates at once (even), bf16 weights.
        quant_rows_per_warp: the same for w8 / w4 weights. Default 2, from the H200 sweep
            (``bench/gemv_sweep.py``, bench/results/gemv_sweep_h200_4086f82.json; 27B decode shapes, T = 1):
            with 2 rows a w4 warp needs 48 registers instead of 85-94, more warps stay resident to hide
            the dequantisation's ALU latency, and the kernel time drops by 5-26 % (w4 down 41.7 -> 33.1 us,
            gate|up 52.1 -> 46.7 us; w8 down 40.6 -> 34.5 us), while bf16 is mixed (gdn in-projection
            46.7 -> 52.1 us) and keeps 4.
        max_tokens: the largest tile (kept for callers that force one variant: :meth:`spec` and
            :meth:`launch_variant` default to it).
        prefetch_steps: K steps (16 bytes per lane per W row) each warp asks L2 to prefetch before its PDL
            wait (``prefetch.global.L2``; weights are constant); 0 = none. A template parameter only when
            not 1, so the default kernels keep their URI. Default 1 from same-process A/Bs on the H200
            (``bench/prefetch_ab.py``, 27B decode at context 512): bf16 0 -> 1 step 15.06 -> 14.83 ms/token;
            w8 0 / 1 / 2 steps 9.17 / 9.13 / 9.10 ms (within noise), 4 and 8 steps 3.6 % and 16 % slower
            than 1 (bench/results/prefetch_ab_*).
    """

    name = "gemv_coop"
    template = "gemv_coop.cu.j2"

    def __init__(self, threads: tuple[int, ...] = (256, 512), token_tiles: tuple[int, ...] = (1, 4),
                 rows_per_warp: int = 4, quant_rows_per_warp: int = 2, prefetch_steps: int = 1):
        if any(t % WARP or t <= 0 for t in threads) or rows_per_warp % 2 or quant_rows_per_warp % 2 \
                or min(rows_per_warp, quant_rows_per_warp) < 2 or not token_tiles or min(token_tiles) < 1:
            raise PlanError(
                f"gemv_coop: bad family parameters threads={threads} (multiples of {WARP}), "
                f"rows_per_warp={rows_per_warp} and quant_rows_per_warp={quant_rows_per_warp} (even, >= 2), "
                f"token_tiles={token_tiles} (each >= 1)"
            )
        self.quant_rows_per_warp = int(quant_rows_per_warp)
        self.threads = tuple(threads)
        self.token_tiles = tuple(sorted(set(int(t) for t in token_tiles)))
        self.max_tokens = self.token_tiles[-1]
        self.rows_per_warp = int(rows_per_warp)
        if prefetch_steps < 0:
            raise PlanError(f"gemv_coop: prefetch_steps = {prefetch_steps} must be >= 0")
        self.prefetch_steps = int(prefetch_steps)

    def rows_for(self, problem: GemvProblem) -> int:
        """W rows per warp for ``problem``'s weight format (``rows_per_warp`` or ``quant_rows_per_warp``)."""
        return self.quant_rows_per_warp if problem.quantized else self.rows_per_warp

    def tiles(self, problem: GemvProblem) -> tuple[int, ...]:
        """Token tiles compiled for ``problem``: all of ``token_tiles`` for w8 / w4, the largest for bf16."""
        return self.token_tiles if problem.quantized else (self.max_tokens,)

    def tile_for(self, tokens: int, problem: GemvProblem | None = None) -> int:
        """The token tile (``max_tokens`` variant) a launch of T = ``tokens`` uses: the smallest of
        :meth:`tiles` >= T, else the largest."""
        tiles = self.token_tiles if problem is None else self.tiles(problem)
        return next((t for t in tiles if t >= tokens), self.max_tokens)

    # ---- identity ------------------------------------------------------------------------------

    def spec(self, problem: GemvProblem, threads: int, mode: str, max_tokens: int | None = None) -> KernelSpec:
        """The kernel for (epilogue, weight format, threads, mode); K and N are runtime arguments, not
        identity. ``wfmt`` is a parameter only for w8 / w4 (URI ``..._wfmt-w8``), so bf16 kernels keep
        their URI and rendered source.

        Raises:
            PlanError: unknown mode.
        """
        if mode not in MODES:
            raise PlanError(f"gemv_coop: unknown mode {mode!r}; supported: {', '.join(MODES)}")
        params = {
            "threads": threads,
            "max_tokens": self.max_tokens if max_tokens is None else int(max_tokens),
            "rows_per_warp": self.rows_for(problem),
            "epilogue": problem.epilogue,
            "mode": mode,
        }
        if problem.quantized:
            params["wfmt"] = problem.wfmt
        if problem.fused_norm:
            params["unit_offset"] = bool(problem.unit_offset)
        if self.prefetch_steps != 1:
            params["prefetch_steps"] = self.prefetch_steps
        return KernelSpec.make(self.name, self.template, params, threads, cooperative=(mode == "coop"))

    def arg_names(self, problem: GemvProblem) -> tuple[str, ...]:
        """Kernel parameters in order (templates/README.md ABI): pointers w (bf16 [N_w, K]; w8: int8
        [N_w, K]; w4: uint8 [N_w, K/2]), for w8 / w4 only scales (fp32 [N_w] / [N_w, K/64]), x (bf16
        [T, K]), y (fp32 [T, N], bf16 for swiglu), ws (fp32 scratch, ``Launch.workspace_bytes``), barrier
        (uint32 counter, zero-initialised once); int32 k, n_out (= N), t_total (= T), splits
        (= ``Launch.split_k``). ``add_rmsnorm`` names its fp32 output ``h`` (the residual stream, updated in
        place) instead of ``y`` and appends ``norm_w`` (fp32 [N]), ``xn`` (bf16 [T, N]) and float ``eps``;
        its ``barrier`` needs two words."""
        head = ("w", "scales") if problem.quantized else ("w",)
        if problem.fused_norm:
            return (*head, "x", "h", "ws", "barrier", "k", "n_out", "t_total", "splits", "norm_w", "xn", "eps")
        return (*head, "x", "y", "ws", "barrier", "k", "n_out", "t_total", "splits")

    def variants(self, problem: GemvProblem) -> list[KernelSpec]:
        """Every kernel a launch for ``problem`` may use: each token tile x thread count x {coop, plain};
        for add_rmsnorm the cooperative fused kernels plus every variant of :meth:`GemvProblem.unfused`."""
        if problem.fused_norm:
            return ([self.spec(problem, t, "coop", mt) for mt in self.tiles(problem) for t in self.threads]
                    + self.variants(problem.unfused()))
        return [self.spec(problem, t, m, mt) for mt in self.tiles(problem) for t in self.threads for m in MODES]

    def sample_problems(self) -> list[GemvProblem]:
        """One small problem per epilogue and weight format (covers every template parameter value)."""
        return [GemvProblem(256, 704, e, f) for f in WFORMATS for e in EPILOGUES] + [
            GemvProblem(256, 704, "add_rmsnorm", "bf16", unit_offset=False)]

    # ---- geometry ------------------------------------------------------------------------------

    def outputs_per_cta(self, problem: GemvProblem, threads: int) -> int:
        """Outputs (columns of Y) one CTA produces."""
        rw = self.rows_for(problem)
        per_warp = rw // 2 if problem.epilogue == "swiglu" else rw
        return threads // WARP * per_warp

    def row_blocks(self, problem: GemvProblem, threads: int) -> int:
        """CTAs along N: ceil(n / outputs_per_cta)."""
        return -(-problem.n // self.outputs_per_cta(problem, threads))

    def token_chunks(self, tokens: int, tile: int | None = None) -> int:
        """CTAs along T: ceil(T / tile) (default tile: the largest)."""
        return -(-tokens // (self.max_tokens if tile is None else tile))

    def max_splits(self, problem: GemvProblem) -> int:
        """Most K splits that still give every lane at least one 16-byte step per split:
        ``max(1, K / k_per_vec / 32)`` with k_per_vec = 8 (bf16), 16 (w8), 32 (w4)."""
        return max(1, problem.k // problem.k_per_vec // WARP)

    def workspace_bytes(self, problem: GemvProblem, tokens: int, splits: int, threads: int = WARP) -> int:
        """Bytes a coop launch needs: fp32 partial sums [splits, T, w_rows]; add_rmsnorm adds the per-(token,
        CTA) sums of squares, fp32 [T, ceil(T * n / threads)] (``threads``: the kernel's CTA size)."""
        extra = 4 * tokens * -(-tokens * problem.n // threads) if problem.fused_norm else 0
        return 4 * splits * tokens * problem.w_rows + extra

    # ---- route selection -----------------------------------------------------------------------

    def launch(self, problem: GemvProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The launch for T = ``tokens`` on ``ctx`` (see module docstring for the route rule).

        ``add_rmsnorm``: route ``coop_norm``, the fused kernel with the most splits that fit its cooperative cap
        (at least one: the norm needs the grid barrier even without split-K); when no variant's grid of
        ``base`` CTAs fits, the launch of :meth:`GemvProblem.unfused` (``coop_splitk`` or ``plain``: the
        caller then runs the norm as its own kernel, see ``ninferc.targets.lower.drop_unneeded_steps``).

        Raises:
            PlanError: T < 1, or no variant can be resident at all on this target.
        """
        if tokens < 1:
            raise PlanError(f"gemv_coop: T = {tokens} must be at least 1")
        fused = problem.fused_norm
        min_splits = 1 if fused else 2  # the fused norm needs the barriers even without split-K
        tile = self.tile_for(tokens, problem)
        chunks = self.token_chunks(tokens, tile)
        coop, plain = [], []
        for th in self.threads:
            base = self.row_blocks(problem, th) * chunks
            cspec = self.spec(problem, th, "coop", tile)
            cap = ctx.cap(cspec)
            splits = min(cap // base, self.max_splits(problem))
            one_per_thread = not fused or base * splits * th >= tokens * problem.n
            if splits >= min_splits and one_per_thread:
                coop.append((base * splits / cap, -th, cspec, base, splits))
            pspec = None if fused else self.spec(problem, th, "plain", tile)
            pcap = ctx.cap(pspec) if pspec else 0
            if pcap > 0:
                w = -(-base // pcap)
                plain.append((base / (w * pcap), -th, pspec, base, 1))
        if coop:
            _, _, spec, base, splits = max(coop, key=lambda c: (c[0], c[1]))
            return ctx.make_launch(spec, base * splits, route="coop_norm" if fused else "coop_splitk", tokens=tokens,
                                   split_k=splits, workspace_bytes=self.workspace_bytes(problem, tokens, splits,
                                                                                       spec.threads))
        if fused:  # no fused grid fits: the store GEMV, and the norm runs as its own kernel
            return self.launch(problem.unfused(), tokens, ctx)
        if plain:
            _, _, spec, base, _ = max(plain, key=lambda c: (c[0], c[1]))
            return ctx.make_launch(spec, base, route="plain", tokens=tokens)
        raise PlanError(
            f"gemv_coop (K={problem.k}, N={problem.n}, {problem.epilogue}, {problem.wfmt}) on {ctx.arch.name}: "
            f"no variant "
            f"({', '.join(map(str, self.threads))} threads) has a resident CTA per SM"
        )

    def launch_variant(self, problem: GemvProblem, tokens: int, ctx: PlanContext, threads: int, mode: str,
                       splits: int | None = None, max_tokens: int | None = None) -> Launch:
        """A launch of one forced variant, bypassing route selection (tests and benchmarks).

        ``coop``: ``splits`` defaults to the most that fit the cooperative cap (may be 1); ``plain``:
        always one split. ``max_tokens``: the token tile (default the largest).

        Raises:
            PlanError: the cooperative grid cannot fit even with one split, or ``splits`` exceeds the cap.
        """
        base = self.row_blocks(problem, threads) * self.token_chunks(tokens, max_tokens)
        spec = self.spec(problem, threads, mode, max_tokens)
        if mode == "plain":
            if problem.fused_norm:
                raise PlanError(f"{spec.uri}: add_rmsnorm has no plain mode (the norm needs the grid barrier)")
            return ctx.make_launch(spec, base, route="plain", tokens=tokens)
        cap = ctx.cap(spec)
        if splits is None:
            splits = min(cap // base, self.max_splits(problem))
        if splits < 1 or base * splits > cap:
            raise PlanError(
                f"{spec.uri} on {ctx.arch.name}: cooperative grid of {base} x {splits} splits = "
                f"{base * max(splits, 1)} CTAs exceeds the cooperative cap of {cap} CTAs"
            )
        if problem.fused_norm and base * splits * threads < tokens * problem.n:
            raise PlanError(f"{spec.uri}: add_rmsnorm needs one thread per output, but {base * splits} CTAs x "
                            f"{threads} threads < T x N = {tokens * problem.n}")
        return ctx.make_launch(spec, base * splits, route="coop_norm" if problem.fused_norm else "coop_splitk",
                               tokens=tokens, split_k=splits,
                               workspace_bytes=self.workspace_bytes(problem, tokens, splits, threads))


def kernel_args(problem: GemvProblem, launch: Launch, w, x, y, ws=None, barrier=None, scales=None,
                norm_w=None, xn=None, eps=None) -> tuple:
    """Kernel argument tuple in :meth:`GemvCoopFamily.arg_names` order: bf16 ``w, x, y, ws, barrier, k,
    n_out, t_total, splits``; w8 / w4 ``w, scales, x, y, ...`` (``scales`` right after ``w``).

    Pointers are passed through (device arrays); an unused ``ws``/``barrier`` (plain route) becomes a
    64-bit null (``np.uint64(0)``, pointer-sized). Sizes become ``np.int32``.

    add_rmsnorm: ``y`` is the residual stream ``h`` (updated in place), and ``norm_w``, ``xn``, ``eps`` are
    appended (all required).

    Raises:
        PlanError: ``scales`` missing for a w8 / w4 problem, or given for a bf16 one; add_rmsnorm without
            norm_w / xn / eps.
    """
    null = np.uint64(0)
    if problem.quantized and scales is None:
        raise PlanError(f"gemv_coop: a {problem.wfmt} problem needs its scales")
    if not problem.quantized and scales is not None:
        raise PlanError("gemv_coop: a bf16 problem takes no scales")
    head = (w, scales) if problem.quantized else (w,)
    args = (*head, x, y, ws if ws is not None else null, barrier if barrier is not None else null,
            np.int32(problem.k), np.int32(problem.n), np.int32(launch.tokens), np.int32(launch.split_k))
    if problem.fused_norm:
        if norm_w is None or xn is None or eps is None:
            raise PlanError("gemv_coop: add_rmsnorm needs norm_w, xn and eps")
        return (*args, norm_w, xn, np.float32(eps))
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


def reference(problem: GemvProblem, x, w, y_in=None, scales=None, norm_w=None, eps=None):
    """Reference output of the GEMV + epilogue.

    Args:
        problem: the instance.
        x: [T, K] bf16 (``ml_dtypes.bfloat16``) or any float array holding bf16 values.
        w: bf16: [w_rows, K] same as x; w8 / w4: the codes (int8 [w_rows, K] / uint8 [w_rows, K/2]),
            dequantised with ``scales`` by :func:`dequantize_weight` (``fl32(q * scale)``).
        y_in: [T, N] fp32 residual stream (``residual_add`` / ``add_rmsnorm``).
        scales: w8 / w4 only: fp32 [w_rows] / [w_rows, K/64].
        norm_w, eps: add_rmsnorm only: fp32 [N] norm weight and epsilon.

    Returns:
        [T, N]: ``acc`` (fp32), ``y_in + acc`` (fp32) or ``bf16(silu(gate) * up)`` (``ml_dtypes.bfloat16``),
        with ``acc = x @ w.T`` computed in fp32; add_rmsnorm: the pair ``(h, xn)`` with ``h = y_in + acc``
        (fp32) and ``xn`` = :func:`ninferc.ir.reference.ref_rmsnorm` of ``h`` rounded to bf16, what the
        unfused GEMV + rmsnorm kernel pair computes.

    Raises:
        PlanError: shapes that do not match the problem; scales missing (w8 / w4) or given (bf16);
            add_rmsnorm without norm_w / eps.
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
    acc = x32 @ w32.T
    if problem.epilogue == "store":
        return acc
    if problem.epilogue == "residual_add":
        return _f32(y_in) + acc
    if problem.fused_norm:
        if norm_w is None or eps is None:
            raise PlanError("gemv_coop reference: add_rmsnorm needs norm_w and eps")
        h = _f32(y_in) + acc
        xn = ref_rmsnorm(h, _f32(norm_w), float(eps), problem.unit_offset)
        return h, xn.astype(ml_dtypes.bfloat16)
    gate, up = acc[:, : problem.n], acc[:, problem.n:]
    return ((gate / (np.float32(1) + np.exp(-gate))) * up).astype(ml_dtypes.bfloat16)


FAMILY = GemvCoopFamily()
"""The registered instance (discovered by :mod:`ninferc.targets.kernels`)."""
