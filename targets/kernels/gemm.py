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

Quantised W (``GemmProblem.wfmt``, formats of :mod:`ninferc.ir.quant`)
-----------------------------------------------------------------------
* ``bf16`` (default) as above.
* ``w8``: ``w`` = int8 codes ``[N_w, K]`` (K a multiple of 16), ``scales`` fp32 ``[N_w]``.
* ``w4``: ``w`` = uint8 ``[N_w, K/2]`` offset-binary nibbles (element 2j in the low nibble of byte j,
  ``q = nibble - 8``; K a multiple of 64), ``scales`` fp32 ``[N_w, K/64]`` (signed).

The weight the tensor cores see is ``bf16_rn(fl32(q * scale))``: the fp32 product of
:func:`ninferc.ir.quant.dequantize`, rounded once more to bf16 (RNE) because mma takes bf16 operands;
:func:`reference` rounds the same way, so the kernel's only error is the fp32 accumulation (same
tolerances as bf16 W). Codes and scales must be 16-byte / 4-byte aligned.

Fused dequantisation: each stage's W tile still lands in shared memory as bf16 in the same swizzled
layout, so the ldmatrix/mma code is the bf16 kernel's. Instead of ``cp.async`` of bf16 rows, each
thread reads its *units* (``kWqElems`` consecutive K of one W row; :meth:`GemmTile.wq_layout` mirrors the
template's choice: the widest of 16/8/4-byte loads that covers whole 16-byte bf16 chunks and divides
the stage evenly among the threads -- w8 16 B = 16 K, w4 16 B = 32 K or 8 B = 16 K) with read-only
register loads, converts them in registers (prmt into the fp32 ``2^23 + code`` pattern, exact subtract,
fp32 multiply by the row's / group's scale, ``cvt.rn.bf16x2``) and stores 16-byte chunks
(``st.shared.v4``, conflict-free under the swizzle). Register double-buffering keeps the global loads
off the critical path: iteration ``kt`` issues the code loads of k-tile ``kt + stages - 1`` before its mma
work and dequantises + stores them after it (X keeps its ``cp.async`` pipeline). A k-tile (bk <= 64, aligned)
lies inside one w4 group, so one scale per unit. Shared memory is unchanged (:meth:`GemmTile.smem_bytes`);
the extra registers (codes + scale per unit) are read from the cubin like any other variant's and enter
the stage/tile choice through the occupancy calculator.

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

