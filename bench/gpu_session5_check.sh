# Device run (session 5, 38): w4 back on the fp32-FMA GEMV by default (the mma variants kept behind w4_mma):
# GEMV GPU tier for w4 (both paths); the w4 sweep at T = 4 (mma vs FMA); the 27B w4 bench; the engine tier.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session5_check.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 150 tests/targets/test_gemv_coop_gpu.py -k "w4 or every_arch"
rm -f $OUT/*.xml
timeout 110 python3 bench/gemv_ksplit_sweep.py --formats w4 --tokens 4 --json $OUT/sweep_w4_t4.json > $OUT/sweep_w4_t4.log 2>&1
echo "sweep rc $?"; grep -E "^w4 " $OUT/sweep_w4_t4.log; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 150 $B --weights w4 --prompt-tokens 512,8192 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log; el
gpu_tests engine 100 tests/runtime
rm -f $OUT/*.xml
