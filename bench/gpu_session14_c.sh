# Device run (session 14, c): the tree with depth 2 on the 640-thread dp kernels by default (run 102). (1) A/B of the
# GDN decode kernel's CTA size (GdnDecodeFamily.state_per_thread: 32 state floats per thread = 512 threads per
# head today; 16 -> 1024, 64 -> 256) in a w4 engine, where GDN decode is ~6 % of the step; (2) the 27B w8 and w4
# benches (README rows).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_c.sh
source bench/gpu_setup.sh
ab_run w4_gdn_threads w4 170 now "spt16:gdn_decode.state_per_thread=16" "spt64:gdn_decode.state_per_thread=64"
bench_27b w8 w4
