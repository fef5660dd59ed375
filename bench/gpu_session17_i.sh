# Device run (session 17, i): bench/kv_stream_probe.py with the DRAM rows (5 rotating pools of 33.5 MB).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_i.sh
source bench/gpu_setup.sh
timeout 120 python3 bench/kv_stream_probe.py --json $OUT/kv_stream_probe.json 2>&1 | tail -22
echo "probe $(el)"
