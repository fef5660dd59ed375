"""Tensor-core GEMM for prefill-size token counts (template ``gemm.cu.j2``, helpers ``gemm_mma.cuh``).

Contract
--------
``Y = X[T, K] (bf16, row-major, row stride ldx) @ W[N_w, K]^T (bf16, row-major, nn.Linear layout)``,
fp32 accumulation (``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``), then an epilogue:

* ``store_f32``    ``Y[T, N]`` fp32 ``= acc``                                        (N_w = N)
* ``swiglu_bf16``  W stacks [gate; up] (N_w = 2N): ``Y[T, N]`` bf16 ``= silu(acc[:, :N]) * acc[:, N:]``,
  gate and up of an output column are computed by the same thread of the same CTA (no workspace).

Any T >= 1 and any N >= 1 (edges masked: zero-filled loads, guarded stores); K a multiple of 8; X
and W 16-byte aligned; ``ldx`` >= K and a multiple of 8 (16-byte ``cp.async`` rows).

Kernel shape
------------
A CTA computes a ``bm x bn`` tile of ``X @ W^T`` (``bn`` W rows: for swiglu ``bn/2`` gate rows and the
``bn/2`` matching up rows, i.e. ``bn/2`` output columns). K advances ``bk`` (32) per step through a
``stages``-deep ``cp.async`` pipeline in dynamic shared memory (XOR-swizzled rows, conflict-free
``ldmatrix``); a ``warps_m x warps_n`` grid of warps each owns a ``(bm/warps_m) x (bn/warps_n)``
sub-tile of m16n8 fragments. The epilogue writes straight from the accumulators (2-element stores).
The grid is 1-D, ``ceil(T/bm) * ceil(N/out_per_cta)`` CTAs, rasterised in groups of ``group_m`` M-tiles
(consecutive CTAs share W tiles and X tiles in L2); nothing rides on grid y/z.

Routes (chosen here by the plan; the kernel has no launch constants)
--------------------------------------------------------------------
Each :data:`TILES` entry is a route (``mma_<bm>x<bn>x<bk>_w<warps_m>x<warps_n>``). For every tile, the stage count is the variant
with the most resident CTAs/SM on the target (ties: more stages); tiles that cannot be resident are
dropped. Among tiles, the launch minimises the modelled time of the busiest SM::

    cost = ceil(ctas / SMs) * bm * bn / efficiency(tile)

(each SM works through ``ceil(ctas/SMs)`` tiles of ``bm*bn*K`` MACs; ``efficiency`` is the tile's relative
tensor-pipe throughput, larger tiles reuse more operands). Ties go to the larger tile. So small T or
narrow N picks the small tile (more CTAs to fill the SMs), and prefill at T >= ~1024 picks 128x128.
``Launch.waves`` = ceil(ctas / (CTAs/SM x SMs)) from the occupancy calculator. No split-K (split_k = 1).

Runtime arguments (:func:`arg_names`, :func:`kernel_args`): ``x, w, y, t, n_out, k, ldx, group_m`` --
three pointers then five int32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import PlanError
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

EPILOGUES = ("store_f32", "swiglu_bf16")
WARP = 32  # threads per warp on every CUDA architecture
VEC = 8    # bf16 elements per 16-byte load
GROUP_M = 8
"""M-tiles per rasterisation group (Triton-style grouped ordering; an L2-reuse heuristic, not a
hardware number). Clamped to the number of M-tiles."""


@dataclass(frozen=True)
class GemmTile:
    """One CTA tile shape (a route).

    Attributes:
        bm: tile rows (tokens). bn: tile W rows (swiglu: half gate, half up). bk: K per stage (32 or 64).
        warps_m, warps_n: warp grid (warp tile = bm/warps_m x bn/warps_n).
        efficiency: relative tensor throughput used by the route cost model (1.0 for the largest tile).
    """

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    efficiency: float

    @property
    def threads(self) -> int:
        """Threads per CTA (warps_m * warps_n * 32)."""
        return self.warps_m * self.warps_n * WARP

    @property
    def route(self) -> str:
        """Route name, ``mma_<bm>x<bn>x<bk>_w<warps_m>x<warps_n>``."""
        return f"mma_{self.bm}x{self.bn}x{self.bk}_w{self.warps_m}x{self.warps_n}"

    def smem_bytes(self, stages: int) -> int:
        """Dynamic shared memory of the pipeline: stages * (bm + bn) * bk bf16."""
        return stages * (self.bm + self.bn) * self.bk * 2

    def check(self, epilogue: str) -> None:
        """Raise PlanError if the template's static_asserts would reject this tile."""
        wm, wn = self.bm // self.warps_m, self.bn // self.warps_n
        chunks = self.bk // VEC
        bad = []
        if self.bm % self.warps_m or wm % 16:
            bad.append(f"bm/warps_m = {self.bm}/{self.warps_m} must be a multiple of 16")
        if self.bn % self.warps_n or wn % 16:
            bad.append(f"bn/warps_n = {self.bn}/{self.warps_n} must be a multiple of 16")
        if epilogue == "swiglu_bf16" and wn % 32:
            bad.append(f"swiglu needs bn/warps_n = {wn} to be a multiple of 32")
        if self.bk not in (32, 64):
            bad.append(f"bk = {self.bk} must be 32 or 64")
        if (self.bm * chunks) % self.threads or (self.bn * chunks) % self.threads:
            bad.append(f"tile chunks ({self.bm}+{self.bn})*{chunks} must divide among {self.threads} threads")
        if self.threads > 1024:
            bad.append(f"{self.threads} threads exceed 1024")
        if bad:
            raise PlanError(f"gemm tile {self.bm}x{self.bn}x{self.bk}: " + "; ".join(bad))


