# Device run (session 6, 48): w8 mma at the 4-token tile by default -- GEMV w8 GPU tier, the engine tier, the
# fixture fidelity on the final kernels. Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_d.sh
source bench/gpu_setup.sh
gpu_tests gemv_w8 110 tests/targets/test_gemv_coop_gpu.py -k "w8 or every_arch"
rm -f $OUT/*.xml
gpu_tests engine 120 tests/runtime
rm -f $OUT/*.xml
timeout 90 python3 bench/quant_fidelity_gpu.py --json $OUT/quant_fidelity.json > $OUT/quant_fidelity.log 2>&1
echo "fidelity rc $?"; tail -7 $OUT/quant_fidelity.log; el
