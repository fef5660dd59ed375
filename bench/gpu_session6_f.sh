# Device run (session 6, 51): the 1-token w8 mma variants at 64 registers (launch bounds) -- GEMV w8 GPU tier and the
# w8 sweep at T = 1. Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_f.sh
source bench/gpu_setup.sh
gpu_tests gemv_w8 110 tests/targets/test_gemv_coop_gpu.py -k "w8"
rm -f $OUT/*.xml
timeout 100 python3 bench/gemv_ksplit_sweep.py --formats w8 --tokens 1 --json $OUT/sweep_w8_t1.json > $OUT/sweep_w8.log 2>&1
echo "sweep rc $?"; grep -E "planner" $OUT/sweep_w8.log; el
