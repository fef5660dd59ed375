# Device run (session 10, c): decode_stream test, the graph-replayed step's timeline between steps (sampler,
# copies, host waits) for the streamed and the step-by-step loop, and the w4 layer probe with more weight steps
# prefetched into L2 before the PDL wait (covering the x staging).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_c.sh
source bench/gpu_setup.sh
gpu_tests engine 120 tests/runtime/test_engine_gpu.py -k "decode_stream"
rm -f $OUT/*.xml
for L in stream step; do
  timeout 100 python3 bench/graph_profile.py --weights w4 --context 512 --loop $L --json $OUT/graph_profile_w4_$L.json \
    > $OUT/graph_profile_w4_$L.log 2>$OUT/graph_profile_w4_$L.err
  echo "profile $L rc $?"; head -1 $OUT/graph_profile_w4_$L.log; el
done
timeout 150 python3 bench/dp_layer_probe.py --wfmt w4 --prefetch 0,3,6 --json $OUT/dp_layer_probe_w4.json > $OUT/dp_layer_probe_w4.log 2>&1
echo "probe rc $?"; grep -v Warn $OUT/dp_layer_probe_w4.log | tail -14; el
