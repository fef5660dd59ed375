# Device run (session 17, h): bench/kv_stream_probe.py -- how fast one layer's paged K/V (8,192 tokens, 33.5 MB) moves
# by cp.async into shared memory (per page / all pages at once) and by plain 16-byte loads, against a device copy.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_h.sh
source bench/gpu_setup.sh
timeout 120 python3 bench/kv_stream_probe.py --json $OUT/kv_stream_probe.json 2>&1 | tail -14
echo "probe $(el)"
