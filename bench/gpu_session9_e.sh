# Device run (session 9, 70): w4 decode GEMVs on the persistent dp variant (2 rows per warp, 256 threads, one
# warp per row group; w8 back on FMAs): engine tier (fidelity included), GEMV tier for the quantised kernels
# (planned, forced dp, every-arch plans), then the 27B w4 (with a profile) and w8 decode.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session9_e.sh
source bench/gpu_setup.sh
gpu_tests engine 150 tests/runtime
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or (quant_forced and dp) or every_arch or folded or driver"
rm -f $OUT/*.xml
for W in w4 w8; do
  P=""; [ $W = w4 ] && P="--profile"
  timeout 90 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $W --decode-tokens 32 --prompt-tokens 512,8192 \
    $P --json $OUT/bench_$W.json > $OUT/bench_$W.log 2>&1
  echo "$W rc $?"; grep -A3 "^context" $OUT/bench_$W.log | head -4; el
done
