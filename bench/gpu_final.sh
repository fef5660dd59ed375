# Device run: the whole GPU tier, the README's CLI demo on the fixture, and the 27B benchmark.
source bench/gpu_setup.sh
python3 -m pytest tests -m gpu -q --tb=short -rf --timeout 300 -p no:cacheprovider \
  --junitxml=$OUT/suite.xml 2>&1 | tee $OUT/suite.log | tail -6
{
  echo '$ ninferc compile .fixtures/models/qwen35-tiny-code --target sm_90 --sku h200 -o tiny.ninfer'
  ninferc compile .fixtures/models/qwen35-tiny-code --target sm_90 --sku h200 -o /tmp/tiny.ninfer 2>&1 | tr '\r' '\n' | grep -v "tensor/s\]$" | grep -v '^$'
  echo "\$ ninferc run tiny.ninfer --prompt \$'def fibonacci(n):\\n' --max-new 48"
  ninferc run /tmp/tiny.ninfer --prompt $'def fibonacci(n):\n' --max-new 48 2>&1
} > $OUT/cli_demo.txt 2>&1
tail -12 $OUT/cli_demo.txt
ninferc bench --preset qwen3.8-27b --synthetic-weights --prompt-tokens 512,8192 --decode-tokens 48 \
  --json $OUT/bench.json 2>&1 | tail -5
