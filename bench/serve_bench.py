"""Serving benchmark: C concurrent streaming clients against a running ``ninferc serve``.

For each concurrency C in ``--concurrency`` the tool sends ``--requests`` completions (C at a time, each client
starting its next request when the previous one ends), streaming, with ``ignore_eos`` so every request generates
exactly ``--max-tokens`` tokens, and measures

* from the clients: time to first token and inter-token latency (arrival times of the SSE chunks), wall time,
  aggregate generated tok/s;
* from the server's own records (its ``--request-log`` JSON lines, matched by the ``x-request-id`` the tool
  sends): per-request decode tok/s, TTFT, queue time, and how many decode steps each request shared.

Every request's prompt is its own (token ids whose first differs per request), so the prefix cache finds nothing
to reuse between them (``--shared-prompt`` sends one prompt to all). Before each level, ``c`` short requests run
untimed (``--no-warmup`` skips them), so a decode graph's first capture at a new batch size is not measured.

``--prefix-ttft CACHED/TOTAL`` (e.g. ``7680/8192``) measures prefix reuse instead, as a conversation's second turn:
per repeat, a request of CACHED tokens (the first turn; the server checkpoints the end of its prompt and of its
generation), then a TOTAL-token request that extends it (the second turn), then a cold TOTAL-token request sharing
nothing; TTFT of the second turn against the cold one, and the ``cached_tokens`` the server reported.

Percentiles are p50 / p90 / p99 over the requests (ITL over all gaps). The result, with provenance (command,
commit, server URL, host), is printed and written as JSON (``--json``, e.g. under ``bench/results/``).

Usage::

    ninferc serve model.ninfer --request-log /tmp/req.jsonl --max-concurrency 8 &
    python bench/serve_bench.py --url http://127.0.0.1:8000 --server-log /tmp/req.jsonl \
        --concurrency 1,2,4,8 --requests 16 --prompt-tokens 512 --max-tokens 128 --json bench/results/serve.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx


def pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile (0..100, nearest rank) of ``xs``, or None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def summary(xs: list[float]) -> dict:
    """p50 / p90 / p99 / mean of ``xs`` (None when empty)."""
    return {"p50": pct(xs, 50), "p90": pct(xs, 90), "p99": pct(xs, 99),
            "mean": statistics.fmean(xs) if xs else None, "n": len(xs)}


def one_request(client: httpx.Client, url: str, model: str, prompt, max_tokens: int, rid: str,
                extra: dict | None = None) -> dict:
    """Stream one completion (``extra``: more request fields); returns client-side times (seconds) and the token
    count from the usage chunk."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}, **(extra or {})}
    t0 = time.perf_counter()
    arrivals, usage, first = [], None, None
    with client.stream("POST", url + "/v1/completions", json=body, headers={"x-request-id": rid}) as r:
        if r.status_code != 200:
            return {"error": r.status_code, "body": r.read().decode(errors="replace")[:200]}
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])
            if ch.get("usage"):
                usage = ch["usage"]
            elif ch.get("choices") and ch["choices"][0].get("text"):
                arrivals.append(time.perf_counter())
            elif ch.get("choices") and first is None:  # a first chunk with no text (e.g. held back): still a token
                first = time.perf_counter()
    t1 = time.perf_counter()
    t_first = min([x for x in (first, arrivals[0] if arrivals else None) if x is not None], default=None)
    return {"ttft_s": (t_first - t0) if t_first else None, "itl_s": [b - a for a, b in zip(arrivals, arrivals[1:])],
            "wall_s": t1 - t0, "tokens": usage["completion_tokens"] if usage else None,
            "cached_tokens": ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")}


def make_prompt(n: int, i: int) -> list[int]:
    """``n`` token ids for prompt number ``i`` (0 <= i < 4000): ids 1..4000 (in every vocabulary here) whose first is
    ``1 + i``, so prompts of different numbers share no prefix."""
    if not 0 <= i < 4000:
        raise ValueError(f"prompt number {i} outside 0..3999")
    return [1 + (i + j * 7919) % 4000 for j in range(n)]


def run_level(url: str, model: str, c: int, n: int, prompt, max_tokens: int, tag: str, logprobs_every: int = 0,
              sampling: dict | None = None) -> dict:
    """``n`` requests, ``c`` in flight at a time; ``prompt(i)`` is request ``i``'s prompt; with ``logprobs_every`` k,
    requests 0, k, 2k, ... ask for ``logprobs: 1`` (their rows' logits copied to the host each step); ``sampling``:
    more fields of every request (temperature, penalties, ...; default greedy)."""
    results, lock = [], threading.Lock()
    todo = list(range(n))

    def client_loop():
        with httpx.Client(timeout=3600) as h:
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop(0)
                res = one_request(h, url, model, prompt(i), max_tokens, f"{tag}-c{c}-{i}",
                                  {**(sampling or {}),
                                   **({"logprobs": 1} if logprobs_every and i % logprobs_every == 0 else {})})
                res["rid"] = f"{tag}-c{c}-{i}"
                with lock:
                    results.append(res)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client_loop) for _ in range(c)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    gen = sum(r["tokens"] or 0 for r in ok)
    return {"concurrency": c, "requests": n, "errors": [r for r in results if "error" in r], "wall_s": wall,
            "generated_tokens": gen, "aggregate_tok_s": gen / wall if wall else None,
            "client": {"ttft_s": summary([r["ttft_s"] for r in ok if r["ttft_s"] is not None]),
                       "itl_s": summary([x for r in ok for x in r["itl_s"]]),
                       "per_request_decode_tok_s": summary([(r["tokens"] - 1) / (r["wall_s"] - r["ttft_s"])
                                                            for r in ok if r["tokens"] and r["tokens"] > 1
                                                            and r["ttft_s"] is not None])},
            "rids": [r["rid"] for r in results]}


