# Device run (session 13, e): graph profiles of the w8 decode step with the planned one-token GEMVs (fp32 FMAs) and
# with all of them on the persistent dp kernels (run 97: 1.013x in one process), to see per family which is faster.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session13_e.sh
source bench/gpu_setup.sh
for v in fma dp; do
  extra=""; [ $v = dp ] && extra="--set gemv_coop.w8_dp_tiles=(1,)"
  timeout 90 python3 bench/graph_profile.py --weights w8 $extra --json $OUT/gp_w8_$v.json > /tmp/gp_$v.log 2>&1
  echo "== $v rc $? $(el)"; grep -E "step wall|gemv|gdn_decode" /tmp/gp_$v.log | head -12
done
