# Session 24, run 177: the final tree (cupy() now checks for a device once per process): the sampler's GPU tests and
# the engine's decode_stream tests.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_h.sh
source bench/gpu_setup.sh
gpu_tests sample 60 tests/kernels/test_sample_gpu.py
gpu_tests engine 100 tests/runtime/test_engine_gpu.py -k "decode_stream or graph_equals_eager"
rm -f $OUT/*.xml
