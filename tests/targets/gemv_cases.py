"""The forced ``gemv`` cases of the GPU tests (``test_gemv_gpu.py``), shared with the CPU check that every
one of them plans on the H200 (``test_gemv_routes.py``)."""

from ninferc.targets.kernels.gemv import GemvFamily, GemvProblem, GemvTuning

QKV = GemvProblem(5120, 12288 + 2048, "store")
DOWN = GemvProblem(17408, 5120, "residual_add")
O_PROJ = GemvProblem(6144, 5120, "residual_add")
GATE_UP = GemvProblem(5120, 17408, "swiglu")
MID_SWIGLU = GemvProblem(5120, 2048, "swiglu")
NARROW = GemvProblem(2048, 256, "residual_add")  # 8 row blocks at 256 threads: many K splits
TINY = [GemvProblem(256, 704, e) for e in ("store", "residual_add", "swiglu")]
# the folded norm's two halves at the 27B shapes (and the fixture's, N = 704 / K = 256)
NORM_CASES = [GemvProblem(17408, 5120, "add_norm_parts", f) for f in ("bf16", "w8", "w4")] + [
    GemvProblem(6144, 5120, "add_norm_parts", "bf16"), GemvProblem(704, 256, "add_norm_parts", "bf16", unit_offset=False),
    GemvProblem(704, 256, "add_norm_parts", "w4"), GemvProblem(5120, 17408, "swiglu", "bf16", in_norm="parts"),
    GemvProblem(5120, 16480, "store", "w8", in_norm="parts"), GemvProblem(5120, 14336, "store", "w4", in_norm="parts"),
    GemvProblem(256, 704, "swiglu", "w8", in_norm="parts")]

# a cooperative grid holds one CTA per row block and split, all resident at once: the forced coop cases use shapes
# whose grids fit the H200's cap (132 SMs x CTAs/SM); tests/targets/test_gemv_routes.py plans every case for it on the
# CPU, so a case that stops fitting fails there, not as a skip here
DOWN_NARROW = GemvProblem(17408, 2048, "residual_add")  # 32 row blocks at 512 threads: room for a 2-way K split
TINY_NORM_SWIGLU = GemvProblem(256, 704, "swiglu", "bf16", in_norm="parts")
#: the family the forced cases are made with: the registered one's, but bf16 on fp32 FMAs at every token tile (the
#: registered family takes bf16's 4- and 8-token tiles on tensor cores, plain mode only, since 2026-12-06; those have
#: their own forced cases, ``test_gemv_gpu.py``'s ``BF16_MMA``), so that the cases keep covering the FMA kernels'
#: cooperative and multi-token routes
FORCED_FAMILY = GemvFamily(GemvTuning(bf16_mma_tiles=()))
FORCED = [  # (problem, T, threads, mode, splits or None = most that fit, k_warps)
    (QKV, 1, 128, "plain", None, 2), (O_PROJ, 2, 512, "coop", 1, 1),
    (DOWN, 1, 256, "coop", None, 1), (DOWN_NARROW, 3, 512, "coop", 2, 1), (DOWN, 5, 256, "plain", None, 4),
    (O_PROJ, 4, 256, "coop", None, 1), (O_PROJ, 1, 128, "plain", None, 4), (GATE_UP, 1, 128, "plain", None, 1),
    (GATE_UP, 2, 256, "plain", None, 2), (MID_SWIGLU, 2, 256, "coop", None, 1), (MID_SWIGLU, 1, 512, "coop", 2, 1),
    (NARROW, 1, 256, "coop", None, 1), (NARROW, 6, 512, "coop", None, 1), (NARROW, 1, 128, "plain", None, 4),
    (TINY[0], 7, 256, "coop", None, 1), (TINY[1], 1, 512, "coop", None, 1), (TINY[2], 9, 128, "plain", None, 2),
    (TINY[2], 3, 512, "coop", 1, 1), (TINY[0], 1, 256, "plain", None, 4),
    (NORM_CASES[0], 1, 128, "plain", None, 4), (NORM_CASES[0], 5, 128, "plain", None, 1),
    (NORM_CASES[6], 3, 256, "plain", None, 2), (TINY_NORM_SWIGLU, 8, 512, "coop", None, 1),
]
