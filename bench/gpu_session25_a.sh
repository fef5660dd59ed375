# Session 25, run 177: (1) the planned decode GEMVs' steady-state streaming rate and fixed cost per launch
# (bench/gemv_marginal_probe.py: each at N and 4N with the same kernel); (2) the w4 step's kernel timeline at 512 of
# 8,248 on today's kernels (graph_profile; the last w4 one is session 10's); (3) GPU tests: GDN, sampler,
# elementwise, decode MLP (first part of the whole GPU tier on the final tree).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session25_a.sh
source bench/gpu_setup.sh
timeout 240 python3 bench/gemv_marginal_probe.py --formats w8,w4 --mult 1,4 --json $OUT/marginal.json > $OUT/marginal.log 2>&1
echo "marginal rc $? $(el)"; grep -v Warning $OUT/marginal.log | tail -60
timeout 120 python3 bench/graph_profile.py --weights w4 --context 512 --max-context 8248 --json $OUT/gp_w4_512.json \
  > $OUT/gp_w4_512.log 2>&1; echo "gp w4 512 rc $? $(el)"; head -30 $OUT/gp_w4_512.log | cut -c1-140
gpu_tests gdn 130 tests/kernels/test_gdn_gpu.py
gpu_tests small 120 tests/kernels/test_sample_gpu.py tests/kernels/test_elementwise_gpu.py tests/kernels/test_mlp_decode_gpu.py
rm -f $OUT/*.xml
