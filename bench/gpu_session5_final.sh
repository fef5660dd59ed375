# Device run (session 5, 39): w4 GEMV on tensor cores for the 4-token tile only (w4_mma_tiles=(4,)): GEMV GPU
# tier for w4 + every-arch plans; the engine tier; the 27B w4 bench (T = 1 decode unchanged).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session5_final.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 150 tests/targets/test_gemv_coop_gpu.py -k "w4 or every_arch"
rm -f $OUT/*.xml
gpu_tests engine 100 tests/runtime
rm -f $OUT/*.xml
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 150 $B --weights w4 --prompt-tokens 512,8192 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log; el
