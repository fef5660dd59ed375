# Device run (session 9, 69): the dp GEMV with the norm factor computed once per staging of x (warp 0, shared):
# forced dp GPU tests, then bench/dp_probe.py -- the same shapes with and without the norm input / residual
# epilogues, persistent and not, to find what the dp kernels' time goes to.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session9_d.sh
source bench/gpu_setup.sh
gpu_tests gemv 90 tests/targets/test_gemv_coop_gpu.py -k "(quant_forced and dp) or folded"
timeout 300 python3 bench/dp_probe.py --formats w4,w8 --json $OUT/dp_probe.json > $OUT/dp_probe.log 2>&1
echo "probe rc $?"; cat $OUT/dp_probe.log | tail -25; el
rm -f $OUT/*.xml
