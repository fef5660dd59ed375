# Session 23, run 164: the w8 step's kernel timeline at 8,192 of 8,448 with the planned 2-buffer attention decode and
# with the ring (stage_slots = 3), back to back on one machine: where the ring's shorter decode goes (run 163: the
# decode's exposed time fell but the A/B step did not).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session23_c.sh
source bench/gpu_setup.sh
for v in now ring now2 ring2; do
  set_arg=(); [[ $v == ring* ]] && set_arg=(--set attn_decode.stage_slots=3)
  timeout 60 python3 bench/graph_profile.py --weights w8 --context 8192 --max-context 8448 "${set_arg[@]}" \
    --json $OUT/gp_$v.json > /tmp/gp_$v.log 2>&1
  echo "== $v rc $? $(el)"; grep -A40 "step wall" /tmp/gp_$v.log | grep -v "^\s*L2\.\|^\s*L3\.mlp" | cut -c1-120
done
