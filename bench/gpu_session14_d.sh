# Device run (session 14, d): GPU tests of the final tree -- persistent dp kernels (every option), the planned and
# quantised GEMV launches, the engine goldens, the quantised-weight / int8-KV fidelity.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_d.sh
source bench/gpu_setup.sh
gpu_tests dp 150 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many_items"
gpu_tests gemv 150 tests/targets/test_gemv_coop_gpu.py -k "quant_planned or planned_launches or folded or every_arch"
gpu_tests engine 90 tests/runtime/test_engine_gpu.py -k "goldens_short or folded"
gpu_tests quant 90 tests/runtime/test_quant_gpu.py
