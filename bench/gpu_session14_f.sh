# Device run (session 14, f): the w8 store GEMVs (GDN in, q|k|v, a w4 engine's LM head) capped at 64 registers
# (__launch_bounds__(256, 4)) by default: A/B against no cap; the 27B w8 and w4 benches (README rows); GPU tests
# of the capped persistent dp variants and of the planned (and quantised) GEMV launches.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_f.sh
source bench/gpu_setup.sh
timeout 130 python3 bench/family_ab.py --weights w8 --rounds 4 --json $OUT/ab_w8_capstore.json now \
  "nocap:gemv_coop.dp_min_ctas=()" > /tmp/ab8.log 2>&1
echo "ab w8 rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab8.log | tail -4
for w in w8 w4; do
  timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --decode-tokens 32 \
    --prompt-tokens 512,8192 --json $OUT/bench_$w.json > /tmp/bench_$w.log 2>&1
  echo "bench $w rc $? $(el)"; grep -A3 "^context" /tmp/bench_$w.log | head -3; grep -i "error" /tmp/bench_$w.log | tail -2
done
gpu_tests dp 60 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many_items and cap"
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or planned_launches or quant_lm_head"
