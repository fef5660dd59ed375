# Device run: GEMV + engine correctness, then the 27B decode benchmark with a kernel profile.
source bench/gpu_setup.sh
python3 -m pytest tests/targets/test_gemv_coop_gpu.py tests/runtime -m gpu -q --tb=short -rf --timeout 300 \
  -p no:cacheprovider 2>&1 | tee $OUT/tests.log | tail -5
NINFERC_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "$NINFERC_COMMIT") ninferc bench --preset qwen3.8-27b \
  --synthetic-weights "$@" --json $OUT/bench.json 2>&1 | grep -v "^  gemm\|^  gdn_chunk\|^  attn_prefill\|^  gdn_conv\|^  gdn_ring" | tail -30
