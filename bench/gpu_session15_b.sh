# Device run (session 15, b): the balanced attn_decode split where it should matter, a context far below max_context
# (bench/family_ab.py --max-context): w8 at 512 of 8,248 (ninferc bench's engine), at 2,048 of 32,768; GDN decode
# preload with both.  Run as NINFERC_COMMIT=<hash> bash bench/gpu_session15_b.sh
source bench/gpu_setup.sh
ab_run w8_bal_8k w8 150 now "bal16:attn_decode.balance_keys=16" "both:gdn_decode.preload=True;attn_decode.balance_keys=16" --max-context 8248
ab_run w8_bal_32k w8 150 now "bal16:attn_decode.balance_keys=16" --context 2048 --max-context 32768
ab_run bf16_bal_8k bf16 150 now "both:gdn_decode.preload=True;attn_decode.balance_keys=16" --max-context 8248