Hopper routes (``wgmma_<bm>x<bn>x64``, :data:`WGMMA_TILES`; :data:`WGMMA_ARCHS` only, every weight format): template
``gemm_wgmma.cu.j2``, the same contract, arguments, epilogues and rasterisation, one warpgroup per 64 tile
rows issuing ``wgmma.mma_async.m64n<bn>k16`` straight from the 128-byte-swizzled shared tiles (no ldmatrix,
accumulators in registers), fed by the same zero-filling ``cp.async`` loads; quantised W is dequantised into the
same shared layout by the mma.sync kernel's code (``gemm_wq.inc.j2``), its codes loaded one k-tile ahead and
stored while the current k-tile's wgmma runs. They join the candidates of the
cost rule above (their stage counts :data:`WGMMA_STAGES`), so a plan for sm_90 takes them where the model
says and any other target never compiles them (:meth:`GemmFamily.variants` with the target's arch).

Runtime arguments (:func:`arg_names`, :func:`kernel_args`): ``x, w, y, t, n_out, k, ldx, group_m`` --
three pointers then five int32 (bf16 W); quantised W adds the fp32 scales pointer after ``w``:
``x, w, scales, y, t, n_out, k, ldx, group_m``.

Identity: the template parameter ``wfmt`` exists only for quantised W, so bf16 kernels keep their URIs
(``gemm__bk32_bm128_bn128_store_f32_stages3_th256_warps_m2_warps_n4``) and byte-identical rendered sources;
quantised ones end in ``_wfmt-w8`` / ``_wfmt-w4``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.quant import GROUP_SIZE as W4_GROUP
from ninferc.ir.quant import dequantize_codes
from ninferc.targets.arch import ARCHS
from ninferc.targets.kernels._weights import WFORMATS, check_weight_k
from ninferc.targets.plan import KernelSpec, Launch, PlanContext

EPILOGUES = ("store_f32", "swiglu_bf16")
CODE_ELEMS_PER_BYTE = {"w8": 1, "w4": 2}
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
    kind: str = "mma"

    @property
    def threads(self) -> int:
        """Threads per CTA (warps_m * warps_n * 32)."""
        return self.warps_m * self.warps_n * WARP

    @property
    def route(self) -> str:
        """Route name, ``mma_<bm>x<bn>x<bk>_w<warps_m>x<warps_n>`` or ``wgmma_<bm>x<bn>x<bk>``."""
        if self.kind == "wgmma":
            return f"wgmma_{self.bm}x{self.bn}x{self.bk}"
        return f"mma_{self.bm}x{self.bn}x{self.bk}_w{self.warps_m}x{self.warps_n}"

    def smem_bytes(self, stages: int) -> int:
        """Dynamic shared memory of the pipeline: stages * (bm + bn) * bk bf16 (the same for quantised W:
        its tile is stored in shared memory as bf16); wgmma tiles add :data:`WGMMA_ALIGN` bytes of slack so the
        kernel can start its tiles on a 1024-byte boundary (the 128-byte swizzle atom)."""
        slack = WGMMA_ALIGN if self.kind == "wgmma" else 0
        return stages * (self.bm + self.bn) * self.bk * 2 + slack

    def wq_layout(self, wfmt: str) -> tuple[int, int, int] | None:
        """How the template loads a quantised W tile (mirrors its ``wq_fits``/``kWqBytes``).

        Returns:
            ``(load_bytes, k_elems, units_per_thread)``: each thread issues ``units_per_thread`` loads of
            ``load_bytes`` per stage, each covering ``k_elems`` consecutive K of one W row -- the widest of
            16, 8, 4 bytes whose ``k_elems`` is a multiple of 8 dividing ``bk`` and whose ``bn * bk / k_elems``
            units divide evenly among the threads; None for ``bf16`` or when no width fits.
        """
        if wfmt == "bf16":
            return None
        per_byte = CODE_ELEMS_PER_BYTE[wfmt]
        for nbytes in (16, 8, 4):
            elems = nbytes * per_byte
            if elems >= VEC and self.bk % elems == 0 and (self.bn * (self.bk // elems)) % self.threads == 0:
                return nbytes, elems, self.bn * (self.bk // elems) // self.threads
        return None

    def check(self, epilogue: str, wfmt: str = "bf16") -> None:
        """Raise PlanError if the template's static_asserts would reject this tile (for ``wfmt``)."""
        if self.kind == "wgmma":
            return self._check_wgmma(epilogue, wfmt)
        if self.kind != "mma":
            raise PlanError(f"gemm tile kind {self.kind!r}: expected 'mma' or 'wgmma'")
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
        if wfmt != "bf16" and not bad and self.wq_layout(wfmt) is None:
            bad.append(f"{wfmt}: no 16/8/4-byte code load divides the {self.bn}x{self.bk} W tile evenly "
                       f"among {self.threads} threads")
        if bad:
            raise PlanError(f"gemm tile {self.bm}x{self.bn}x{self.bk}: " + "; ".join(bad))

    def _check_wgmma(self, epilogue: str, wfmt: str) -> None:
        """The static_asserts of ``gemm_wgmma.cu.j2``: one warpgroup (4 warps of 16 rows) per 64 tile rows,
        wgmma N = bn in [16, 256] step 16 (PTX ISA wgmma shapes m64nNk16), bk = 64; quantised W needs a code
        load layout (:meth:`wq_layout`, the same rule as the mma.sync kernel: ``gemm_wq.inc.j2``)."""
        bad = []
        if self.bm % WGMMA_M or self.bm < WGMMA_M:
            bad.append(f"bm = {self.bm} must be a positive multiple of {WGMMA_M} (one warpgroup per 64 rows)")
        if self.warps_m != self.bm // 16 or self.warps_n != 1:
            bad.append(f"warps {self.warps_m}x{self.warps_n} must be {self.bm // 16}x1 (4 warps of 16 rows per "
                       f"warpgroup)")
        if self.bn % 16 or not 16 <= self.bn <= WGMMA_MAX_N:
            bad.append(f"bn = {self.bn} must be a multiple of 16 in [16, {WGMMA_MAX_N}] (the wgmma N)")
        if epilogue == "swiglu_bf16" and (self.bn // 2) % 8:
            bad.append(f"swiglu needs bn/2 = {self.bn // 2} to be a multiple of 8")
        if self.bk != 64:
            bad.append(f"bk = {self.bk} must be 64 (one 128-byte swizzle row)")
        rows = self.threads // (self.bk // VEC)  # rows one cp.async pass of all threads covers
        if not bad and ((self.bn // 2) % rows or self.bm % rows):
            bad.append(f"bm = {self.bm} and bn/2 = {self.bn // 2} must be multiples of the {rows} rows one "
                       f"cp.async pass of {self.threads} threads covers")
        if wfmt != "bf16" and not bad and self.wq_layout(wfmt) is None:
            bad.append(f"{wfmt}: no 16/8/4-byte code load divides the {self.bn}x{self.bk} W tile evenly "
                       f"among {self.threads} threads")
        if bad:
            raise PlanError(f"gemm wgmma tile {self.bm}x{self.bn}x{self.bk}: " + "; ".join(bad))


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

WGMMA_M = 64
"""Rows of one ``wgmma.mma_async`` (m64nNk16; PTX ISA "Asynchronous Warpgroup Level Matrix Multiply")."""
WGMMA_MAX_N = 256
"""Largest wgmma N for bf16 inputs (PTX ISA wgmma shapes: N = 8..256 in steps of 8; the template needs 16)."""
WGMMA_ALIGN = 1024
"""Alignment of a 128-byte-swizzled wgmma operand in shared memory, bytes (PTX ISA "Shared Memory Matrix
Layout": the swizzle pattern repeats every 8 rows of 128 B)."""
WGMMA_ARCHS: tuple[str, ...] = tuple(a.name for a in ARCHS.values() if a.wgmma)
"""Targets with ``wgmma`` (:attr:`Arch.wgmma`; PTX ISA: ``wgmma.mma_async`` requires ``sm_90a``; the sources carry
:data:`ninferc.targets.nvrtc.ARCH_SPECIFIC_MARKER`, so the sm_90 target compiles them for sm_90a)."""

WGMMA_TILES: tuple[GemmTile, ...] = (
    GemmTile(128, 256, 64, 8, 1, 1.8, "wgmma"),  # 2 warpgroups, each m64 x n256 (128 fp32 accumulators)
)
"""Hopper routes (:data:`WGMMA_ARCHS` only; bf16, w8 and w4 W). Efficiency relative to the 128x128 mma.sync tile from the
H200 throughput report (bench/NOTES.md run 59): 4 stages of 128x256 ran the 27B projections at T = 8,192 at
494-677 TFLOP/s (mma.sync 128x128: ~340). A 128x128 wgmma tile measured slower on every 27B shape at T = 1,024
and 8,192 (2 CTAs/SM at 3 stages: 335-495 TFLOP/s; 4 stages: 425-498) and is not routed."""

WGMMA_STAGES: tuple[int, ...] = (4,)
"""Pipeline depths of the wgmma tiles (the template needs >= 3: the stage refilled at k-tile kt is the one read
at kt - 2). 4 stages = 193 KiB of the 227 KiB opt-in: 3 stages ran 25-40 % slower in run 59."""

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
        wfmt: weight format ``"bf16" | "w8" | "w4"`` (module docstring; w8 needs K % 16 == 0, w4
            K % 64 == 0).

    Raises:
        PlanError: a value outside its range (names the value and the limit).
    """

    k: int
    n: int
    epilogue: str = "store_f32"
    ldx: int | None = None
    wfmt: str = "bf16"

    def __post_init__(self):
        check_weight_k("gemm", self.k, self.wfmt)
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

    @property
    def quantized(self) -> bool:
        """True for ``w8`` / ``w4`` weights (the kernel then takes a ``scales`` pointer)."""
        return self.wfmt != "bf16"

    @property
    def w_shape(self) -> tuple[int, int]:
        """Shape of the ``w`` argument: bf16 / w8 ``(w_rows, k)``, w4 ``(w_rows, k // 2)`` (packed bytes)."""
        return (self.w_rows, self.k // 2) if self.wfmt == "w4" else (self.w_rows, self.k)

    @property
    def scales_shape(self) -> tuple[int, ...] | None:
        """Shape of the fp32 ``scales`` argument: w8 ``(w_rows,)``, w4 ``(w_rows, k // 64)``, bf16 None."""
        if self.wfmt == "w8":
            return (self.w_rows,)
        if self.wfmt == "w4":
            return (self.w_rows, self.k // W4_GROUP)
        return None


class GemmFamily:
    """The ``gemm`` kernel family (see module docstring).

    Args:
        tiles: mma.sync tile routes (default :data:`TILES`). stages: pipeline depths per tile (default
            :data:`STAGES`). wgmma_tiles / wgmma_stages: the Hopper routes (default :data:`WGMMA_TILES` /
            :data:`WGMMA_STAGES`), compiled and routed only on :data:`WGMMA_ARCHS`.

    Raises:
        PlanError: a tile the template cannot build, or a stage count < 2 (< 3 for wgmma).
    """

    name = "gemm"
    template = "gemm.cu.j2"
    arch_variants = True  # variants(problem, arch): see ninferc.targets.plan.family_variants
    wgmma_template = "gemm_wgmma.cu.j2"
    templates = (template, wgmma_template)  # every template this family renders

    def __init__(self, tiles: tuple[GemmTile, ...] = TILES, stages: tuple[int, ...] = STAGES,
                 wgmma_tiles: tuple[GemmTile, ...] = WGMMA_TILES, wgmma_stages: tuple[int, ...] = WGMMA_STAGES):
        if not tiles or any(s < 2 for s in stages) or not stages:
            raise PlanError(f"gemm: need at least one tile and stage counts >= 2, got {tiles}, {stages}")
        if wgmma_tiles and (not wgmma_stages or any(s < 3 for s in wgmma_stages)):
            raise PlanError(f"gemm: wgmma stage counts must be >= 3, got {wgmma_stages}")
        for t in tiles:
            if t.kind != "mma":
                raise PlanError(f"gemm: {t.route} is not an mma.sync tile (pass it in wgmma_tiles)")
            for ep in EPILOGUES:
                for wf in WFORMATS:
                    t.check(ep, wf)
        for t in wgmma_tiles:
            if t.kind != "wgmma":
                raise PlanError(f"gemm: {t.route} is not a wgmma tile")
            for ep in EPILOGUES:
                for wf in WFORMATS:
                    t.check(ep, wf)
        self.tiles = tuple(tiles)
        self.stages = tuple(stages)
        self.wgmma_tiles = tuple(wgmma_tiles)
        self.wgmma_stages = tuple(wgmma_stages)

    def uses_wgmma(self, problem: GemmProblem, arch) -> bool:
        """True when the wgmma routes apply: a target in :data:`WGMMA_ARCHS` (``arch`` a name or
        :class:`~ninferc.targets.arch.Arch`; None = unknown target, False), any weight format."""
        name = getattr(arch, "name", arch)
        return bool(self.wgmma_tiles) and name in WGMMA_ARCHS

    def _routes(self, problem: GemmProblem, arch) -> list[tuple[GemmTile, tuple[int, ...]]]:
        routes = [(t, self.stages) for t in self.tiles]
        if self.uses_wgmma(problem, arch):
            routes += [(t, self.wgmma_stages) for t in self.wgmma_tiles]
        return routes

    # ---- identity ------------------------------------------------------------------------------

    def spec(self, problem: GemmProblem, tile: GemmTile, stages: int) -> KernelSpec:
        """The kernel for (epilogue, weight format, tile, stages); ``wfmt`` is a parameter only when the
        weights are quantised (bf16 URIs and sources are those of the kernel before quantisation). wgmma
        tiles render ``gemm_wgmma.cu.j2`` (parameter ``kind = "wgmma"``, no warp grid).

        Raises:
            PlanError: a tile the template cannot build for this problem (:meth:`GemmTile.check`).
        """
        if tile.kind == "wgmma":
            tile.check(problem.epilogue, problem.wfmt)
            params = {"threads": tile.threads, "bm": tile.bm, "bn": tile.bn, "bk": tile.bk, "stages": stages,
                      "epilogue": problem.epilogue, "kind": "wgmma"}
            if problem.quantized:
                params["wfmt"] = problem.wfmt
            return KernelSpec.make(self.name, self.wgmma_template, params, tile.threads, cooperative=False)
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
        if problem.quantized:
            params["wfmt"] = problem.wfmt
        return KernelSpec.make(self.name, self.template, params, tile.threads, cooperative=False)

    def variants(self, problem: GemmProblem, arch=None) -> list[KernelSpec]:
        """Every kernel a launch for ``problem`` on ``arch`` may use: each tile x each stage count, plus the
        wgmma tiles where :meth:`uses_wgmma` (``arch`` None: the portable mma.sync variants only)."""
        return [self.spec(problem, t, s) for t, stages in self._routes(problem, arch) for s in stages]

    def sample_problems(self) -> list[GemmProblem]:
        """One small problem per epilogue and weight format (covers every template parameter value)."""
        return [GemmProblem(256, 704, e, wfmt=f) for f in WFORMATS for e in EPILOGUES]

    @staticmethod
    def tile_of(spec: KernelSpec) -> GemmTile:
        """Reconstruct the :class:`GemmTile` of a spec (efficiency not recorded: 0)."""
        p = dict(spec.params)
        if p.get("kind") == "wgmma":
            return GemmTile(p["bm"], p["bn"], p["bk"], p["bm"] // 16, 1, 0.0, "wgmma")
        return GemmTile(p["bm"], p["bn"], p["bk"], p["warps_m"], p["warps_n"], 0.0)

    # ---- geometry ------------------------------------------------------------------------------

    @staticmethod
    def out_per_cta(problem: GemmProblem, tile: GemmTile) -> int:
        """Output columns one CTA produces: bn, or bn/2 for swiglu."""
        return tile.bn // 2 if problem.epilogue == "swiglu_bf16" else tile.bn

    def grid(self, problem: GemmProblem, tokens: int, tile: GemmTile) -> int:
        """CTAs: ceil(T / bm) * ceil(N / out_per_cta)."""
        return -(-tokens // tile.bm) * -(-problem.n // self.out_per_cta(problem, tile))

    def _best_stages(self, problem: GemmProblem, tile: GemmTile, stages: tuple[int, ...], ctx: PlanContext):
        best = None
        for s in stages:
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
        for order, (tile, stages) in enumerate(self._routes(problem, ctx.arch)):
            best = self._best_stages(problem, tile, stages, ctx)
            if best is None:
                continue
            _, spec, smem = best
            ctas = self.grid(problem, tokens, tile)
            cost = -(-ctas // ctx.sms) * tile.bm * tile.bn / tile.efficiency
            cands.append((cost, -tile.bm * tile.bn, order, tile, spec, smem, ctas))
        if not cands:
            raise PlanError(
                f"gemm (K={problem.k}, N={problem.n}, {problem.epilogue}, {problem.wfmt}) on {ctx.arch.name}: no tile/stage "
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
    """The kernel's parameters in order: ``x, w, y`` (pointers) then ``t, n_out, k, ldx, group_m`` (int32);
    quantised W (``w8``/``w4``): ``x, w, scales, y`` then the same five int32."""
    if problem.quantized:
        return ("x", "w", "scales", "y", "t", "n_out", "k", "ldx", "group_m")
    return ("x", "w", "y", "t", "n_out", "k", "ldx", "group_m")


def group_m_for(launch: Launch) -> int:
    """The rasterisation group the launch uses: min(GROUP_M, M-tiles)."""
    bm = launch.kernel.param("bm")
    return max(1, min(GROUP_M, -(-launch.tokens // bm)))


def kernel_args(problem: GemmProblem, launch: Launch, x, w, y, scales=None) -> tuple:
    """Kernel argument tuple in :func:`arg_names` order.

    Args:
        problem: the instance; launch: from :meth:`GemmFamily.launch` (T = ``launch.tokens``).
        x: bf16 [T, ldx] device array (uint16 storage); w: bf16 [N_w, K] (uint16), or the codes of a
            quantised W (w8: int8 [N_w, K]; w4: uint8 [N_w, K/2]); y: fp32 [T, N] (store_f32) or bf16 [T, N]
            (swiglu_bf16); scales: fp32 (w8: [N_w]; w4: [N_w, K/64]) for quantised W, None for bf16.
            Pointers are passed through.

    Raises:
        PlanError: ``scales`` missing for quantised W, or given for bf16 W.
    """
    tail = (np.int32(launch.tokens), np.int32(problem.n), np.int32(problem.k), np.int32(problem.x_stride),
            np.int32(group_m_for(launch)))
    if problem.quantized:
        if scales is None:
            raise PlanError(f"gemm kernel_args: wfmt = {problem.wfmt} needs the fp32 scales "
                            f"{list(problem.scales_shape)}")
        return (x, w, scales, y) + tail
    if scales is not None:
        raise PlanError("gemm kernel_args: scales given for bf16 weights (wfmt = bf16 takes none)")
    return (x, w, y) + tail


# ------------------------------------------------------------------------------------------------
# numpy reference (fp64 math on the bf16 values)
# ------------------------------------------------------------------------------------------------


def _round_bf16(f, xp):
    """fp32 array -> fp32 array of the nearest-even bf16 values (finite inputs; bit arithmetic, so numpy
    and cupy give the same bits)."""
    u = xp.ascontiguousarray(f, dtype=xp.float32).view(xp.uint32)
    r = (u + xp.uint32(0x7FFF) + ((u >> 16) & xp.uint32(1))) & xp.uint32(0xFFFF0000)
    return r.view(xp.float32)


def dequantize_weight(problem: GemmProblem, w, scales=None, xp=np):
    """The weight the kernel's tensor cores multiply, as fp32 values [N_w, K].

    Args:
        problem: the instance (``wfmt`` selects the format).
        w: bf16 W [N_w, K] (returned as fp32, unchanged values); or w8 int8 codes [N_w, K]; or w4 uint8
            packed codes [N_w, K/2]; or a :class:`ninferc.ir.quant.QuantTensor` (its codes and scales).
        scales: fp32 w8 [N_w] / w4 [N_w, K/64]; None for bf16 or a QuantTensor.
        xp: ``numpy`` or ``cupy``.

    Returns:
        fp32 [N_w, K]: ``bf16_rn(fl32(q * scale))`` for quantised formats (``ninferc.ir.quant.dequantize``
        then one round-to-nearest-even to bf16, as the kernel stores its shared-memory tile).

    Raises:
        PlanError: missing scales, or codes/scales of the wrong shape for the problem.
    """
    if hasattr(w, "codes") and hasattr(w, "scales"):
        w, scales = w.codes, w.scales
    if not problem.quantized:
        return xp.asarray(w).astype(xp.float32)
    if scales is None:
        raise PlanError(f"gemm: wfmt = {problem.wfmt} needs scales {list(problem.scales_shape)}")
    codes, sc = xp.asarray(w), xp.asarray(scales, dtype=xp.float32)
    if tuple(codes.shape) != problem.w_shape or tuple(sc.shape) != problem.scales_shape:
        raise PlanError(f"gemm {problem.wfmt}: expected codes {list(problem.w_shape)} and scales "
                        f"{list(problem.scales_shape)}, got {list(codes.shape)} and {list(sc.shape)}")
    return _round_bf16(dequantize_codes(problem.wfmt, codes, sc, xp), xp)


def reference(problem: GemmProblem, x, w, xp=np, scales=None):
    """Reference output in fp64 on the same bf16 operand values.

    Args:
        problem: the instance.
        x: [T, K] (or [T, >= K], first K columns used) bf16 (``ml_dtypes.bfloat16``) or a float array of
            bf16 values. w: [N_w, K] same (bf16 W); for quantised W the codes (w8 int8 [N_w, K], w4 uint8
            [N_w, K/2]) or a ``QuantTensor``, dequantised by :func:`dequantize_weight` (``bf16_rn(fl32(q *
            scale))``, the values the kernel's tensor cores see) before the same math.
        xp: array module (``numpy``; ``cupy`` evaluates the same fp64 math on the GPU for large shapes,
            with x and w given as float arrays).
        scales: fp32 scales for quantised W (w8 [N_w], w4 [N_w, K/64]); None for bf16 or a QuantTensor.

    Returns:
        [T, N] float64: ``x @ w.T`` (store_f32) or ``silu(gate) * up`` (swiglu_bf16), before any rounding
        of the output (compare with ``ninferc.ir.tolerances.GEMM`` / ``GEMM_BF16_OUT``).

    Raises:
        PlanError: operand shapes do not match the problem; scales missing for quantised W.
    """
    if problem.quantized:
        w = dequantize_weight(problem, w, scales, xp)
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
