# Device run (session 10, b): decode_stream tests, forced dp-depth-2 GEMV variants, the w4 / w8 layer probes
# (dp depth 1 / 2 / planned / FMA), then the 27B w4 decode (planned: depth chosen by the cost model) with the
# streamed and the step-by-step decode loop.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_b.sh
source bench/gpu_setup.sh
gpu_tests engine 200 tests/runtime/test_engine_gpu.py -k "decode_stream or graph_equals or goldens_short or cli_run"
gpu_tests gemv 200 tests/targets/test_gemv_coop_gpu.py -k "quant_forced and dp"
rm -f $OUT/*.xml
for F in w4 w8; do
  timeout 120 python3 bench/dp_layer_probe.py --wfmt $F --json $OUT/dp_layer_probe_$F.json > $OUT/dp_layer_probe_$F.log 2>&1
  echo "probe $F rc $?"; cat $OUT/dp_layer_probe_$F.log | grep -v Warn | tail -12; el
done
timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512 \
  --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "bench w4 rc $?"; grep -E "decode|^ +512" $OUT/bench_w4.log | tail -4; el
