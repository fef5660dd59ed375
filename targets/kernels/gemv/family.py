"""The GEMV kernel family (:class:`GemvFamily`): variants, route selection and launch geometry over its three
compute engines -- :mod:`~ninferc.targets.kernels.gemv.fma` (fp32 FMAs), :mod:`~ninferc.targets.kernels.gemv.dp`
(integer dot products), :mod:`~ninferc.targets.kernels.gemv.mma` (tensor cores) -- with the options of
:class:`~ninferc.targets.kernels.gemv.tuning.GemvTuning` and the cost model of
:func:`~ninferc.targets.kernels.gemv.cost.estimate_us` (the package docstring, :mod:`ninferc.targets.kernels.gemv`,
describes the contract, the routes and the model)."""

from __future__ import annotations

import dataclasses

from ninferc.errors import PlanError
from ninferc.targets.kernels._weights import WFORMATS
from ninferc.targets.kernels.gemv import dp, fma, mma
from ninferc.targets.kernels.gemv.cost import estimate_us
from ninferc.targets.kernels.gemv.mma import MMA_ROWS
from ninferc.targets.kernels.gemv.problem import EPILOGUES, MODES, WARP, GemvProblem
from ninferc.targets.kernels.gemv.tuning import TUNING_FIELDS, GemvTuning
from ninferc.targets.plan import KernelSpec, Launch, PlanContext


@dataclasses.dataclass(frozen=True)
class GemvCandidate:
    """One variant the GEMV's route selection compared (:meth:`GemvFamily.candidates`).

    Attributes:
        estimate_us: the cost model's time of the launch (:func:`~ninferc.targets.kernels.gemv.cost.estimate_us`),
            microseconds; only its order between candidates is used.
        route: ``"plain"`` or ``"coop_splitk"``. threads, k_warps: the CTA shape. splits: K splits (1 = plain).
        grid: CTAs. ctas_per_sm: resident CTAs per SM of the compiled kernel. spec: the kernel.
    """

    estimate_us: float
    route: str
    threads: int
    k_warps: int
    splits: int
    grid: int
    ctas_per_sm: int
    spec: KernelSpec

    @property
    def key(self) -> tuple:
        """The selection order: the estimate, then the plain route, fewer k_warps, fewer threads."""
        return (self.estimate_us, self.route != "plain", self.k_warps, self.threads)


