# Device run (session 12, f): the final tree (no weight rings, cvt.rni staging -- the kernels of 96e6520 with the
# floor / ceil item split): the 27B w4 bench (README rows), the persistent-dp and planned GEMV GPU tests, the
# engine goldens and the fidelity test.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_f.sh
source bench/gpu_setup.sh
timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512,8192 \
  --json $OUT/bench_w4.json > /tmp/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" /tmp/bench_w4.log | head -3; el
gpu_tests persist 120 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many"
gpu_tests gemv 120 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or planned_launches"
gpu_tests engine 80 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
gpu_tests quant 60 tests/runtime/test_quant_gpu.py
rm -f $OUT/*.xml $OUT/*.log
