# Device run (session 3): step plans memoised per (family, problem, counts) -- engine GPU tests, then the bf16 27B
# bench (its timed prefill is the first step of that prompt length, so TTFT includes building the step plan).
source bench/gpu_setup.sh
gpu_tests engine 120 tests/runtime
timeout 120 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512,8192 --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; el
