# Device run (session 9, 66): the integer-dot-product GEMV (dp: x staged as int16 per 64-element block, dp2a on
# w8 / w4 codes; the 1-token tile of both formats): GEMV GPU tier for the quantised kernels (forced dp / fma / mma
# variants, planned launches, folded norm pair, driver attributes), the T = 1 sweep of every kind for w8 and w4,
# the 27B w8 / w4 decode (w4 with a profile), then the engine tier's quantised tests.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session9_a.sh
source bench/gpu_setup.sh
gpu_tests gemv 170 tests/targets/test_gemv_coop_gpu.py -k "quant or folded or driver or every_arch"
for W in w8 w4; do
  timeout 70 python3 bench/gemv_ksplit_sweep.py --formats $W --tokens 1 --json $OUT/sweep_${W}_t1.json \
    > $OUT/sweep_$W.log 2>&1; echo "sweep $W rc $?"; grep -E "planner" $OUT/sweep_$W.log | head -24; el
done
for W in w8 w4; do
  P=""; [ $W = w4 ] && P="--profile"
  timeout 90 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $W --decode-tokens 32 --prompt-tokens 512,8192 \
    $P --json $OUT/bench_$W.json > $OUT/bench_$W.log 2>&1
  echo "$W rc $?"; grep -A3 "^context" $OUT/bench_$W.log | head -4; el
done
gpu_tests engine 120 tests/runtime/test_quant_gpu.py
rm -f $OUT/*.xml
