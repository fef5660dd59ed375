# Device run (session 4, final): engine GPU tier; the 27B bf16 bench at 512 / 8192 with the HF transformers peer
# and a profile, and at 32768; the fixture's quantisation fidelity; the README CLI demo. 8 result files.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session4_final.sh
source bench/gpu_setup.sh
gpu_tests engine 100 tests/runtime
rm -f $OUT/*.xml
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48"
timeout 170 $B --prompt-tokens 512,8192 --peer hf --profile --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1
echo "bf16 rc $?"; grep -A3 "^context" $OUT/bench_bf16.log; grep -i -A4 "peer\|hf " $OUT/bench_bf16.log | tail -8; el
timeout 100 $B --prompt-tokens 32768 --json $OUT/bench_bf16_32k.json > $OUT/bench_bf16_32k.log 2>&1
echo "32k rc $?"; grep -A2 "^context" $OUT/bench_bf16_32k.log; el
timeout 100 python3 bench/quant_fidelity_gpu.py --json $OUT/quant_fidelity.json > $OUT/quant_fidelity.log 2>&1
echo "fidelity rc $?"; tail -8 $OUT/quant_fidelity.log; el
timeout 80 bash bench/gpu_demo.sh > /dev/null 2>&1; echo "demo rc $?"; tail -5 $OUT/cli_demo.txt; el
