# Device run (session 17, f): the README's 27B w4 and bf16 rows on the final tree, the quantised fidelity tests, and
# attn_decode's per-CTA timeline (staged kernel, bench/attn_trace_probe.py) at 8,192 of 8,248.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_f.sh
source bench/gpu_setup.sh
bench_27b w4 bf16
gpu_tests quant 150 tests/runtime/test_quant_gpu.py
timeout 80 python3 bench/attn_trace_probe.py --context 8192 --max-context 8248 --json $OUT/attn_trace_8192_8248.json 2>&1 \
  | grep -v "^engine\|^memory" | tail -11
echo "trace $(el)"
