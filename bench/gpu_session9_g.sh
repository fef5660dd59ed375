# Device run (session 9, 74): the persistent dp GEMV whose last K step of an item also loads the next item's first
# step (the warp's loads stay in flight through the item's reduction, epilogue and barrier): forced dp / planned
# quantised GPU tests, the 16-layer w4 GEMV sequence (bench/dp_layer_probe.py), the 27B w4 decode with a profile.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session9_g.sh
source bench/gpu_setup.sh
gpu_tests gemv 100 tests/targets/test_gemv_coop_gpu.py -k "(quant_forced and w4-dp) or (quant_planned and w4) or folded"
rm -f $OUT/*.xml
timeout 100 python3 bench/dp_layer_probe.py --json $OUT/dp_layer_probe.json > $OUT/dp_layer_probe.log 2>&1
echo "probe rc $?"; tail -6 $OUT/dp_layer_probe.log; el
timeout 80 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512,8192 \
  --profile --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log | head -4; el