def server_side(log_path: Path, rids: list[str]) -> dict:
    """Summaries of the server's own records for ``rids`` (its --request-log JSON lines)."""
    want = set(rids)
    recs = []
    for line in log_path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("request_id") in want:
            recs.append(rec)
    return {"records": len(recs),
            "decode_tok_s": summary([r["decode_tok_s"] for r in recs if r.get("decode_tok_s")]),
            "ttft_s": summary([r["ttft_s"] for r in recs if r.get("ttft_s") is not None]),
            "queue_s": summary([r["queue_s"] for r in recs if r.get("queue_s") is not None]),
            "prefill_tok_s": summary([r["prefill_tok_s"] for r in recs if r.get("prefill_tok_s")]),
            "shared_step_fraction": summary([r["shared_steps"] / r["decode_steps"] for r in recs
                                             if r.get("decode_steps")]),
            **spec_side(recs)}


def spec_side(recs: list[dict]) -> dict:
    """The speculative rounds of a ``--spec mtp`` server's records, summed over them: {"spec": {rounds, drafted,
    accepted, acceptance (accepted / drafted), tokens_per_round (delivered / rounds)}}; {} where none speculated."""
    sp = [r["spec"] for r in recs if r.get("spec")]
    if not sp:
        return {}
    tot = {k: sum(s[k] for s in sp) for k in ("rounds", "drafted", "accepted", "delivered")}
    return {"spec": {**tot, "acceptance": tot["accepted"] / tot["drafted"] if tot["drafted"] else None,
                     "tokens_per_round": tot["delivered"] / tot["rounds"] if tot["rounds"] else None}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default=None, help="model id (default: the server's only model)")
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level (at most 300)")
    ap.add_argument("--prompt-tokens", type=int, default=512, help="prompt length (token ids sent as the prompt)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--server-log", type=Path, default=None, help="the server's --request-log file")
    ap.add_argument("--shared-prompt", action="store_true", help="send one prompt to every request")
    ap.add_argument("--no-warmup", action="store_true", help="no untimed requests before each level")
    ap.add_argument("--prefix-ttft", default=None, metavar="CACHED/TOTAL",
                    help="measure prefix reuse: TTFT of a TOTAL-token request sharing CACHED tokens vs cold ones")
    ap.add_argument("--repeats", type=int, default=3, help="with --prefix-ttft: rounds of cold / reuse / cold")
    ap.add_argument("--logprobs-every", type=int, default=0, metavar="K",
                    help="every K-th request asks for logprobs (its logits rows copied to the host for them)")
    ap.add_argument("--sampling", type=json.loads, default=None, metavar="JSON",
                    help="more fields of every timed request, e.g. Qwen3.5's model card's non-thinking settings: "
                         "'{\"temperature\": 0.7, \"top_p\": 0.8, \"top_k\": 20, \"presence_penalty\": 1.5}'")
    ap.add_argument("--server-command", default=None, metavar="TEXT",
                    help="how the server was started, recorded in the JSON (the client cannot see it)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    url = a.url.rstrip("/")
    model = a.model or httpx.get(url + "/v1/models").json()["data"][0]["id"]
    tag = f"sb{int(time.time())}"
    if a.prefix_ttft:
        return prefix_main(a, url, model, tag)
    prompt = (lambda i: make_prompt(a.prompt_tokens, 0)) if a.shared_prompt else \
        (lambda i: make_prompt(a.prompt_tokens, i))
    levels = []
    for li, c in enumerate(int(x) for x in a.concurrency.split(",")):
        if not a.no_warmup:  # untimed: first captures of the decode graphs at batch sizes up to c
            run_level(url, model, c, c, lambda i, li=li: make_prompt(16, 3000 + 64 * li + i), 4, tag + "-warm")
        lv = run_level(url, model, c, a.requests, lambda i, li=li: prompt(300 * li + i), a.max_tokens, tag,
                       a.logprobs_every, a.sampling)
        if a.server_log is not None:
            time.sleep(0.2)
            lv["server"] = server_side(a.server_log, lv["rids"])
        del lv["rids"]
        levels.append(lv)
        srv = lv.get("server", {}).get("decode_tok_s", {}).get("p50")
        print(f"C={c}: aggregate {lv['aggregate_tok_s']:.1f} tok/s, client TTFT p50 "
              f"{(lv['client']['ttft_s']['p50'] or 0) * 1e3:.1f} ms p99 {(lv['client']['ttft_s']['p99'] or 0) * 1e3:.1f} "
              f"ms, ITL p50 {(lv['client']['itl_s']['p50'] or 0) * 1e3:.2f} ms, per-request decode (server log) p50 "
              f"{srv if srv is None else round(srv, 1)} tok/s, errors {len(lv['errors'])}"
              + spec_line(lv.get("server", {}).get("spec")))
    out = provenance(a, url, model)
    out.update({"prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens, "shared_prompt": a.shared_prompt,
                "logprobs_every": a.logprobs_every, "sampling": a.sampling, "levels": levels})
    return write(a, out)


def spec_line(spec: dict | None) -> str:
    """``, spec: N rounds, A % of drafts accepted, T tokens per round`` of :func:`spec_side`'s summary, or ''."""
    if not spec:
        return ""
    acc = "-" if spec["acceptance"] is None else f"{100 * spec['acceptance']:.0f} %"
    return f", spec: {spec['rounds']} rounds, {acc} of drafts accepted, {spec['tokens_per_round'] or 0:.2f} tokens per round"


def provenance(a, url: str, model: str) -> dict:
    """Command, commit, server, host and date of this run."""
    try:
        from ninferc.bench import git_commit

        commit = git_commit()
    except Exception:  # noqa: BLE001 -- provenance is best effort off the project's tree
        commit = None
    return {"tool": "bench/serve_bench.py", "command": " ".join(sys.argv), "commit": commit, "url": url,
            "server_command": getattr(a, "server_command", None),
            "model": model, "host": platform.node(), "python": platform.python_version(),
            "server_health": httpx.get(url + "/health").json(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def write(a, out: dict) -> int:
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
        print(f"wrote {a.json}")
    return 0


def prefix_main(a, url: str, model: str, tag: str) -> int:
    """``--prefix-ttft CACHED/TOTAL``: rounds of (first turn, second turn, cold) requests, one at a time, 1 token
    each."""
    cached, total = (int(x) for x in a.prefix_ttft.split("/"))
    if not 0 < cached < total:
        raise SystemExit(f"--prefix-ttft {a.prefix_ttft}: need 0 < CACHED < TOTAL")
    rounds = []
    with httpx.Client(timeout=3600) as h:
        for r in range(a.repeats):
            turn2 = make_prompt(cached, 3500 + 3 * r) + make_prompt(total - cached, 3501 + 3 * r)
            res = {}
            for name, p in (("turn1", turn2[:cached]), ("reuse", turn2), ("cold", make_prompt(total, 3502 + 3 * r))):
                res[name] = one_request(h, url, model, p, 1, f"{tag}-prefix-{r}-{name}")
            rounds.append({k: {"ttft_s": v.get("ttft_s"), "cached_tokens": v.get("cached_tokens"),
                               "error": v.get("error")} for k, v in res.items()})
            print(f"round {r}: first turn {res['turn1']['ttft_s'] * 1e3:.1f} ms, cold {res['cold']['ttft_s'] * 1e3:.1f} "
                  f"ms, second turn {res['reuse']['ttft_s'] * 1e3:.1f} ms ({res['reuse']['cached_tokens']} cached)")
    cold = [x["cold"]["ttft_s"] for x in rounds]
    warm = [x["reuse"]["ttft_s"] for x in rounds]
    out = provenance(a, url, model)
    out.update({"prefix_ttft": {"cached": cached, "total": total, "rounds": rounds,
                                "cold_ttft_s": summary(cold), "reuse_ttft_s": summary(warm),
                                "speedup_p50": statistics.median(cold) / statistics.median(warm)}})
    print(f"prefix {cached} of {total}: TTFT p50 cold {statistics.median(cold) * 1e3:.1f} ms, reuse "
          f"{statistics.median(warm) * 1e3:.1f} ms ({out['prefix_ttft']['speedup_p50']:.2f}x)")
    return write(a, out)


if __name__ == "__main__":
    raise SystemExit(main())
