# Device run (session 12, b): the persistent dp GPU tests with the new options (preload "late", weight rings of 2 / 3
# stages), then the layer timeline (bench/dp_trace_probe.py) of the planned w4 dp GEMVs with the floor / ceil item
# split on the planned grid and on a full one, preload "late", and weight rings.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_b.sh
source bench/gpu_setup.sh
gpu_tests persist 200 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many"
for cfg in "planned||" "full||--grid full" "late|{'preload': 'late'}|" "ring2|{'ring': 2}|" "ring3|{'ring': 3}|" \
           "ring4|{'ring': 4}|" "ring3_late|{'ring': 3, 'preload': 'late'}|" "ring3_full|{'ring': 3}|--grid full"; do
  IFS='|' read -r name params gridopt <<< "$cfg"
  timeout 60 python3 bench/dp_trace_probe.py ${params:+--params "$params"} $gridopt --json $OUT/dp_trace_$name.json > $OUT/trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; head -1 $OUT/trace_$name.log; grep -A4 "^mean" $OUT/trace_$name.log | tail -4
  grep -E "grid [0-9]+," $OUT/trace_$name.log | sed 's/gemv_coop__//' | cut -c1-150
done
tail -n 3 $OUT/trace_*.log | grep -i -E "error|Traceback"
mkdir -p $OUT/logs; mv $OUT/*.log $OUT/logs/ 2>/dev/null; tar czf $OUT/logs.tgz -C $OUT logs dp_trace_*.json && rm -rf $OUT/logs $OUT/dp_trace_*.json
