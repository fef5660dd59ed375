# Device run (session 5, 40): the mma ring reads each stage lazily (no register copy of the chunk) and takes
# mma_chunk 4 or 8 (128 / 256 bytes of each row per stage). GEMV GPU tier for w4; the w4 sweep at T = 1 and 4
# (FMA, mma chunk 4, mma chunk 8). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session5_chunk.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 120 tests/targets/test_gemv_coop_gpu.py -k "w4"
rm -f $OUT/*.xml
for T in 1 4; do
  timeout 150 python3 bench/gemv_ksplit_sweep.py --formats w4 --tokens $T --json $OUT/sweep_w4_t$T.json > $OUT/sweep_w4_t$T.log 2>&1
  echo "sweep T=$T rc $?"; grep -E "^w4 " $OUT/sweep_w4_t$T.log | sed 's/planner [^|]*|/|/'; el
done
