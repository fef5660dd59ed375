# Device run (session 2, final): GEMV + engine + quant GPU tests at the final commit, then the benches the
# README and issues 5/6 quote: bf16 (512, 8192) with the HF peer, bf16 at 32768, w8, w4 + int8 KV.
source bench/gpu_setup.sh
gpu_tests tests 200 tests/targets/test_gemv_coop_gpu.py tests/runtime
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
$B --prompt-tokens 512,8192 --peer hf --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; tail -6 $OUT/bench_bf16.log; el
$B --prompt-tokens 32768 --json $OUT/bench_bf16_32k.json > $OUT/bench_bf16_32k.log 2>&1; tail -3 $OUT/bench_bf16_32k.log; el
$B --prompt-tokens 512,8192 --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; tail -3 $OUT/bench_w8.log; el
$B --prompt-tokens 512,8192 --weights w4 --kv-dtype int8 --json $OUT/bench_w4_kv8.json > $OUT/bench_w4_kv8.log 2>&1; tail -3 $OUT/bench_w4_kv8.log; el
