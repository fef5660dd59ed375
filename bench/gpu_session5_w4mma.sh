# Device run (session 5): the tensor-core w4 GEMV (run 35: registers as the in-flight buffer; run 36: a per-warp
# cp.async ring; run 37: the ring copies whole 128-byte lines of each row). GEMV GPU tier for w4 (mma and simt) + the plan/occupancy
# checks; the w4 shape sweep (mma vs fp32-FMA variants, T = 1); the 27B w4 bench with a profile; the engine tier.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session5_w4mma.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 200 tests/targets/test_gemv_coop_gpu.py -k "w4 or every_arch or occupancy or cubin"
rm -f $OUT/*.xml
timeout 120 python3 bench/gemv_ksplit_sweep.py --formats w4 --json $OUT/sweep_w4.json > $OUT/sweep_w4.log 2>&1
echo "sweep rc $?"; grep -E "^w4 " $OUT/sweep_w4.log; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 150 $B --weights w4 --prompt-tokens 512 --profile --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A2 "^context" $OUT/bench_w4.log; grep -iE "gate|down|gdn|qkv|lm head|attention" $OUT/bench_w4.log | head -16; el
gpu_tests engine 100 tests/runtime
rm -f $OUT/*.xml
