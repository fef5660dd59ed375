# Device run (session 16, e): (1) the int8-KV decode GPU tests after the int8 P.V loop's unroll 4 -> 8 (which removes
# the balanced int8 kernel's 8-byte spill on sm_120a) and the int8 balanced split made the default, (2) same-process
# A/B of the 27B w8 step with int8 KV at 2,048 of 32,768 tokens: balanced split (granule 16, now the default) vs
# page-aligned splits (the earlier int8 default), (3) the int8-KV fidelity test on the fixture, (4) attn_decode's
# per-CTA timeline in the graph-replayed step (bench/attn_trace_probe.py) at 512 / 8,192 of 8,248.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_e.sh
source bench/gpu_setup.sh
gpu_tests attn_int8 120 tests/kernels/test_attention_gpu.py -k "decode_step_int8"
ab_run w8_kv8_bal w8 200 --kv-dtype int8 --context 2048 --max-context 32768 now "pages:attn_decode.balance_keys_int8=0"
gpu_tests quant_kv8 200 tests/runtime/test_quant_gpu.py -k "kv8"
for cfg in "512 8248" "8192 8248"; do
  set -- $cfg
  timeout 80 python3 bench/attn_trace_probe.py --context $1 --max-context $2 --json $OUT/attn_trace_$1_$2.json 2>&1 \
    | grep -v "^engine\|^memory" | tail -11
  echo "trace $1/$2 $(el)"
done
