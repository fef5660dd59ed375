# Device run (session 16, d): the balanced split's keys granule at the bench's 512-of-8,248 shape (w8): 16 (planned),
# 32, and page-aligned splits -- fewer live splits make attn_combine's chain shorter and attn_decode's longer.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_d.sh
source bench/gpu_setup.sh
ab_run w8_gran w8 300 --max-context 8248 now "bal32:attn_decode.balance_keys=32" "pages:attn_decode.balance_keys=0"
