# (Ran at f600938 as run 90, when the plan had a ring rule -- with_ring, removed after it: today --family
# "{'dp_ring': N}" forces N stages on every persistent dp variant without the carry, so ring5 / 6 / 7 below now differ.)
# Device run (session 12, d): weight rings as planned (GemvCoopFamily.with_ring: DP_RING stages for a persistent dp
# CTA alone on its SM -- w4 down / GDN out / attention o at 640 threads on the H200): the layer timeline without a
# ring and with 5 / 6 / 7 stages, the persistent-dp / planned / quantised GEMV GPU tests, the engine goldens and the
# fidelity test, then the 27B w4 bench and its graph profile.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_d.sh
source bench/gpu_setup.sh
trace_run noring --family "{'dp_ring': 0}"
trace_run ring5 --family "{'dp_ring': 5}"
trace_run ring6 --family "{'dp_ring': 6}"
trace_run ring7 --family "{'dp_ring': 7}"
timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512,8192 \
  --json $OUT/bench_w4.json > /tmp/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" /tmp/bench_w4.log | head -3; el
timeout 60 python3 bench/graph_profile.py --weights w4 --context 512 --json $OUT/graph_profile_w4.json > /tmp/gp.log 2>/dev/null
echo "profile rc $?"; head -24 /tmp/gp.log; el
gpu_tests persist 150 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many"
gpu_tests gemv 120 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or planned_launches or folded"
gpu_tests engine 80 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
gpu_tests quant 100 tests/runtime/test_quant_gpu.py
rm -f $OUT/*.xml $OUT/*.log
