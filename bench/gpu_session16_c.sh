# Device run (session 16, c): the graph-replayed 27B w8 decode step's kernel timeline of layers 2-3 (a GDN layer and
# the first attention layer) at 512 tokens, with the bench's max_context (8,248) and the A/B's (~640).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_c.sh
source bench/gpu_setup.sh
timeout 150 python3 bench/graph_profile.py --weights w8 --max-context 8248 --json $OUT/gp_w8_8248.json 2>&1 | tail -32
timeout 150 python3 bench/graph_profile.py --weights w8 --json $OUT/gp_w8_short.json 2>&1 | tail -22
