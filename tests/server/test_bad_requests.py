"""Bad requests get a 4xx in the OpenAI error shape and the server keeps serving; /health and /metrics."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading

import httpx
import pytest

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def keyed(start_server, tiny_dir, tmp_path_factory):
    """The fixture without its chat template, served with --api-key and a small context (named with vLLM's
    ``--served-model-name`` and ``--max-model-len``, the aliases of ``--model-id`` and ``--max-context``)."""
    d = tmp_path_factory.mktemp("notemplate") / "tiny-notemplate"
    shutil.copytree(tiny_dir, d)
    (d / "chat_template.jinja").chmod(0o644)
    (d / "chat_template.jinja").unlink()
    return start_server(d, "--served-model-name", "tiny", "--api-key", KEY, "--max-model-len", "256")


AUTH = {"Authorization": f"Bearer {KEY}"}
OK = {"model": "tiny", "prompt": "def f():", "max_tokens": 2, "temperature": 0}


def _post(srv, path, body=None, *, raw=None, headers=AUTH, timeout=60):
    h = {"content-type": "application/json", **(headers or {})}
    data = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(srv.url + path, content=data, headers=h, timeout=timeout)


CASES = [
    # (name, path, body or raw bytes, status, param / code fragment)
    ("malformed JSON", "/v1/completions", b'{"model": "tiny", "prompt": ', 400, "invalid_json"),
    ("not an object", "/v1/completions", b'[1, 2]', 400, "invalid_body"),
    ("non-UTF-8 body", "/v1/completions", b'{"model": "tiny", "prompt": "\xff\xfe"}', 400, "invalid_body"),
    # a JSON \\uD800-\\uDFFF escape without its pair parses to a str no tokenizer takes (it was a 500, 2026-12-06)
    ("lone surrogate in the prompt", "/v1/completions", b'{"model": "tiny", "prompt": "ab\\udfffc"}', 400,
     "prompt invalid_body prompt holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape without its pair) at character 2"),
    ("lone surrogate in a message", "/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}', 400, "messages.0.content"),
    ("lone surrogate in a stop string", "/v1/completions", b'{"model": "tiny", "prompt": "x", "stop": ["a", "\\udc00"]}',
     400, "stop.1"),
    ("nested past the recursion limit", "/v1/completions", b'{"model": "tiny", "prompt": ' + b"[" * 100_000 + b"1"
     + b"]" * 100_000 + b"}", 400, "nested too deeply"),
    ("wrong type", "/v1/completions", {**OK, "max_tokens": "ten"}, 400, "max_tokens"),
    ("missing prompt", "/v1/completions", {"model": "tiny"}, 400, "prompt"),
    ("no messages", "/v1/chat/completions", {"model": "tiny"}, 400, "messages"),
    ("empty messages", "/v1/chat/completions", {"model": "tiny", "messages": []}, 400,
     "messages must hold at least 1 item(s), found 0"),
    ("bad role", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages.0.role"),
    ("enable_thinking a string", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": "no"}},
     400, "chat_template_kwargs"),
    ("enable_thinking null passes to the template (here: none)", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": None}},
     400, "no_chat_template"),
    ("template kwargs set messages", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": []}},
     400, "chat_template_kwargs"),
    ("unknown model", "/v1/completions", {**OK, "model": "gpt-9"}, 404, "model_not_found"),
    ("max_tokens negative", "/v1/completions", {**OK, "max_tokens": -5}, 400, "max_tokens"),
    ("max_tokens over the context", "/v1/completions", {**OK, "max_tokens": 1000}, 400, "context_length_exceeded"),
    ("prompt over the context", "/v1/completions", {**OK, "prompt": "x = 1\n" * 300}, 400, "context_length_exceeded"),
    ("prompt over the context names the prompt", "/v1/completions", {**OK, "prompt": "x = 1\n" * 300}, 400,
     "prompt context_length_exceeded the prompt is"),
    ("temperature negative", "/v1/completions", {**OK, "temperature": -0.5}, 400, "temperature"),
    ("temperature NaN", "/v1/completions", b'{"model": "tiny", "prompt": "x", "temperature": NaN}', 400, "temperature"),
    ("top_p 0", "/v1/completions", {**OK, "temperature": 1, "top_p": 0}, 400, "top_p"),
    ("top_p above 1", "/v1/completions", {**OK, "temperature": 1, "top_p": 1.5}, 400, "top_p"),
    ("top_k below -1", "/v1/completions", {**OK, "temperature": 1, "top_k": -2}, 400,
     "top_k None top_k must be a count of tokens >= 1, or 0 or -1 for no limit, found -2"),
    ("n = 17", "/v1/completions", {**OK, "n": 17}, 400, "n None n must be in 1..16, found 17"),
    ("n = 0", "/v1/completions", {**OK, "n": 0}, 400, "n must be in 1..16, found 0"),
    ("n = 2 with continuous usage", "/v1/completions",
     {**OK, "n": 2, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}, 400,
     "continuous_usage_stats is not supported with n > 1"),
    ("empty stop string", "/v1/completions", {**OK, "stop": ["a", ""]}, 400, "stop.1 None stop holds an empty string"),
    ("stream_options without stream", "/v1/completions", {**OK, "stream_options": {"include_usage": True}}, 400,
     "stream_options applies only with stream: true"),
    ("continuous usage without include_usage", "/v1/completions",
     {**OK, "stream": True, "stream_options": {"continuous_usage_stats": True}}, 400,
     "stream_options.continuous_usage_stats applies with stream_options.include_usage: true"),
    ("response_format regex", "/v1/completions", {**OK, "response_format": {"type": "regex"}}, 400,
     "response_format.type None response_format type 'regex' is not supported (text, json_object, json_schema)"),
    ("tools", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                        "tools": [{"type": "function", "function": {"name": "f"}}]}, 400,
     "tools None tools need a server started with --tool-call-parser"),
    ("tool_choice without tools", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"}, 400,
     "tool_choice None tool_choice \"auto\" needs tools"),
    ("unknown field", "/v1/completions", {**OK, "frobnicate": True}, 400, "frobnicate"),
    ("reasoning_effort (not implemented)", "/v1/completions", {**OK, "reasoning_effort": "low"}, 400,
     "reasoning_effort None unsupported field 'reasoning_effort'"),
    ("min_tokens above max_tokens", "/v1/completions", {**OK, "min_tokens": 3}, 400,
     "min_tokens None min_tokens (3) is more than max_tokens (2)"),
    ("min_tokens above the completions default of max_tokens", "/v1/completions", {**OK, "max_tokens": None, "min_tokens": 100000},
     400, "min_tokens (100000) is more than max_tokens (16)"),
    ("min_tokens negative", "/v1/completions", {**OK, "min_tokens": -1}, 400,
     "min_tokens None min_tokens must be an integer >= 0, found -1"),
    ("logit_bias key not a token id", "/v1/completions", {**OK, "logit_bias": {"hello": 5}}, 400,
     "logit_bias None logit_bias: key 'hello' is not a token id"),
    ("logit_bias id past the vocabulary", "/v1/completions", {**OK, "logit_bias": {"99999": 5}}, 400,
     "logit_bias None logit_bias: token id 99999 is past the vocabulary (4096 tokens)"),
    ("logit_bias above 100", "/v1/completions", {**OK, "logit_bias": {"7": 101}}, 400,
     "logit_bias None logit_bias[7] must be in [-100, 100], found 101.0"),
    ("logit_bias value not a number", "/v1/completions", {**OK, "logit_bias": {"7": "big"}}, 400, "logit_bias.7"),
    ("logit_bias id twice", "/v1/completions", {**OK, "logit_bias": {"7": 1, "07": 2}}, 400,
     "logit_bias: token id 7 is given twice ('07')"),
    ("store true", "/v1/completions", {**OK, "store": True}, 400, "store None store: true is not supported"),
    ("service_tier flex", "/v1/completions", {**OK, "service_tier": "flex"}, 400, "service_tier"),
    ("modalities with audio", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]}, 400,
     "modalities"),
    ("echo on chat", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "echo": True}, 400,
     "echo None echo is not supported on chat completions"),
    ("max_tokens 0 without scoring", "/v1/completions", {**OK, "max_tokens": 0}, 400,
     "max_tokens None max_tokens must be at least 1 (0 only with echo or prompt_logprobs), found 0"),
    ("an empty prompt among several", "/v1/completions", {**OK, "prompt": ["a", ""]}, 400,
     "prompt.1 None the prompt is empty after tokenisation"),
    ("prompt_logprobs over 20", "/v1/completions", {**OK, "prompt_logprobs": 21}, 400,
     "prompt_logprobs None prompt_logprobs must be in 0..20"),
    ("prompt_logprobs -1 (vLLM's whole vocabulary)", "/v1/completions", {**OK, "prompt_logprobs": -1}, 400,
     "prompt_logprobs None prompt_logprobs must be in 0..20"),
    ("prompt_logprobs streamed", "/v1/completions", {**OK, "prompt_logprobs": 1, "stream": True}, 400,
     "prompt_logprobs None prompt_logprobs is not available with stream: true"),
    ("prompt_logprobs with n 2", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1, "n": 2}, 400,
     "n None prompt_logprobs is not supported with n > 1"),
    ("echo with logprobs and n 2", "/v1/completions", {**OK, "echo": True, "logprobs": 1, "n": 2}, 400,
     "n None echo with logprobs is not supported with n > 1"),
    ("prompt_logprobs not an integer", "/v1/completions", {**OK, "prompt_logprobs": True}, 400, "prompt_logprobs"),
    ("metadata values not strings", "/v1/completions", {**OK, "metadata": {"k": 1}}, 400, "metadata.k"),
    ("temperature below the floor", "/v1/completions", {**OK, "temperature": 1e-6}, 400,
     "temperature must be 0 (greedy) or in [1e-05, 100], found 1e-06"),
    ("top_logprobs over 20", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
     400, "top_logprobs"),
    ("token id outside the vocabulary", "/v1/completions", {**OK, "prompt": [1, 2, 99999]}, 400, "prompt"),
    ("token id outside the vocabulary in the second prompt", "/v1/completions", {**OK, "prompt": [[1, 2], [5, 99999]]},
     400, "prompt.1.1 None prompt.1[1] = 99999 is not a token id (0..4095)"),
    ("more prompts x n than the server holds", "/v1/completions", {**OK, "prompt": ["a"] * 11, "n": 2}, 400,
     "prompt None 11 prompts x n = 2 make 22 requests, more than this server holds at once (20: --max-concurrency 4 + "
     "--max-pending 16)"),
    ("several prompts with continuous_usage_stats", "/v1/completions",
     {**OK, "prompt": ["a", "b"], "stream": True, "stream_options": {"include_usage": True,
                                                                     "continuous_usage_stats": True}}, 400,
     "continuous_usage_stats is not supported with several prompts"),
    ("presence_penalty out of range", "/v1/completions", {**OK, "presence_penalty": 3}, 400, "presence_penalty"),
    ("chat with no template", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}]},
     400, "no_chat_template"),
]


@pytest.mark.parametrize("name,path,body,status,frag", CASES, ids=[c[0] for c in CASES])
def test_bad_request_gets_4xx_in_openai_shape_and_server_stays_healthy(keyed, name, path, body, status, frag):
    r = _post(keyed, path, raw=body) if isinstance(body, bytes) else _post(keyed, path, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert frag in (str(err["param"]) + " " + str(err["code"]) + " " + err["message"]), err
    assert "Traceback" not in r.text and r.headers.get("x-request-id")
    assert httpx.get(keyed.url + "/health").status_code == 200
    ok = _post(keyed, "/v1/completions", OK)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


def test_body_over_the_limit_is_413(keyed):
    r = _post(keyed, "/v1/completions", raw=b'{"model": "tiny", "prompt": "' + b"x" * (17 << 20) + b'"}')
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert _post(keyed, "/v1/completions", OK).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}])
def test_missing_or_wrong_api_key_is_401(keyed, headers):
    for path in ("/v1/completions", "/v1/models", "/v1/models/tiny"):
        r = httpx.post(keyed.url + path, json=OK, headers=headers) if path.endswith("s") and "compl" in path \
            else httpx.get(keyed.url + path, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(keyed.url + "/health").status_code == 200  # health, metrics and version need no key
    assert httpx.get(keyed.url + "/metrics").status_code == 200
    from ninferc import __version__

    assert httpx.get(keyed.url + "/version").json() == {"version": __version__}


def test_routes_and_methods(keyed):
    assert httpx.get(keyed.url + "/v1/nothing", headers=AUTH).status_code == 404
    r = httpx.get(keyed.url + "/v1/completions", headers=AUTH)
    assert r.status_code == 405 and "error" in r.json()
    r = httpx.get(keyed.url + "/v1/models", headers={**AUTH, "x-request-id": "my-id-1"})
    assert r.headers["x-request-id"] == "my-id-1"
    assert [m["id"] for m in r.json()["data"]] == ["tiny"]  # --served-model-name


def test_log_line_and_record_of_a_request_that_ended_waiting():
    """A request cancelled before admission: its queue time is its whole wait, and the times and rates it never had
    read ``-`` with no unit (the line read ``ttft=-ms``)."""
    from ninferc.runtime.scheduler import RequestStats
    from ninferc.server.metrics import format_request_line, request_record

    s = RequestStats("r1", 12, finish_reason="abort", arrival=10.0, finished=11.25, arrival_unix=1.8e9)
    line = format_request_line(s)
    assert "finish=abort prompt=12 cached=0 gen=0 queue=1250.0ms ttft=- prefill=- decode=- wall=1.25s" in line, line
    rec = request_record(s)
    assert rec["queue_s"] == 1.25 and rec["ttft_s"] is None and rec["decode_tok_s"] is None


def test_metrics_parse_and_count_what_was_sent(start_server, tiny_dir):
    from prometheus_client.parser import text_string_to_metric_families

    srv = start_server(tiny_dir, "--model-id", "tiny")
    m0 = srv.metrics()
    sent = [("def a():", 5), ("import os\n", 7), ("x", 3)]
    prompt_tokens = 0
    for p, n in sent:
        r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": p, "max_tokens": n,
                                                         "temperature": 0}, timeout=60).json()
        prompt_tokens += r["usage"]["prompt_tokens"]
    httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "n": 17})  # refused: not counted
    text = httpx.get(srv.url + "/metrics").text
    names = {f.name for f in text_string_to_metric_families(text)}
    for want in ("ninferc:num_requests_running", "ninferc:num_requests_waiting", "ninferc:kv_cache_usage_perc",
                 "ninferc:prompt_tokens", "ninferc:generation_tokens", "ninferc:request_success",
                 "ninferc:request_rejected", "ninferc:time_to_first_token_seconds",
                 "ninferc:inter_token_latency_seconds", "ninferc:e2e_request_latency_seconds",
                 "ninferc:request_queue_time_seconds"):
        assert want in names, want
    assert not [n for n in names if "spec_decode" in n]  # a server without --spec has no spec_decode counters
    m = srv.metrics()
    d = lambda k: m[k] - m0.get(k, 0.0)  # noqa: E731
    assert d("ninferc:prompt_tokens_total") == prompt_tokens
    assert d("ninferc:generation_tokens_total") == sum(n for _, n in sent)
    assert d("ninferc:request_success_total{finished_reason=length}") == 3
    assert d("ninferc:time_to_first_token_seconds_count") == 3
    assert d("ninferc:inter_token_latency_seconds_count") == sum(n - 1 for _, n in sent)
    assert d("ninferc:e2e_request_latency_seconds_count") == 3
    # idle: the only pages off the free list are those the prefix cache alone holds, which a new request may evict:
    # usage 0, as vLLM counts its cached free blocks
    assert m["ninferc:prefix_cache_pages_evictable"] == m["ninferc:prefix_cache_pages"] > 0
    assert m["ninferc:kv_pages_free"] == m["ninferc:kv_pages_total"] - m["ninferc:prefix_cache_pages"]
    assert m["ninferc:kv_cache_usage_perc"] == 0.0
    assert d("ninferc:prefix_cache_queries_total") == 3
    assert d("ninferc:http_errors_total{status=400}") == 1  # the n = 3 request


def test_health_503_while_loading_200_when_ready_503_after_failure(tiny_dir):
    """In-process: the app over an engine whose backend build waits on an event (and one that fails)."""
    from ninferc.runtime.engine_loop import EngineLoop
    from ninferc.runtime.scheduler import Scheduler
    from ninferc.server.app import ServerState, create_app
    from ninferc.server.metrics import ServerMetrics
    from ninferc.tokenizer import Tokenizer
    from ninferc.testing import FakeBackend

    async def get(app, path):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get(path)

    for fail in (False, True):
        gate = threading.Event()

        def make_backend():
            gate.wait(30)
            if fail:
                raise RuntimeError("no device")
            return FakeBackend()

        eng = EngineLoop(make_backend, lambda be: Scheduler(be))
        st = ServerState(engine=eng, tokenizer=Tokenizer.from_dir(tiny_dir), chat=None, model_id="t", max_context=64)
        st.metrics = ServerMetrics(lambda: None)
        app = create_app(st)
        eng.start()
        r = asyncio.run(get(app, "/health"))
        assert r.status_code == 503 and r.json()["status"] == "loading"
        gate.set()
        eng.wait_ready(30)
        r = asyncio.run(get(app, "/health"))
        if fail:
            assert r.status_code == 503 and r.json()["status"] == "failed" and "no device" in r.json()["error"]
        else:
            assert r.status_code == 200 and r.json() == {"status": "ok"}
        eng.shutdown(0)


@pytest.mark.slow  # seconds on 2 cores: the quick loop (-m "not slow") stays under 2 minutes
def test_serve_without_a_gpu_for_its_cuda_backend_stops_before_listening(tiny_dir, tmp_path):
    """The CUDA backend (a preset, an artifact) on a machine without a GPU: one error line and status 2 before the
    server listens (no "listening on" line, no engine thread started) -- skipped where a GPU is present."""
    import subprocess
    import sys

    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is here: the backend would load")
    except Exception:  # noqa: BLE001 -- no CuPy or no device: the case under test
        pass
    from ninferc.pipeline import compile_model

    art = tmp_path / "tiny.ninfer"
    compile_model(tiny_dir, "sm_90", art, sku="h200")
    for args, hint in ((["--preset", "qwen3.8-27b", "--synthetic-weights"], False), ([str(art)], True),
                       ([str(art), "--spec", "mtp"], True)):
        r = subprocess.run([sys.executable, "-m", "ninferc", "serve", *args, "--port", "0"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "needs CuPy and an NVIDIA GPU" in lines[0]
        assert ("--backend reference" in lines[0]) == hint  # the preset cannot follow that hint


def test_serve_refuses_a_request_log_it_cannot_open_and_a_port_in_use(tiny_dir, tmp_path):
    """``--request-log`` in a missing folder or naming a folder, and a port another socket listens on: one error line
    naming the value, status 2, before the model is loaded."""
    import socket

    from click.testing import CliRunner

    from ninferc.cli import main

    for bad, why in ((tmp_path / "missing" / "x.jsonl", "No such file or directory"), (tmp_path, "Is a directory")):
        r = CliRunner().invoke(main, ["serve", str(tiny_dir), "--request-log", str(bad)])
        assert r.exit_code == 2 and f"--request-log {bad}: cannot open it for appending ({why})" in r.output, r.output
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = CliRunner().invoke(main, ["serve", str(tiny_dir), "--port", str(port)])
        # a wrong flag is named as such even where the port is taken (the port was checked first until 2026-12-06)
        wrong = CliRunner().invoke(main, ["serve", str(tiny_dir), "--port", str(port), "--kv-capacity", "64"])
    assert r.exit_code == 2 and f"--port {port}: cannot bind (Address already in use)" in r.output, r.output
    assert wrong.exit_code == 2 and "--kv-capacity 64 tokens" in wrong.output and "bind" not in wrong.output, wrong.output
