# Device run (session 6, 52): batched decode -- the engine test (five golden cases decoded together, teacher forced
# and free running on the B = 5 graph), then the 27B bench with --batch 4 at 512 for w8, w4 and bf16 (the 4-token
# GEMV tiles: tensor cores for w8 / w4). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_g.sh
source bench/gpu_setup.sh
gpu_tests engine_batch 100 tests/runtime/test_engine_gpu.py -k "batched or goldens_short"
rm -f $OUT/*.xml
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 32 --prompt-tokens 512 --batch 4"
for f in w8 w4 bf16; do
  timeout 110 $B --weights $f --json $OUT/batch4_$f.json > $OUT/batch4_$f.log 2>&1
  echo "$f rc $?"; grep -E "^ +512|batched decode" $OUT/batch4_$f.log; el
done
