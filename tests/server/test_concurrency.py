"""Several clients at once: shared decode steps with outputs equal to solo runs, admission limits (429, 503),
disconnects returning pages and slots, a bounded soak, and SIGTERM under load."""

from __future__ import annotations

import random
import re
import signal
import threading
import time

import httpx
import openai
import pytest


pytestmark = pytest.mark.slow  # seconds each on 2 cores: `pytest -m "not slow"` skips them


def _solo_texts(client, prompts, lengths):
    return [client.completions.create(model="tiny", prompt=p, max_tokens=n, temperature=0).choices[0].text
            for p, n in zip(prompts, lengths)]


def _stream(url, prompt, n, out, key, **kw):
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    text = []
    for ch in c.completions.create(model="tiny", prompt=prompt, max_tokens=n, temperature=0, stream=True, **kw):
        if ch.choices:
            text.append(ch.choices[0].text)
    out[key] = "".join(text)


def test_eight_concurrent_streams_equal_solo_and_share_steps(start_server, tiny_dir, goldens):
    srv = start_server(tiny_dir, "--model-id", "tiny", "--max-concurrency", "8", "--prefill-chunk", "64")
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=300)
    prompts = [c["prompt"] for c in goldens["cases"]] + ["import re\n", "while True:\n    ", "x = [i for i in "]
    lengths = [40, 25, 33, 12, 48, 20, 30, 16]
    solo = _solo_texts(client, prompts, lengths)
    # the solo requests' log lines, read from the server's stderr by another thread, may trail their responses
    n_before = len(srv.wait_request_lines(len(prompts)))
    out = {}
    ts = [threading.Thread(target=_stream, args=(srv.url, p, n, out, i)) for i, (p, n) in
          enumerate(zip(prompts, lengths))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [out[i] for i in range(8)] == solo
    lines = srv.wait_request_lines(8, after=n_before)
    assert len(lines) == 8
    shared = [int(re.search(r"shared=(\d+)", ln).group(1)) for ln in lines]
    assert sum(s > 0 for s in shared) >= 7, lines  # (at most the first admitted may have run alone)
    assert all(re.search(r"decode=[\d.]+ tok/s", ln) for ln in lines)


def test_admission_429_at_once_and_503_after_the_pending_timeout(start_server, tiny_dir):
    srv = start_server(tiny_dir, "--model-id", "tiny", "--max-concurrency", "2", "--max-pending", "2",
                       "--pending-timeout-ms", "1500")
    results = {}

    def call(i, n):
        t0 = time.monotonic()
        r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": f"def f{i}():", "max_tokens": n,
                                                          "temperature": 0}, timeout=300)
        results[i] = (r.status_code, time.monotonic() - t0, r)

    # two long requests fill the concurrency, two more wait; the fifth is refused at once
    ts = [threading.Thread(target=call, args=(i, 600)) for i in range(2)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    ts2 = [threading.Thread(target=call, args=(i, 5)) for i in (2, 3)]
    for t in ts2:
        t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 5}, timeout=30)
    assert r.status_code == 429 and time.monotonic() - t0 < 1.0
    assert r.json()["error"]["code"] == "server_overloaded" and r.headers["retry-after"] == "1"
    for t in ts + ts2:
        t.join()
    for i in (2, 3):  # waited past 1.5 s for a slot: 503 request_queue_timeout
        code, dt, resp = results[i]
        assert code == 503 and resp.json()["error"]["code"] == "request_queue_timeout", resp.text
    for i in (0, 1):
        code, _, resp = results[i]
        assert code == 200 and resp.json()["usage"]["completion_tokens"] == 600
    m = srv.metrics()
    assert m["ninferc:request_rejected_total{reason=overloaded}"] == 1
    assert m["ninferc:request_rejected_total{reason=queue_timeout}"] == 2
    assert m.get("ninferc:request_error_total{code=request_queue_timeout}", 0) == 0  # counted once, as rejections
    timed_out = [ln for ln in srv.request_lines() if "error=request_queue_timeout" in ln]  # and logged as requests
    assert len(timed_out) == 2 and all("ttft=- " in ln for ln in timed_out), timed_out


