# Device run (session 2, call 2): fixture fidelity of the quantised artifacts, then the 27B bench for bf16
# (with the HF transformers peer), w8, and w4 + int8 KV. JSON under $OUT.
source bench/gpu_setup.sh
python3 bench/quant_fidelity_gpu.py --json $OUT/quant_fidelity_gpu.json 2>&1 | grep -v Warning | tail -8; el
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --prompt-tokens 512,8192 --decode-tokens 48"
$B --peer hf --json $OUT/bench_bf16.json > $OUT/bench_bf16.log 2>&1; tail -7 $OUT/bench_bf16.log; el
$B --weights w8 --json $OUT/bench_w8.json > $OUT/bench_w8.log 2>&1; tail -4 $OUT/bench_w8.log; el
$B --weights w4 --kv-dtype int8 --json $OUT/bench_w4_kv8.json > $OUT/bench_w4_kv8.log 2>&1; tail -4 $OUT/bench_w4_kv8.log; el
