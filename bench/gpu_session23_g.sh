# Session 23, runs 168-169: run 167's gate|up trace again with every CTA's %smid and stamps (--dump-ctas; from e29e2ec
# on also its blockIdx.x and item count), planned vs tensor-core attention decode at 8,192 of 8,448: which CTAs make
# the gate|up after an attention layer end 1.5 us later behind the faster decode -- item ranges or SMs?
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session23_g.sh
source bench/gpu_setup.sh
for v in now mma; do
  set_arg=(); [[ $v == mma ]] && set_arg=(--set attn_decode.stage_mma=True)
  timeout 80 python3 bench/attn_trace_probe.py --family gemv_coop --weights w8 --context 8192 --max-context 8448 \
    --steps 3 --dump-ctas "${set_arg[@]}" --json $OUT/tr_gu_$v.json > /tmp/tr_$v.log 2>&1
  echo "== $v rc $? $(el)"; grep -A7 "attention layers" /tmp/tr_$v.log
done
