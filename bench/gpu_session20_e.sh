# Session 20, run 145: gdn_decode y_first (the gated norm and y store before the state update and its stores; the same
# values) A/B'd against the planned one-pass tree kernel (w8 at 512 and 8,192), its GPU decode tests, and the w8 bench
# in a second process (repeatability of run 144's row).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session20_e.sh
source bench/gpu_setup.sh
ab_run w8_yf_512 w8 50 --context 512 --max-context 8248 now "yf:gdn_decode.y_first=True"
ab_run w8_yf_8192 w8 50 --context 8192 --max-context 8448 now "yf:gdn_decode.y_first=True"
bench_27b w8
gpu_tests gdn_yf 40 tests/kernels/test_gdn_gpu.py -k "decode and y_first"
rm -f $OUT/*.xml
