# Device run (session 15, a): GPU tests of the balanced attn_decode split (template `balance`) and the GDN decode
# state / conv-ring preload before the PDL wait (template `preload`), then same-process A/Bs of the 27B decode step
# (bench/family_ab.py, 512-token context): w4 with the balanced split alone, both, and both with 256-thread GDN
# decode CTAs;
# w8 with both. Run as NINFERC_COMMIT=<hash> bash bench/gpu_session15_a.sh
source bench/gpu_setup.sh
gpu_tests attn 80 tests/kernels/test_attention_gpu.py -k "decode_step"
gpu_tests gdn 60 tests/kernels/test_gdn_gpu.py -k "test_decode"
ab_run w4_s15 w4 230 now "bal16:attn_decode.balance_keys=16" \
  "both:gdn_decode.preload=True;attn_decode.balance_keys=16" \
  "both_spt64:gdn_decode.preload=True;attn_decode.balance_keys=16;gdn_decode.state_per_thread=64"
ab_run w8_s15 w8 140 now "both:gdn_decode.preload=True;attn_decode.balance_keys=16"
