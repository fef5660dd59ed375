# Session 22, run 156: Stream-K with a per-warp shared-item combine (no CTA barrier; the carry crosses a CTA's first,
# mid-item start) -- its GPU tests, then same-process A/Bs of the 27B step at 512 of 8,248 against the planned kernels
# and against the balanced schedule without any combine (stream_k "probe": wrong sums, timing only): is the balance
# worth anything, and what does the combine cost? w4 with its gate|up GEMVs held at 4 CTAs/SM by a register cap on
# every side (the Stream-K build's registers pass 64 on NVRTC 13.0).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session22_b.sh
source bench/gpu_setup.sh
gpu_tests sk 120 tests/targets/test_gemv_coop_gpu.py -k "stream_k"
ab_run w8_skp_512 w8 150 --context 512 --max-context 8248 now "sk:gemv_coop.dp_stream_k=True" "skprobe:gemv_coop.dp_stream_k='probe'"
CAPGU="gemv_coop.dp_min_ctas=(('w8','store',256,4),('w4','swiglu',256,4))"
ab_run w4_skp_512 w4 170 --context 512 --max-context 8248 now "cap:$CAPGU" "skcap:gemv_coop.dp_stream_k=True;$CAPGU" "skprobe:gemv_coop.dp_stream_k='probe';$CAPGU"
rm -f $OUT/*.xml
cp /tmp/ab_*.log $OUT/
