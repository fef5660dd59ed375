# Device run (session 10, e): the GPU tests touched by this session's kernel changes (attention decode / combine,
# GDN decode, argmax sampler, dp staging without float-to-int conversions), the engine tier, then the w8 / w4
# layer probes (does w8 on dp beat its FMA kernels now that staging is cheaper?) and the dp stream probe.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_e.sh
source bench/gpu_setup.sh
gpu_tests kernels 170 tests/kernels/test_attention_gpu.py tests/kernels/test_gdn_gpu.py tests/kernels/test_sample_gpu.py
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or (quant_forced and dp) or folded"
gpu_tests engine 150 tests/runtime
rm -f $OUT/*.xml
for F in w8 w4; do
  timeout 60 python3 bench/dp_layer_probe.py --wfmt $F --json $OUT/dp_layer_probe_$F.json > $OUT/dp_layer_probe_$F.log 2>&1
  echo "probe $F rc $?"; grep -v Warn $OUT/dp_layer_probe_$F.log | tail -6; el
done
timeout 40 python3 bench/dp_stream_probe.py --json $OUT/dp_stream_probe.json > $OUT/dp_stream_probe.log 2>&1
echo "stream probe rc $?"; grep -v Warn $OUT/dp_stream_probe.log | tail -4; el
