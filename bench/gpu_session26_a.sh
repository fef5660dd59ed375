# Session 26, run 182: the README rows' bench (w8, w4) on this session's host -- another sample of the w8 fraction's
# host-to-host spread (owner question 4 in issue 6's notes) -- and the sampler GPU tests through gpu_setup's
# gpu_tests (its per-test limit now only where pytest-timeout is installed).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session26_a.sh
source bench/gpu_setup.sh
bench_27b w8 w4
gpu_tests sampler 120 tests/kernels/test_sample_gpu.py
