# Session 23, run 165: does the step depend on where the engine's buffers lie? (run 164: the ring decode kernel took
# ~46 us per step off attn_decode, yet every GEMV family got slower by about as much.) (1) family_ab with three
# identical variants (three engines, same kernels, different buffers) at 512 of 8,248; (2) graph_profile at 512 of
# 8,248 after 0 / 1 / 2 / 3 / 0 MiB of padding allocated first (same kernels, every later allocation moved).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session23_d.sh
source bench/gpu_setup.sh
ab_run w8_same_512 w8 120 --context 512 --max-context 8248 now same1 same2
for pad in 0 1 2 3 0; do
  timeout 45 python3 bench/graph_profile.py --weights w8 --context 512 --max-context 8248 --pad-mib $pad \
    --json $OUT/gp_pad$pad.json > /tmp/gp_pad$pad.log 2>&1
  echo "== pad $pad rc $? $(el)"; grep -A8 "step wall" /tmp/gp_pad$pad.log | cut -c1-120
done
cp /tmp/ab_*.log $OUT/
