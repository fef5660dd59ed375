# Device run (session 6, 46): the w8 GEMV on tensor cores (fp16 mma, the 1-token tile): GEMV w8 GPU tier, the w8
# sweep at T = 1 (mma vs FMA variants), the 27B w8 bench, the engine tier, the fixture fidelity (new w4 quantiser).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_b.sh
source bench/gpu_setup.sh
gpu_tests gemv_w8 110 tests/targets/test_gemv_coop_gpu.py -k "w8"
rm -f $OUT/*.xml
timeout 100 python3 bench/gemv_ksplit_sweep.py --formats w8 --tokens 1 --json $OUT/sweep_w8_t1.json > $OUT/sweep_w8.log 2>&1
echo "sweep rc $?"; grep -E "planner" $OUT/sweep_w8.log; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 120 $B --weights w8 --prompt-tokens 512,8192 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1
echo "w8 rc $?"; grep -A3 "^context" $OUT/bench_w8.log; el
gpu_tests engine 110 tests/runtime
rm -f $OUT/*.xml
timeout 90 python3 bench/quant_fidelity_gpu.py --json $OUT/quant_fidelity.json > $OUT/quant_fidelity.log 2>&1
echo "fidelity rc $?"; tail -9 $OUT/quant_fidelity.log; el
