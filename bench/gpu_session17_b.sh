# Device run (session 17, b): attn_decode's staged K/V tiles (AttnDecodeFamily.stage_kv) with tiles of a page or of 32
# keys (stage_keys) and the bf16 launch bound (stage_min_ctas 4): (1) attention decode GPU tests (global, staged,
# staged32; bf16 and int8 KV; every split mode; driver occupancy incl. the staged kernels' dynamic shared memory);
# (2) the engine tests: staged == global decode logits bit for bit (tiles of a page / 32 keys, B = 1 and 3);
# (3) same-process A/B of the 27B w8 step at 8,192 tokens: planned vs staged (page tiles) vs staged32.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_b.sh
source bench/gpu_setup.sh
gpu_tests attn_stage 170 tests/kernels/test_attention_gpu.py -k "decode_step or occupancy"
gpu_tests engine_stage 150 tests/runtime/test_engine_gpu.py -k "staged"
ab_run w8_stage_8192 w8 230 --context 8192 --max-context 8448 now "staged:attn_decode.stage_kv=True" \
  "staged32:attn_decode.stage_kv=True;attn_decode.stage_keys=32"
