# Device run (session 14, f): the w8 store GEMVs (GDN in, q|k|v, a w4 engine's LM head) capped at 64 registers
# (__launch_bounds__(256, 4)) by default: A/B against no cap; the 27B w8 and w4 benches (README rows); GPU tests
# of the capped persistent dp variants and of the planned (and quantised) GEMV launches.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_f.sh
source bench/gpu_setup.sh
ab_run w8_capstore w8 130 now "nocap:gemv_coop.dp_min_ctas=()"
bench_27b w8 w4
gpu_tests dp 60 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many_items and cap"
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or planned_launches or quant_lm_head"
