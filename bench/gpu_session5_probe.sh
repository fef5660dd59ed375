# Device run (session 5, 41): bench/w4_stream_probe.py -- the w4 mma GEMV with its math / x loads removed.
source bench/gpu_setup.sh
timeout 200 python3 bench/w4_stream_probe.py --json $OUT/w4_probe.json 2>&1 | tee $OUT/w4_probe.log; el
