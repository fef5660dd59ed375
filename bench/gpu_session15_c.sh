# Device run (session 15, c): the final tree's GPU tests of the changed kernels (attn_decode balanced by default,
# gdn_decode preload by default) and the engine, then the 27B w8 / w4 benches (README rows).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session15_c.sh
source bench/gpu_setup.sh
gpu_tests attn 70 tests/kernels/test_attention_gpu.py -k "decode_step or driver_occupancy"
gpu_tests gdn 60 tests/kernels/test_gdn_gpu.py -k "test_decode or driver_occupancy"
gpu_tests engine 120 tests/runtime/test_engine_gpu.py
bench_27b w8 w4
