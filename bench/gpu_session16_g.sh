# Device run (session 16, g): attn_decode reads its key range and first page from the batch metadata before the PDL
# wait (meta_late False, the new default): attention decode GPU tests (bf16 and int8, every split mode), the same-
# process A/B of the 27B w8 step at 512 of 8,248 against meta_late True, and the per-CTA trace at 512 of 8,248.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_g.sh
source bench/gpu_setup.sh
gpu_tests attn 120 tests/kernels/test_attention_gpu.py -k "decode_step"
ab_run w8_meta w8 200 --max-context 8248 now "late:attn_decode.meta_late=True"
timeout 80 python3 bench/attn_trace_probe.py --context 512 --max-context 8248 --json $OUT/attn_trace_512_8248.json 2>&1 \
  | grep -v "^engine\|^memory" | tail -11
