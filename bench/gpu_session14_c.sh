# Device run (session 14, c): the tree with depth 2 on the 640-thread dp kernels by default (run 102). (1) A/B of the
# GDN decode kernel's CTA size (GdnDecodeFamily.state_per_thread: 32 state floats per thread = 512 threads per
# head today; 16 -> 1024, 64 -> 256) in a w4 engine, where GDN decode is ~6 % of the step; (2) the 27B w8 and w4
# benches (README rows).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_c.sh
source bench/gpu_setup.sh
timeout 170 python3 bench/family_ab.py --weights w4 --rounds 4 --json $OUT/ab_w4_gdn_threads.json now \
  "spt16:gdn_decode.state_per_thread=16" "spt64:gdn_decode.state_per_thread=64" > /tmp/ab.log 2>&1
echo "ab rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab.log | tail -5
for w in w8 w4; do
  timeout 110 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --decode-tokens 32 \
    --prompt-tokens 512,8192 --json $OUT/bench_$w.json > /tmp/bench_$w.log 2>&1
  echo "bench $w rc $? $(el)"; grep -A3 "^context" /tmp/bench_$w.log | head -3; grep -i "error" /tmp/bench_$w.log | tail -2
done
