# Device run (session 4): the GDN and attention kernels' GPU tier (run 4 timed out in them after the L2
# prefetch before the PDL wait was added). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session4_kernels.sh
source bench/gpu_setup.sh
gpu_tests gdn 200 tests/kernels/test_gdn_gpu.py
gpu_tests attention 300 tests/kernels/test_attention_gpu.py
rm -f $OUT/*.xml
el
