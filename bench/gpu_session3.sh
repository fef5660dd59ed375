# Device run (session 3): the fused add+RMSNorm GEMV epilogue (route coop_norm) and the SM-aware GDN column
# block -- their GPU tests, the engine end to end, the GDN core A/B per dv_block, 27B bf16 / w8 benches.
source bench/gpu_setup.sh
gpu_tests gemv_norm 150 tests/targets/test_gemv_coop_gpu.py -k "add_rmsnorm or every_arch or cubin_resources or occupancy"
gpu_tests engine 200 tests/runtime
python3 bench/gdn_chunk_ab.py --json $OUT/gdn_chunk_ab.json > $OUT/gdn_chunk_ab.log 2>&1; tail -5 $OUT/gdn_chunk_ab.log; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --prompt-tokens 512,8192"
$B --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; tail -8 $OUT/bench_bf16.log; el
$B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; tail -4 $OUT/bench_w8.log; el
