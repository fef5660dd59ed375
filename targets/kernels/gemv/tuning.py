"""The GEMV family's tuning options (:class:`GemvTuning`): which variants it compiles and which engine takes a
problem at each token tile. Frozen and validated; :class:`~ninferc.targets.kernels.gemv.family.GemvFamily` takes one
(its constructor's only argument).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ninferc.errors import PlanError
from ninferc.targets.kernels.gemv.dp import DP_X_BYTES
from ninferc.targets.kernels.gemv.mma import MMA_MAX_TOKENS
from ninferc.targets.kernels.gemv.problem import EPILOGUES, WARP


@dataclass(frozen=True)
class GemvTuning:
    """Tuning options of the GEMV family (every field has the planned default; the measurements behind each default
    are cited where it is described).

    Attributes:
        plain_shapes: (threads, k_warps) of the plain variants (threads a multiple of 32; k_warps divides the
            CTA's warps). Default: 128 threads with 1, 2 or 4 warps per row group, 256 threads with 2 or 4 --
            on the H200 sweep these five hold the fastest variant of every 27B decode shape within 0.5 %
            (512-thread CTAs and 8-16 warps per row group never won).
        coop_threads: thread counts of the cooperative split-K variants (k_warps 1).
        token_tiles: the ``max_tokens`` variants (tokens per CTA, a template parameter; larger T adds token chunks
            to the grid). A launch for T tokens uses the smallest tile >= T, else the largest (:meth:`GemvFamily.tile_for`):
            one-sequence decode (T = 1) gets the one-token kernel, whose single-token accumulators need fewer
            registers (w8 / w4: H200, runs 12-19: 27B w8 decode 84.5 -> 106 tok/s). The 8-token tile (since
            2026-12-05) streams the weights once for 5-8 tokens, where the 4-token tile streams them twice (two token
            chunks): 27B on an H100, ``bench/batch_ab.py --batch 8 --tokens-per-seq 6`` (bench/NOTES.md run 209,
            ``bench/results/batch_ab_{bf16,w8,w4}_tok8_h100_6269543.json``): bf16 8-sequence step 43.71 -> 42.49 ms,
            one sequence x 6 tokens through the verify program 41.32 -> 35.21 ms; w8 (with ``w8_mma_tiles`` 8)
            34.22 -> 32.47 and 31.97 -> 28.83 ms. w4 problems take ``w4_token_tiles`` instead.
        w4_token_tiles: the token tiles of w4 problems. Default (1, 4, 8), since 2026-12-06: the 8-token tile on
            tensor cores (``w4_mma_tiles``; its 128-thread CTA's rings, 51,200 B, in dynamic shared memory) streams
            the weights once for 5-8 tokens, where the 4-token tile streams them twice; on an H100 (bench/NOTES.md run
            246, ``bench/results/batch_ab_w4_t6_{tile8_,}h100_e9e0271.json``, one process each) the 27B 8-sequence
            step took 14.35 against 15.67 ms (557.4 against 510.6 tok/s), one sequence x 6 tokens through the verify
            program 13.39 against 15.48 ms, one sequence unchanged (148.03 / 147.97 tok/s). Before: (1, 4) -- at 8
            tokens the w4 FMA variants made the 8-sequence step 3.4x slower than two 4-token chunks on tensor cores
            (run 209: 15.45 -> 53.16 ms), and the mma variants' rings of 8 tokens' x did not fit static shared
            memory.
        rows_per_warp: W rows a warp accumulates at once (even), bf16 weights.
        quant_rows_per_warp: the same for w8 / w4 weights. Default 2, from the H200 sweep
            (runs 12-19's sweep, bench/results/gemv_sweep_h200_4086f82.json; 27B decode shapes, T = 1):
            with 2 rows a w4 warp needs 48 registers instead of 85-94 and the kernel time drops by 5-26 %.
        norm_rows_per_warp: the same for the add_norm_parts epilogue, every format. Default 2: on the H200 the
            bf16 27B down_proj / out_proj with it take 41 / 16 us against 62 / 24 us with 4 rows per warp at the
            same CTA shape (``bench/gemv_ksplit_sweep.py``, runs 27-34; 4 rows per warp are fine for the same
            GEMV with a plain residual add -- the difference was measured, not explained).
        prefetch_steps: K steps (16 bytes per lane per W row) each warp asks L2 to prefetch before its PDL
            wait (``prefetch.global.L2``; weights are constant); 0 = none. A template parameter only when
            not 1, so the default kernels keep their URI. Default 1 from same-process A/Bs on the H200
            (``bench/prefetch_ab.py``: bf16 0 -> 1 step 15.06 -> 14.83 ms/token; 4 and 8 steps slower).
        w4_mma_tiles: the token tiles whose w4 variants run on tensor cores (template ``mma``: 16 rows per warp,
            the dot products on mma.sync; every w4 variant of such a tile is an mma variant -- the cost model has
            no ALU term, so the two kinds are not compared by it). Default (4, 8); the 4-token tile from the H200 sweep
            (``bench/gemv_ksplit_sweep.py``, runs 35-43 run 42, every 27B decode shape, best variant of each kind,
            ``bench/results/gemv_ksplit_sweep_w4_t4_h200_5149fc8.json``): at T = 4 the mma variants take 28.2 /
            15.1 / 48.8 / 35.6 / 24.8 / 265 us (GDN in, GDN out, gate|up, down, q|k|v, LM head) against 51.3 /
            26.5 / 110.6 / 62.3 / 51.0 / 533 us on fp32 FMAs (1.7-2.3x); at T = 1 they are at parity or slower
            (gate|up 42.7 vs 40.5 us, down 25.4 vs 22.2; the 27B w4 decode 125.3 vs 131 tok/s), so the 1-token
            tile keeps the FMA path. The 8-token tile since 2026-12-06 (``w4_token_tiles``): every epilogue, as it is
            no dp tile.
        w8_mma_tiles: the token tiles whose w8 variants run on tensor cores (fp16 mma, module docstring), where K is
            a multiple of 64 (a long x is converted in segments of ``W8_MMA_X_BYTES``). Default none since 2026-12-06:
            every w8 tile is a dp tile (``w8_dp_tiles``), and a tile runs here only where no dp kernel serves it
            (:meth:`GemvFamily.fallback`, after :meth:`GemvFamily.chunk_fallback`). Before, (8,): the 8-token tile
            fills the m16n8k16 tile's n (run 209: the 8-sequence step on FMAs at that tile 38.07 ms, on tensor cores
            32.47, two 4-token chunks 34.22, the 4-token tile then on tensor cores too). The 4-token tile from the H200
            sweeps, against fp32 FMAs: at T = 4
            they win 1.5-1.6x where they fit (runs 45-55 run 47,
            ``bench/results/gemv_ksplit_sweep_w8_t4_h200_13d5dd2.json``, best of each kind, mma vs FMA: GDN in 33.0 vs
            52.6 us, gate|up 65.1 vs 99.9, q|k|v 30.8 vs 45.3, an LM head at w8 351 vs 537; GDN out and down, K = 6,144
            / 17,408, then still needed more than 40 KiB of x at 4 tokens and stayed on FMAs; since run 53 a long K is
            converted in segments); at T = 1 they are correct and slower (runs 45-55 run 46, ``bench/results/gemv_ksplit_sweep_w8_t1_h200_c8764ba.json``, best
            variant of each kind, mma vs FMA: gate|up 54.2 vs 45.4 us, down 31.9 vs 23.0, GDN in 27.1 vs 24.2, GDN
            out 13.2 vs 9.6, q|k|v 24.1 vs 20.3; 27B w8 decode 99.6 vs ~118 tok/s), like the w4 mma variants at
            T = 1: both tensor-core kernels stream at most ~3.3 TB/s there.
        bf16_mma_tiles: the token tiles whose bf16 variants run on tensor cores (bf16 mma, the weights as A fragments
            with no conversion, each lane's x fragments from global memory; K a multiple of 64, plain mode only).
            Default (4, 8), since 2026-12-06: on an H100 (bench/NOTES.md run 233,
            ``bench/results/batch_ab_bf16_t{4,6}_{now,mma4,mma48}_h100_c1b3c5a.json``, one process per setting) the
            27B 8-sequence step took 25.13 ms against 42.57 on FMAs (318.4 against 187.9 tok/s), one sequence x 6
            tokens through the verify program 24.74 against 34.20 ms (1.388x against 1.919x the one-token step); at
            4 tokens the 4-sequence step 20.38 against 21.42 ms, the prefill program 25.54 against 26.51 ms, the verify
            program 22.03 against 22.01 ms; one-sequence decode 56.09 tok/s both (the one-token kernels are the
            same). Written for issue 38 (the 4-token bf16 verify step's GEMVs cost 1.17-1.43x their one-token time on
            fp32 FMAs, bench/NOTES.md run 196). Its first form staged every token's whole x in
            dynamic shared memory per CTA (as the w8 variants do) and was slower than the FMAs on an H100: the 27B
            4-sequence step 22.87-23.13 ms on FMAs against 26.81 with (4,), the 8-sequence step 43.07 against 54.71
            with (4, 8) (runs 205-206, ``bench/results/batch_ab_bf16_t{4,6}_h100_cedfdcc.json``); the GEMV alone
            (run 229, ``bench/results/gemv_tokens_probe_h100_310db51.json``): gate|up 160.3 us against 132.1 on
            FMAs (113.6 at one token), 147.6 without the staging, 140.3 with x from global memory.
        bf16_unpack_tiles: the token tiles (>= 2) whose bf16 fp32-FMA variants convert each 16-byte weight vector to
            fp32 once for all the tile's tokens (template ``unpack_w``; every token slot computes, a slot past the
            chunk's tokens on its last token's x, never stored). Default (4,): the variants without it convert a vector
            once per token (the token loop's per-slot branch keeps ptxas from sharing the conversions): at 4 tokens a
            token's block per vector of 4 rows is ~85 instructions, 32 FMAs and ~40 conversions (shifts / masks);
            with the tile's conversions shared, sm_90's loop body is 221 instructions against ~347 at 4 tokens (~393
            against ~690 at 8) for 104 registers against 80 (146 against 104) -- nvdisasm of the 256-thread swiglu
            gate|up variant, 2026-12-06. On an H100 (2026-12-06, bench/NOTES.md run 217,
            ``bench/results/batch_ab_bf16_t4_{now,unpack}_0234301.json``) the 27B 4-sequence step took 21.85 ms
            with (4,) against 23.09 without (0.946x), one sequence x 4 tokens through the verify program 1.239x the
            one-token step against 1.304x, the one-token decode unchanged (55.01 / 55.04 tok/s). Tiles 2..4: at 8
            tokens the 512-thread cooperative variants spill. A tile of ``bf16_mma_tiles`` runs on tensor cores
            where K is a multiple of 64; these variants then take only the other K.
        w8_dp_tiles / w4_dp_tiles: the token tiles whose w8 / w4 variants use integer dot products (template ``dp``,
            module docstring) where K is a multiple of 64, the staged x fits ``dp_x_bytes`` and the tile is not an mma
            tile (a tile of 2 or more that the dp variants cannot serve on a target: :meth:`GemvFamily.fallback`).
            Defaults: (1, 4, 8) for w8 and (1, 4) for w4 (at 4 tokens w4's add_norm_parts GEMVs only:
            ``w4_mma_epilogues``). w8 at 8 tokens on dp since 2026-12-06: on an H100, one process (bench/NOTES.md runs
            254 and 257, ``bench/results/batch_ab_w8_b8_{dp8_h100_bfabdbd,chunk_h100_332c9e8}.json``), the 27B
            8-sequence step 16.71 ms (478.8 tok/s) against 26.65 (300.1) with the 8-token tile on tensor cores, one
            sequence x 6 tokens through the verify program 1.534x the one-token step against 2.214x, one sequence
            unchanged (97.60 / 97.56 tok/s); the w4 recipe's w8 LM head at 8 tokens too: the w4 8-sequence step
            12.35 against 12.67 ms. At one CTA of 640 threads per SM, 74-85 registers, 84-102 KB of x (sm_90); the
            tensor-core kernel staged every token's x as fp16 in each of 320-1,088 CTAs of ~10 warps per SM. w8 at 4
            tokens on dp since 2026-12-06: on an H100, one process per setting (bench/NOTES.md run 244,
            ``bench/results/batch_ab_w8_t4_{now,dp4}_h100_d3666fb.json``), 4 sequences
            315.6 tok/s (12.67 ms per step) against 228.4 (17.51 ms) on tensor cores, one sequence x 4 tokens through
            the verify program 1.275x the one-token step against 1.734x, one sequence 99.30 / 99.33 tok/s: the w8
            tensor-core kernel converts every token's x to fp16 in each of its ~2,000 CTAs, the persistent dp one
            stages x once per CTA of one wave. w4 at 4 tokens on dp everywhere was slower (387.8 against 402.8 tok/s,
            verify 1.587x against 1.530x); only its add_norm_parts GEMVs take it (``w4_mma_epilogues``). From the
            H200 (bench/NOTES.md runs
            66-69, ``bench/results/dp_probe_h200_fcda2c0.json``, best variant of each kind at T = 1): w4 dp vs
            fp32 FMAs gate|up 30.8 vs 40.3 us, down 19.4 vs 22.1, GDN in 14.9 vs 20.5, GDN out 7.8 vs 9.3, q|k|v
            14.6 vs 18.8. w8 was mixed in isolation (GDN in 21.8 vs 24.2, gate|up 44.9 vs 45.3, down 24.8 vs 23.1)
            and stayed on FMAs until runs 93-99, when the persistent dp kernels (one balanced wave, since run 68)
            beat the FMA ones in the decode step itself -- even at the FMA kernels' best one-token shape (4 rows per
            warp, 2 warps per row group for the norm-input GEMVs, 1.040x over the cost model's pick, run 95; that
            special case was removed once dp replaced them): 27B w8 8.016 vs 8.122 ms per token in one process
            (1.013x, run 97, ``bench/results/family_ab_w8_dp_h200_f20a747.json``); per family in the graph
            profile (run 98) gate|up 2.98 vs 3.02 ms, GDN in 1.14 vs 1.22, GDN out 0.48 vs 0.51, attention o 0.155
            vs 0.166, down equal, q|k|v 0.36 vs 0.32 (the one loser).
        dp_shapes: the plain (threads, k_warps) shapes of the dp variants; the cost model (with its x-staging
            term, ``DP_STAGE_NS``) picks one per problem. Default 256 and 640 threads, one warp per row group. On
            the H200 probe (runs 59-65) the persistent dp variant at 2 rows per warp and 256 threads is within 3 % of
            the fastest of 16 variants (2 / 4 rows per warp x 4 shapes x persistent or not) on all four w4 decode
            shapes; a 640-thread CTA (one per SM: the staging of x once per SM, not per each of its 2-3 CTAs) takes
            w4 down (K = 17,408) from 20.0 to 17.3 us, ties GDN out (8.0), and loses on the K = 5,120 shapes
            (GDN in 20.0 vs 15.2, gate|up 35.9 vs 31.0, q|k|v 16.3 vs 14.3; 320 / 512 threads won nowhere by more
            than 3 %: bench/NOTES.md run 84, ``bench/results/dp_layer_probe_w4_h200_3cbe079.json``). With the
            staging term the model picks 640 threads for down and GDN out and 256 for the others.
        dp_persistent: the dp variants are persistent (template ``persist``): a grid of one balanced wave
            (:func:`.dp.persistent_grid`) whose CTAs each take a contiguous range of row blocks and stage x once,
            instead of one CTA (and one staging of x) per row block.
            The grid fills every resident CTA slot: leaving 1/4 or 1/2 of them for the next kernel's CTAs (to load
            their first weights under PDL while this grid drains) took 94.7 / 118.4 instead of 74.9 us per GDN
            layer's four w4 GEMVs on the H200 (``bench/results/dp_layer_probe_h200_7b16357.json``).
        dp_carry: the item-boundary carry settings the persistent dp variants are compiled with (template
            ``carry``: each warp's last weight step of a work item also loads its first step of the CTA's next
            item, and the CTA meets at a barrier between items only where a shared buffer is reused; without it
            every item starts with its own loads and ends at a barrier). The cost model picks per problem: the
            carry saves ``DP_ITEM_US`` per item boundary, and where its registers cost a resident CTA per SM the
            bytes in flight decide. Default both: on the H200 the first carry build's registers cost the 256-thread
            kernels their 4th CTA per SM (GDN in 15.0 -> 16.9 us, gate|up 30.6 -> 31.3; bench/NOTES.md run 83), at 640
            threads it saved 0.3-0.5 us per boundary (run 84).
        dp_ring: stages of each warp's weight ring in the persistent dp variants without the carry (template
            ``ring``: cp.async into lane-private shared-memory slots, ``dp_ring - 1`` steps in flight across item
            boundaries, the first ones issued before the PDL wait; :func:`.dp.dp_ring_bytes` of dynamic shared memory per
            CTA). Default 0: weights through registers, one step ahead. Measured no faster on the H200 (bench/NOTES.md
            runs 88-90): 256-thread ring kernels lose their 4th CTA per SM to registers, or with a 64-register cap
            finish far apart; on the 640-thread w4 down / GDN out (one CTA per SM) no ring / 5 / 6 / 7 stages took
            71.9 / 72.5 / 72.9 / 75.0 us per GDN layer's four GEMVs -- a CTA with that much shared memory starts only
            once its SM is empty (GDN out's PDL wait 0.9 -> 2.3-3.8 us after GDN in's last exit).
        dp_preload: where the dp variants without the carry put their first weight steps before the PDL wait
            (template ``preload``): ``"regs"`` loads them (registers, or the ring's first stages), ``"late"`` only
            asks L2 for them and loads them after the staging of x.
        dp_deep_threads: the dp thread counts whose variants without carry, ring or late preload keep two weight
            steps in flight per warp instead of one (template ``depth`` 2). Meant for the 640-thread kernels, one
            CTA per SM (20 warps of 2 rows: ~25 KB in flight per SM vs ~40 KB for four 256-thread CTAs), which
            have registers to spare (at most 96 per thread for one 640-thread CTA per SM). Default (640,): on the
            H200 (bench/NOTES.md run 102) the w4 down / GDN out kernels' last CTA exit 17.8 -> 17.1 / 8.8 -> 8.3 us
            (72 registers on NVRTC 13.0, still one CTA per SM), 27B decode step 1.0105x (w4) and 1.0037x (w8) in
            one process (``bench/results/family_ab_{w4,w8}_deep_h200_2458298.json``); on the 256-thread kernels
            the registers cost the 4th CTA per SM (72.5 vs 70.9 us per GDN layer). The cost model does not count
            the second step (its in-flight term is one step per warp).
        dp_min_ctas: (wfmt, epilogue, tile, threads, n) entries: the dp variants of that weight format, epilogue,
            token tile and CTA size compile with ``__launch_bounds__(threads, n)`` (template ``min_ctas``), a register
            cap of 65,536 / (threads x n) on the 64K-register SMs -- the occupancy and grid then follow the capped
            kernel's real register count. Default: the w8 ``store`` GEMVs (GDN in, q|k|v) of the one-token tile at 4
            CTAs of 256 threads per SM (64 registers, no spills on NVRTC 13.0 / 13.5; 72 uncapped on 13.0, 3
            CTAs/SM): on the H200 the w8 GDN in kernel's last CTA exit 23.9 -> 22.0 us; capping gate|up (swiglu)
            too cost it 1.0 us (bench/NOTES.md run 105: both capped, 27B w8 step 1.0075x). At 4 tokens a cap spilled
            8 B (NVRTC 13.5) while each token's products sat behind a branch. A straight run over the tile's tokens
            (no branch: ~204 -> ~136 SASS instructions per w8 step) took those kernels to 84-90 registers and, capped
            at 3 CTAs, timed the same on an H100 (bench/NOTES.md runs 267-269: verify 1.279-1.280x vs 1.277-1.280x,
            4 sequences 308-313 vs 313-315 tok/s), so the branches stayed (``bench/patches/gemv_dp_straight_run.patch``
            re-applies it).
        dp_x_bytes: the most staged x (int16 x, its block scales and sums: :func:`.dp.dp_x_bytes`) per token of the
            tile a dp variant takes, bytes (since 2026-12-06 per token; the whole tile's before). Default
            ``DP_X_BYTES`` (40 KiB): a one-token x needs no opt-in, and the 27B w8 down at 4 tokens stages 143,616 B
            of its 160 KiB in opted-in dynamic shared memory. Where the target cannot hold a variant's x (99 KiB per
            CTA on sm_86 / sm_89 / sm_120a, 227 KiB on sm_90) it has no resident CTA, and a tile of 2 to 8 tokens
            takes :meth:`GemvFamily.fallback`'s kernels (the tensor-core ones), as a longer x does. The 27B w4 down at
            4 tokens took 29.3 us on dp (152,320 B of x) against 35.8 on tensor cores on an H100 (bench/NOTES.md run
            231).
        dp_chunk_fallback: the weight formats ("w8", "w4") whose dp tile that a target cannot serve (the x over
            ``dp_x_bytes``, or no CTA resident) first tries the largest smaller dp tile of at least 2 tokens, in token
            chunks that each stream the weights once, and takes :meth:`GemvFamily.fallback`'s tensor-core kernels
            only where that lands on no dp kernel either (:meth:`GemvFamily.chunk_fallback`). Default ("w8",): the 27B
            w8 down (K = 17,408) at 8 tokens stages 287 KB of x, more than any SM holds; as two 4-token dp chunks the
            8-sequence step took 16.71 ms against 20.01 on the 8-token tensor-core kernel, one sequence x 6 tokens
            through the verify program 1.534x against 1.693x the one-token step (H100, one process, bench/NOTES.md run
            257, ``bench/results/batch_ab_w8_b8_chunk_h100_332c9e8.json``; on an L20 the 4-token x does not fit either,
            so the down keeps the 8-token tensor-core kernel there). w4's 8-token tile is no dp tile (tensor cores
            took the 8-sequence step to 12.58 ms against 17.38 with every w4 GEMV on dp, run 255).
        w4_mma_epilogues: the epilogues whose w4 problems take the tensor-core variants at a tile of both
            ``w4_mma_tiles`` and ``w4_dp_tiles``; the others take dp there (and :meth:`GemvFamily.fallback`'s
            tensor-core kernels where the target cannot hold their x). At a tile of ``w4_mma_tiles`` alone every
            epilogue takes tensor cores (the 8-token tile). Default ``("store", "residual_add", "swiglu")`` with
            ``w4_dp_tiles`` (1, 4), since 2026-12-06: the 27B down, GDN out and attention o (``add_norm_parts``: 320
            row tiles of 16 rows, ~10 warps per SM on tensor cores, too few to hide the dequantisation, run 229) run
            on dp at 4 tokens. On an H100, one process per setting (bench/NOTES.md runs 236 and 244,
            ``bench/results/batch_ab_w4_t4_{now,dpnorm}_h100_{6ee773d,d3666fb}.json``): 4 sequences 421.3 / 423.4
            tok/s against 408.8 / 402.8, one sequence x 4 tokens through the verify program 1.454x / 1.486x the
            one-token step against 1.491x / 1.530x, one sequence unchanged (147.92 / 147.98, 152.69 / 152.71).
        mma_shapes: the plain (threads, k_warps) shapes of the mma variants, in place of ``plain_shapes``: a
            16-row warp tile leaves few row groups on a short N (5,120 outputs = 320 tiles), so more warps
            share each tile's K to keep enough bytes in flight. At most 256 threads: a 512-thread CTA's 128
            registers per thread make the 4-token variants spill (sm_86 / sm_89) and the 1-token one on sm_120a.
        bf16_mma_shapes: the same for the bf16 mma variants. Default the 128-thread shapes: at 256 threads their ~130
            registers (4 blocks per warp step) left one resident CTA per SM; on an H100 at 4 tokens the 27B gate|up
            took 147.9 / 184.9 us at 256 threads (k_warps 4 / 8) against 129.7-130.7 at 128 (bench/NOTES.md run
            232, ``bench/results/gemv_tokens_probe_sweep_h100_04ccdfc.json``). Since ef99dfa (the kernels' fragment
            tail) the 256-thread variants hold 106-126 registers on sm_90, 2 CTAs per SM, and still lose: the 8-sequence
            step 0.963x with them (bench/NOTES.md run 254). At 8 tokens the gate|up alone takes 120.0 us on 128 x 2
            CTAs against 136.8 on the cost model's 128 x 4 (run 259), but the 8-sequence step only 1.004x with 128 x 2
            alone and 0.980x with 128 x 1 / 128 x 2 (run 260), so the three 128-thread shapes stay.

    Raises:
        PlanError: bad options (names them): a (threads, k_warps) shape whose threads are not a positive multiple of
            32 or whose k_warps does not divide its warps, an empty shape list, odd or < 2 rows per warp, an empty
            or non-positive token tile, a negative prefetch_steps, an mma tile over ``MMA_MAX_TOKENS``, an empty
            dp_carry, a dp_ring of 1 or < 0, an unknown dp_preload, dp_deep_threads that are not CTA sizes, a bad
            dp_min_ctas entry, a bf16_unpack_tiles entry outside 2..4, a dp_chunk_fallback entry that is not w8 / w4.
    """

    plain_shapes: tuple[tuple[int, int], ...] = ((128, 1), (128, 2), (128, 4), (256, 2), (256, 4))
    coop_threads: tuple[int, ...] = (256, 512)
    token_tiles: tuple[int, ...] = (1, 4, 8)
    w4_token_tiles: tuple[int, ...] = (1, 4, 8)
    rows_per_warp: int = 4
    quant_rows_per_warp: int = 2
    norm_rows_per_warp: int = 2
    prefetch_steps: int = 1
    w4_mma_tiles: tuple[int, ...] = (4, 8)
    w8_mma_tiles: tuple[int, ...] = ()
    bf16_mma_tiles: tuple[int, ...] = (4, 8)
    bf16_unpack_tiles: tuple[int, ...] = (4,)
    w8_dp_tiles: tuple[int, ...] = (1, 4, 8)
    w4_dp_tiles: tuple[int, ...] = (1, 4)
    dp_persistent: bool = True
    dp_shapes: tuple[tuple[int, int], ...] = ((256, 1), (640, 1))
    dp_carry: tuple[bool, ...] = (False, True)
    dp_ring: int = 0
    dp_preload: str = "regs"
    dp_deep_threads: tuple[int, ...] = (640,)
    dp_min_ctas: tuple[tuple[str, str, int, int, int], ...] = (("w8", "store", 1, 256, 4),)
    dp_x_bytes: int = DP_X_BYTES
    dp_chunk_fallback: tuple[str, ...] = ("w8",)
    w4_mma_epilogues: tuple[str, ...] = ("store", "residual_add", "swiglu")
    mma_shapes: tuple[tuple[int, int], ...] = ((128, 1), (128, 2), (128, 4), (256, 4), (256, 8))
    bf16_mma_shapes: tuple[tuple[int, int], ...] = ((128, 1), (128, 2), (128, 4))

    def __post_init__(self):
        plain_shapes, mma_shapes, dp_shapes = self.plain_shapes, self.mma_shapes, self.dp_shapes
        bf16_mma_shapes = self.bf16_mma_shapes
        coop_threads, token_tiles = self.coop_threads, self.token_tiles
        rows_per_warp, quant_rows_per_warp, norm_rows_per_warp = (self.rows_per_warp, self.quant_rows_per_warp,
                                                                   self.norm_rows_per_warp)
        bad_shape = [s for s in (*plain_shapes, *mma_shapes, *bf16_mma_shapes, *dp_shapes)
                     if s[0] % WARP or s[0] <= 0 or s[1] < 1 or (s[0] // WARP) % s[1]]
        if (bad_shape or not plain_shapes or not mma_shapes or not bf16_mma_shapes or not dp_shapes or any(t % WARP or t <= 0 for t in coop_threads) or rows_per_warp % 2
                or quant_rows_per_warp % 2 or norm_rows_per_warp % 2
                or min(rows_per_warp, quant_rows_per_warp, norm_rows_per_warp) < 2 or not token_tiles
                or min(token_tiles) < 1 or not self.w4_token_tiles or min(self.w4_token_tiles) < 1):
            raise PlanError(
                f"gemv: bad family parameters plain_shapes={plain_shapes}, mma_shapes={mma_shapes}, "
                f"bf16_mma_shapes={bf16_mma_shapes}, "
                f"dp_shapes={dp_shapes} "
                f"((threads, k_warps): threads a "
                f"multiple of {WARP}, k_warps dividing its warps), coop_threads={coop_threads}, rows_per_warp="
                f"{rows_per_warp}, quant_rows_per_warp={quant_rows_per_warp}, norm_rows_per_warp={norm_rows_per_warp} "
                f"(even, >= 2), "
                f"token_tiles={token_tiles}, w4_token_tiles={self.w4_token_tiles} (each >= 1)")
        if self.prefetch_steps < 0:
            raise PlanError(f"gemv: prefetch_steps = {self.prefetch_steps} must be >= 0")
        if any(t > MMA_MAX_TOKENS for t in (*self.w4_mma_tiles, *self.w8_mma_tiles, *self.bf16_mma_tiles)):
            raise PlanError(f"gemv: w4_mma_tiles={self.w4_mma_tiles}, w8_mma_tiles={self.w8_mma_tiles}, "
                            f"bf16_mma_tiles={self.bf16_mma_tiles}: the mma variants take at most {MMA_MAX_TOKENS} "
                            f"tokens per CTA (the m16n8k16 tile's n)")
        if any(not 2 <= int(t) <= 4 for t in self.bf16_unpack_tiles):
            raise PlanError(f"gemv: bf16_unpack_tiles = {tuple(self.bf16_unpack_tiles)} must be token tiles in 2..4 (one "
                            "token converts each weight vector once already; at 8 tokens the 512-thread cooperative "
                            "variants spill under their 128-register cap on every arch)")
        if int(self.dp_x_bytes) < 1:
            raise PlanError(f"gemv: dp_x_bytes = {self.dp_x_bytes} must be a positive byte count")
        if any(f not in ("w8", "w4") for f in self.dp_chunk_fallback):
            raise PlanError(f"gemv: dp_chunk_fallback = {tuple(self.dp_chunk_fallback)} must name weight formats with "
                            "dp variants ('w8', 'w4')")
        bad_ep = [e for e in self.w4_mma_epilogues if e not in EPILOGUES]
        if bad_ep:
            raise PlanError(f"gemv: w4_mma_epilogues {bad_ep} are not epilogues (known: {', '.join(EPILOGUES)})")
        if not self.dp_carry:
            raise PlanError(f"gemv: dp_carry = {self.dp_carry!r} needs at least one setting (False and / or True)")
        if self.dp_ring < 0 or self.dp_ring == 1:
            raise PlanError(f"gemv: dp_ring = {self.dp_ring} must be 0 (no ring) or at least 2 stages")
        if self.dp_preload not in ("regs", "late"):
            raise PlanError(f"gemv: dp_preload = {self.dp_preload!r}; supported: 'regs', 'late'")
        if any(int(t) <= 0 or int(t) % WARP or int(t) > 1024 for t in self.dp_deep_threads):
            raise PlanError(f"gemv: dp_deep_threads = {tuple(self.dp_deep_threads)} must be CTA sizes: multiples "
                            f"of {WARP} up to 1024")
        bad = [e for e in self.dp_min_ctas if len(e) != 5 or e[0] not in ("w8", "w4") or e[1] not in EPILOGUES
               or int(e[2]) < 1 or int(e[3]) % WARP or int(e[4]) < 1]
        if bad:
            raise PlanError(f"gemv: dp_min_ctas entries {bad} must be (wfmt 'w8' | 'w4', epilogue one of "
                            f"{', '.join(EPILOGUES)}, token tile >= 1, threads a multiple of {WARP}, min resident "
                            "CTAs per SM >= 1)")
        norm = {  # the canonical types (ints, tuples; token tiles sorted and unique, dp_carry unique in order)
            "plain_shapes": tuple((int(t), int(k)) for t, k in plain_shapes),
            "mma_shapes": tuple((int(t), int(k)) for t, k in mma_shapes),
            "bf16_mma_shapes": tuple((int(t), int(k)) for t, k in bf16_mma_shapes),
            "dp_shapes": tuple((int(t), int(k)) for t, k in dp_shapes),
            "coop_threads": tuple(int(t) for t in coop_threads),
            "token_tiles": tuple(sorted(set(int(t) for t in token_tiles))),
            "w4_token_tiles": tuple(sorted(set(int(t) for t in self.w4_token_tiles))),
            "rows_per_warp": int(rows_per_warp), "quant_rows_per_warp": int(quant_rows_per_warp),
            "norm_rows_per_warp": int(norm_rows_per_warp), "prefetch_steps": int(self.prefetch_steps),
            "w4_mma_tiles": tuple(int(t) for t in self.w4_mma_tiles),
            "w8_mma_tiles": tuple(int(t) for t in self.w8_mma_tiles),
            "bf16_mma_tiles": tuple(int(t) for t in self.bf16_mma_tiles),
            "bf16_unpack_tiles": tuple(sorted(set(int(t) for t in self.bf16_unpack_tiles))),
            "w8_dp_tiles": tuple(int(t) for t in self.w8_dp_tiles),
            "w4_dp_tiles": tuple(int(t) for t in self.w4_dp_tiles),
            "dp_persistent": bool(self.dp_persistent),
            "dp_carry": tuple(dict.fromkeys(bool(c) for c in self.dp_carry)),
            "dp_ring": int(self.dp_ring), "dp_preload": str(self.dp_preload),
            "dp_deep_threads": tuple(int(t) for t in self.dp_deep_threads),
            "dp_min_ctas": tuple((str(f), str(e), int(m), int(t), int(c)) for f, e, m, t, c in self.dp_min_ctas),
            "dp_x_bytes": int(self.dp_x_bytes),
            "w4_mma_epilogues": tuple(str(e) for e in self.w4_mma_epilogues),
            "dp_chunk_fallback": tuple(str(f) for f in self.dp_chunk_fallback),
        }
        for name, value in norm.items():
            object.__setattr__(self, name, value)

    def tiles(self, wfmt: str) -> tuple[int, ...]:
        """The token tiles of a problem of weight format ``wfmt`` ("bf16", "w8", "w4"), ascending: ``w4_token_tiles``
        for w4, ``token_tiles`` for the others; the last is the tile of a launch that names none."""
        return self.w4_token_tiles if wfmt == "w4" else self.token_tiles


#: the option names (what ``family.<name> = value`` replaces: :meth:`GemvFamily.__setattr__`)
TUNING_FIELDS = tuple(f.name for f in fields(GemvTuning))
