# Device run (session 8, 60): wgmma 128x256 at 4 stages as the only Hopper route -- the GEMM GPU tier (forced and
# planned), the engine tier (goldens through the wgmma prefill), the group_m rasterisation sweep at 8,192, and the
# 27B bf16 bench at 32,768.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session8_b.sh
source bench/gpu_setup.sh
gpu_tests gemm 110 tests/kernels/test_gemm_gpu.py -k "wgmma or planned or every_arch or driver or strided or deterministic"
gpu_tests engine 140 tests/runtime
rm -f $OUT/*.xml
timeout 80 python3 bench/gemm_group_sweep.py --tokens 8192 --json $OUT/gemm_group_sweep.json > $OUT/gemm_group_sweep.log 2>&1
echo "sweep rc $?"; cat $OUT/gemm_group_sweep.log | tail -40; el
timeout 130 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 32768 \
  --json $OUT/bench_bf16_32k.json > $OUT/bench_bf16_32k.log 2>&1
echo "32k rc $?"; grep -A2 "^context" $OUT/bench_bf16_32k.log; el
