# Session 21, run 152: the fused decode MLP with 2 / 4 gate|up outputs per warp and item (a half / a quarter of the
# items, barriers and tickets of the gate|up phase), under the 64-register cap; same-process A/Bs against the two
# GEMVs at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_f.sh
source bench/gpu_setup.sh
C4="mlp_decode.min_ctas={'w4':4,'w8':4}"
ab_run w4_guouts_512 w4 150 --context 512 --max-context 8248 "unfused:mlp_decode.enabled=False" "gu1:$C4" \
  "gu2:$C4;mlp_decode.gu_outs=2" "gu4:$C4;mlp_decode.gu_outs=4"
ab_run w8_guouts_512 w8 100 --context 512 --max-context 8248 "unfused:mlp_decode.enabled=False" "gu2:$C4;mlp_decode.gu_outs=2"
cp /tmp/ab_*.log $OUT/; rm -f $OUT/*.xml
