# Device run (session 2): quantised GEMV kernels with 2 rows per warp -- GPU tests, fidelity, 27B w8 / w4 benches.
source bench/gpu_setup.sh
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
timeout 240 python3 -m pytest tests/targets/test_gemv_coop_gpu.py tests/runtime/test_quant_gpu.py tests/kernels/test_elementwise_gpu.py -m gpu -q --tb=short -rf --timeout 200 \
  -p no:cacheprovider > $OUT/tests.log 2>&1; echo "tests rc $?: $(tail -1 $OUT/tests.log)"; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512,8192"
$B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; tail -3 $OUT/bench_w8.log; el
$B --weights w4 --kv-dtype int8 --json $OUT/bench_w4_kv8.json > $OUT/bench_w4_kv8.log 2>&1; tail -3 $OUT/bench_w4_kv8.log; el
$B --weights w4 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1; tail -3 $OUT/bench_w4.log; el
