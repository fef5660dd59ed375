# Session 22, run 158: the dp GEMVs asking L2 for their first item's next weight steps right after the PDL wait,
# while the CTA stages x (GemvCoopFamily.dp_stage_prefetch, template stage_prefetch; DRAM otherwise idles through the
# staging): device plan rows, then same-process A/Bs of the 27B step at 512 of 8,248, w4 and w8, 2 / 4 / 8 steps.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session22_d.sh
source bench/gpu_setup.sh
timeout 60 python3 bench/plan_rows.py --weights w4 now "sp4:gemv_coop.dp_stage_prefetch=4" > $OUT/plan_rows_w4.log 2>&1
echo "plan rows $(el)"; grep -E "^==|gemv_coop" $OUT/plan_rows_w4.log | cut -c1-75,115-180
ab_run w4_sp_512 w4 200 --context 512 --max-context 8248 now "sp2:gemv_coop.dp_stage_prefetch=2" "sp4:gemv_coop.dp_stage_prefetch=4" "sp8:gemv_coop.dp_stage_prefetch=8"
ab_run w8_sp_512 w8 150 --context 512 --max-context 8248 now "sp4:gemv_coop.dp_stage_prefetch=4" "sp8:gemv_coop.dp_stage_prefetch=8"
cp /tmp/ab_*.log $OUT/
