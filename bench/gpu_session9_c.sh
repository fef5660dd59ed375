# Device run (session 9, 68): the dp GEMV with persistent CTAs (one balanced wave, x staged once per CTA and token
# chunk) and batched x staging loads: forced dp + planned quantised GPU tests, then the T = 1 sweep of every kind
# (fma / mma / dp / dpp = persistent dp) for w4 and w8.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session9_c.sh
source bench/gpu_setup.sh
gpu_tests gemv 130 tests/targets/test_gemv_coop_gpu.py -k "(quant_forced and dp) or quant_planned or folded"
for W in w4 w8; do
  timeout 100 python3 bench/gemv_ksplit_sweep.py --formats $W --tokens 1 --json $OUT/sweep_${W}_t1.json \
    > $OUT/sweep_$W.log 2>&1; echo "sweep $W rc $?"; grep -E "planner" $OUT/sweep_$W.log | head -30; el
done
rm -f $OUT/*.xml $OUT/sweep_*.log
