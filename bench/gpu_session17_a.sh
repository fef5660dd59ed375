# Device run (session 17, a): attn_decode with K/V tiles through shared memory (AttnDecodeFamily.stage_kv, template
# `stage`): (1) attention decode GPU tests, global and staged, bf16 and int8 KV, every split mode, driver occupancy
# with the staged kernel's dynamic shared memory; (2) the engine test: staged == global decode logits bit for bit
# (PDL-chained, B = 1 and 3); (3) same-process A/B of the 27B w8 step (bf16 KV), planned vs staged, at 512 and at
# 8,192 tokens of context.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_a.sh
source bench/gpu_setup.sh
gpu_tests attn_stage 170 tests/kernels/test_attention_gpu.py -k "decode_step or occupancy"
gpu_tests engine_stage 120 tests/runtime/test_engine_gpu.py -k "staged"
ab_run w8_stage_512 w8 150 --context 512 --max-context 8248 now "staged:attn_decode.stage_kv=True"
ab_run w8_stage_8192 w8 200 --context 8192 --max-context 8448 now "staged:attn_decode.stage_kv=True"
