# Ran as bench/NOTES.md run 100 at 838df91; reproduces only there (the x_replicas option / --replicas was removed after it).
# Device run prepared in session 13, not run yet (the device budget was spent). (1) Does the dp GEMVs' staging of x
# (2.1-3.2 us after the PDL wait, with DRAM idle: bench/NOTES.md runs 87-93) shorten when fewer CTAs read each L2
# line of x? Each dp kernel stages from copy blockIdx % R of R identical copies (template x_replicas; the probe's x
# is static, so no producer writes the copies). If the staging drops well below 2 us at some R, the next step is the
# producers (swiglu store, add_norm_parts' xs) writing R copies and the plan passing the stride. (2) What one kernel
# boundary of the chain costs alone (bench/pdl_boundary_probe.py: PDL wait, plain stream order, and an arrival
# counter in place of griddepcontrol.wait), at the dp GEMVs' grids -- whether counters or fewer kernels is the lever.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_next_probes.sh
source bench/gpu_setup.sh
trace_run planned
for r in 2 4 8 16; do trace_run rep$r --replicas $r; done
trace_run planned_again
timeout 120 python3 bench/pdl_boundary_probe.py --json $OUT/pdl_boundary.json 2>&1 | tail -8
