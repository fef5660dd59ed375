# Session 18, run 131: where the tensor-core attention decode (stage_mma) loses at 512 of 8,248 tokens (run 130:
# 0.9865x) and wins at 8,192 (1.0125x): the per-CTA phase timeline of the planned staged kernel and the mma one.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session18_a.sh (run 131, at 46d8e28, ran the probe's first form of the
# option, --set stage_mma=True; it now takes family.attr=value as bench/graph_profile.py does)
source bench/gpu_setup.sh
for cfg in "staged_512 --context 512" "mma_512 --context 512 --set attn_decode.stage_mma=True" \
           "staged_8192 --context 8192 --max-context 8448" "mma_8192 --context 8192 --max-context 8448 --set attn_decode.stage_mma=True"; do
  set -- $cfg; name=$1; shift
  timeout 90 python3 bench/attn_trace_probe.py "$@" --json $OUT/attn_trace_$name.json > $OUT/attn_trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; grep -A8 "^w8 context" $OUT/attn_trace_$name.log; grep -iE "error" $OUT/attn_trace_$name.log | tail -2
done
