# Device run (session 6, 53-54): w8 mma at 4 tokens for every K (a long K's x converted in segments) -- GEMV w8 GPU tier,
# the w8 sweep at T = 4, the 27B w8 bench with --batch 4. Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_h.sh
source bench/gpu_setup.sh
gpu_tests gemv_w8 110 tests/targets/test_gemv_coop_gpu.py -k "w8"
rm -f $OUT/*.xml
timeout 120 python3 bench/gemv_ksplit_sweep.py --formats w8 --tokens 4 --json $OUT/sweep_w8_t4.json > $OUT/sweep_w8_t4.log 2>&1
echo "sweep rc $?"; grep -E "planner" $OUT/sweep_w8_t4.log; el
timeout 110 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 32 --prompt-tokens 512 --batch 4 \
  --weights w8 --json $OUT/batch4_w8.json > $OUT/batch4_w8.log 2>&1
echo "w8 rc $?"; grep -E "^ +512|batched decode" $OUT/batch4_w8.log; el
