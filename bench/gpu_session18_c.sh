# Session 18, run 133: the whole GPU tier on the final tree, time-boxed per file group (logs and junit under $OUT).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session18_c.sh
source bench/gpu_setup.sh
gpu_tests attention 200 tests/kernels/test_attention_gpu.py
gpu_tests gdn 120 tests/kernels/test_gdn_gpu.py
gpu_tests gemv 150 tests/targets
gpu_tests engine_quant_peer 200 tests/runtime tests/ninferc
