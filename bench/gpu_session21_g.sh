# Session 21, run 153 (the final tree: the fused decode MLP off by default, under its register caps; the dp GEMVs'
# dot products moved into gemv_dp.cuh -- their sm_90 cubins byte-identical to 5dc9212's, checked on the CPU): the fused
# kernel's GPU tests at its defaults, then engine and quantised fidelity on the default plan (the down steps now go
# through MlpRoute).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_g.sh
source bench/gpu_setup.sh
gpu_tests mlp 60 tests/kernels/test_mlp_decode_gpu.py
gpu_tests engine 100 tests/runtime/test_engine_gpu.py
gpu_tests quant 90 tests/runtime/test_quant_gpu.py
rm -f $OUT/*.xml
