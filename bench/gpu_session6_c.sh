# Device run (session 6, 47): the w8 mma kernels at the 4-token tile -- GEMV w8 GPU tier (forced w8-mma at 1 and 4
# tokens) and the w8 sweep at T = 4 (mma vs FMA variants). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_c.sh
source bench/gpu_setup.sh
gpu_tests gemv_w8 110 tests/targets/test_gemv_coop_gpu.py -k "w8"
rm -f $OUT/*.xml
timeout 120 python3 bench/gemv_ksplit_sweep.py --formats w8 --tokens 4 --json $OUT/sweep_w8_t4.json > $OUT/sweep_w8_t4.log 2>&1
echo "sweep rc $?"; grep -E "planner" $OUT/sweep_w8_t4.log; el
