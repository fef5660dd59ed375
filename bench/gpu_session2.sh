# Device run (session 2, call 1): engine end to end with PDL launches, quantised artifacts' fidelity, the HF
# peer's mapping, then the new quantised / int8-KV kernel tests. Each part has its own time box; logs in $OUT.
source bench/gpu_setup.sh
gpu_tests engine 200 tests/runtime/test_engine_gpu.py
gpu_tests quant 150 tests/runtime/test_quant_gpu.py
gpu_tests peer 90 tests/ninferc/test_peer_hf_gpu.py
gpu_tests kernels_q 200 tests/kernels tests/targets/test_gemv_coop_gpu.py -k "w8 or w4 or int8 or quant or wfmt"
