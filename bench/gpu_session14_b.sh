# Device run (session 14, b): two weight steps in flight per warp (template depth 2, GemvCoopFamily.dp_deep_threads)
# for the 640-thread dp kernels (one CTA per SM: down, GDN out, attention o). Their loops stream ~3.6 TB/s vs ~4.1-4.4
# for four 256-thread CTAs per SM (run 100's timeline): 20 warps x 1 step in flight is ~25 KB per SM against ~40 KB.
# (1) GPU tests of the persistent dp options (the new "deep" one included); (2) the layer timeline, planned vs
# depth 2; (3) same-process A/Bs of the 27B decode step, w4 and w8.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_b.sh
source bench/gpu_setup.sh
gpu_tests dp 120 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many_items and (deep or nocarry)"
trace_run planned
trace_run deep --family "{'dp_deep_threads': (640,)}"
trace_run deep_all --family "{'dp_deep_threads': (256, 640)}"
trace_run planned_again
for w in w4 w8; do ab_run ${w}_deep $w 150 now "deep:gemv_coop.dp_deep_threads=(640,)"; done
