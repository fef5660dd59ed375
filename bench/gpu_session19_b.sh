# Session 19, run 137: the README rows with fuse_prep "auto" (27B w8 / w4 / bf16 at 512 and 8,192 of 8,248) and a
# same-process A/B of the default against fuse_prep=False (w8, 512 of 8,248).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session19_b.sh
source bench/gpu_setup.sh
bench_27b w8 w4 bf16
ab_run w8_noprep_512 w8 130 --context 512 --max-context 8248 now "noprep:attn_decode.fuse_prep=False"
cp /tmp/ab_*.log /tmp/bench_*.log $OUT/
