# Device run (session 7, 57): the GDN chunk kernels' staging loads batched (gdn::stage: every global load of a tile
# issued before its first shared store; row scalars likewise) -- GDN GPU tier, the route x dv_block A/B at 8,192
# tokens, the 27B bf16 bench at 512 / 8,192 with a profile. Run as NINFERC_COMMIT=<hash> bash bench/gpu_session7_b.sh
source bench/gpu_setup.sh
gpu_tests gdn 150 tests/kernels/test_gdn_gpu.py
rm -f $OUT/*.xml
timeout 90 python3 bench/gdn_chunk_ab.py --tokens 8192 --reps 5 --json $OUT/gdn_chunk_ab.json > $OUT/gdn_chunk_ab.log 2>&1
echo "ab rc $?"; cat $OUT/gdn_chunk_ab.log | tail -12; el
timeout 170 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 32 --prompt-tokens 512,8192 \
  --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; grep -E "^prefill chunk|gdn_chunk" $OUT/bench_bf16.log; el
