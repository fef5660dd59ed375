# Device run prepared in session 12 and not run yet (the device budget was spent): the dp staging one step's slice at
# a time (template stage "progressive", family dp_stage) -- its GPU correctness tests, then the layer timeline
# (bench/dp_trace_probe.py) as planned and with the progressive staging: the 256-thread kernels capped at 64
# registers (min_ctas 4: on this machine's NVRTC 13.5 the option costs 8-14 registers), uncapped, and on the
# 640-thread kernels only; and the same timeline of the planned w8 GEMVs (fp32 FMA kernels; --wfmt w8).
# (Run 93 measured it slower; stage "progressive" and dp_stage were removed afterwards: this script
# reproduces only at 7d6e814.)
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_progressive_probe.sh
source bench/gpu_setup.sh
gpu_tests persist 150 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many and (progressive or nocarry)"
trace_run planned
trace_run prog_capped --params "{256: {'stage': 'progressive', 'min_ctas': 4}, 640: {'stage': 'progressive'}}"
trace_run prog --params "{'stage': 'progressive'}"
trace_run prog640 --params "{640: {'stage': 'progressive'}}"
trace_run planned_again
trace_run w8 --wfmt w8
rm -f $OUT/*.xml $OUT/*.log
