# Device run (session 3, final): the fused add+RMSNorm tail with per-CTA partial sums (one output per thread),
# its GPU tests and the engine end to end; same-process A/B fused vs unfused norm (bf16, w8); 27B benches
# (bf16 with the HF peer and a decode/prefill profile, w8, w4) for the README tables.
source bench/gpu_setup.sh
gpu_tests gemv_norm 70 tests/targets/test_gemv_coop_gpu.py -k "add_rmsnorm or every_arch or cubin_resources or occupancy"
gpu_tests engine 120 tests/runtime
for w in bf16 w8; do
  timeout 90 python3 bench/fuse_norm_ab.py --weights $w --json $OUT/fuse_norm_ab_$w.json > $OUT/fuse_norm_ab_$w.log 2>&1
  echo "ab $w rc $?: $(tail -1 $OUT/fuse_norm_ab_$w.log)"; el
done
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512,8192"
timeout 150 $B --peer hf --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; el
timeout 60 $B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; echo "w8 rc $?"; grep -A3 "^context" $OUT/bench_w8.log; el
timeout 60 $B --weights w4 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1; echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log; el