TILES: tuple[GemmTile, ...] = (
    GemmTile(128, 128, 32, 2, 4, 1.0),   # prefill: 8 warps of 64x32
    GemmTile(64, 128, 32, 2, 2, 0.9),    # mid T: 4 warps of 32x64
    GemmTile(32, 128, 32, 1, 4, 0.7),    # small T / narrow N: 4 warps of 32x32
)
"""Tile routes, largest first. Efficiencies are a first model (operand reuse per tile), to be replaced
by H200 measurements."""

BENCH_TILES: tuple[GemmTile, ...] = (
    GemmTile(128, 256, 32, 2, 4, 1.1),   # 8 warps of 64x64 (~230 registers: 1 CTA/SM)
    GemmTile(128, 128, 32, 2, 2, 1.05),  # 4 warps of 64x64 (~236 registers: 2 CTAs/SM)
)
"""Candidate tiles with larger warp tiles (more operand reuse per ldmatrix, the usual mma.sync recipe for
high throughput), compiled and verified by the tests but not routed by default: promote them into
:data:`TILES` with measured efficiencies once the H200 throughput report (tests/kernels/test_gemm_gpu.py)
shows them ahead."""

STAGES: tuple[int, ...] = (3, 4)
"""Pipeline depths compiled per tile; the launch picks per target (3 stages keeps two 128x128 CTAs per
SM on the 100 KiB-shared-memory parts, 4 where shared memory allows)."""


@dataclass(frozen=True)
class GemmProblem:
    """One GEMM instance (K and N are runtime arguments, not kernel identity).

    Attributes:
        k: reduction length (columns of X used and of W); positive multiple of 8.
        n: output columns N (for swiglu the intermediate size I; W then has 2N rows).
        epilogue: ``"store_f32" | "swiglu_bf16"``.
        ldx: row stride of X in elements (default k); >= k and a multiple of 8.

    Raises:
        PlanError: a value outside its range (names the value and the limit).
    """

    k: int
    n: int
    epilogue: str = "store_f32"
    ldx: int | None = None

    def __post_init__(self):
        if self.k <= 0 or self.k % VEC:
            raise PlanError(f"gemm: K = {self.k} must be a positive multiple of {VEC} (16-byte bf16 loads)")
        if self.n <= 0:
            raise PlanError(f"gemm: N = {self.n} must be positive")
        if self.epilogue not in EPILOGUES:
            raise PlanError(f"gemm: unknown epilogue {self.epilogue!r}; supported: {', '.join(EPILOGUES)}")
        if self.ldx is not None and (self.ldx < self.k or self.ldx % VEC):
            raise PlanError(f"gemm: ldx = {self.ldx} must be >= K = {self.k} and a multiple of {VEC}")

    @property
    def w_rows(self) -> int:
        """Rows of W: 2n for swiglu, else n."""
        return 2 * self.n if self.epilogue == "swiglu_bf16" else self.n

    @property
    def x_stride(self) -> int:
        """Row stride of X in elements (ldx, default k)."""
        return self.k if self.ldx is None else self.ldx

    @property
    def out_dtype(self) -> str:
        """``"float32"`` (store_f32) or ``"bfloat16"`` (swiglu_bf16)."""
        return "bfloat16" if self.epilogue == "swiglu_bf16" else "float32"


