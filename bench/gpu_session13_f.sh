# Device run (session 13, f): w8's one-token GEMVs on the persistent dp kernels by default (runs 97-98). In a w4
# engine that also moves the LM head (a w8 tensor) to dp: same-process A/B against the FMA LM head first; then the
# 27B w8 and w4 benches (README rows) and the GPU tests of the planned GEMVs, the engine goldens and the fidelity.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session13_f.sh
source bench/gpu_setup.sh
timeout 150 python3 bench/family_ab.py --weights w4 --rounds 4 --json $OUT/ab_w4_lm.json now \
  "fma_lm:gemv_coop.w8_dp_tiles=()" > /tmp/ab.log 2>&1
echo "ab rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab.log | tail -4
for w in w8 w4; do
  timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --decode-tokens 32 \
    --prompt-tokens 512,8192 --json $OUT/bench_$w.json > /tmp/bench_$w.log 2>&1
  echo "bench $w rc $? $(el)"; grep -A3 "^context" /tmp/bench_$w.log | head -3; grep -i "error" /tmp/bench_$w.log | tail -2
done
gpu_tests quant 70 tests/runtime/test_quant_gpu.py
gpu_tests engine 80 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or planned_launches or w8-dp"
rm -f $OUT/*.xml $OUT/*.log
