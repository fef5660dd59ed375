# Session 20, run 143: the README rows with gdn_decode one_pass as the default (27B bench, w8 / w4 / bf16 at 512 and
# 8,192), then the staged-attention engine test with its greedy comparison bounded by the golden's first near-tie
# for the reassociating tiles (run 142's mma case split at a 0.005-margin position).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session20_c.sh
source bench/gpu_setup.sh
bench_27b w8 w4 bf16
gpu_tests engine_staged 120 tests/runtime/test_engine_gpu.py -k "staged_attention"
