# Device run (session 5, 44): GEMV GPU tier for w4 after reverting the offset mma (the 5149fc8 kernels, with the
# fixed forced-variant harness). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session5_recheck.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 80 tests/targets/test_gemv_coop_gpu.py -k "w4"
rm -f $OUT/*.xml
