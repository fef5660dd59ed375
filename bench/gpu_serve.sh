# Device run: `ninferc serve` of the 27B shape with synthetic weights, per weight format W given (bf16, w8, w4):
#   1. serve_bench.py at C = 1, 2, 4, 8 (prompt 512 token ids, 64 generated, 8 requests per level, streaming), from
#      the clients and the server's --request-log;
#   2. `ninferc bench` in the same run at 512 (the C = 1 comparison);
#   3. with PREFIX=1: prefix reuse at 7,680 of 8,192 tokens (a one-slot server checkpointing every 512 tokens).
# Files under $OUT: serve_27b_W.json, bench_27b_W.json, prefix_27b_W.json, and the servers' logs (serve_W.log).
# Usage (sourced after bench/gpu_setup.sh):  serve_27b bf16 w4
wait_healthy() {  # wait_healthy PORT SECONDS
  python3 - "$1" "$2" <<'PY'
import sys, time, httpx
port, secs = int(sys.argv[1]), float(sys.argv[2])
end = time.time() + secs
while time.time() < end:
    try:
        if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
            sys.exit(0)
    except httpx.HTTPError:
        pass
    time.sleep(0.5)
sys.exit(1)
PY
}
serve_27b() {
  local w
  for w in "$@"; do
    ninferc serve --preset qwen3.8-27b --synthetic-weights --weights $w --max-concurrency 8 --max-context 4096 \
      --port 8100 --request-log /tmp/req_$w.jsonl > $OUT/serve_$w.log 2>&1 &
    local pid=$!
    if wait_healthy 8100 240; then
      echo "serve $w healthy $(el)"
      timeout 200 python3 bench/serve_bench.py --url http://127.0.0.1:8100 --concurrency 1,2,4,8 --requests 8 \
        --prompt-tokens 512 --max-tokens 64 --server-log /tmp/req_$w.jsonl --json $OUT/serve_27b_$w.json 2>&1 | grep -v "^wrote"
    else
      echo "serve $w never healthy $(el)"; tail -5 $OUT/serve_$w.log
    fi
    kill $pid; wait $pid; echo "serve $w stopped $(el)"
    timeout 120 ninferc bench --preset qwen3.8-27b --synthetic-weights --weights $w --prompt-tokens 512 \
      --decode-tokens 64 --tokens-per-seq 2,3,4,6,8 --json $OUT/bench_27b_$w.json > /tmp/bench_$w.log 2>&1
    echo "bench $w rc $? $(el)"; grep -A1 "^context" /tmp/bench_$w.log | tail -1; grep "one sequence x" /tmp/bench_$w.log
    if [ "${PREFIX:-0}" = 1 ]; then
      ninferc serve --preset qwen3.8-27b --synthetic-weights --weights $w --max-concurrency 1 --max-context 8256 --prefill-chunk 8192 \
        --port 8101 >> $OUT/serve_$w.log 2>&1 &
      pid=$!
      if wait_healthy 8101 240; then
        timeout 150 python3 bench/serve_bench.py --url http://127.0.0.1:8101 --prefix-ttft 7680/8192 --repeats 3 \
          --json $OUT/prefix_27b_$w.json 2>&1 | grep -v "^wrote"
      fi
      kill $pid; wait $pid; echo "prefix $w done $(el)"
    fi
  done
}
serve_demo() {  # the README's serve transcript on the device: the fixture compiled for it, served, two requests
  ninferc compile tests/fixtures/qwen35-tiny-code --target sm_90 --sku h200 -o /tmp/tiny.ninfer > /dev/null 2>&1
  {
    echo '$ ninferc serve tiny.ninfer --request-log requests.jsonl &'
    ninferc serve /tmp/tiny.ninfer --port 8102 --request-log /tmp/requests.jsonl 2>&1 &
    local pid=$!
    wait_healthy 8102 120
    python3 - <<'PY'
import openai
c = openai.OpenAI(base_url="http://127.0.0.1:8102/v1", api_key="none")
print("$ python3 client.py   # openai client: one chat completion, one streamed completion")
r = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Write a Python function that adds two numbers."}],
                              max_tokens=48, temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
print(repr(r.choices[0].message.content), r.usage.completion_tokens, "tokens")
text = "".join(ch.choices[0].text for ch in c.completions.create(model="tiny", prompt="def fibonacci(n):\n",
                                                                  max_tokens=48, temperature=0, stream=True) if ch.choices)
print(repr(text))
PY
    kill $pid; wait $pid
    echo '$ tail -1 requests.jsonl'; tail -1 /tmp/requests.jsonl
  } > $OUT/serve_demo.txt 2>&1
  echo "serve demo $(el)"; cat $OUT/serve_demo.txt | head -40
}
