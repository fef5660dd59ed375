# Device run (session 13, d): same-process A/B (bench/family_ab.py) of the w8 one-token GEMVs on the persistent
# integer-dot-product kernels (w8_dp_tiles=(1,), at 2 and 4 rows per warp) against the planned fp32 FMA kernels.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session13_d.sh
source bench/gpu_setup.sh
timeout 200 python3 bench/family_ab.py --weights w8 --rounds 4 --json $OUT/ab_w8_dp.json now \
  "dp2:gemv_coop.w8_dp_tiles=(1,)" "dp4:gemv_coop.w8_dp_tiles=(1,);gemv_coop.quant_rows_per_warp=4" \
  > /tmp/ab.log 2>&1
echo "ab rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab.log | tail -6
