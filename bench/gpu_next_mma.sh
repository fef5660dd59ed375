# Prepared device run (session 17, not run: the device budget was spent): attn_decode's tensor-core loops
# (AttnDecodeFamily.stage_mma, template `mma`: S = Q K^T and O += P V by mma.sync m16n8k16 with q and P as bf16 hi + lo,
# on the staged tiles) -- (1) attention decode GPU tests incl. staged-mma (bf16 KV, every split mode), (2) the engine
# test staged == global within ENGINE_REORDER (B = 1 and 3), (3) same-process A/B of the 27B w8 step at 8,192 and 512
# tokens: planned (staged SIMT) vs mma, and the kernel's per-CTA trace with mma at 8,192.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_next_mma.sh
source bench/gpu_setup.sh
gpu_tests attn_mma 150 tests/kernels/test_attention_gpu.py -k "decode_step and (staged-mma or global)"
gpu_tests engine_mma 150 tests/runtime/test_engine_gpu.py -k "staged and mma"
ab_run w8_mma_8192 w8 200 --context 8192 --max-context 8448 now "mma:attn_decode.stage_mma=True"
ab_run w8_mma_512 w8 150 --context 512 --max-context 8248 now "mma:attn_decode.stage_mma=True"
