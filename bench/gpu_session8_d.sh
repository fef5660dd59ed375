# Device run (session 8, 62): the wgmma kernel's cp.async loader with its per-thread row pointers, chunk offset
# and row masks hoisted out of the K loop (~150 instead of ~270 SASS instructions per k-tile): GEMM GPU tier
# (wgmma forced + planned), the throughput report, the group_m sweep, and the 27B bf16 bench at 512 / 8,192.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session8_d.sh
source bench/gpu_setup.sh
gpu_tests gemm 110 tests/kernels/test_gemm_gpu.py -k "wgmma or planned or every_arch or driver or strided or deterministic"
rm -f $OUT/*.xml
timeout 80 python3 bench/gemm_group_sweep.py --tokens 8192 --groups 8 --json $OUT/gemm_group_sweep.json > $OUT/gemm_group_sweep.log 2>&1
echo "sweep rc $?"; cat $OUT/gemm_group_sweep.log | tail -6; el
timeout 200 ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512,8192 \
  --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log | head -4; grep -i "gemm\|gdn_chunk\|attn_prefill" $OUT/bench_bf16.log | tail -9; el
