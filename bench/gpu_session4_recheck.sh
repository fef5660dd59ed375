# Device run (session 4, re-check after the review mends): GEMV GPU tier and the engine.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session4_recheck.sh
source bench/gpu_setup.sh
gpu_tests gemv 130 tests/targets/test_gemv_coop_gpu.py
gpu_tests engine 110 tests/runtime
rm -f $OUT/*.xml
el
