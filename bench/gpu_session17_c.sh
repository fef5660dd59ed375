# (transpose_sums was removed after this run, run 123: it reproduces only at 9bf8310)
# Device run (session 17, c): the staged attention decode as the plan's choice (stage_kv "auto": bf16 KV on sm_90) and
# the transpose-reduced scores (transpose_sums, off): (1) attention GPU tests (decode: global / staged / staged32 /
# staged-tsum, bf16 and int8 KV, every split mode; occupancy; prep; prefill), (2) engine tests (goldens per arch,
# graphs, paged KV, chunked prefill, batched decode, staged == global), (3) A/B of the 27B w8 step at 8,192 and at
# 512 tokens: planned (staged) vs global vs staged + transpose sums.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_c.sh
source bench/gpu_setup.sh
gpu_tests attn 150 tests/kernels/test_attention_gpu.py
gpu_tests engine 200 tests/runtime/test_engine_gpu.py
ab_run w8_tsum_8192 w8 200 --context 8192 --max-context 8448 now "global:attn_decode.stage_kv=False" \
  "tsum:attn_decode.transpose_sums=True"
ab_run w8_tsum_512 w8 150 --context 512 --max-context 8248 now "global:attn_decode.stage_kv=False" \
  "tsum:attn_decode.transpose_sums=True"
