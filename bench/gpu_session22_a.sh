# Session 22, run 155: Stream-K for the persistent dp GEMVs (GemvCoopFamily.dp_stream_k, template stream_k: items x K
# steps cut into equal ranges over every resident CTA, shared items summed by the last CTA to count in). The device's
# plan rows (registers, CTAs/SM, grids under NVRTC 13.0), the Stream-K GPU tests, then same-process A/Bs of the 27B
# step at 512 of 8,248: w4 and w8, Stream-K alone and with the w4 256-thread GEMVs held at 4 CTAs/SM by a register cap.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session22_a.sh
source bench/gpu_setup.sh
SK="sk:gemv_coop.dp_stream_k=True"
CAP="skcap:gemv_coop.dp_stream_k=True;gemv_coop.dp_min_ctas=(('w8','store',256,4),('w4','swiglu',256,4),('w4','store',256,4))"
for w in w4 w8; do
  timeout 100 python3 bench/plan_rows.py --weights $w now "$SK" "$CAP" > $OUT/plan_rows_$w.log 2>&1
  echo "plan rows $w rc $? $(el)"; grep -E "^==|gate_up|gdn.in|q_k_v|Error" $OUT/plan_rows_$w.log | cut -c1-60,100-175
done
gpu_tests sk 120 tests/targets/test_gemv_coop_gpu.py -k "stream_k"
ab_run w4_sk_512 w4 170 --context 512 --max-context 8248 now "$SK" "$CAP"
ab_run w8_sk_512 w8 130 --context 512 --max-context 8248 now "$SK"
rm -f $OUT/*.xml
cp /tmp/ab_*.log $OUT/
