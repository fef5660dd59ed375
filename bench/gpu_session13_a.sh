# Device run (session 13, a): the split argmax sampler (61 CTAs per 248,320-logit row instead of one), the GDN
# decode kernel's pre-wait work (conv ring rows into L2, conv taps and gating constants into registers) and the w8
# one-token GEMVs with a norm input at 4 rows per warp / 2 warps per row group. The sampler's GPU tests; the graph
# profiles (w4, w8) of the previous tree (build/old = git archive 7d6e814, run from its own directory so its
# packages are the ones imported) beside this tree's, same run; the 27B w4 and w8 benches (README rows); then the
# GDN decode and engine GPU tests.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session13_a.sh (carry .whl, .fixtures, build/old)
# NOTE (run 94): the old-tree profiles are not: from build/old, `ninferc` is build/old's but the editable install maps
# ninferc.targets / ninferc.templates / ... to this checkout, so both sides ran the new kernels. Use
# bench/family_ab.py (family attributes, one process) for A/Bs instead.
source bench/gpu_setup.sh
timeout 60 python3 -m pytest tests/kernels/test_sample_gpu.py -m gpu -q -s -p no:cacheprovider -k latency 2>&1 | grep -E "B=|passed|failed"
gpu_tests sample 60 tests/kernels/test_sample_gpu.py
prof() {  # prof NAME DIR WEIGHTS: the graph profile at context 512 with the packages of DIR
  (cd $2 && timeout 80 python3 -c "import runpy, sys; sys.path.insert(0, 'bench'); sys.argv = ['graph_profile.py', '--weights', '$3', '--json', '$OUT/gp_$1.json']; runpy.run_path('bench/graph_profile.py', run_name='__main__')" > /tmp/gp_$1.log 2>&1)
  echo "== profile $1 rc $? $(el)"; grep -E "step wall|gdn_decode|sample|lm_head|gate_up|gdn.in|q_k_v" /tmp/gp_$1.log | head -9
  grep -E "Error" /tmp/gp_$1.log | tail -2
}
prof w4_old build/old w4
prof w4_new . w4
prof w8_old build/old w8
prof w8_new . w8
for w in w4 w8; do
  timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --decode-tokens 32 \
    --prompt-tokens 512,8192 --json $OUT/bench_$w.json > /tmp/bench_$w.log 2>&1
  echo "bench $w rc $? $(el)"; grep -A3 "^context" /tmp/bench_$w.log | head -3; grep -i "error" /tmp/bench_$w.log | tail -2
done
gpu_tests gdn 90 tests/kernels/test_gdn_gpu.py -k "decode"
gpu_tests engine 90 tests/runtime/test_engine_gpu.py -k "goldens_short or folded or stream"
rm -f $OUT/*.xml $OUT/*.log
