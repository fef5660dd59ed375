# Device run (session 8, 61): the 27B bf16 bench at 512 / 8,192 beside HF transformers, with a profile (README
# table; run 60's kernels: the 128x256 wgmma prefill GEMM).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session8_c.sh
source bench/gpu_setup.sh
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 300 $B --prompt-tokens 512,8192 --peer hf --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; grep -i -A4 "peer\|hf " $OUT/bench_bf16.log | tail -8
grep -i "gemm\|gdn_chunk\|attn_prefill\|peak\|memory" $OUT/bench_bf16.log | tail -24; el
