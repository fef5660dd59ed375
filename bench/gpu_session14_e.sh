# Reproduces only at 2f4eecf (bench/NOTES.md run 105): GdnDecodeFamily.early was removed and dp_min_ctas entries gained the epilogue after it.
# Device run (session 14, e): (1) the w8 256-thread dp kernels (GDN in, gate|up: 2/3 of w8's bytes) under a 64-register
# cap (__launch_bounds__(256, 4), GemvCoopFamily.dp_min_ctas): 4 CTAs/SM instead of 3, no spills on NVRTC 13.5 --
# the layer timeline and a same-process A/B of the 27B w8 step; (2) GDN decode with the gate inputs loaded beside
# the conv's loads and the state stored as soon as it is updated (GdnDecodeFamily.early, now the default) against the
# earlier order (early=False), and the 256-thread GDN decode CTA again (run 103: 1.004x); (3) GPU tests of both.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_e.sh
source bench/gpu_setup.sh
gpu_tests gdn 60 tests/kernels/test_gdn_gpu.py -k decode
gpu_tests dp 90 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many_items and cap"
trace_run w8 --wfmt w8
trace_run w8_cap --wfmt w8 --params "{256: {'min_ctas': 4}}"
ab_run w8_cap w8 170 now "cap4:gemv_coop.dp_min_ctas=(('w8',256,4),)" "early0:gdn_decode.early=False"
ab_run w4_gdn w4 150 now "early0:gdn_decode.early=False" "spt64:gdn_decode.state_per_thread=64"
