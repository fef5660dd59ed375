# Device run (session 4): the GPU tier of the k_warps / folded-norm GEMV (every case of
# tests/targets/test_gemv_coop_gpu.py) and the engine end to end (goldens through every arch's plan, graph ==
# eager, paged KV over garbage, chunked == unchunked, occupancy == driver, quantised fidelity).
source bench/gpu_setup.sh
gpu_tests gemv 260 tests/targets/test_gemv_coop_gpu.py
gpu_tests engine 250 tests/runtime
el
