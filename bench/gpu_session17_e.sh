# Device run (session 17, e): the final tree's GPU tests (attention: prep / decode every mode / combine / prefill;
# engine: goldens per arch, graphs, paged KV, chunked prefill, batched decode, staged == global; quantised fidelity)
# and the README's 27B w8 rows.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_e.sh
source bench/gpu_setup.sh
gpu_tests attn 130 tests/kernels/test_attention_gpu.py
gpu_tests engine 170 tests/runtime/test_engine_gpu.py
bench_27b w8
