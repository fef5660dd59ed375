# Device run (session 3, last): the GEMV (every case, incl. the fused norm's forced splits), GDN and engine GPU tiers
# at the final kernel sources.
source bench/gpu_setup.sh
gpu_tests gemv 220 tests/targets/test_gemv_coop_gpu.py
gpu_tests gdn 120 tests/kernels/test_gdn_gpu.py
gpu_tests engine 120 tests/runtime
