# Session 20, run 142: gdn_decode one_pass as the plan's default ("auto"): the 8,192 A/B again with 8 rounds (run 141's
# 4 rounds were mixed), a 512 A/B of two one-pass neighbours (no register preload; 256-thread CTAs), then the GDN decode,
# engine (goldens, graphs, batched) and quantised-fidelity GPU tests on the new default.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session20_b.sh
source bench/gpu_setup.sh
timeout 90 python3 bench/family_ab.py --weights w8 --rounds 8 --context 8192 --max-context 8704 \
  --json $OUT/ab_w8_tp_8192.json now "tp:gdn_decode.one_pass=False" > /tmp/ab_w8_tp_8192.log 2>&1
echo "ab w8_tp_8192 rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab_w8_tp_8192.log | tail -5
ab_run w8_opx_512 w8 70 --context 512 --max-context 8248 now "tp:gdn_decode.one_pass=False" \
  "np:gdn_decode.preload=False" "t256:gdn_decode.state_per_thread=64"
gpu_tests gdn_decode 60 tests/kernels/test_gdn_gpu.py -k "decode"
gpu_tests engine 200 tests/runtime/test_engine_gpu.py
gpu_tests quant 150 tests/runtime/test_quant_gpu.py
grep -E "agreement|top-1|short" $OUT/quant.log | head -8
cp /tmp/ab_*.log $OUT/
