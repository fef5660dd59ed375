# Device run (session 16, i): attn_decode's bf16 P.V loop unrolled 32 (template pv_unroll, now the default) instead of
# 8 -- each thread's V loads of a 64-key tile in 2 batches instead of 8: attention decode GPU tests, then same-process
# A/Bs of the 27B w8 step against unroll 8 at 8,192 and 512 of 8,248 tokens.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_i.sh
source bench/gpu_setup.sh
gpu_tests attn 100 tests/kernels/test_attention_gpu.py -k "decode_step"
ab_run w8_pv_8192 w8 150 --context 8192 --max-context 8248 --rounds 4 now "pv8:attn_decode.pv_unroll=8"
ab_run w8_pv_512 w8 120 --max-context 8248 now "pv8:attn_decode.pv_unroll=8"
