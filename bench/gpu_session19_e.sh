# Session 19, run 140: gdn_decode with warp-local row reductions (GdnDecodeFamily.warp_rows: a warp holds every row of
# its columns, so kv = S^T k and o = S^T q are shuffles, no barrier / shared-memory pass -- run 139's timeline put
# 0.7-0.8 us on each) -- same-process A/Bs (w8 at 512 and 8,192, w4 at 512), the GDN decode GPU tests (incl. the
# warp_rows variants), the traced timeline with it.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session19_e.sh
source bench/gpu_setup.sh
ab_run w8_rows_512 w8 60 --context 512 --max-context 8248 now "rows:gdn_decode.warp_rows=True" \
  "rows_wn:gdn_decode.warp_rows=True;gdn_decode.warp_norms=True"
gpu_tests gdn_decode 80 tests/kernels/test_gdn_gpu.py -k "decode"
ab_run w8_rows_8192 w8 50 --context 8192 --max-context 8448 now "rows_wn:gdn_decode.warp_rows=True;gdn_decode.warp_norms=True"
ab_run w4_rows_512 w4 50 --context 512 --max-context 8248 now "rows_wn:gdn_decode.warp_rows=True;gdn_decode.warp_norms=True"
timeout 40 python3 bench/attn_trace_probe.py --family gdn_decode --weights w8 --context 512 --max-context 8248 \
  --set gdn_decode.warp_rows=True --set gdn_decode.warp_norms=True > /tmp/trace_rows.log 2>&1
grep -v "^\[" /tmp/trace_rows.log | grep -A10 "records" | head -12
