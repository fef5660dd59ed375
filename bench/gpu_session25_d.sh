# Session 25, run 180: the README rows' bench (w8, w4) on the final tree, for another host's sample of the w8 fraction.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session25_d.sh
source bench/gpu_setup.sh
bench_27b w8 w4
