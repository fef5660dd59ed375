# Device run (session 2, call 3): GEMV one-token tiles -- kernel + engine tests, then 27B benches:
# bf16 with PDL (512, 8192, 32768), bf16 without PDL (A/B), w8, w4 + int8 KV. JSON under $OUT.
source bench/gpu_setup.sh
gpu_tests tests 230 tests/targets/test_gemv_coop_gpu.py tests/runtime
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
$B --prompt-tokens 512,8192,32768 --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; tail -5 $OUT/bench_bf16.log; el
NINFERC_PDL=0 $B --prompt-tokens 512,8192 --json $OUT/bench_bf16_nopdl.json > $OUT/bench_bf16_nopdl.log 2>&1; tail -3 $OUT/bench_bf16_nopdl.log; el
$B --prompt-tokens 512,8192 --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; tail -3 $OUT/bench_w8.log; el
$B --prompt-tokens 512,8192 --weights w4 --kv-dtype int8 --profile --json $OUT/bench_w4_kv8.json > $OUT/bench_w4_kv8.log 2>&1; tail -3 $OUT/bench_w4_kv8.log; grep -A8 "decode step at context 512" $OUT/bench_w4_kv8.log | head -9; el
