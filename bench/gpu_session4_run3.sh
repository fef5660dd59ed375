# Device run (session 4, third): after the single-round-trip GEMV epilogue -- GEMV GPU tier, the GEMV shape sweep
# (cost-model refit data), the folded-norm A/B (bf16) and the 27B decode benches (bf16 + profile, w8, w4).
source bench/gpu_setup.sh
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py
timeout 100 python3 bench/gemv_ksplit_sweep.py --json $OUT/gemv_sweep.json > $OUT/gemv_sweep.log 2>&1
grep -v "^ " $OUT/gemv_sweep.log | tail -20; el
timeout 110 python3 bench/fuse_norm_ab.py --weights bf16 --json $OUT/fold_ab_bf16.json > $OUT/fold_ab_bf16.log 2>&1
echo "fold A/B rc $?: $(tail -1 $OUT/fold_ab_bf16.log)"; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512"
timeout 100 $B --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; el
timeout 60 $B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; echo "w8 rc $?"; grep -A3 "^context" $OUT/bench_w8.log; el
timeout 60 $B --weights w4 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1; echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log; el
