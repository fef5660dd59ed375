# Session 24, run 176: the roofline's copy bandwidth as the best of four buffer pairs (ninferc.bench.copy_bandwidth_gbps;
# one 4 GiB pair measured 4,142-4,235 GB/s across run 175's processes while decode speed held within 0.05 %): the w8
# bench in three processes, w4 once, each printing every pair's GB/s.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_g.sh
source bench/gpu_setup.sh
for i in 1 2 3; do
  bench_27b w8; mv $OUT/bench_w8.json $OUT/bench_w8_p$i.json; grep "copy bandwidth" /tmp/bench_w8.log
done
bench_27b w4; grep "copy bandwidth" /tmp/bench_w4.log
