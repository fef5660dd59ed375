# Session 19, run 138: gdn_decode's early state store (GdnDecodeFamily.early_store: each state row stored as soon as
# the delta rule has updated it, before o's reduction and the gated norm) and early gating loads (early_gates: a, b
# loaded with z before the conv loop) -- same-process A/Bs of the 27B step (w8 at 512 of 8,248 and 8,192 of 8,448,
# w4 at 512), then the GDN GPU tests (the emulator's decode variants, incl. both, on the device).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session19_c.sh
source bench/gpu_setup.sh
V=(now "store:gdn_decode.early_store=True" "gates:gdn_decode.early_gates=True"
   "both:gdn_decode.early_store=True;gdn_decode.early_gates=True")
ab_run w8_early_512 w8 130 --context 512 --max-context 8248 "${V[@]}"
ab_run w4_early_512 w4 130 --context 512 --max-context 8248 "${V[@]}"
ab_run w8_early_8192 w8 130 --context 8192 --max-context 8448 "${V[@]}"
ab_run w8_spt64_512 w8 100 --context 512 --max-context 8248 now "spt64:gdn_decode.state_per_thread=64" \
  "spt64_both:gdn_decode.state_per_thread=64;gdn_decode.early_store=True;gdn_decode.early_gates=True"
cp /tmp/ab_*.log $OUT/
gpu_tests gdn 200 tests/kernels/test_gdn_gpu.py
