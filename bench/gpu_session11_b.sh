# Device run (session 11, b): the persistent dp GEMVs' item-boundary carry and CTA sizes (256 / 320 / 512 / 640
# threads, with and without the carry) as a w4 layer probe; then the dp tier (the many-items-per-CTA cases of
# both options and two CTA sizes, the quantised planned / forced launches), the fidelity test (issue 6's bar over
# all golden positions) and the engine goldens. Run as NINFERC_COMMIT=<hash> bash bench/gpu_session11_b.sh
source bench/gpu_setup.sh
python3 bench/dp_layer_probe.py --wfmt w4 --json $OUT/dp_layer_probe_w4.json \
  --configs "dp persistent;dp persistent, carry;dp persistent, 320 threads;dp persistent, 512 threads;dp persistent, 640 threads;dp persistent, 640 threads, carry;dp persistent, 512 threads, carry" \
  > $OUT/probe_w4.log 2>&1
echo "probe rc $?"; grep -v "^ *$" $OUT/probe_w4.log | tail -16; el
gpu_tests dp 150 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp or quant_planned or (quant_forced and dp)"
gpu_tests quant 200 tests/runtime/test_quant_gpu.py
grep -o '{"all".*' $OUT/quant.log | head -3 | cut -c1-600
gpu_tests engine 80 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
rm -f $OUT/*.xml
