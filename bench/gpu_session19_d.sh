# Session 19, run 139: where gdn_decode's ~6 us per GDN layer go (run 114) -- its per-CTA timeline in the graph-replayed
# 27B step (bench/attn_trace_probe.py --family gdn_decode: entry, PDL wait, conv, q / k norms, kv, o, y, state store)
# at w8, 512 of 8,248, planned and with warp_norms (GdnDecodeFamily.warp_norms: the q / k norms and the gated norm's sum
# of squares per warp, four barriers fewer, bit-identical sums); same-process A/Bs of warp_norms (w8 / w4 at 512,
# w8 at 8,192); the fused-prep attention decode's timeline (the default since 27d61bc); the GDN GPU tests.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session19_d.sh
source bench/gpu_setup.sh
probe() {  # probe NAME ARGS...
  local name=$1; shift
  timeout 90 python3 bench/attn_trace_probe.py "$@" --json $OUT/trace_$name.json > $OUT/trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; grep -v "^\[" $OUT/trace_$name.log | grep -A12 "records" | head -14
  grep -E "Error|error" $OUT/trace_$name.log | tail -3
}
probe gdn_w8_512 --family gdn_decode --weights w8 --context 512 --max-context 8248
probe gdn_wn_w8_512 --family gdn_decode --weights w8 --context 512 --max-context 8248 --set gdn_decode.warp_norms=True
ab_run w8_wn_512 w8 80 --context 512 --max-context 8248 now "wn:gdn_decode.warp_norms=True"
ab_run w4_wn_512 w4 80 --context 512 --max-context 8248 now "wn:gdn_decode.warp_norms=True"
ab_run w8_wn_8192 w8 80 --context 8192 --max-context 8448 now "wn:gdn_decode.warp_norms=True"
probe attn_w8_512 --family attn_decode --weights w8 --context 512 --max-context 8248
cp /tmp/ab_*.log $OUT/
gpu_tests gdn 150 tests/kernels/test_gdn_gpu.py
