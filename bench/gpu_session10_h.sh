# Device run (session 10, h): the in_norm factor after the dot products (FMA / mma paths) and beside the x staging
# (dp: warp 0 while the other warps stage): the GEMV tier (bf16 / w8 / w4 planned and forced, folded pairs), the
# engine goldens, the layer probes, then the 27B w8 / w4 / bf16 bench.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_h.sh
source bench/gpu_setup.sh
gpu_tests gemv 170 tests/targets/test_gemv_coop_gpu.py -k "planned or folded or forced or lm_head"
gpu_tests engine 90 tests/runtime/test_engine_gpu.py -k "goldens_short or goldens_long or folded"
rm -f $OUT/*.xml $OUT/*.log.tmp
for F in w4 w8; do
  timeout 45 python3 bench/dp_layer_probe.py --wfmt $F > $OUT/probe_$F.log 2>&1
  echo "probe $F rc $?"; grep -E "^(dp persistent|fma) " -A1 $OUT/probe_$F.log | grep -v Warn; el
done
for W in w8 w4 bf16; do
  timeout 75 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $W --decode-tokens 32 --prompt-tokens 512,8192 \
    --json $OUT/bench_$W.json > $OUT/bench_$W.log 2>&1
  echo "$W rc $?"; grep -A3 "^context" $OUT/bench_$W.log | head -3; el
done
