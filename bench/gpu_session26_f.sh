# Session 26, run 187: the final tree's bench path on the GPU (the preset's graph is now built before the GPU check
# and handed to the engine), the README rows' 27B bench on this machine, and run with sampling options.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session26_f.sh
source bench/gpu_setup.sh
bench_27b w8 w4
ninferc compile .fixtures/models/qwen35-tiny-code --target sm_90 --sku h200 -o /tmp/tiny.ninfer > /tmp/c.log 2>&1
timeout 60 ninferc run /tmp/tiny.ninfer --prompt $'def fibonacci(n):\n' --max-new 16 --temperature 0.8 --top-k 50 --seed 7 2>&1 | tail -2
echo "run rc $? $(el)"
timeout 60 ninferc run /tmp/tiny.ninfer --prompt $'def fibonacci(n):\n' --max-new 16 --greedy --top-k 0 --seed 0 2>&1 | tail -2
echo "run rc $? $(el)"
gpu_tests sampler 120 tests/kernels/test_sample_gpu.py
