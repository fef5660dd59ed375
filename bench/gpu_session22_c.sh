# Session 22, run 157: Stream-K with the shared items handed over as tagged words (the item's first CTA finishes it; the
# other sharers, which hold it as their first item, store one relaxed 64-bit word per sum -- no fence, no counter; a
# cooperative launch). Device plan rows, its GPU tests, then same-process A/Bs of the 27B step at 512 of 8,248 against
# the planned kernels and the balanced schedule without any hand-over (stream_k "probe": wrong sums, timing only).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session22_c.sh
source bench/gpu_setup.sh
SK="sk:gemv_coop.dp_stream_k=True"
CAPGU="gemv_coop.dp_min_ctas=(('w8','store',256,4),('w4','swiglu',256,4))"
timeout 60 python3 bench/plan_rows.py --weights w8 now "$SK" > $OUT/plan_rows_w8.log 2>&1
timeout 60 python3 bench/plan_rows.py --weights w4 "cap:$CAPGU" "skcap:gemv_coop.dp_stream_k=True;$CAPGU" > $OUT/plan_rows_w4.log 2>&1
echo "plan rows $(el)"; grep -E "^==|gate_up|gdn.in|q_k_v" $OUT/plan_rows_w*.log | cut -c1-75,115-200
gpu_tests sk 100 tests/targets/test_gemv_coop_gpu.py -k "stream_k"
ab_run w8_skt_512 w8 150 --context 512 --max-context 8248 now "$SK" "skprobe:gemv_coop.dp_stream_k='probe'"
ab_run w4_skt_512 w4 170 --context 512 --max-context 8248 "cap:$CAPGU" "skcap:gemv_coop.dp_stream_k=True;$CAPGU" "skprobe:gemv_coop.dp_stream_k='probe';$CAPGU"
rm -f $OUT/*.xml
cp /tmp/ab_*.log $OUT/
