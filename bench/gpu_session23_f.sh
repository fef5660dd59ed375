# Session 23, run 167: the per-CTA timeline of every gate|up GEMV inside the graph-replayed w8 step at 8,192 of 8,448
# (GemvCoopFamily.trace_epilogues = swiglu through bench/attn_trace_probe.py --family gemv_coop), the gate|ups of
# attention layers apart from the GDN layers', with the planned attention decode and with the tensor-core one
# (attn_decode.stage_mma=True: ~4 us per layer shorter at 8,192, run 131, yet no faster step, run 132).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session23_f.sh
source bench/gpu_setup.sh
for v in now mma now2; do
  set_arg=(); [[ $v == mma ]] && set_arg=(--set attn_decode.stage_mma=True)
  timeout 80 python3 bench/attn_trace_probe.py --family gemv_coop --weights w8 --context 8192 --max-context 8448 \
    --steps 3 "${set_arg[@]}" --json $OUT/tr_gu_$v.json > /tmp/tr_$v.log 2>&1
  echo "== $v rc $? $(el)"; grep -v "^engine\|^memory\|Warning\|warn" /tmp/tr_$v.log | tail -16
done
