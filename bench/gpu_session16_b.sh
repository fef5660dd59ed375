# Device run (session 16, b): attn_decode / attn_combine alone at the 27B shape (bench/attn_decode_probe.py).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_b.sh
source bench/gpu_setup.sh
timeout 240 python3 bench/attn_decode_probe.py --json $OUT/attn_decode_probe.json 2>&1 | tail -30
