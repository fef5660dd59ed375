# Session 24, run 172: two weight steps in flight per warp (template depth 2) on the 256-thread w8 dp GEMVs too
# (gate|up runs 3 CTAs/SM at 72 registers either way on NVRTC 13.0, so depth 2 may cost it no residency). depth 2
# excludes the carry, so "deepnc" also drops the carry everywhere; "deep" leaves the choice to the cost model.
# The device's plan rows, then same-process A/Bs of the 27B w8 step (first variant repeated) at 8,192 and 512.
# Then the tensor-core attention decode at 8,192 with the repeated first variant.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_c.sh
source bench/gpu_setup.sh
DEEP="deep:gemv_coop.dp_deep_threads=(256,640)"
DEEPNC="deepnc:gemv_coop.dp_deep_threads=(256,640);gemv_coop.dp_carry=(False,)"
NC="nc:gemv_coop.dp_carry=(False,)"
timeout 100 python3 bench/plan_rows.py --weights w8 now "$DEEP" "$DEEPNC" "$NC" > $OUT/plan_rows_w8.log 2>&1
echo "plan rows w8 rc $? $(el)"; grep -E "^==|gate_up|gdn.in|q_k_v|Error" $OUT/plan_rows_w8.log | cut -c1-60,100-175
ab_run w8_deep_8192 w8 150 --repeat-first --context 8192 --max-context 8448 now "$DEEPNC" "$NC"
ab_run w8_deep_512 w8 150 --repeat-first --context 512 --max-context 8248 now "$DEEPNC" "$NC"
cp /tmp/ab_*.log $OUT/
# the tensor-core attention decode (AttnDecodeFamily.stage_mma, off) at 8,192 again, now with the repeated first variant
ab_run w8_mma_8192 w8 150 --repeat-first --context 8192 --max-context 8448 now "mma:attn_decode.stage_mma=True"
cp /tmp/ab_w8_mma_8192.log $OUT/
