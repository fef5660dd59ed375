# Device run (session 10, a): where the graph-replayed decode step's time goes (CUPTI kernel times and each
# kernel's exposed share of the step), 27B shape, w4 / w8 / bf16 at context 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session10_a.sh
source bench/gpu_setup.sh
for W in w4 w8 bf16; do
  timeout 150 python3 bench/graph_profile.py --weights $W --context 512 --json $OUT/graph_profile_$W.json \
    > $OUT/graph_profile_$W.log 2>$OUT/graph_profile_$W.err
  echo "$W rc $?"; cat $OUT/graph_profile_$W.log; tail -3 $OUT/graph_profile_$W.err; el
done
