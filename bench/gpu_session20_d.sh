# Session 20, run 144: gdn_decode one_pass with its reduction spread over the CTA (GdnDecodeFamily.one_pass_tree, now
# the default: transposed partials, two rows per thread, a shuffle tree, one more barrier -- 32 KB of shared-memory
# reads per CTA instead of 256 KB): GDN decode GPU tests, same-process A/Bs against the flat one-pass sum (8,192 x 8
# rounds, 512 x 4), the README rows (27B bench w8 / w4 / bf16), engine and quantised-fidelity GPU tests, the timeline.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session20_d.sh
source bench/gpu_setup.sh
gpu_tests gdn_decode 60 tests/kernels/test_gdn_gpu.py -k "decode"
timeout 90 python3 bench/family_ab.py --weights w8 --rounds 8 --context 8192 --max-context 8704 \
  --json $OUT/ab_w8_tree_8192.json now "flat:gdn_decode.one_pass_tree=False" > /tmp/ab_w8_tree_8192.log 2>&1
echo "ab w8_tree_8192 rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab_w8_tree_8192.log | tail -5
ab_run w8_tree_512 w8 60 --context 512 --max-context 8248 now "flat:gdn_decode.one_pass_tree=False"
bench_27b w8 w4 bf16
timeout 40 python3 bench/attn_trace_probe.py --family gdn_decode --weights w8 --context 512 --max-context 8248 \
  > /tmp/trace_tree.log 2>&1
echo "trace rc $? $(el)"; grep -v "^\[" /tmp/trace_tree.log | grep -A10 "records" | head -12
gpu_tests engine 150 tests/runtime/test_engine_gpu.py
gpu_tests quant 100 tests/runtime/test_quant_gpu.py
grep -E "^E   AssertionError" $OUT/quant.log | cut -c1-400
rm -f $OUT/quant.xml $OUT/engine.xml $OUT/gdn_decode.xml
cp /tmp/ab_*.log $OUT/
