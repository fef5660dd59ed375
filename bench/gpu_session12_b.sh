# Device run (session 12, b): the layer timeline (bench/dp_trace_probe.py) of the planned w4 dp GEMVs with the
# floor / ceil item split, on the planned grid and on a full one, with the first weight step preloaded into
# registers before the PDL wait (as planned) or only into L2 there (preload "late").
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_b.sh
source bench/gpu_setup.sh
for cfg in "planned||" "full||--grid full" "late|{'preload': 'late'}|" "late_full|{'preload': 'late'}|--grid full"; do
  IFS='|' read -r name params gridopt <<< "$cfg"
  timeout 100 python3 bench/dp_trace_probe.py ${params:+--params "$params"} $gridopt --json $OUT/dp_trace_$name.json > $OUT/trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; head -1 $OUT/trace_$name.log; grep -A4 "^mean" $OUT/trace_$name.log
  grep -E "grid [0-9]+," $OUT/trace_$name.log | sed 's/gemv_coop__//' | cut -c1-150
done
tail -n 3 $OUT/trace_*.log | grep -i -E "error|Traceback"
rm -f $OUT/*.log
