# Session 26, run 184: batched decode on today's kernels (the README's batched figures are session 6's) -- four
# sequences per step, bf16 / w8 / w4, with the one-sequence figure of the same process; the bench JSON's new device
# identity (UUID, PCI bus id) on real CuPy.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session26_c.sh
source bench/gpu_setup.sh
for w in bf16 w8 w4; do
  timeout 150 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --batch 4 --prompt-tokens 512 \
    --decode-tokens 32 --json $OUT/batch4_$w.json > /tmp/batch_$w.log 2>&1
  echo "batch4 $w rc $? $(el)"; grep -E "^ +512|batched decode|rror" /tmp/batch_$w.log | tail -4
done
python3 -c "import json; d=json.load(open('$OUT/batch4_w4.json')); print('device', d.get('device'))"
