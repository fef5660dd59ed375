# Session 18, run 135: attn_prep folded into the staged attention decode (AttnDecodeFamily.fuse_prep) -- the engine
# test (no attn_prep launch in decode; logits vs the engine with it, B = 1 and 3), then same-process A/Bs of the 27B
# step against the planned kernels: w8 at 512 of 8,248 and 8,192 of 8,448, w4 at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session18_e.sh
source bench/gpu_setup.sh
gpu_tests engine_prep 120 tests/runtime/test_engine_gpu.py -k "prep_folded" -s
grep "max |d logit|" $OUT/engine_prep.log
ab_run w8_prep_512 w8 130 --context 512 --max-context 8248 now "prep:attn_decode.fuse_prep=True"
ab_run w8_prep_8192 w8 130 --context 8192 --max-context 8448 now "prep:attn_decode.fuse_prep=True"
ab_run w4_prep_512 w4 110 --context 512 --max-context 8248 now "prep:attn_decode.fuse_prep=True"
cp /tmp/ab_*.log $OUT/
