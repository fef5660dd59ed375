# Session 23, run 162: (1) the w8 step's kernel timeline at 8,192 of 8,448 and at 512 of 8,248 (graph_profile);
# (2) the bound on folding attn_combine into attn_decode -- a probe that drops every decode step's combine launch
# (attn_combine.probe_skip: the attention output is not written; timing only), same-process A/B.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session23_a.sh
source bench/gpu_setup.sh
timeout 120 python3 bench/graph_profile.py --weights w8 --context 8192 --max-context 8448 --json $OUT/gp_w8_8192.json \
  > $OUT/gp_w8_8192.log 2>&1; echo "gp 8192 rc $? $(el)"; head -30 $OUT/gp_w8_8192.log | cut -c1-120
timeout 90 python3 bench/graph_profile.py --weights w8 --context 512 --max-context 8248 --json $OUT/gp_w8_512.json \
  > $OUT/gp_w8_512.log 2>&1; echo "gp 512 rc $? $(el)"; head -20 $OUT/gp_w8_512.log | cut -c1-120
ab_run w8_skip_512 w8 120 --context 512 --max-context 8248 now "skip:attn_combine.probe_skip=True"
ab_run w8_skip_8192 w8 100 --context 8192 --max-context 8448 now "skip:attn_combine.probe_skip=True"
ab_run w4_skip_512 w4 100 --context 512 --max-context 8248 now "skip:attn_combine.probe_skip=True"
cp /tmp/ab_*.log $OUT/
