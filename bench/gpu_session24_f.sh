# Session 24, run 175: the bench in more processes on the final decode loop (run 174's kernels): w8 three times,
# w4 once more -- the README rows are medians over processes.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_f.sh
source bench/gpu_setup.sh
for i in 1 2 3; do
  bench_27b w8; mv $OUT/bench_w8.json $OUT/bench_w8_p$i.json
done
bench_27b w4; mv $OUT/bench_w4.json $OUT/bench_w4_p2.json
