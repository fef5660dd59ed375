# Session 26, run 185: the CLI after the input-check changes, on the GPU: bench of a compiled fixture artifact at a
# prompt length that is not a multiple of the page and 48 decode steps (KV capacity is now prompt + 2 x decode + 8;
# before, such a run would stop after its prefill), run with sampling options, and the runtime GPU tests.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session26_d.sh
source bench/gpu_setup.sh
ninferc compile .fixtures/models/qwen35-tiny-code --target sm_90 --sku h200 -o /tmp/tiny.ninfer > /tmp/c.log 2>&1
echo "compile rc $? $(el)"
timeout 90 ninferc bench /tmp/tiny.ninfer --prompt-tokens 500,1000 --decode-tokens 48 --json $OUT/bench_tiny_500.json 2>&1 | tail -3
echo "bench rc $? $(el)"
timeout 60 ninferc run /tmp/tiny.ninfer --prompt $'def fibonacci(n):\n' --max-new 24 --temperature 0.8 --top-k 50 --top-p 0.9 --seed 7 2>&1 | tail -4
echo "run (sampling) rc $? $(el)"
timeout 60 ninferc run /tmp/tiny.ninfer --prompt hello --max-new 4 --seed 3 2>&1 | tail -1
gpu_tests runtime 420 tests/runtime tests/ninferc
