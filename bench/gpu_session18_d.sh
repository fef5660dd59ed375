# Session 18, run 134: the tensor-core attention decode (stage_mma) at 32,768 tokens, where the attention's share of
# the step is four times 8,192's -- same-process A/B against the planned staged kernel (w8).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session18_d.sh
source bench/gpu_setup.sh
ab_run w8_mma_32k w8 300 --context 32768 --max-context 33024 now "mma:attn_decode.stage_mma=True"
cp /tmp/ab_*.log $OUT/
