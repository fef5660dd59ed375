# Device run (session 4, first): the decode GEMV's CTA shape sweep (k_warps, in_norm, residual_add) on the 27B
# shapes for bf16 / w8 / w4, and the GEMV-only layer sequence planner vs best (bench/gemv_ksplit_sweep.py).
source bench/gpu_setup.sh
timeout 500 python3 bench/gemv_ksplit_sweep.py --json $OUT/gemv_ksplit_sweep.json 2>&1 | tee $OUT/sweep.log
el
