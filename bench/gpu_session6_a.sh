# Device run (session 6, 45): the GEMV w4 tier on the current kernels (the re-check session 5 ran out of budget
# for), and the 27B w8 bench at 512 with a per-family decode profile (where the w8 step's time goes).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_a.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 100 tests/targets/test_gemv_coop_gpu.py -k "w4"
rm -f $OUT/*.xml
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 150 $B --weights w8 --prompt-tokens 512 --profile --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1
echo "w8 rc $?"; grep -A3 "^context" $OUT/bench_w8.log; el
