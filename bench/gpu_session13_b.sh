# Device run (session 13, b): same-process A/Bs (bench/family_ab.py) of this session's three decode changes against
# their baselines, one at a time: the w8 one-token norm-input GEMVs at 2 rows per warp with the cost model's
# shape (rows2), the one-CTA argmax (one_cta), the GDN decode kernel without its new pre-wait work (noprewait).
# (gemv_coop.w8_tok1_* were removed after run 99, when w8 moved to the dp kernels: this script
# reproduces only at its commit.)
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session13_b.sh
source bench/gpu_setup.sh
OLDSHAPES="((128,1),(128,2),(128,4),(256,2),(256,4))"
timeout 200 python3 bench/family_ab.py --weights w8 --rounds 4 --json $OUT/ab_w8.json now \
  "rows2:gemv_coop.w8_tok1_rows_per_warp=2;gemv_coop.w8_tok1_shapes=$OLDSHAPES" one_cta:sample.split_argmax=False \
  noprewait:gdn_decode.prewait=False > /tmp/ab_w8.log 2>&1
echo "ab w8 rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab_w8.log | tail -6
timeout 150 python3 bench/family_ab.py --weights w4 --rounds 4 --json $OUT/ab_w4.json now \
  one_cta:sample.split_argmax=False noprewait:gdn_decode.prewait=False > /tmp/ab_w4.log 2>&1
echo "ab w4 rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab_w4.log | tail -6
