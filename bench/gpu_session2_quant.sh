# Device run (session 2): quantised GEMV kernels with 2 rows per warp -- GPU tests, fidelity, 27B w8 / w4 benches.
source bench/gpu_setup.sh
gpu_tests tests 240 tests/targets/test_gemv_coop_gpu.py tests/runtime/test_quant_gpu.py tests/kernels/test_elementwise_gpu.py
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512,8192"
$B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; tail -3 $OUT/bench_w8.log; el
$B --weights w4 --kv-dtype int8 --json $OUT/bench_w4_kv8.json > $OUT/bench_w4_kv8.log 2>&1; tail -3 $OUT/bench_w4_kv8.log; el
$B --weights w4 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1; tail -3 $OUT/bench_w4.log; el
