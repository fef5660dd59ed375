# Device run (session 7, 58): route wy as landed (run 56's kernels; run 57's load batching reverted) -- the engine
# tier, the 27B bf16 bench at 512 / 8,192 beside HF transformers and at 32,768 (README table).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session7_c.sh
source bench/gpu_setup.sh
gpu_tests engine 130 tests/runtime
rm -f $OUT/*.xml
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 200 $B --prompt-tokens 512,8192 --peer hf --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; grep -i -A4 "peer\|hf " $OUT/bench_bf16.log | tail -8; el
timeout 110 $B --prompt-tokens 32768 --json $OUT/bench_bf16_32k.json > $OUT/bench_bf16_32k.log 2>&1
echo "32k rc $?"; grep -A2 "^context" $OUT/bench_bf16_32k.log; el
