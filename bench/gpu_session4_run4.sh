# Device run (session 4, fourth): GPU tier of the changed kernels (GEMV, GDN, attention) and the engine; 27B decode
# benches at 512 and 8192 (bf16 + profile, w8, w4) and the folded-norm A/B. Run as NINFERC_COMMIT=<hash> bash ...
source bench/gpu_setup.sh
gpu_tests kernels 170 tests/targets/test_gemv_coop_gpu.py tests/kernels/test_gdn_gpu.py tests/kernels/test_attention_gpu.py
gpu_tests engine 120 tests/runtime
rm -f $OUT/*.xml  # at most 8 files come back
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512,8192"
timeout 120 $B --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; el
timeout 70 $B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; echo "w8 rc $?"; grep -A3 "^context" $OUT/bench_w8.log; el
timeout 70 $B --weights w4 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1; echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log; el
