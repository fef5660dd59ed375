# Session 25, run 179: the whole GPU tier on the final tree, third part -- engine, quantised fidelity, HF peer; then
# the fixture's fidelity table (README) and the README's CLI transcript (bench/gpu_demo.sh).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session25_c.sh
source bench/gpu_setup.sh
gpu_tests engine_quant_peer 240 tests/runtime tests/ninferc
timeout 120 python3 bench/quant_fidelity_gpu.py --json $OUT/quant_fidelity.json > $OUT/quant_fidelity.log 2>&1
echo "quant_fidelity rc $? $(el)"; tail -14 $OUT/quant_fidelity.log
timeout 150 bash bench/gpu_demo.sh > /dev/null 2>&1; echo "demo rc $? $(el)"; cat $OUT/cli_demo.txt
rm -f $OUT/*.xml
