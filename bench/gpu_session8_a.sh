# Device run (session 8, 59): the wgmma (sm_90a) prefill GEMM routes -- the GEMM GPU tier (forced wgmma variants
# on every shape, planned launches, every-arch plans, driver vs cubin), the throughput report (every route at
# T = 8,192 / 1,024), then the 27B bf16 bench at 512 / 8,192 with a profile.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session8_a.sh
source bench/gpu_setup.sh
gpu_tests gemm_wgmma 150 tests/kernels/test_gemm_gpu.py -k "wgmma or planned or every_arch or driver or strided or deterministic"
timeout 120 python3 -m pytest tests/kernels/test_gemm_gpu.py -k "test_throughput_report" -m gpu -q -s -p no:cacheprovider \
  > $OUT/gemm_throughput.log 2>&1; echo "throughput rc $?"; grep -E "planned|wgmma" $OUT/gemm_throughput.log | head -40; el
rm -f $OUT/*.xml
timeout 200 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 32 --prompt-tokens 512,8192 \
  --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A4 "^context\|^prompt" $OUT/bench_bf16.log | head -20; grep -i "gemm\|gdn_chunk\|attn_prefill" $OUT/bench_bf16.log | head -16; el
