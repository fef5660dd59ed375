# Device run (session 11, d): the fidelity JSON (run 85's did not come back: too many files under $OUT) and a
# second process of the 27B w4 bench at the same commit (process-to-process spread).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session11_d.sh
source bench/gpu_setup.sh
timeout 120 python3 bench/quant_fidelity_gpu.py --json $OUT/quant_fidelity_gpu.json > $OUT/quant_fidelity_gpu.log 2>&1
echo "fidelity rc $?"; grep -E "agree" $OUT/quant_fidelity_gpu.log | cut -c1-200; el
timeout 100 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights w4 --decode-tokens 32 --prompt-tokens 512,8192 \
  --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log | head -3; el
rm -f $OUT/*.log
