# Device run (session 17, g): a second process of the README's 27B w8 / w4 bench on the final tree (process spread),
# and an A/B of the balanced split's keys granule 8 vs 16 with the staged attention decode (w8, 512 of 8,248).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session17_g.sh
source bench/gpu_setup.sh
bench_27b w8 w4
ab_run w8_g8_512 w8 150 --context 512 --max-context 8248 now "g8:attn_decode.balance_keys=8"
