# Session 21, run 150: is the fused decode MLP's ticket counter its limit? (run 149: still 1.21x slower than the two
# GEMVs at w4.) Static items (CTA c takes items c, c + grid, ...: no ticket atomics), with and without the 64-register
# cap and the fences (probe), against the ticket schedule and the two GEMVs; w4 and w8 at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_d.sh
source bench/gpu_setup.sh
ab_run w4_static_512 w4 150 --context 512 --max-context 8248 now "unfused:mlp_decode.enabled=False" \
  "static:mlp_decode.sched='static'" "static_cap4:mlp_decode.sched='static';mlp_decode.min_ctas={'w4':4,'w8':4}" \
  "static_nofence:mlp_decode.sched='static';mlp_decode.probe_nofence=True"
ab_run w8_static_512 w8 110 --context 512 --max-context 8248 "unfused:mlp_decode.enabled=False" \
  "static_cap4:mlp_decode.sched='static';mlp_decode.min_ctas={'w4':4,'w8':4}"
cp /tmp/ab_*.log $OUT/; rm -f $OUT/*.xml
