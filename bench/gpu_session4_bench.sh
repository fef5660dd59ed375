# Device run (session 4): same-process A/B of the folded norm (bf16), 27B decode benches (bf16 with a
# per-kernel profile, w8, w4) at a 512-token context, and the GEMV shape sweep with the cost model's estimates.
source bench/gpu_setup.sh
timeout 110 python3 bench/fuse_norm_ab.py --weights bf16 --json $OUT/fold_ab_bf16.json > $OUT/fold_ab_bf16.log 2>&1
echo "fold A/B rc $?: $(tail -1 $OUT/fold_ab_bf16.log)"; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512"
timeout 150 $B --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; el
timeout 90 $B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; echo "w8 rc $?"; grep -A3 "^context" $OUT/bench_w8.log; el
timeout 90 $B --weights w4 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1; echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log; el
left=$(( 570 - ($(date +%s) - T0) ))
(( left > 40 )) && timeout $left python3 bench/gemv_ksplit_sweep.py --json $OUT/gemv_sweep.json > $OUT/gemv_sweep.log 2>&1
grep -v "^ " $OUT/gemv_sweep.log | tail -20; el
