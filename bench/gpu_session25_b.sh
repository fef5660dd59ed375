# Session 25, run 178: the whole GPU tier on the final tree, second part -- attention, GEMV, GEMM kernels.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session25_b.sh
source bench/gpu_setup.sh
gpu_tests attention 220 tests/kernels/test_attention_gpu.py
gpu_tests gemv 260 tests/targets
gpu_tests gemm 80 tests/kernels/test_gemm_gpu.py
rm -f $OUT/*.xml
