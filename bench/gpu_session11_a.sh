# Device run (session 11, a): the persistent dp GEMVs' new options -- the next item's first weights carried in the
# last step of the current one (no barrier between items unless a shared buffer is reused), x staged by one round
# of cp.async and converted in place, a register cap of 4 CTAs per SM, 320-thread CTAs -- as a layer probe (w4,
# then w8 for the planned config), then their correctness tier and the 27B w4 bench with the registered defaults.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session11_a.sh
source bench/gpu_setup.sh
python3 bench/dp_layer_probe.py --wfmt w4 --json $OUT/dp_layer_probe_w4.json \
  --configs "no carry, registers staging;dp persistent;carry, registers staging;no carry, cp.async staging;dp persistent, min 4 CTAs;no carry, registers, min 4 CTAs;dp persistent, 320 threads;dp persistent, 320 threads, min 3 CTAs;dp persistent, 512 threads;dp persistent, 640 threads" \
  > $OUT/probe_w4.log 2>&1
echo "probe rc $?"; grep -v "^ *$" $OUT/probe_w4.log | tail -20; el
gpu_tests dp 200 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp or quant_planned or (quant_forced and dp)"
timeout 60 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512,8192 \
  --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log | head -3; el
rm -f $OUT/*.xml
