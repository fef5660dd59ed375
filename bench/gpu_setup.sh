# Sourced at the start of every device run: install carried wheels and the project without network,
# the tests find the fixture checkpoint in the repository (tests/fixtures). (The device image has CuPy 14 / NVRTC 13.0.)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 3; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip-e.log 2>&1 \
  || { cat /tmp/pip-e.log; echo "project install failed"; exit 3; }
export PYTHONUNBUFFERED=1
export NINFERC_REQUIRE_GPU=1   # a missing or broken GPU fails the GPU tests instead of skipping them (tests/conftest.py)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv
python3 -c "import cupy, cuda.bindings, numpy; print('cupy', cupy.__version__, 'cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__); from ninferc.targets.nvrtc import nvrtc_version; print('nvrtc', nvrtc_version())"

# Helpers for the device scripts: elapsed time, a time-boxed GPU test run with its own log and junit
# file under $OUT (the whole call must stay under the device's 10-minute limit: 570 s budget here), and the dp layer
# timeline's summary (trace_run).
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
gpu_tests() {  # gpu_tests NAME SECONDS pytest-args...
  local name=$1 secs=$2; shift 2
  local left=$(( 570 - ($(date +%s) - T0) ))
  (( left < 30 )) && { echo "$name: skipped (no time left)"; return; }
  (( secs > left )) && secs=$left
  # a per-test limit only where pytest-timeout is installed (the device image has it; the project does not ask for
  # it): the outer `timeout` bounds the whole run either way
  local per_test=""
  python3 -c "import pytest_timeout" 2>/dev/null && per_test="--timeout 300"
  timeout $secs python3 -m pytest "$@" -m gpu -q --tb=short -rf $per_test -p no:cacheprovider \
    --junitxml=$OUT/$name.xml > $OUT/$name.log 2>&1
  echo "$name (rc $?, $(( $(date +%s) - T0 )) s): $(tail -1 $OUT/$name.log)"
  grep -E "^(FAILED|ERROR)" $OUT/$name.log | head -20
}
trace_run() {  # trace_run NAME [dp_trace_probe args...]: the layer timeline's summary lines, its JSON under $OUT
  local name=$1; shift
  timeout 60 python3 bench/dp_trace_probe.py "$@" --json $OUT/dp_trace_$name.json > /tmp/trace_$name.log 2>&1
  echo "== $name rc $? $(el)"; head -1 /tmp/trace_$name.log; grep -A4 "^mean" /tmp/trace_$name.log | tail -4
  grep -E "grid [0-9]+," /tmp/trace_$name.log | sed 's/gemv_coop__//' | cut -c1-150
  grep -E "Error|error" /tmp/trace_$name.log | tail -2
}
bench_27b() {  # bench_27b W [W ...]: the README rows' 27B bench (512 and 8,192 context) per weight format, JSON under $OUT
  local w
  for w in "$@"; do
    timeout 110 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --decode-tokens 32 \
      --prompt-tokens 512,8192 --json $OUT/bench_$w.json > /tmp/bench_$w.log 2>&1
    echo "bench $w rc $? $(el)"; grep -A3 "^context" /tmp/bench_$w.log | head -3; grep -i "error" /tmp/bench_$w.log | tail -2
  done
}
ab_run() {  # ab_run NAME WEIGHTS SECONDS VARIANT...: bench/family_ab.py over 4 rounds, JSON $OUT/ab_NAME.json
  local name=$1 w=$2 secs=$3; shift 3
  # the GPU's SM / memory clocks, power and temperature every 200 ms during the A/B (medians printed after it)
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 200 \
    > /tmp/smi_$name.csv 2>/dev/null &
  local smi=$!
  timeout $secs python3 bench/family_ab.py --weights $w --rounds 4 --json $OUT/ab_$name.json "$@" > /tmp/ab_$name.log 2>&1
  echo "ab $name rc $? $(el)"; kill $smi 2>/dev/null; grep -E "speed-up|Error|error" /tmp/ab_$name.log | tail -5
  python3 -c "import sys, statistics as st; r=[[float(x) for x in l.split(',')] for l in open(sys.argv[1]) if l.strip() and 'N/A' not in l]; print('  smi medians (sm MHz, mem MHz, W, C) over', len(r), 'samples:', [round(st.median(c), 1) for c in zip(*r)] if r else 'none')" /tmp/smi_$name.csv 2>/dev/null
}
