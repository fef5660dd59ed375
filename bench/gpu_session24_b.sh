# Session 24, run 171: the balanced persistent dp GEMVs (GemvCoopFamily.dp_balance, template balance: CTAs own runs of
# row-group units, so a grid of every resident slot streams equal rows per CTA; gate|up, GDN in, q|k|v). The device's
# plan rows (NVRTC 13.0 registers, CTAs/SM, grids), the GPU tests, then same-process A/Bs of the 27B step with the
# first variant repeated (--repeat-first: the harness's own spread): w8 at 512 of 8,248 and 8,192 of 8,448, w4 at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_b.sh
source bench/gpu_setup.sh
BAL="bal:gemv_coop.dp_balance=True"
for w in w8 w4; do
  timeout 100 python3 bench/plan_rows.py --weights $w now "$BAL" > $OUT/plan_rows_$w.log 2>&1
  echo "plan rows $w rc $? $(el)"; grep -E "^==|gate_up|gdn.in|q_k_v|Error" $OUT/plan_rows_$w.log | cut -c1-60,100-175
done
gpu_tests bal 100 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many_items and balance"
ab_run w8_bal_512 w8 120 --repeat-first --context 512 --max-context 8248 now "$BAL"
ab_run w8_bal_8192 w8 120 --repeat-first --context 8192 --max-context 8448 now "$BAL"
ab_run w4_bal_512 w4 110 --repeat-first --context 512 --max-context 8248 now "$BAL"
rm -f $OUT/*.xml
cp /tmp/ab_*.log $OUT/
