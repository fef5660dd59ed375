# Session 21, run 153 (the final tree: the fused decode MLP off by default, under a 64-register cap; the dp GEMVs'
# dot products moved into gemv_dp.cuh): the fused kernel's GPU tests at its default, the planned / persistent dp
# GEMV GPU tests, the folded-norm pair, engine and quantised fidelity on the default plan.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_g.sh
source bench/gpu_setup.sh
gpu_tests mlp 60 tests/kernels/test_mlp_decode_gpu.py
gpu_tests gemv 200 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or persistent_dp or folded_norm or cubin_resources or occupancy_calculator"
gpu_tests engine 100 tests/runtime/test_engine_gpu.py
gpu_tests quant 90 tests/runtime/test_quant_gpu.py
rm -f $OUT/*.xml
