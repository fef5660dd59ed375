# Device run (session 17, d): attn_combine spread over dim_ctas CTAs per head (template dctas; family attribute
# attn_combine.dim_ctas, default 1): (1) attention decode GPU tests (the combine at dim_ctas 4 / 8 checked on the
# same workspace), (2) same-process A/B of the 27B w8 step at 512 and 8,192 tokens: planned vs dim_ctas 4 / 8.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_d.sh
source bench/gpu_setup.sh
gpu_tests attn_comb 120 tests/kernels/test_attention_gpu.py -k "decode_step and global"
ab_run w8_comb_512 w8 170 --context 512 --max-context 8248 now "comb4:attn_combine.dim_ctas=4" \
  "comb8:attn_combine.dim_ctas=8"
ab_run w8_comb_8192 w8 200 --context 8192 --max-context 8448 now "comb4:attn_combine.dim_ctas=4" \
  "comb8:attn_combine.dim_ctas=8"
