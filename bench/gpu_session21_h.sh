# Session 21, run 154: the fused decode MLP's GPU tests after the review's simplification (the gate|up item without
# its one-output loop; the tests' shared case builder).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_h.sh
source bench/gpu_setup.sh
gpu_tests mlp 60 tests/kernels/test_mlp_decode_gpu.py
rm -f $OUT/*.xml
