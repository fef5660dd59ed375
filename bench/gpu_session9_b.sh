# Device run (session 9, 67): the dp GEMV with the first weight step loaded into registers before the PDL wait and
# one step in flight ahead (software pipeline): the forced dp GPU tests, then the T = 1 sweep of every kind for w8
# and w4 (the data the dp cost-model term is fitted on).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session9_b.sh
source bench/gpu_setup.sh
gpu_tests gemv 100 tests/targets/test_gemv_coop_gpu.py -k "quant_forced and dp"
for W in w4 w8; do
  timeout 80 python3 bench/gemv_ksplit_sweep.py --formats $W --tokens 1 --json $OUT/sweep_${W}_t1.json \
    > $OUT/sweep_$W.log 2>&1; echo "sweep $W rc $?"; grep -E "planner" $OUT/sweep_$W.log | head -24; el
done
rm -f $OUT/*.xml $OUT/sweep_*.log
