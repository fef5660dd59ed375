# Device run (session 16, h): the final tree's GPU checks -- attention decode (bf16 and int8 KV, every split mode),
# engine (goldens, graph == eager, paged KV, chunked prefill) and the quantised / int8-KV fidelity tests.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_h.sh
source bench/gpu_setup.sh
gpu_tests attn 100 tests/kernels/test_attention_gpu.py -k "decode_step"
gpu_tests engine 200 tests/runtime/test_engine_gpu.py
gpu_tests quant 200 tests/runtime/test_quant_gpu.py
