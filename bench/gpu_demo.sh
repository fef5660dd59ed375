# Device run: the README's CLI demo on the fixture (bf16, w8 + int8 KV and w4 artifacts). Output in $OUT/cli_demo.txt.
source bench/gpu_setup.sh >/dev/null 2>&1
{
  echo '$ ninferc compile tests/fixtures/qwen35-tiny-code --target sm_90 --sku h200 -o /tmp/tiny.ninfer'
  ninferc compile tests/fixtures/qwen35-tiny-code --target sm_90 --sku h200 -o /tmp/tiny.ninfer 2>&1 | tr '\r' '\n' | grep -v "tensor/s\]$" | grep -v '^$'
  echo "\$ ninferc run /tmp/tiny.ninfer --prompt \$'def fibonacci(n):\\n' --max-new 48"
  ninferc run /tmp/tiny.ninfer --prompt $'def fibonacci(n):\n' --max-new 48 2>&1
  echo '$ ninferc compile tests/fixtures/qwen35-tiny-code --target sm_90 --sku h200 --weights w8 --kv-dtype int8 -o /tmp/tiny_w8.ninfer'
  ninferc compile tests/fixtures/qwen35-tiny-code --target sm_90 --sku h200 --weights w8 --kv-dtype int8 -o /tmp/tiny_w8.ninfer 2>&1 | tr '\r' '\n' | grep -v "tensor/s\]$" | grep -v '^$'
  echo "\$ ninferc run /tmp/tiny_w8.ninfer --prompt \$'def fibonacci(n):\\n' --max-new 48"
  ninferc run /tmp/tiny_w8.ninfer --prompt $'def fibonacci(n):\n' --max-new 48 2>&1
  echo '$ ninferc compile tests/fixtures/qwen35-tiny-code --target sm_90 --sku h200 --weights w4 -o /tmp/tiny_w4.ninfer'
  ninferc compile tests/fixtures/qwen35-tiny-code --target sm_90 --sku h200 --weights w4 -o /tmp/tiny_w4.ninfer 2>&1 | tr '\r' '\n' | grep -v "tensor/s\]$" | grep -v '^$'
  echo "\$ ninferc run /tmp/tiny_w4.ninfer --prompt \$'def fibonacci(n):\\n' --max-new 48"
  ninferc run /tmp/tiny_w4.ninfer --prompt $'def fibonacci(n):\n' --max-new 48 2>&1
} > $OUT/cli_demo.txt 2>&1
cat $OUT/cli_demo.txt
