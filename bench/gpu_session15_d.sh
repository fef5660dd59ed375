# Device run (session 15, d): the final tree's bf16 27B bench with the HF transformers peer in the same process
# (512 / 8,192), and at a 32,768-token prompt (issue 5's rows). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session15_d.sh
source bench/gpu_setup.sh
timeout 300 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 32 --prompt-tokens 512,8192 \
  --peer hf --json $OUT/bench_bf16.json > /tmp/bench_bf16.log 2>&1
echo "bench bf16 rc $? $(el)"; grep -A3 "^context" /tmp/bench_bf16.log | head -3; grep -iE "peer|hf|ratio|error" /tmp/bench_bf16.log | tail -8
timeout 200 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 32 --prompt-tokens 32768 \
  --json $OUT/bench_bf16_32k.json > /tmp/bench_bf16_32k.log 2>&1
echo "bench bf16 32k rc $? $(el)"; grep -A2 "^context" /tmp/bench_bf16_32k.log | head -3; grep -i "error" /tmp/bench_bf16_32k.log | tail -2
cp /tmp/bench_bf16*.log $OUT/
