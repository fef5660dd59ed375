# Session 20, run 141: gdn_decode with one shared-memory reduction (GdnDecodeFamily.one_pass: S^T k and S^T q of the
# raw conv outputs in one pass, norms and q.k per warp, o from the identity S_new^T q' = e^g rq scale S^T q +
# (k'.q') delta, the gated norm's sum a warp sum -- two barriers after the conv's instead of seven): the GDN decode GPU
# tests (every DECODE_VARIANTS kernel), same-process A/Bs of the 27B step (w8 / w4 at 512, w8 at 8,192), its timeline.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session20_a.sh
source bench/gpu_setup.sh
gpu_tests gdn_decode 90 tests/kernels/test_gdn_gpu.py -k "decode"
ab_run w8_op_512 w8 60 --context 512 --max-context 8248 now "op:gdn_decode.one_pass=True"
ab_run w4_op_512 w4 50 --context 512 --max-context 8248 now "op:gdn_decode.one_pass=True"
ab_run w8_op_8192 w8 50 --context 8192 --max-context 8448 now "op:gdn_decode.one_pass=True"
timeout 40 python3 bench/attn_trace_probe.py --family gdn_decode --weights w8 --context 512 --max-context 8248 \
  --set gdn_decode.one_pass=True > /tmp/trace_op.log 2>&1
echo "trace rc $? $(el)"; grep -v "^\[" /tmp/trace_op.log | grep -A10 "records" | head -12
cp /tmp/ab_*.log $OUT/
