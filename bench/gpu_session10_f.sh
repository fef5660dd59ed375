# Device run (session 10, f): dp staging that starts each CTA at its own x block (stream probe first), the GEMV
# dp tests, the graph profile of the w4 step, then the 27B bench for w4 / w8 / bf16 at 512 and 8,192.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_f.sh
source bench/gpu_setup.sh
timeout 40 python3 bench/dp_stream_probe.py --json $OUT/dp_stream_probe.json > $OUT/dp_stream_probe.log 2>&1
echo "stream probe rc $?"; grep -v Warn $OUT/dp_stream_probe.log | tail -4; el
gpu_tests gemv 130 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or (quant_forced and dp) or folded"
rm -f $OUT/*.xml
timeout 60 python3 bench/graph_profile.py --weights w4 --context 512 --json $OUT/graph_profile_w4.json \
  > $OUT/graph_profile_w4.log 2>$OUT/graph_profile_w4.err
echo "profile rc $?"; head -1 $OUT/graph_profile_w4.log; el
for W in w4 w8 bf16; do
  timeout 130 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $W --decode-tokens 32 --prompt-tokens 512,8192 \
    --json $OUT/bench_$W.json > $OUT/bench_$W.log 2>&1
  echo "$W rc $?"; grep -A3 "^context" $OUT/bench_$W.log | head -3; el
done
