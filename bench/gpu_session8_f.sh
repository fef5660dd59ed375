# Device run (session 8, 64): the wgmma GEMM with quantised W (w8 / w4 codes dequantised into the swizzled tile one
# k-tile ahead, gemm_wq.inc.j2 shared with the mma.sync kernel): GEMM GPU tier (forced wgmma variants for every
# format, planned launches incl. quantised, every-arch plans), the bf16 vs w8 vs w4 throughput report, the engine
# tier (w8 / w4 prefill now on wgmma; fidelity tests), and the 27B w8 / w4 bench at 512 / 8,192.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session8_f.sh
source bench/gpu_setup.sh
gpu_tests gemm 150 tests/kernels/test_gemm_gpu.py -k "not throughput and not every_variant or every_wgmma_variant"
timeout 60 python3 -m pytest tests/kernels/test_gemm_gpu.py -k "test_quant_throughput_report" -m gpu -q -s -p no:cacheprovider \
  > $OUT/gemm_quant_throughput.log 2>&1; echo "quant throughput rc $?"; grep -E "T=" $OUT/gemm_quant_throughput.log | head -8; el
gpu_tests engine 120 tests/runtime
rm -f $OUT/*.xml
for W in w8 w4; do
  timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $W --decode-tokens 32 --prompt-tokens 512,8192 \
    --json $OUT/bench_$W.json > $OUT/bench_$W.log 2>&1
  echo "$W rc $?"; grep -A3 "^context" $OUT/bench_$W.log | head -4; el
done
