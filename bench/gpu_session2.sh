# Device run (session 2, call 1): engine end to end with PDL launches, quantised artifacts' fidelity, the HF
# peer's mapping, then the new quantised / int8-KV kernel tests. Each part has its own time box; logs in $OUT.
source bench/gpu_setup.sh
T0=$(date +%s)
run() {  # run NAME SECONDS pytest-args...
  local name=$1 secs=$2; shift 2
  local left=$(( 570 - ($(date +%s) - T0) ))
  (( left < 30 )) && { echo "$name: skipped (no time left)"; return; }
  (( secs > left )) && secs=$left
  timeout $secs python3 -m pytest "$@" -m gpu -q --tb=short -rf --timeout 300 -p no:cacheprovider \
    --junitxml=$OUT/$name.xml > $OUT/$name.log 2>&1
  echo "$name (rc $?, $(( $(date +%s) - T0 )) s): $(tail -1 $OUT/$name.log)"
}
run engine 200 tests/runtime/test_engine_gpu.py
run quant 150 tests/runtime/test_quant_gpu.py
run peer 90 tests/ninferc/test_peer_hf_gpu.py
run kernels_q 200 tests/kernels tests/targets/test_gemv_coop_gpu.py -k "w8 or w4 or int8 or quant or wfmt"
grep -h -E "^(FAILED|ERROR)" $OUT/*.log | head -30
