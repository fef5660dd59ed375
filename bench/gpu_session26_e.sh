# Session 26, run 186: where batched decode stands against other GEMV routes at four sequences (bench/batch_ab.py,
# engines in turn, not alternated): w8 / w4 on tensor cores at the 4-token tile (planned) vs integer dot products
# (dp) at that tile, and w8 on fp32 FMAs.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session26_e.sh
source bench/gpu_setup.sh
cd bench
timeout 300 python3 batch_ab.py --weights w8 --batch 4 --repeat-first --json $OUT/batch_ab_w8.json now \
  "dp4:gemv_coop.w8_mma_tiles=();gemv_coop.w8_dp_tiles=(1,4)" "fma4:gemv_coop.w8_mma_tiles=()" 2>&1 | grep -vE "^\s*$" | tail -8
echo "w8 rc $? $(el)"
timeout 200 python3 batch_ab.py --weights w4 --batch 4 --json $OUT/batch_ab_w4.json now \
  "dp4:gemv_coop.w4_mma_tiles=();gemv_coop.w4_dp_tiles=(1,4)" 2>&1 | grep -vE "^\s*$" | tail -6
echo "w4 rc $? $(el)"
