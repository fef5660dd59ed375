# Device run (session 12, c): the layer timeline (bench/dp_trace_probe.py) of the planned w4 dp GEMVs with weight
# rings of several depths per CTA size (256-thread kernels capped at 64 registers to keep 4 CTAs/SM), and with every
# shape at 640 threads.
# (Ran at 0dbe842 as run 89, with the template parameter then called max_regs: 64, which is min_ctas 4 at 256 threads.)
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session12_c.sh
source bench/gpu_setup.sh
run() {  # run NAME [probe args...]
  local name=$1; shift
  timeout 60 python3 bench/dp_trace_probe.py "$@" --json $OUT/dp_trace_$name.json > /tmp/trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; head -1 /tmp/trace_$name.log; grep -A4 "^mean" /tmp/trace_$name.log | tail -4
  grep -E "grid [0-9]+," /tmp/trace_$name.log | sed 's/gemv_coop__//' | cut -c1-150
  grep -E "Error|error" /tmp/trace_$name.log | tail -2
}
run planned
run r4c_r7 --params "{256: {'ring': 4, 'min_ctas': 4}, 640: {'ring': 7}}"
run r3c_r5 --params "{256: {'ring': 3, 'min_ctas': 4}, 640: {'ring': 5}}"
run r4c --params "{256: {'ring': 4, 'min_ctas': 4}}"
run r6_r8 --params "{256: {'ring': 6}, 640: {'ring': 8}}"
run all640_r7 --family "{'dp_shapes': ((640, 1),)}" --params "{640: {'ring': 7}}"
run planned_again
