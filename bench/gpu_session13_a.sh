# Device run (session 13, a): the split argmax sampler (61 CTAs per 248,320-logit row instead of one) and the GDN
# decode kernel's pre-wait work (conv ring rows into L2, conv taps and gating constants into registers). GPU tests
# of both, the engine goldens; the w4 graph profile of the previous tree (build/old = git archive 7d6e814, run
# from its own directory so its packages are the ones imported) beside this tree's, same run; then the 27B w4 and
# w8 benches (README rows).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session13_a.sh (carry .whl, .fixtures, build/old)
source bench/gpu_setup.sh
gpu_tests sample 90 tests/kernels/test_sample_gpu.py
gpu_tests gdn 120 tests/kernels/test_gdn_gpu.py -k "decode"
gpu_tests engine 90 tests/runtime/test_engine_gpu.py -k "goldens_short or folded or stream"
prof() {  # prof NAME DIR: the w4 graph profile at context 512 with the packages of DIR
  (cd $2 && timeout 100 python3 -c "import runpy, sys; sys.path.insert(0, 'bench'); sys.argv = ['graph_profile.py', '--weights', 'w4', '--json', '$OUT/gp_$1.json']; runpy.run_path('bench/graph_profile.py', run_name='__main__')" > /tmp/gp_$1.log 2>&1)
  echo "== profile $1 rc $? $(el)"; grep -E "step wall|gdn_decode|sample|lm_head|gdn.in" /tmp/gp_$1.log | head -8
  grep -E "Error" /tmp/gp_$1.log | tail -2
}
prof old build/old
prof new .
prof old2 build/old
for w in w4 w8; do
  timeout 110 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --decode-tokens 32 \
    --prompt-tokens 512,8192 --json $OUT/bench_$w.json > /tmp/bench_$w.log 2>&1
  echo "bench $w rc $? $(el)"; grep -A3 "^context" /tmp/bench_$w.log | head -3; grep -i "error" /tmp/bench_$w.log | tail -2
done
rm -f $OUT/*.xml $OUT/*.log
