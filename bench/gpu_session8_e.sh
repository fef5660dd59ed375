# Device run (session 8, 63): final kernels (run 62's) -- the engine tier, the 27B bf16 bench at 512 / 8,192 beside HF
# transformers with a profile, and at 32,768 (README table).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session8_e.sh
source bench/gpu_setup.sh
gpu_tests engine 140 tests/runtime
rm -f $OUT/*.xml
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 200 $B --prompt-tokens 512,8192 --peer hf --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log | head -4; grep -i "^peer" $OUT/bench_bf16.log | tail -1
grep -i "gemm\|gdn_chunk\|attn_prefill\|^memory" $OUT/bench_bf16.log | tail -10; el
timeout 130 $B --prompt-tokens 32768 --json $OUT/bench_bf16_32k.json > $OUT/bench_bf16_32k.log 2>&1
echo "32k rc $?"; grep -A2 "^context" $OUT/bench_bf16_32k.log; el
