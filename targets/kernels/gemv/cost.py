"""The GEMV's cost model: :func:`estimate_us`, the modelled time of one launch, by which the family picks a variant
(the package docstring, :mod:`ninferc.targets.kernels.gemv`, "Routes and the cost model", says how it was fitted). Its
inputs are the variant, the compiled kernel's resident CTAs per SM, the SM count and the DRAM bandwidth per SM (the
SKU's, the device's, or the arch's typical figure: ninferc.targets.skus); its constants below were fitted on the H200.
"""

from __future__ import annotations

import math

from ninferc.ir.quant import GROUP_SIZE
from ninferc.targets.kernels.gemv.mma import BF16_MMA_UNROLL, MMA_CHUNK, MMA_ROWS, W8_MMA_UNROLL, mma_stages
from ninferc.targets.kernels.gemv.problem import WARP, GemvProblem

#: loaded DRAM latency, microseconds: bytes in flight needed = bandwidth x this (Little's law)
LATENCY_US = 1.0
#: per-warp fixed cost in K steps (start-up, x loads, warp reduction, epilogue)
OVERHEAD_STEPS = 3.0
#: extra per-warp cost in K steps per doubling of k_warps (the shared-memory reduction and its barrier)
REDUCE_STEPS = 1.0
#: microseconds per K step of a CTA running in the last, partly filled wave
TAIL_STEP_US = 0.2
#: nanoseconds per x element (and token) one dp CTA's staging costs its SM: on the H200 (bench/NOTES.md run 78,
#: ``bench/results/dp_stream_probe_h200_0fd6675.json``) skipping the staging saved 4.8 us of w4 down (K = 17,408)
#: and 1.8 us of GDN out (K = 6,144), each at 320 CTAs of 256 threads = 2.4 per SM: 0.115 / 0.122 ns
DP_STAGE_NS = 0.12
#: microseconds one boundary between two work items of a persistent dp CTA costs without the carry: on the H200
#: (bench/NOTES.md run 84) the carry took 640-thread CTAs of w4 gate|up (7 items each) from 35.9 to 33.1 us, GDN in
#: (4 items) 20.0 to 19.0, q|k|v (3 items) 16.3 to 15.7: 0.47 / 0.33 / 0.30 us per boundary
DP_ITEM_US = 0.4


def estimate_us(problem: GemvProblem, tokens: int, *, threads: int, k_warps: int, rows_per_warp: int, tile: int,
                ctas_per_sm: int, sms: int, bandwidth_per_sm_gbs: float, splits: int = 1, mma: bool = False,
                dp: bool = False, items_per_cta: int = 1, carry: bool = False) -> float:
    """Modelled time of one launch, microseconds (module docstring, "Routes and the cost model").

    Args:
        problem: the GEMV. tokens: T. threads, k_warps, rows_per_warp, tile: the variant (tile = max_tokens).
        ctas_per_sm: the variant's resident CTAs per SM (occupancy calculator). sms: SM count.
        bandwidth_per_sm_gbs: DRAM bandwidth per SM, GB/s. splits: K splits of a cooperative launch (1 = plain).
        mma: a tensor-core variant. w4: a warp step is the ``(mma_stages - 1) x MMA_CHUNK`` scale groups of its
            16 rows its cp.async ring holds in flight (4 KiB at 3 stages) instead of one 16-byte vector per lane
            and row; w8 / bf16: ``W8_MMA_UNROLL`` / ``BF16_MMA_UNROLL`` 64-element blocks of its 16 rows (4 / 8 KiB).
        dp: an integer-dot-product variant: every resident CTA first converts its tokens' whole x (``tile x K``
            elements) before it streams, so each SM pays that once per CTA it holds -- ``DP_STAGE_NS`` per element
            and CTA per SM, on top of the streaming time.
        items_per_cta: work items each CTA of a persistent launch runs in a row; each boundary between two costs
            ``DP_ITEM_US`` (the next item's first weights are requested only after the previous item's epilogue
            and barrier) unless ``carry`` (the variant loads them in the previous item's last step).

    Returns:
        streaming time (weight bytes x token chunks at the bandwidth the resident warps can sustain) + the
        last wave's tail (+ the barrier and reduction pass when ``splits > 1``; + the x staging of a dp
        variant). Only its ordering between variants is used.
    """
    warps = threads // WARP
    groups = warps // k_warps
    outs = groups * (rows_per_warp // 2 if problem.epilogue == "swiglu" else rows_per_warp)
    chunks = -(-tokens // tile)
    ctas = -(-problem.n // outs) * chunks * splits
    cap = max(1, ctas_per_sm) * sms
    if mma and problem.wfmt in ("w8", "bf16"):
        unroll, elem_bytes = (W8_MMA_UNROLL, 1) if problem.wfmt == "w8" else (BF16_MMA_UNROLL, 2)
        steps = -(-(problem.k // 64) // (k_warps * splits * unroll))
        step_bytes = MMA_ROWS * 64 * elem_bytes * unroll
    elif mma:
        inflight_groups = (mma_stages(threads, tile) - 1) * MMA_CHUNK
        steps = -(-(problem.k // GROUP_SIZE) // (k_warps * splits * inflight_groups))
        step_bytes = MMA_ROWS * GROUP_SIZE // 2 * inflight_groups
    else:
        steps = -(-(problem.k // problem.k_per_vec) // (k_warps * WARP * splits))
        step_bytes = rows_per_warp * 16 * WARP
    over = OVERHEAD_STEPS + REDUCE_STEPS * math.log2(k_warps)
    bw = bandwidth_per_sm_gbs * sms * 1e3  # bytes per microsecond
    inflight = min(ctas, cap) * warps * step_bytes * steps / (steps + over)
    stream = problem.weight_bytes * chunks / (bw * min(1.0, inflight / (bw * LATENCY_US)))
    waves = ctas / cap
    tail = (steps + over) * TAIL_STEP_US * ((math.ceil(waves) - waves + 1) if waves > 1 else 1.0)
    barrier = (2 + splits) * LATENCY_US if splits > 1 else 0.0
    stage = min(ctas, cap) / sms * tile * problem.k * DP_STAGE_NS * 1e-3 if dp else 0.0
    boundaries = 0.0 if carry else (max(1, items_per_cta) - 1) * DP_ITEM_US
    return stream + tail + barrier + stage + boundaries
