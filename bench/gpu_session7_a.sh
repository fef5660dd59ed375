# Device run (session 7, 56): the GDN prefill core split into gdn_chunk_wy (chunk-local WY part, every chunk at
# once) + the gdn_chunk scan (route "wy", now the default): GDN GPU tier (both chunked routes, every dv_block),
# the route x dv_block A/B at 8,192 tokens, the engine tier, the 27B bf16 bench at 512 / 8,192 with a profile.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session7_a.sh
source bench/gpu_setup.sh
gpu_tests gdn 150 tests/kernels/test_gdn_gpu.py
rm -f $OUT/*.xml
timeout 90 python3 bench/gdn_chunk_ab.py --tokens 8192 --reps 5 --json $OUT/gdn_chunk_ab.json > $OUT/gdn_chunk_ab.log 2>&1
echo "ab rc $?"; cat $OUT/gdn_chunk_ab.log | tail -12; el
gpu_tests engine 120 tests/runtime/test_engine_gpu.py
rm -f $OUT/*.xml
timeout 170 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 32 --prompt-tokens 512,8192 \
  --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A4 "^context\|^prompt" $OUT/bench_bf16.log | head -20; grep -i "gdn" $OUT/bench_bf16.log | head -12; el
