# Session 18, run 132: the tensor-core attention decode (stage_mma) with its scores' k-steps split over the warps
# when a tile holds few keys, P.V from the 16-key step holding the first key, no q conversion in an empty CTA --
# GPU tests, the engine test, A/B against the planned staged kernel at 8,192 and 512 tokens.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session18_b.sh
source bench/gpu_setup.sh
gpu_tests attn_mma 150 tests/kernels/test_attention_gpu.py -k "decode_step and (staged-mma or global)"
gpu_tests engine_mma 150 tests/runtime/test_engine_gpu.py -k "staged and mma"
ab_run w8_mma_512 w8 150 --context 512 --max-context 8248 now "mma:attn_decode.stage_mma=True"
ab_run w8_mma_8192 w8 200 --context 8192 --max-context 8448 now "mma:attn_decode.stage_mma=True"
cp /tmp/ab_*.log $OUT/
