# Session 18, run 136: fuse_prep through the plan's step dropping (drop_unneeded_steps) instead of a prefill-only
# lowering: the engine tests with it forced (B = 1 and 3) and the staged-decode engine tests (default plan); the
# fused kernel as of 8b89b0f (norm_rope_row helper, cos / sin table before the PDL wait).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session18_f.sh
source bench/gpu_setup.sh
gpu_tests engine_prep 200 tests/runtime/test_engine_gpu.py -k "prep_folded or staged" -s
grep "max |d logit|" $OUT/engine_prep.log
