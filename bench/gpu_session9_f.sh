# Device run (session 9, 71): bench/dp_layer_probe.py -- the w4 decode GEMVs as a 16-layer sequence (GDN in, GDN
# out, gate|up, down) in one graph, persistent dp grids at 1, 3/4 and 1/2 of the resident-CTA cap, the
# non-persistent dp grid, and the FMA kernels.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session9_f.sh
source bench/gpu_setup.sh
timeout 200 python3 bench/dp_layer_probe.py --json $OUT/dp_layer_probe.json > $OUT/dp_layer_probe.log 2>&1
echo "probe rc $?"; cat $OUT/dp_layer_probe.log | tail -8; el
