# Device run (session 8, 65): the final tree -- the whole GEMM GPU tier (run 64's test fix included).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session8_g.sh
source bench/gpu_setup.sh
gpu_tests gemm 300 tests/kernels/test_gemm_gpu.py -k "not throughput"
rm -f $OUT/*.xml
