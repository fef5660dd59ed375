# Session 23, run 166: do the GDN layers' kernels depend on which attention decode kernel the step runs? (run 164: with
# the ring decode every GEMV family moved a little.) graph_profile at 8,192 of 8,448: the planned staged decode (73.5 KB
# of shared memory per CTA, 3 CTAs/SM: the SM's largest shared-memory carveout) and the global-memory decode
# (attn_decode.stage_kv=False: no dynamic shared memory; attn_prep launched again), alternately.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session23_e.sh
source bench/gpu_setup.sh
for v in staged global staged2 global2; do
  set_arg=(); [[ $v == global* ]] && set_arg=(--set attn_decode.stage_kv=False)
  timeout 60 python3 bench/graph_profile.py --weights w8 --context 8192 --max-context 8448 "${set_arg[@]}" \
    --json $OUT/gp_$v.json > /tmp/gp_$v.log 2>&1
  echo "== $v rc $? $(el)"; grep -A14 "step wall" /tmp/gp_$v.log | cut -c1-100
done
