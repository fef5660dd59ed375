# Session 24, run 170: are the planned persistent dp GEMVs bound by DRAM or by the SMs they occupy? Each planned
# launch (w8, w4) at its real N and at an N whose grid fills every SM (bench/sm_fill_probe.py).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_a.sh
source bench/gpu_setup.sh
timeout 400 python3 bench/sm_fill_probe.py --formats w8,w4 --json $OUT/sm_fill.json > $OUT/sm_fill.log 2>&1
echo "sm_fill rc $? $(el)"; cat $OUT/sm_fill.log | grep -v Warning | tail -30
