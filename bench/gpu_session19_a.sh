# Session 19, run 136: fuse_prep "auto" by default (the staged decode kernel computes q and the new K / V row; the
# decode step launches no attn_prep on sm_90) and RoPE's cos / sin through attn_common.cuh rope_cos_sin in attn_prep
# and the fused kernel (double reduction + sincospif: no sinf / cosf slow path, no local memory). The attention GPU
# tests (incl. attn_prep at positions up to 2^18 - 1), the engine tests (goldens, fused == prep launch) and the
# quantised fidelity tests.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session19_a.sh
source bench/gpu_setup.sh
gpu_tests attn 150 tests/kernels/test_attention_gpu.py
gpu_tests engine 210 tests/runtime/test_engine_gpu.py -s
grep "max |d logit|" $OUT/engine.log
gpu_tests quant 150 tests/runtime/test_quant_gpu.py
