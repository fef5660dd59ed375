# Device run (session 10, d): where a w4 dp GEMV's fixed cost goes (bench/dp_stream_probe.py: as built, no x
# staging, no dot products, neither).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_d.sh
source bench/gpu_setup.sh
timeout 200 python3 bench/dp_stream_probe.py --json $OUT/dp_stream_probe.json > $OUT/dp_stream_probe.log 2>&1
echo "probe rc $?"; grep -v Warn $OUT/dp_stream_probe.log | tail -8; el
