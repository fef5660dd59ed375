# Device run (session 10, g): the w4 27B bench and graph profile with the dp staging as in session 9 (run 80's
# per-CTA x rotation reverted).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_g.sh
source bench/gpu_setup.sh
timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512,8192 \
  --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log | head -3; grep "between streamed" $OUT/bench_w4.log; el
timeout 60 python3 bench/graph_profile.py --weights w4 --context 512 --json $OUT/graph_profile_w4.json \
  > $OUT/graph_profile_w4.log 2>/dev/null
echo "profile rc $?"; cat $OUT/graph_profile_w4.log; el
