# Session 22, run 161 (a probe): the upper bound of a producer-side x format -- the dp GEMVs with no x staging at all
# (template probe_nostage: the staging loop skipped, its barrier and the norm factor kept; wrong sums, timing only)
# against the planned kernels, 27B step at 512 of 8,248, w4 and w8. Device plan rows first (residency must match).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session22_e.sh
source bench/gpu_setup.sh
timeout 60 python3 bench/plan_rows.py --weights w4 now "ns:gemv_coop.probe_nostage=True" > $OUT/plan_rows_w4.log 2>&1
timeout 60 python3 bench/plan_rows.py --weights w8 now "ns:gemv_coop.probe_nostage=True" > $OUT/plan_rows_w8.log 2>&1
echo "plan rows $(el)"; grep -E "^==|gemv_coop" $OUT/plan_rows_w*.log | cut -c20-60,130-200
ab_run w4_ns_512 w4 120 --context 512 --max-context 8248 now "ns:gemv_coop.probe_nostage=True"
ab_run w8_ns_512 w8 120 --context 512 --max-context 8248 now "ns:gemv_coop.probe_nostage=True"
cp /tmp/ab_*.log $OUT/
