# Device run (session 6, 55): the engine tier (incl. the batched golden test) on the kernels of 7c23df3 (restored after
# run 54). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session6_i.sh
source bench/gpu_setup.sh
gpu_tests engine 150 tests/runtime
rm -f $OUT/*.xml
