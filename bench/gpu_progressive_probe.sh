# Device run prepared in session 12 and not run yet (the device budget was spent): the dp staging one step's slice at
# a time (template stage "progressive", family dp_stage) -- its GPU correctness tests, then the layer timeline
# (bench/dp_trace_probe.py) as planned and with the progressive staging: the 256-thread kernels capped at 64
# registers (min_ctas 4: on this machine's NVRTC 13.5 the option costs 8-14 registers), uncapped, and on the
# 640-thread kernels only; and the same timeline of the planned w8 GEMVs (fp32 FMA kernels; --wfmt w8).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_progressive_probe.sh
source bench/gpu_setup.sh
gpu_tests persist 150 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many and (progressive or nocarry)"
run() {  # run NAME [probe args...]
  local name=$1; shift
  timeout 60 python3 bench/dp_trace_probe.py "$@" --json $OUT/dp_trace_$name.json > /tmp/trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; head -1 /tmp/trace_$name.log; grep -A4 "^mean" /tmp/trace_$name.log | tail -4
  grep -E "grid [0-9]+," /tmp/trace_$name.log | sed 's/gemv_coop__//' | cut -c1-150
  grep -E "Error|error" /tmp/trace_$name.log | tail -2
}
run planned
run prog_capped --params "{256: {'stage': 'progressive', 'min_ctas': 4}, 640: {'stage': 'progressive'}}"
run prog --params "{'stage': 'progressive'}"
run prog640 --params "{640: {'stage': 'progressive'}}"
run planned_again
run w8 --wfmt w8
rm -f $OUT/*.xml $OUT/*.log
