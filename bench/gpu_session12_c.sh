# Device run (session 12, c): the layer timeline (bench/dp_trace_probe.py) of the planned w4 dp GEMVs with weight
# rings of several depths per CTA size (256-thread kernels capped at 64 registers to keep 4 CTAs/SM), and with every
# shape at 640 threads.
# (Ran at 0dbe842 as run 89, with the template parameter then called max_regs: 64, which is min_ctas 4 at 256 threads.)
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_c.sh
source bench/gpu_setup.sh
trace_run planned
trace_run r4c_r7 --params "{256: {'ring': 4, 'min_ctas': 4}, 640: {'ring': 7}}"
trace_run r3c_r5 --params "{256: {'ring': 3, 'min_ctas': 4}, 640: {'ring': 5}}"
trace_run r4c --params "{256: {'ring': 4, 'min_ctas': 4}}"
trace_run r6_r8 --params "{256: {'ring': 6}, 640: {'ring': 8}}"
trace_run all640_r7 --family "{'dp_shapes': ((640, 1),)}" --params "{640: {'ring': 7}}"
trace_run planned_again