class GemmFamily:
    """The ``gemm`` kernel family (see module docstring).

    Args:
        tiles: tile routes (default :data:`TILES`). stages: pipeline depths per tile (default :data:`STAGES`).

    Raises:
        PlanError: a tile the template cannot build, or a stage count < 2.
    """

    name = "gemm"
    template = "gemm.cu.j2"

    def __init__(self, tiles: tuple[GemmTile, ...] = TILES, stages: tuple[int, ...] = STAGES):
        if not tiles or any(s < 2 for s in stages) or not stages:
            raise PlanError(f"gemm: need at least one tile and stage counts >= 2, got {tiles}, {stages}")
        for t in tiles:
            for ep in EPILOGUES:
                t.check(ep)
        self.tiles = tuple(tiles)
        self.stages = tuple(stages)

    # ---- identity ------------------------------------------------------------------------------

    def spec(self, problem: GemmProblem, tile: GemmTile, stages: int) -> KernelSpec:
        """The kernel for (epilogue, tile, stages)."""
        params = {
            "threads": tile.threads,
            "bm": tile.bm,
            "bn": tile.bn,
            "bk": tile.bk,
            "stages": stages,
            "warps_m": tile.warps_m,
            "warps_n": tile.warps_n,
            "epilogue": problem.epilogue,
        }
        return KernelSpec.make(self.name, self.template, params, tile.threads, cooperative=False)

    def variants(self, problem: GemmProblem) -> list[KernelSpec]:
        """Every kernel a launch for ``problem`` may use: each tile x each stage count."""
        return [self.spec(problem, t, s) for t in self.tiles for s in self.stages]

    def sample_problems(self) -> list[GemmProblem]:
        """One small problem per epilogue (covers every template parameter value)."""
        return [GemmProblem(256, 704, e) for e in EPILOGUES]

    @staticmethod
    def tile_of(spec: KernelSpec) -> GemmTile:
        """Reconstruct the :class:`GemmTile` of a spec (efficiency not recorded: 0)."""
        p = dict(spec.params)
        return GemmTile(p["bm"], p["bn"], p["bk"], p["warps_m"], p["warps_n"], 0.0)

    # ---- geometry ------------------------------------------------------------------------------

    @staticmethod
    def out_per_cta(problem: GemmProblem, tile: GemmTile) -> int:
        """Output columns one CTA produces: bn, or bn/2 for swiglu."""
        return tile.bn // 2 if problem.epilogue == "swiglu_bf16" else tile.bn

    def grid(self, problem: GemmProblem, tokens: int, tile: GemmTile) -> int:
        """CTAs: ceil(T / bm) * ceil(N / out_per_cta)."""
        return -(-tokens // tile.bm) * -(-problem.n // self.out_per_cta(problem, tile))

    def _best_stages(self, problem: GemmProblem, tile: GemmTile, ctx: PlanContext):
        best = None
        for s in self.stages:
            spec = self.spec(problem, tile, s)
            smem = tile.smem_bytes(s)
            if smem + ctx.resources_of(spec).static_smem_bytes > ctx.arch.max_smem_per_cta_optin:
                continue
            per_sm = ctx.occupancy(spec, smem).ctas_per_sm
            if per_sm < 1:
                continue
            key = (per_sm, s)
            if best is None or key > best[0]:
                best = (key, spec, smem)
        return best

    def launch(self, problem: GemmProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The launch for T = ``tokens`` on ``ctx`` (route rule in the module docstring).

        Raises:
            PlanError: T < 1, or no tile/stage variant can be resident on this target.
        """
        if tokens < 1:
            raise PlanError(f"gemm: T = {tokens} must be at least 1")
        cands = []
        for order, tile in enumerate(self.tiles):
            best = self._best_stages(problem, tile, ctx)
            if best is None:
                continue
            _, spec, smem = best
            ctas = self.grid(problem, tokens, tile)
            cost = -(-ctas // ctx.sms) * tile.bm * tile.bn / tile.efficiency
            cands.append((cost, -tile.bm * tile.bn, order, tile, spec, smem, ctas))
        if not cands:
            raise PlanError(
                f"gemm (K={problem.k}, N={problem.n}, {problem.epilogue}) on {ctx.arch.name}: no tile/stage "
                f"variant fits (shared memory per CTA limit {ctx.arch.max_smem_per_cta_optin} B)"
            )
        _, _, _, tile, spec, smem, ctas = min(cands, key=lambda c: c[:3])
        return ctx.make_launch(spec, ctas, route=tile.route, tokens=tokens, dynamic_smem=smem)

    def launch_variant(self, problem: GemmProblem, tokens: int, ctx: PlanContext, tile: GemmTile,
                       stages: int) -> Launch:
        """A launch of one forced (tile, stages) variant, bypassing route selection (tests, benchmarks).

        Raises:
            PlanError: T < 1 or the variant's shared memory exceeds the target's opt-in maximum.
        """
        if tokens < 1:
            raise PlanError(f"gemm: T = {tokens} must be at least 1")
        spec = self.spec(problem, tile, stages)
        smem = tile.smem_bytes(stages)
        if smem > ctx.arch.max_smem_per_cta_optin:
            raise PlanError(
                f"{spec.uri} on {ctx.arch.name}: dynamic shared memory {smem} B exceeds the opt-in maximum "
                f"of {ctx.arch.max_smem_per_cta_optin} B"
            )
        return ctx.make_launch(spec, self.grid(problem, tokens, tile), route=tile.route, tokens=tokens,
                               dynamic_smem=smem)


def arg_names(problem: GemmProblem) -> tuple[str, ...]:
    """The kernel's parameters in order: ``x, w, y`` (pointers) then ``t, n_out, k, ldx, group_m`` (int32)."""
    return ("x", "w", "y", "t", "n_out", "k", "ldx", "group_m")


def group_m_for(launch: Launch) -> int:
    """The rasterisation group the launch uses: min(GROUP_M, M-tiles)."""
    bm = launch.kernel.param("bm")
    return max(1, min(GROUP_M, -(-launch.tokens // bm)))


def kernel_args(problem: GemmProblem, launch: Launch, x, w, y) -> tuple:
    """Kernel argument tuple in :func:`arg_names` order.

    Args:
        problem: the instance; launch: from :meth:`GemmFamily.launch` (T = ``launch.tokens``).
        x: bf16 [T, ldx] device array (uint16 storage); w: bf16 [N_w, K]; y: fp32 [T, N] (store_f32) or
            bf16 [T, N] (swiglu_bf16). Pointers are passed through.
    """
    return (x, w, y, np.int32(launch.tokens), np.int32(problem.n), np.int32(problem.k),
            np.int32(problem.x_stride), np.int32(group_m_for(launch)))


# ------------------------------------------------------------------------------------------------
# numpy reference (fp64 math on the bf16 values)
# ------------------------------------------------------------------------------------------------


def reference(problem: GemmProblem, x, w, xp=np):
    """Reference output in fp64 on the same bf16 operand values.

    Args:
        problem: the instance.
        x: [T, K] (or [T, >= K], first K columns used) bf16 (``ml_dtypes.bfloat16``) or a float array of
            bf16 values. w: [N_w, K] same.
        xp: array module (``numpy``; ``cupy`` evaluates the same fp64 math on the GPU for large shapes,
            with x and w given as float arrays).

    Returns:
        [T, N] float64: ``x @ w.T`` (store_f32) or ``silu(gate) * up`` (swiglu_bf16), before any rounding
        of the output (compare with ``ninferc.ir.tolerances.GEMM`` / ``GEMM_BF16_OUT``).

    Raises:
        PlanError: operand shapes do not match the problem.
    """
    x64 = xp.asarray(x).astype(xp.float64)
    w64 = xp.asarray(w).astype(xp.float64)
    if x64.ndim != 2 or x64.shape[1] < problem.k or w64.shape != (problem.w_rows, problem.k):
        raise PlanError(
            f"gemm reference: expected x [T, >={problem.k}] and w [{problem.w_rows}, {problem.k}], "
            f"got {x64.shape} and {w64.shape}"
        )
    acc = x64[:, : problem.k] @ w64.T
    if problem.epilogue == "store_f32":
        return acc
    gate, up = acc[:, : problem.n], acc[:, problem.n:]
    return gate / (1.0 + xp.exp(-gate)) * up


FAMILY = GemmFamily()
