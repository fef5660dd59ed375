# Device run (session 6, 49-50): bench/w8_layout_probe.py -- is the w8 mma GEMV's access pattern its T = 1 limit?
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_e.sh
source bench/gpu_setup.sh
timeout 200 python3 bench/w8_layout_probe.py --json $OUT/w8_layout_probe.json > $OUT/w8_layout_probe.log 2>&1
echo "probe rc $?"; cat $OUT/w8_layout_probe.log | tail -30; el