class GemvFamily:
    """The ``gemv`` kernel family (the package docstring describes the kernels, routes and cost model).

    Args:
        tuning: the options (:class:`~ninferc.targets.kernels.gemv.tuning.GemvTuning`; default: the planned ones).
            They read as attributes of the family (``family.dp_carry``), and assigning one
            (``family.prefetch_steps = 2``, as the bench tools' ``family.attr=value`` settings do) replaces the
            tuning with a validated copy.

    Raises:
        PlanError: an assigned option that :class:`GemvTuning` refuses (names it).
    """

    name = "gemv"
    #: the template of each compute engine (a variant's ``mma`` / ``dp`` parameter names it; else fp32 FMAs)
    engine_templates = {"fma": "gemv_fma.cu.j2", "dp": "gemv_dp.cu.j2", "mma": "gemv_mma.cu.j2"}
    template = engine_templates["fma"]
    templates = tuple(engine_templates.values())

    def __init__(self, tuning: GemvTuning = GemvTuning()):
        object.__setattr__(self, "tuning", tuning)

    def __getattr__(self, name: str):
        if name in TUNING_FIELDS:
            return getattr(self.tuning, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name in TUNING_FIELDS:
            object.__setattr__(self, "tuning", dataclasses.replace(self.tuning, **{name: value}))
        else:
            object.__setattr__(self, name, value)

    @property
    def threads(self) -> tuple[int, ...]:
        """Every thread count the family compiles (plain, mma, dp and cooperative)."""
        t = self.tuning
        return tuple(sorted({th for th, _ in (*t.plain_shapes, *t.mma_shapes, *t.dp_shapes)} | set(t.coop_threads)))

    def engine(self, problem: GemvProblem, tile: int) -> str:
        """The compute engine of ``problem`` at token tile ``tile``: ``"mma"`` (:func:`.mma.applies`), ``"dp"``
        (:func:`.dp.applies`) or ``"fma"`` (every other problem)."""
        if mma.applies(self.tuning, problem, tile):
            return "mma"
        return "dp" if dp.applies(self.tuning, problem, tile) else "fma"

    def fallback(self, problem: GemvProblem, tile: int) -> GemvFamily | None:
        """The family whose kernels a launch of ``problem`` at a dp token tile ``tile`` (>= 2) takes where the dp
        variants do not serve it: their staged x over ``dp_x_bytes``, or none of them resident on the target (the
        x over its shared memory per CTA: the 27B w8 down at 4 tokens stages 143,616 B, which sm_90's 227 KiB holds
        and the 99 KiB of sm_86 / sm_89 / sm_120a do not). That family is this tuning with ``tile`` moved from the
        format's dp tiles to its tensor-core tiles (there every w4 epilogue takes them: :func:`.mma.applies`): the
        kernels the tile took before it was a dp tile. None where ``tile`` is not a dp tile of the problem's format,
        is 1 (the tensor-core kernels are slower than the FMA ones at one token; under the default ``dp_x_bytes`` a
        one-token x needs no opt-in, so it fits every target; a larger setting can leave such a problem without a
        resident variant, and ``launch`` then refuses it, naming it) or over ``MMA_MAX_TOKENS``, or is already a
        tensor-core tile."""
        t, fmt = self.tuning, problem.wfmt
        if tile == 1 or tile > mma.MMA_MAX_TOKENS or fmt not in ("w8", "w4") or \
                tile not in getattr(t, f"{fmt}_dp_tiles") or mma.applies(t, problem, tile):
            return None
        moved = {f"{fmt}_dp_tiles": tuple(x for x in getattr(t, f"{fmt}_dp_tiles") if x != tile),
                 f"{fmt}_mma_tiles": tuple(sorted({*getattr(t, f"{fmt}_mma_tiles"), tile}))}
        return GemvFamily(dataclasses.replace(t, **moved))

    def chunk_fallback(self, problem: GemvProblem, tile: int) -> GemvFamily | None:
        """The family a launch of ``problem`` at a dp token tile ``tile`` tries first where the dp variants do not
        serve that tile (before :meth:`fallback`'s tensor-core kernels), for the weight formats of
        ``dp_chunk_fallback``: this tuning without the format's token tiles >= ``tile``, so that the launch takes
        the largest smaller tile -- on dp where it serves there (:meth:`launch` checks that on its target), in token
        chunks that each stream the weights once. The 27B w8 down (K = 17,408) at 8 tokens: its 8-token x (287 KB)
        fits no target, the 4-token one (143,616 B) fits sm_90's 227 KiB per CTA. None where the format is not
        listed, ``tile`` is not a dp tile of the problem's format or no dp tile in 2..``tile`` - 1 remains."""
        t, fmt = self.tuning, problem.wfmt
        if fmt not in t.dp_chunk_fallback or tile not in getattr(t, f"{fmt}_dp_tiles"):
            return None
        smaller = tuple(x for x in t.tiles(fmt) if x < tile)
        if not any(x >= 2 and x in getattr(t, f"{fmt}_dp_tiles") for x in smaller):
            return None
        field = "w4_token_tiles" if fmt == "w4" else "token_tiles"  # the copy serves this problem's launch alone
        return GemvFamily(dataclasses.replace(t, **{field: smaller}))

    def coop_threads_for(self, problem: GemvProblem, tile: int) -> tuple[int, ...]:
        """The cooperative thread counts of ``problem`` at token tile ``tile`` (the engine's ``coop_threads``; the dp
        engine has none: plain only)."""
        e = self.engine(problem, tile)
        return () if e == "dp" else {"mma": mma, "fma": fma}[e].coop_threads(self.tuning, problem, tile)

    def shapes_for(self, problem: GemvProblem, tile: int) -> tuple[tuple[int, int], ...]:
        """The plain (threads, k_warps) candidates of ``problem`` at token tile ``tile``: the tensor-core engine's
        (:func:`.mma.shapes`), ``dp_shapes`` for the integer-dot-product one, else ``plain_shapes``."""
        e = self.engine(problem, tile)
        if e == "dp":
            return self.tuning.dp_shapes
        return {"mma": mma, "fma": fma}[e].shapes(self.tuning, problem, tile)

    def carries_for(self, problem: GemvProblem, tile: int) -> tuple[bool | None, ...]:
        """The item-boundary carry settings of the plain variants of ``problem`` at token tile ``tile``:
        ``dp_carry`` for the persistent dp variants (the cost model picks), else ``(None,)`` (no such parameter)."""
        return self.tuning.dp_carry if self.persistent(problem, tile) else (None,)

    def mma_for(self, problem: GemvProblem, tile: int) -> bool:
        """True when ``problem`` at token tile ``tile`` runs on the tensor-core variants (:func:`.mma.applies`)."""
        return mma.applies(self.tuning, problem, tile)

    def dp_for(self, problem: GemvProblem, tile: int) -> bool:
        """True when ``problem`` at token tile ``tile`` runs on the integer-dot-product variants
        (:func:`.dp.applies`)."""
        return dp.applies(self.tuning, problem, tile)

    def rows_for(self, problem: GemvProblem, tile: int) -> int:
        """W rows per warp for ``problem`` at token tile ``tile``: ``MMA_ROWS`` (16) for the tensor-core variants, else
        :func:`.fma.rows` (``norm_rows_per_warp`` for add_norm_parts, ``quant_rows_per_warp`` or ``rows_per_warp``)."""
        return MMA_ROWS if self.mma_for(problem, tile) else fma.rows(self.tuning, problem)

    def dynamic_smem_bytes(self, problem: GemvProblem, tile: int, spec: KernelSpec | None = None) -> int:
        """Dynamic shared memory of a launch of ``problem`` at token tile ``tile``, bytes: the dp engine's
        (:func:`.dp.dynamic_smem_bytes`, with the weight ring of ``spec``'s template parameter ``ring``), the
        tensor-core engine's (:func:`.mma.dynamic_smem_bytes`: w8, its fp16 x; w4, its warps' rings, for ``spec``'s
        thread count -- the smallest of ``mma_shapes`` without a spec), else 0."""
        e = self.engine(problem, tile)
        if e == "dp":
            ring = int(dict(spec.params).get("ring", 0)) if spec is not None else 0
            threads = spec.threads if spec is not None else 0
            return dp.dynamic_smem_bytes(problem, tile, threads, self.rows_for(problem, tile), ring)
        if e == "mma":
            threads = spec.threads if spec is not None else mma.smallest_cta(self.tuning)
            return mma.dynamic_smem_bytes(problem, tile, threads)
        return 0

    def tile_for(self, tokens: int, wfmt: str = "bf16") -> int:
        """The token tile (``max_tokens`` variant) a launch of T = ``tokens`` of weight format ``wfmt`` uses: the
        smallest of the format's tiles (:meth:`GemvTuning.tiles`) >= T, else the largest."""
        tiles = self.tuning.tiles(wfmt)
        return next((t for t in tiles if t >= tokens), tiles[-1])

    # ---- identity ------------------------------------------------------------------------------

    def spec(self, problem: GemvProblem, threads: int, mode: str, max_tokens: int | None = None,
             k_warps: int = 1, carry: bool | None = None, ring: int | None = None) -> KernelSpec:
        """The kernel for (epilogue, input mode, weight format, threads, k_warps, mode, tile); K and N are
        runtime arguments, not identity. ``wfmt``, ``k_warps`` and ``in_norm`` are parameters only when not
        their defaults (bf16, 1, none), so those kernels keep a short URI. ``ring``: the weight-ring stages of a
        persistent dp variant without the carry (template ``ring``; None: ``dp_ring``; 0: none).

        Raises:
            PlanError: unknown mode, k_warps not dividing the CTA's warps, add_norm_parts in coop mode, or a ring
                of 1 stage or fewer than 0.
        """
        if mode not in MODES:
            raise PlanError(f"gemv: unknown mode {mode!r}; supported: {', '.join(MODES)}")
        if k_warps < 1 or (threads // WARP) % k_warps:
            raise PlanError(f"gemv: k_warps = {k_warps} must divide the {threads // WARP} warps of a "
                            f"{threads}-thread CTA")
        if problem.norm_out and mode != "plain":
            raise PlanError("gemv: add_norm_parts runs in plain mode only (one CTA owns each output), "
                            f"not {mode!r}")
        if ring is not None and (ring < 0 or ring == 1):
            raise PlanError(f"gemv: ring = {ring} must be 0 (no ring) or at least 2 stages")
        tile = self.tuning.tiles(problem.wfmt)[-1] if max_tokens is None else int(max_tokens)
        params = {
            "threads": threads,
            "max_tokens": tile,
            "rows_per_warp": self.rows_for(problem, tile),
            "epilogue": problem.epilogue,
            "mode": mode,
        }
        if problem.quantized:
            params["wfmt"] = problem.wfmt
        engine = self.engine(problem, tile)
        if engine == "mma":
            params.update(mma.params(self.tuning, problem, threads, mode, tile))
        elif engine == "dp":
            params.update(dp.params(self.tuning, problem, threads, mode, carry, ring, tile))
        if problem.norm_out:
            params["unit_offset"] = bool(problem.unit_offset)
        if problem.norm_in:
            params["in_norm"] = problem.in_norm
        if k_warps != 1:
            params["k_warps"] = int(k_warps)
        if self.tuning.prefetch_steps != 1:
            params["prefetch_steps"] = self.tuning.prefetch_steps
        if engine == "fma" and not problem.quantized and tile in self.tuning.bf16_unpack_tiles:
            params["unpack_w"] = 1
        return KernelSpec.make(self.name, self.engine_templates[engine], params, threads, cooperative=(mode == "coop"))

    def arg_names(self, problem: GemvProblem) -> tuple[str, ...]:
        """Kernel parameters in order (templates/README.md ABI): pointers w (bf16 [N_w, K]; w8: int8
        [N_w, K]; w4: uint8 [N_w, K/2]), for w8 / w4 only scales (fp32 [N_w] / [N_w, K/64]), x (bf16
        [T, K]), y (fp32 [T, N], bf16 for swiglu; named ``h`` -- the residual stream, updated in place -- for
        residual_add and add_norm_parts), ws (fp32 scratch, ``Launch.workspace_bytes`` of a coop launch),
        barrier (uint32 counter, zero-initialised once); int32 k, n_out (= N), t_total (= T), splits
        (= ``Launch.split_k``). add_norm_parts appends ``norm_w`` (fp32 [N]), ``xs`` (bf16 [T, N]), ``ss_out``
        (fp32 [T, row_blocks]); in_norm parts appends ``ss_in`` (fp32 [T, ss_parts]), int32 ``ss_parts`` and
        float ``in_eps``."""
        head = ("w", "scales") if problem.quantized else ("w",)
        y = "h" if problem.epilogue in ("residual_add", "add_norm_parts") else "y"
        tail = (("norm_w", "xs", "ss_out") if problem.norm_out else ()) + (
            ("ss_in", "ss_parts", "in_eps") if problem.norm_in else ())
        return (*head, "x", y, "ws", "barrier", "k", "n_out", "t_total", "splits", *tail)

    def variants(self, problem: GemvProblem) -> list[KernelSpec]:
        """Every kernel a launch for ``problem`` may use: each token tile x (each plain shape, and each
        cooperative thread count unless add_norm_parts), and for a dp tile also its :meth:`fallback`'s variants."""
        out = []
        for mt in self.tuning.tiles(problem.wfmt):
            out += self._tile_variants(problem, mt)
            fb = self.fallback(problem, mt)
            if fb is not None:
                out += fb._tile_variants(problem, mt)
        return list({s.uri: s for s in out}.values())

    def _tile_variants(self, problem: GemvProblem, mt: int) -> list[KernelSpec]:
        out = [self.spec(problem, th, "plain", mt, kw, c) for th, kw in self.shapes_for(problem, mt)
               for c in self.carries_for(problem, mt)]
        if not problem.norm_out:
            out += [self.spec(problem, th, "coop", mt) for th in self.coop_threads_for(problem, mt)]
        return out

    def sample_problems(self) -> list[GemvProblem]:
        """One small problem per epilogue, input mode and weight format (covers every template parameter value),
        and the w8 ones again with a K the w8 mma variants do not take (not a multiple of 64)."""
        out = [GemvProblem(256, 704, e, f) for f in WFORMATS for e in EPILOGUES]
        out += [GemvProblem(256, 704, e, f, in_norm="parts") for f in WFORMATS for e in ("store", "swiglu")]
        out += [GemvProblem(256, 704, "add_norm_parts", "bf16", unit_offset=False)]
        # whether a w8 launch runs on tensor cores depends on K (a multiple of 64): a K = 272 copy of each w8
        # problem gives the FMA variants of the mma tiles too, so these cover every K
        return out + [GemvProblem(272, p.n, p.epilogue, p.wfmt, unit_offset=p.unit_offset, in_norm=p.in_norm)
                      for p in out if p.wfmt == "w8"]

    # ---- geometry ------------------------------------------------------------------------------

    def outputs_per_cta(self, problem: GemvProblem, threads: int, k_warps: int = 1, tile: int = 1) -> int:
        """Outputs (columns of Y) one CTA of token tile ``tile`` produces: (warps / k_warps) row groups x outputs
        per warp."""
        rw = self.rows_for(problem, tile)
        per_warp = rw // 2 if problem.epilogue == "swiglu" else rw
        return threads // WARP // k_warps * per_warp

    def row_blocks(self, problem: GemvProblem, threads: int, k_warps: int = 1, tile: int = 1) -> int:
        """CTAs along N: ceil(n / outputs_per_cta) (at token tile ``tile``)."""
        return -(-problem.n // self.outputs_per_cta(problem, threads, k_warps, tile))

    def token_chunks(self, tokens: int, tile: int) -> int:
        """CTAs along T: ceil(T / tile)."""
        return -(-tokens // tile)

    def max_splits(self, problem: GemvProblem) -> int:
        """Most K splits that still give every lane at least one 16-byte step per split:
        ``max(1, K / k_per_vec / 32)`` with k_per_vec = 8 (bf16), 16 (w8), 32 (w4)."""
        return max(1, problem.k // problem.k_per_vec // WARP)

    def workspace_bytes(self, problem: GemvProblem, tokens: int, splits: int) -> int:
        """Bytes a coop launch needs: fp32 partial sums [splits, T, w_rows]."""
        return 4 * splits * tokens * problem.w_rows

    def parts_bytes(self, problem: GemvProblem, tokens: int, row_blocks: int) -> int:
        """``Launch.workspace_bytes`` of a plain launch: the add_norm_parts ``ss_out``, fp32 [T, row_blocks]; 0 for
        every other epilogue."""
        return 4 * tokens * row_blocks if problem.norm_out else 0

    def persistent(self, problem: GemvProblem, tile: int) -> bool:
        """True when launches of ``problem`` at token tile ``tile`` use the persistent dp variants."""
        return self.tuning.dp_persistent and self.dp_for(problem, tile)

    @staticmethod
    def persistent_grid(items: int, cap: int) -> int:
        """CTAs of a persistent launch of ``items`` work items when ``cap`` CTAs fit the device at once:
        :func:`.dp.persistent_grid`.

        Raises:
            PlanError: items or cap below 1.
        """
        return dp.persistent_grid(items, cap)

    def norm_parts(self, launch: Launch) -> int:
        """The ``ss_parts`` (row blocks) of an add_norm_parts launch: the consumer GEMV's ``ss_parts`` argument.

        Raises:
            PlanError: ``launch`` is not an add_norm_parts gemv launch.
        """
        k = launch.kernel
        if k.family != self.name or k.param("epilogue") != "add_norm_parts":
            raise PlanError(f"{k.uri}: not an add_norm_parts GEMV launch (no norm parts)")
        return launch.workspace_bytes // (4 * launch.tokens)  # ss_out is fp32 [T, row_blocks] (parts_bytes)

    # ---- route selection -----------------------------------------------------------------------

    def _estimate(self, problem: GemvProblem, tokens: int, ctx: PlanContext, spec: KernelSpec, k_warps: int,
                  splits: int = 1, items_per_cta: int = 1) -> float:
        occ = ctx.occupancy(spec, self.dynamic_smem_bytes(problem, spec.param("max_tokens"), spec))
        return estimate_us(problem, tokens, threads=spec.threads, k_warps=k_warps,
                           rows_per_warp=self.rows_for(problem, spec.param("max_tokens")), tile=spec.param("max_tokens"),
                           ctas_per_sm=occ.ctas_per_sm, sms=ctx.sms, bandwidth_per_sm_gbs=ctx.bandwidth_per_sm_gbs,
                           splits=splits, mma=self.mma_for(problem, spec.param("max_tokens")),
                           dp=self.dp_for(problem, spec.param("max_tokens")), items_per_cta=items_per_cta,
                           carry=bool(dict(spec.params).get("carry", False)))

    def launch(self, problem: GemvProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The launch for T = ``tokens`` on ``ctx``: the candidate (every plain shape; every cooperative thread
        count with the most splits its cap allows, when that is >= 2; a persistent dp shape with each
        ``dp_carry`` setting) with the least :func:`estimate_us`; ties
        to the plain route, fewer k_warps, fewer threads. A dp tile whose x exceeds ``dp_x_bytes``, or none of
        whose variants is resident on the target, launches a smaller dp tile in token chunks where
        :meth:`chunk_fallback` gives one that serves, else its :meth:`fallback`'s (tensor-core) kernels.

        Raises:
            PlanError: T < 1, or no variant can be resident at all on this target.
        """
        if tokens < 1:
            raise PlanError(f"gemv: T = {tokens} must be at least 1")
        tile = self.tile_for(tokens, problem.wfmt)
        fb = self.fallback(problem, tile)
        if fb is not None and not self.dp_for(problem, tile):  # a dp tile whose x exceeds dp_x_bytes
            return self._fallback_launch(problem, tokens, ctx, tile, fb)
        cands = self.candidates(problem, tokens, ctx)
        if not cands and fb is not None:
            return self._fallback_launch(problem, tokens, ctx, tile, fb)
        if not cands:
            raise PlanError(
                f"gemv (K={problem.k}, N={problem.n}, {problem.epilogue}, {problem.wfmt}) on {ctx.arch.name}: "
                f"no variant ({', '.join(f'{t} threads' for t in self.threads)}) has a resident CTA per SM")
        best = cands[0]
        spec = best.spec
        if best.route == "coop_splitk":
            return ctx.make_launch(spec, best.grid, route="coop_splitk", tokens=tokens, split_k=best.splits,
                                   dynamic_smem=self.dynamic_smem_bytes(problem, tile, spec),
                                   workspace_bytes=self.workspace_bytes(problem, tokens, best.splits))
        return ctx.make_launch(spec, best.grid, route="plain", tokens=tokens,
                               dynamic_smem=self.dynamic_smem_bytes(problem, tile, spec),
                               workspace_bytes=self.parts_bytes(problem, tokens,
                                                                self.row_blocks(problem, spec.threads, best.k_warps,
                                                                                tile)))

    def candidates(self, problem: GemvProblem, tokens: int, ctx: PlanContext) -> list[GemvCandidate]:
        """The variants :meth:`launch` compares for T = ``tokens`` on ``ctx``, best first (:attr:`GemvCandidate.key`):
        every plain shape with a resident CTA, each ``dp_carry`` setting of a persistent dp shape, and every
        cooperative thread count with the most K splits its cap allows, when that is >= 2 (not for add_norm_parts).
        Empty where the launch does not choose among them: the token tile's dp x exceeds ``dp_x_bytes`` (the
        fallback's kernels), or no variant is resident (:meth:`launch` falls back or raises). ``ninferc plan
        --explain`` prints them.

        Raises:
            PlanError: T < 1.
        """
        if tokens < 1:
            raise PlanError(f"gemv: T = {tokens} must be at least 1")
        tile = self.tile_for(tokens, problem.wfmt)
        if self.fallback(problem, tile) is not None and not self.dp_for(problem, tile):
            return []
        chunks = self.token_chunks(tokens, tile)
        cands = []
        for th, kw in self.shapes_for(problem, tile):
            for carry in self.carries_for(problem, tile):
                spec = self.spec(problem, th, "plain", tile, kw, carry)
                dyn = self.dynamic_smem_bytes(problem, tile, spec)
                occ = ctx.occupancy(spec, dyn).ctas_per_sm
                if occ > 0:
                    grid = self._plain_grid(problem, th, kw, tile, chunks, occ * ctx.sms)
                    items = self.row_blocks(problem, th, kw, tile) * chunks
                    est = self._estimate(problem, tokens, ctx, spec, kw, items_per_cta=-(-items // grid))
                    cands.append(GemvCandidate(est, "plain", th, kw, 1, grid, occ, spec))
        if not problem.norm_out:
            for th in self.coop_threads_for(problem, tile):
                spec = self.spec(problem, th, "coop", tile)
                dyn = self.dynamic_smem_bytes(problem, tile, spec)
                cap = ctx.cap(spec, dyn)  # co-resident: the grid barrier
                base = self.row_blocks(problem, th, 1, tile) * chunks
                splits = min(cap // base, self.max_splits(problem))
                if splits >= 2:
                    cands.append(GemvCandidate(self._estimate(problem, tokens, ctx, spec, 1, splits), "coop_splitk",
                                               th, 1, splits, base * splits, ctx.occupancy(spec, dyn).ctas_per_sm,
                                               spec))
        return sorted(cands, key=lambda c: c.key)

    def deciding(self, problem: GemvProblem, tokens: int, ctx: PlanContext
                 ) -> tuple[str, list[GemvCandidate]]:
        """How :meth:`launch` arrives at its kernel for T = ``tokens`` on ``ctx``, for ``ninferc plan --explain``:
        ``("", candidates)`` where it picks among this family's :meth:`candidates`; where the token tile's dp variants
        do not serve the problem, a sentence saying why (their staged x over ``dp_x_bytes``, or no CTA of theirs
        resident on the target) and what runs instead, with the candidates that family compared (a smaller dp tile in
        token chunks, :meth:`chunk_fallback`, or the tile's tensor-core variants, :meth:`fallback`). Candidates are
        empty only where :meth:`launch` raises."""
        tile = self.tile_for(tokens, problem.wfmt)
        fb = self.fallback(problem, tile)
        cands = self.candidates(problem, tokens, ctx)
        if cands or fb is None:
            return "", cands
        x = dp.dp_x_bytes(problem.wfmt, problem.k, tile)
        if not self.dp_for(problem, tile):
            why = (f"the {tile}-token dp variants would stage {x:,} B of x in shared memory, over their limit of "
                   f"{tile * self.tuning.dp_x_bytes:,} B (dp_x_bytes, {self.tuning.dp_x_bytes:,} B per token)")
        else:
            why = (f"no {tile}-token dp variant has a resident CTA on {ctx.arch.name} (each stages {x:,} B of x in "
                   f"shared memory; a CTA may take {ctx.arch.max_smem_per_cta_optin:,} B)")
        runner, ln = self._fallback(problem, tokens, ctx, tile, fb)
        if runner is not fb:
            sub = runner.tile_for(tokens, problem.wfmt)
            return (f"{why}: the {sub}-token dp tile runs it in {runner.token_chunks(tokens, sub)} token chunks, its "
                    "variants compared", runner.candidates(problem, tokens, ctx))
        return f"{why}: the {tile}-token tensor-core variants run it, compared", fb.candidates(problem, tokens, ctx)

    def _fallback_launch(self, problem: GemvProblem, tokens: int, ctx: PlanContext, tile: int,
                         fb: GemvFamily) -> Launch:
        """The launch of T = ``tokens`` where the dp variants do not serve ``problem`` at its dp tile ``tile`` on
        ``ctx`` (:meth:`_fallback`)."""
        return self._fallback(problem, tokens, ctx, tile, fb)[1]

    def _fallback(self, problem: GemvProblem, tokens: int, ctx: PlanContext, tile: int,
                  fb: GemvFamily) -> tuple[GemvFamily, Launch]:
        """(the family that runs it, its launch) where the dp variants do not serve ``problem`` at its dp tile
        ``tile`` on ``ctx``: the :meth:`chunk_fallback` family where its launch lands on dp variants (a smaller dp tile
        in token chunks), else ``fb`` (:meth:`fallback`, the tensor-core kernels at ``tile``). The one decision both
        :meth:`launch` and :meth:`deciding` read."""
        ch = self.chunk_fallback(problem, tile)
        if ch is not None:
            ln = ch.launch(problem, tokens, ctx)
            if dict(ln.kernel.params).get("dp"):
                return ch, ln
        return fb, fb.launch(problem, tokens, ctx)

    def _plain_grid(self, problem: GemvProblem, threads: int, k_warps: int, tile: int, chunks: int, cap: int) -> int:
        """CTAs of a plain launch: one per work item (row block x token chunk), or for the persistent dp variants
        :meth:`persistent_grid` of them under ``cap`` (resident CTAs/SM x SMs)."""
        items = self.row_blocks(problem, threads, k_warps, tile) * chunks
        return self.persistent_grid(items, cap) if self.persistent(problem, tile) else items

    def launch_variant(self, problem: GemvProblem, tokens: int, ctx: PlanContext, threads: int, mode: str,
                       splits: int | None = None, max_tokens: int | None = None, k_warps: int = 1,
                       carry: bool | None = None, ring: int | None = None) -> Launch:
        """A launch of one forced variant, bypassing route selection (tests and benchmarks).

        ``coop``: ``splits`` defaults to the most that fit the cooperative cap (may be 1); ``plain``:
        always one split. ``max_tokens``: the token tile (default the largest). ``k_warps``: warps per row group.
        ``carry``: a persistent dp variant's item-boundary carry (default: the first of ``dp_carry``).
        ``ring``: its weight-ring stages (None: ``dp_ring``; 0: none).

        Raises:
            PlanError: a plain variant with no resident CTA on the target (its dynamic shared memory, e.g. a dp
                tile's x, over what an SM holds: a launch would fail), the cooperative grid cannot fit even with one
                split, or ``splits`` exceeds the cap; the spec's own errors (:meth:`spec`).
        """
        tile = self.tuning.tiles(problem.wfmt)[-1] if max_tokens is None else max_tokens
        chunks = self.token_chunks(tokens, tile)
        base = self.row_blocks(problem, threads, k_warps, tile) * chunks
        spec = self.spec(problem, threads, mode, max_tokens, k_warps, carry, ring)
        if mode == "plain":
            dyn = self.dynamic_smem_bytes(problem, tile, spec)
            occ = ctx.occupancy(spec, dyn)
            if occ.ctas_per_sm < 1:
                raise PlanError(f"{spec.uri} on {ctx.arch.name}: no resident CTA per SM (limited by {occ.limiter}; "
                                f"{dyn:,} B of dynamic shared memory for {tokens} tokens at the {tile}-token tile, "
                                f"{occ.smem_per_cta:,} B per CTA in all, where a CTA may take at most "
                                f"{ctx.arch.max_smem_per_cta_optin:,} B)")
            grid = self._plain_grid(problem, threads, k_warps, tile, chunks, occ.ctas_per_sm * ctx.sms)
            return ctx.make_launch(spec, grid, route="plain", tokens=tokens, dynamic_smem=dyn,
                                   workspace_bytes=self.parts_bytes(problem, tokens, base // chunks))
        dyn = self.dynamic_smem_bytes(problem, tile, spec)
        cap = ctx.cap(spec, dyn)
        if splits is None:
            splits = min(cap // base, self.max_splits(problem))
        if splits < 1 or base * splits > cap:
            raise PlanError(
                f"{spec.uri} on {ctx.arch.name}: cooperative grid of {base} x {splits} splits = "
                f"{base * max(splits, 1)} CTAs exceeds the cooperative cap of {cap} CTAs"
            )
        return ctx.make_launch(spec, base * splits, route="coop_splitk", tokens=tokens, split_k=splits,
                               dynamic_smem=dyn, workspace_bytes=self.workspace_bytes(problem, tokens, splits))
