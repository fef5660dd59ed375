# Reproduces only at 1f558dd (bench/NOTES.md run 101): the stream_l2 option was removed after it.
# Device run (session 14, a): the GEMV weight stream with an L2 evict-first cache policy (GemvCoopFamily.stream_l2 /
# template stream_l2 "evict_first": createpolicy + ld .L2::cache_hint). Hypothesis: the step's GBs of weights at
# normal priority evict the small reused data (kernel code, x, ss parts, norm weights) between layers, and the
# dp kernels' 2.1-2.7 us of x staging (one L2 round trip on paper) is partly instruction / data misses served from
# DRAM under load. (1) the layer timeline, planned vs evict-first; (2) same-process A/Bs of the 27B decode step,
# w4 and w8.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session14_a.sh
source bench/gpu_setup.sh
trace_run planned
trace_run evf --family "{'stream_l2': 'evict_first'}"
trace_run planned_again
for w in w4 w8; do ab_run ${w}_evf $w 200 now "evf:gemv_coop.stream_l2='evict_first'"; done