def _idle(srv, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = srv.metrics()
        cached = m.get("ninferc:prefix_cache_pages", 0.0)  # idle = every page free but those the cache holds
        if (m["ninferc:kv_pages_free"] == m["ninferc:kv_pages_total"] - cached
                and m["ninferc:gdn_slots_free"] == m["ninferc:gdn_slots_total"]
                and m["ninferc:num_requests_running"] == 0):
            return m
        time.sleep(0.05)
    raise AssertionError(f"pages / slots not back to idle: {srv.metrics()}")


def _leave(srv, body: dict, stream: bool, while_streaming=None) -> None:
    """Send ``body`` to /v1/completions and leave: a stream after its first 6 lines (``while_streaming()`` called
    then), a whole response after 0.5 s; then the server must be idle again within 5 s."""
    with httpx.Client(timeout=60) as h:
        if stream:
            with h.stream("POST", srv.url + "/v1/completions", json={**body, "stream": True}) as r:
                it = r.iter_lines()
                assert any([next(it).startswith("data: ") for _ in range(6)])
                if while_streaming is not None:
                    while_streaming()
        else:
            try:
                h.post(srv.url + "/v1/completions", json={**body, "stream": False}, timeout=0.5)
            except httpx.ReadTimeout:
                pass
    t0 = time.monotonic()
    _idle(srv)
    assert time.monotonic() - t0 < 5.0


def test_disconnect_mid_stream_returns_pages_and_slots(start_server, tiny_dir):
    srv = start_server(tiny_dir, "--model-id", "tiny", "--max-concurrency", "2")

    def pages_in_use():
        m = srv.metrics()
        assert m["ninferc:gdn_slots_free"] == 1 and m["ninferc:kv_pages_free"] < m["ninferc:kv_pages_total"]
        # the running request's pages are in use (not the prefix cache's alone)
        held = m["ninferc:kv_pages_total"] - m["ninferc:kv_pages_free"]
        assert m["ninferc:kv_cache_usage_perc"] == pytest.approx(
            (held - m["ninferc:prefix_cache_pages_evictable"]) / m["ninferc:kv_pages_total"])
        assert m["ninferc:kv_cache_usage_perc"] > 0

    body = {"model": "tiny", "prompt": "def main():", "max_tokens": 3000, "temperature": 0}
    for stream in (True, False):
        _leave(srv, body, stream, pages_in_use)
    aborted = [ln for ln in srv.wait_request_lines(2) if "finish=abort" in ln]
    assert len(aborted) == 2
    gen = [int(re.search(r"gen=(\d+)", ln).group(1)) for ln in aborted]
    assert all(g < 3000 for g in gen)


def _rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_soak_200_requests_16_clients_random_disconnects(start_server, tiny_dir):
    """No errors but the expected 429s, no leaked pages or slots, resident memory flat within 64 MiB. The prefix
    cache is on with a 20 MiB budget (~31 checkpoints of the fixture's 0.64 MB GDN state), full after the warm-up,
    so it evicts throughout (the prompts share prefixes: many hits)."""
    srv = start_server(tiny_dir, "--model-id", "tiny", "--max-concurrency", "4", "--max-pending", "8",
                       "--prefix-cache-gib", "0.02", env={"NINFERC_POISON_FREED": "1"})
    rng = random.Random(5)
    jobs = [dict(i=i, n=rng.randint(1, 24), plen=rng.randint(1, 200), stream=rng.random() < 0.5,
                 drop=rng.random() < 0.15) for i in range(200)]
    warm = jobs[:20]
    statuses, lock = {}, threading.Lock()
    n429 = [0]

    def attempt(h, j):
        body = {"model": "tiny", "prompt": "x" * j["plen"], "max_tokens": j["n"], "temperature": 0.7,
                "seed": j["i"], "stream": j["stream"]}
        try:
            if j["stream"]:
                with h.stream("POST", srv.url + "/v1/completions", json=body) as r:
                    for k, _ in enumerate(r.iter_lines()):
                        if j["drop"] and k == 2:
                            return "dropped"
                    return r.status_code
            return h.post(srv.url + "/v1/completions", json=body, timeout=0.2 if j["drop"] else 120).status_code
        except httpx.ReadTimeout:
            return "dropped"

    def worker(q):
        with httpx.Client(timeout=120) as h:
            while True:
                with lock:
                    if not q:
                        return
                    j = q.pop()
                for _ in range(400):  # a client backs off on 429 and retries, as the Retry-After header asks
                    code = attempt(h, j)
                    if code != 429:
                        break
                    with lock:
                        n429[0] += 1
                    time.sleep(0.05)
                with lock:
                    statuses[j["i"]] = code

    def run(batch):
        q = list(batch)
        ts = [threading.Thread(target=worker, args=(q,)) for _ in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    run(warm)
    _idle(srv)
    rss0 = _rss_kib(srv.proc.pid)
    run(jobs[20:])
    m = _idle(srv)
    rss1 = _rss_kib(srv.proc.pid)
    codes = set(statuses.values())
    assert codes <= {200, "dropped"}, codes
    assert len(statuses) == 200 and sum(v == 200 for v in statuses.values()) > 150
    assert n429[0] > 0  # 16 clients against 4 running + 8 pending: some were refused, and retried
    assert m["ninferc:num_requests_waiting"] == 0
    assert rss1 - rss0 < 64 * 1024, (rss0, rss1)
    assert m["ninferc:prefix_cache_hits_total"] > 20 and m["ninferc:prefix_cache_bytes"] <= 0.02 * 2**30
    assert httpx.get(srv.url + "/health").status_code == 200


@pytest.mark.parametrize("drain", ["0.3", "60"])
def test_sigterm_under_load_finishes_or_aborts_and_exits_0(start_server, tiny_dir, drain):
    srv = start_server(tiny_dir, "--model-id", "tiny", "--max-concurrency", "2", "--drain-timeout", drain)
    n = 400 if drain == "0.3" else 30
    finish = {}

    def streamer(i):
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
        last = None
        for ch in c.completions.create(model="tiny", prompt=f"def g{i}():", max_tokens=n, temperature=0, stream=True):
            if ch.choices and ch.choices[0].finish_reason:
                last = ch.choices[0].finish_reason
        finish[i] = last

    ts = [threading.Thread(target=streamer, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    time.sleep(1.0)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    try:
        r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2}, timeout=5)
        assert r.status_code == 503
    except httpx.ConnectError:
        pass  # the listener may already be closed
    for t in ts:
        t.join(60)
    assert srv.proc.wait(60) == 0
    if drain == "60":
        assert set(finish.values()) == {"length"}  # drained: everything finished
    else:
        assert "abort" in finish.values() and set(finish.values()) <= {"length", "abort"}


def test_a_second_sigterm_stops_now_and_exits_0(start_server, tiny_dir):
    """The second signal does not wait out --drain-timeout: the stream ends with abort at once and the exit status is
    0 (uvicorn's own handler re-raised the signal at exit: 143, and waited for the stream; a new-user trial,
    2026-12-07)."""
    srv = start_server(tiny_dir, "--model-id", "tiny", "--drain-timeout", "60")
    finish, first = {}, threading.Event()

    def streamer():
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
        for ch in c.completions.create(model="tiny", prompt="def g():", max_tokens=3000, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True}):
            first.set()
            if ch.choices and ch.choices[0].finish_reason:
                finish["reason"] = ch.choices[0].finish_reason

    t = threading.Thread(target=streamer)
    t.start()
    assert first.wait(60)
    srv.proc.send_signal(signal.SIGTERM)
    srv.wait_for_line("draining")
    time.sleep(0.5)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(30) == 0 and time.monotonic() - t0 < 20
    t.join(30)
    assert finish == {"reason": "abort"}
    assert any("again: stopping now, 1 request in flight" in ln for ln in srv.lines), srv.lines


def test_a_long_prompt_being_tokenised_leaves_the_server_answering(tiny_server):
    """A prompt of 2.4 MB (far over the context: a 400 once it is counted) takes seconds to tokenise; that work runs
    off the event loop with the GIL released, so ``/health`` keeps answering meanwhile (it waited out the whole
    tokenisation, 9-14 s for 8 MB, before 2026-12-07)."""
    big = "a b " * 600_000
    out = {}

    def send():
        out["r"] = httpx.post(tiny_server.url + "/v1/completions", timeout=300,
                              json={"model": "tiny", "prompt": big, "max_tokens": 4})

    th = threading.Thread(target=send)
    t0 = time.monotonic()
    th.start()
    waits = []
    while th.is_alive():
        t = time.monotonic()
        assert httpx.get(tiny_server.url + "/health", timeout=120).status_code == 200
        waits.append(time.monotonic() - t)
        time.sleep(0.02)
    th.join()
    took = time.monotonic() - t0
    r = out["r"]
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert took > 1.0, took  # the tokenisation did take a while
    assert max(waits) < min(1.0, took / 2), (max(waits), took)
    assert len(waits) >= 10, (len(waits), took)


def test_n_choices_are_admitted_together_or_not_at_all(start_server, tiny_dir):
    """A request of n choices over the room left (concurrency 1, one pending, one request running) is a 429 and
    submits none of them; n over the whole room, which could never be admitted, is a 400 (a 429 until 2026-12-07:
    retrying could not help); n within the room is served (one choice running, one waiting); a client leaving a
    stream or a whole response of n choices cancels every choice."""
    srv = start_server(tiny_dir, "--model-id", "tiny", "--max-concurrency", "1", "--max-pending", "1")
    body = {"model": "tiny", "prompt": "def f():", "max_tokens": 4, "temperature": 0}
    r = httpx.post(srv.url + "/v1/completions", json={**body, "n": 3}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(
        "n = 3 make 3 requests, more than this server holds at once (2: --max-concurrency 1 + --max-pending 1)"), r.text
    r = httpx.post(srv.url + "/v1/completions", json={**body, "n": 2}, timeout=60)
    assert r.status_code == 200 and [c["index"] for c in r.json()["choices"]] == [0, 1]
    _idle(srv)
    m = srv.metrics()
    assert m["ninferc:request_success_total{finished_reason=length}"] == 2  # the two served choices, nothing else
    assert m["ninferc:request_success_total{finished_reason=abort}"] == 0

    def two_more():  # one request runs: two choices do not fit in the one pending place left
        r = httpx.post(srv.url + "/v1/completions", json={**body, "n": 2}, timeout=60)
        assert r.status_code == 429 and "at capacity for 2 more" in r.json()["error"]["message"], r.text

    _leave(srv, {**body, "max_tokens": 3000}, True, while_streaming=two_more)
    m = srv.metrics()
    assert m["ninferc:request_rejected_total{reason=overloaded}"] == 1
    assert m["ninferc:request_success_total{finished_reason=abort}"] == 1
    for stream in (True, False):  # streamed: choice 0 runs, choice 1 waits; both end when the client leaves
        _leave(srv, {**body, "n": 2, "max_tokens": 3000}, stream)
    assert srv.metrics()["ninferc:request_success_total{finished_reason=abort}"] == 5


def test_sampler_rows_reach_metrics_only_where_the_backend_counts_them():
    """``ninferc:sampler_rows_total{kind}`` comes from the scheduler's snapshot of the backend's row counts (the
    CUDA backend's ``stats``); a backend that keeps none (the reference) has no such metric."""
    from prometheus_client import generate_latest

    from ninferc.runtime.scheduler import Snapshot
    from ninferc.server.metrics import ServerMetrics

    snap = Snapshot(sampler_rows={"device_rows": 10, "host_rows": 2, "adjusted_rows": 4, "logprob_rows": 1})
    text = generate_latest(ServerMetrics(lambda: snap).registry).decode()
    for kind, n in (("device", 10), ("host", 2), ("adjusted", 4), ("logprobs", 1)):
        assert f'ninferc:sampler_rows_total{{kind="{kind}"}} {float(n)}' in text
    assert "sampler_rows" not in generate_latest(ServerMetrics(lambda: Snapshot()).registry).decode()
