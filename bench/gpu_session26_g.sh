# Session 26, run 188: did the bench's larger KV reservation (prompt + 2 x decode + 8: 8,264 tokens at 8,192 + 32
# decode steps, was 8,232) move the w8 decode figure at 8,192? Same machine, alternating: --decode-tokens 32 (8,264,
# 130 pages) and --decode-tokens 12 (8,224, 129 pages, as before the change), twice each.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session26_g.sh
source bench/gpu_setup.sh
for i in 1 2; do
  for d in 32 12; do
    timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w8 --decode-tokens $d \
      --prompt-tokens 8192 --json $OUT/w8_8192_d${d}_$i.json > /tmp/b.log 2>&1
    echo "decode-tokens $d round $i rc $? $(el): $(grep -E '^ +8192' /tmp/b.log | head -1)"
  done
done
