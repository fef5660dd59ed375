# Session 21, run 147: the fused decode MLP (mlp_decode: gate|up and down in one cooperative persistent launch, down
# split-K over slices of y with per-slice counters instead of a kernel boundary): its GPU tests (27B and small
# shapes, three launches each: counters back to zero, bit-identical outputs), same-process A/Bs of the 27B step
# against the two GEMVs (w4 / w8 at 512), then the quantised-fidelity and engine GPU tests on the fused path.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_a.sh
source bench/gpu_setup.sh
gpu_tests mlp 120 tests/kernels/test_mlp_decode_gpu.py
ab_run w4_mlp_512 w4 75 --context 512 --max-context 8248 now "unfused:mlp_decode.enabled=False"
ab_run w8_mlp_512 w8 75 --context 512 --max-context 8248 now "unfused:mlp_decode.enabled=False"
gpu_tests quant 150 tests/runtime/test_quant_gpu.py
gpu_tests engine 120 tests/runtime/test_engine_gpu.py
cp /tmp/ab_*.log $OUT/; rm -f $OUT/*.xml
