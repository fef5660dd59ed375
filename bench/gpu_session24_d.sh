# Session 24, run 173: what the host-side stream work between decode steps (the metadata upload, the 4-byte id copy)
# costs the GPU per token (bench/step_gap_probe.py, w8 at 512 of 8,248 and 8,192 of 8,448), then the w8 bench
# (README rows) in this process.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_d.sh
source bench/gpu_setup.sh
timeout 120 python3 bench/step_gap_probe.py --weights w8 --context 512 --max-context 8248 --json $OUT/gap_512.json \
  > $OUT/gap_512.log 2>&1; echo "gap 512 rc $? $(el)"; grep -E "per step|Error" $OUT/gap_512.log
timeout 150 python3 bench/step_gap_probe.py --weights w8 --context 8192 --max-context 8448 --json $OUT/gap_8192.json \
  > $OUT/gap_8192.log 2>&1; echo "gap 8192 rc $? $(el)"; grep -E "per step|Error" $OUT/gap_8192.log
bench_27b w8
