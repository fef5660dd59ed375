# Device run (session 12, a): the timeline of the planned w4 dp decode GEMVs of a GDN layer (bench/dp_trace_probe.py),
# as planned, and with every shape at 256 / at 640 threads.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_a.sh
source bench/gpu_setup.sh
timeout 150 python3 bench/dp_trace_probe.py --json $OUT/dp_trace_w4.json > $OUT/trace_planned.log 2>&1
echo "trace planned rc $?"; el
timeout 120 python3 bench/dp_trace_probe.py --family "{'dp_shapes': ((256, 1),)}" --json $OUT/dp_trace_w4_256.json > $OUT/trace_256.log 2>&1
echo "trace 256 rc $?"; el
timeout 120 python3 bench/dp_trace_probe.py --family "{'dp_shapes': ((640, 1),)}" --json $OUT/dp_trace_w4_640.json > $OUT/trace_640.log 2>&1
echo "trace 640 rc $?"; el
head -12 $OUT/trace_planned.log; grep -A5 "^mean" $OUT/trace_planned.log
grep -B2 -A5 "^mean" $OUT/trace_256.log | grep -v "^ *[0-9]"; grep -A5 "^mean" $OUT/trace_640.log
tail -n 3 $OUT/trace_*.log | grep -i -E "error|Traceback" 
