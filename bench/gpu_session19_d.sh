# Session 19, run 139: where gdn_decode's ~6 us per GDN layer go (run 114) -- its per-CTA timeline in the graph-replayed
# 27B step (bench/attn_trace_probe.py --family gdn_decode: entry, PDL wait, conv, q / k norms, kv, o, y, state store)
# at w8 and w4, 512 of 8,248; and the fused-prep attention decode's timeline (the default since 27d61bc) at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session19_d.sh
source bench/gpu_setup.sh
probe() {  # probe NAME ARGS...
  local name=$1; shift
  timeout 90 python3 bench/attn_trace_probe.py "$@" --json $OUT/trace_$name.json > $OUT/trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; grep -v "^\[" $OUT/trace_$name.log | grep -A12 "records" | head -14
  grep -E "Error|error" $OUT/trace_$name.log | tail -3
}
probe gdn_w8_512 --family gdn_decode --weights w8 --context 512 --max-context 8248
probe gdn_w4_512 --family gdn_decode --weights w4 --context 512 --max-context 8248
probe attn_w8_512 --family attn_decode --weights w8 --context 512 --max-context 8248
