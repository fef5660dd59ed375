# Device run (session 16, f): attn_decode's per-CTA timeline in the graph-replayed 27B w8 step (bench/attn_trace_probe.py)
# at 512 and 8,192 of 8,248 tokens (run e's attempt failed: the trace arrays were in an anonymous namespace).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_f.sh
source bench/gpu_setup.sh
for cfg in "512 8248" "8192 8248"; do
  set -- $cfg
  timeout 100 python3 bench/attn_trace_probe.py --context $1 --max-context $2 --json $OUT/attn_trace_$1_$2.json 2>&1 \
    | grep -v "^engine\|^memory" | tail -11
  echo "trace $1/$2 $(el)"
done
