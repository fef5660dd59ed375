# Device run (session 17, h): (1) bench/kv_stream_probe.py -- how fast one layer's paged K/V (8,192 tokens, 33.5 MB)
# moves by cp.async into shared memory (per page / all pages at once) and by plain 16-byte loads, against a device
# copy; (2) attention decode GPU tests incl. the staged ring (stage_depth 2, 32-key tiles); (3) A/B of the 27B w8
# step at 8,192: planned (staged, page tiles, one in flight) vs 32-key tiles two in flight vs 16-key tiles four.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_h.sh
source bench/gpu_setup.sh
timeout 120 python3 bench/kv_stream_probe.py --json $OUT/kv_stream_probe.json 2>&1 | tail -22
echo "probe $(el)"
gpu_tests attn_ring 120 tests/kernels/test_attention_gpu.py -k "decode_step and (staged32-depth2 or global)"
ab_run w8_ring_8192 w8 200 --context 8192 --max-context 8448 now \
  "t32d2:attn_decode.stage_keys=32;attn_decode.stage_depth=2" "t16d4:attn_decode.stage_keys=16;attn_decode.stage_depth=4"
