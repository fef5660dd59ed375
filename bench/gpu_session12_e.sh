# Device run (session 12, e): the dp staging's rounding by one FMA (template stage_round "fma", now the default)
# against cvt.rni (the old code) in the layer timeline, twice each; the 27B w4 bench; the persistent-dp GEMV GPU
# tests, the engine goldens and the fidelity test.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_e.sh
source bench/gpu_setup.sh
trace_run fma
trace_run cvt --params "{'stage_round': 'cvt'}"
trace_run fma2
trace_run cvt2 --params "{'stage_round': 'cvt'}"
timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512,8192 \
  --json $OUT/bench_w4.json > /tmp/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" /tmp/bench_w4.log | head -3; el
gpu_tests persist 150 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many and (nocarry or planned or carry)"
gpu_tests engine 80 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
gpu_tests quant 100 tests/runtime/test_quant_gpu.py
rm -f $OUT/*.xml $OUT/*.log
