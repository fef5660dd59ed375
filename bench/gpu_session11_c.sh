# Device run (session 11, c): the cost model's x-staging term and the 640-thread dp CTAs it picks for w4 down /
# GDN out / attention o (the others stay at 256 threads): the 27B w4 and w8 bench, the w4 graph profile, then the
# planned-launch GEMV tier, the fidelity test and the engine goldens; first a layer probe of the (now lighter)
# item-boundary carry, planned by the cost model ("dp persistent") and forced off / on.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session11_c.sh
source bench/gpu_setup.sh
python3 bench/dp_layer_probe.py --wfmt w4 --json $OUT/dp_layer_probe_w4.json \
  --configs "dp persistent;dp persistent, no carry;dp persistent, carry;dp persistent, 640 threads, carry" > $OUT/probe_w4.log 2>&1
echo "probe rc $?"; grep -v "^ *$" $OUT/probe_w4.log | tail -6; el
for W in w4 w8; do
  timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $W --decode-tokens 32 --prompt-tokens 512,8192 \
    --json $OUT/bench_$W.json > $OUT/bench_$W.log 2>&1
  echo "$W rc $?"; grep -A3 "^context" $OUT/bench_$W.log | head -3; el
done
timeout 60 python3 bench/graph_profile.py --weights w4 --context 512 --json $OUT/graph_profile_w4.json \
  > $OUT/graph_profile_w4.log 2>/dev/null
echo "profile rc $?"; head -30 $OUT/graph_profile_w4.log; el
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp or quant_planned or planned_launches or folded"
gpu_tests quant 120 tests/runtime/test_quant_gpu.py
gpu_tests engine 80 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
rm -f $OUT/*.xml
timeout 120 python3 bench/quant_fidelity_gpu.py --json $OUT/quant_fidelity_gpu.json > $OUT/quant_fidelity_gpu.log 2>&1
echo "fidelity rc $?"; grep -E "agree" $OUT/quant_fidelity_gpu.log | cut -c1-200; el
