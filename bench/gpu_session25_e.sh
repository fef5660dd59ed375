# Session 25, run 181: the gate|up GEMV with two warps per row group (K split in two inside the CTA;
# gemv_coop.dp_shapes_by_epilogue, a probe), so the busiest warp streams half-units: w4 at 512 of 8,248 against the
# plan, with and without a 64-register cap on the w4 gate|up (dp_min_ctas), and w8. The probe option was in 811dfd2 and
# was removed after the run: this script reproduces only at that commit.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session25_e.sh
source bench/gpu_setup.sh
KW2="gemv_coop.dp_shapes_by_epilogue=(('swiglu',((256,2),)),)"
CAP="gemv_coop.dp_min_ctas=(('w8','store',256,4),('w4','swiglu',256,4))"
timeout 80 python3 bench/plan_rows.py --weights w4 now "kw2:$KW2" "kw2cap:$KW2;$CAP" 2>&1 | grep -E "^==|gate_up" | cut -c1-200
ab_run w4_kw2_512 w4 260 --repeat-first --context 512 --max-context 8248 now "kw2:$KW2" "kw2cap:$KW2;$CAP" "cap:$CAP"
ab_run w8_kw2_512 w8 120 --context 512 --max-context 8248 now "kw2:$KW2"
