# Device run (session 10, h): the in_norm factor after the dot products (FMA / mma paths) and beside the x staging
# (dp: warp 0 while the other warps stage): the 27B w8 / w4 / bf16 bench, then the GEMV tier (planned launches of
# every format, folded pairs) and the engine goldens.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_h.sh
source bench/gpu_setup.sh
for W in w8 w4 bf16; do
  timeout 60 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $W --decode-tokens 32 --prompt-tokens 512,8192 \
    --json $OUT/bench_$W.json > $OUT/bench_$W.log 2>&1
  echo "$W rc $?"; grep -A3 "^context" $OUT/bench_$W.log | head -3; el
done
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "planned or folded"
gpu_tests engine 60 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
rm -f $OUT/*.xml
