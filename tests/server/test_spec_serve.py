"""``ninferc serve --spec mtp``: the same greedy text as without speculation (alone and with 4 concurrent
requests), acceptance in the per-request log, and the flags' checks."""

from __future__ import annotations

import re
import threading

import openai
import pytest
from click.testing import CliRunner

from ninferc.cli import main


pytestmark = pytest.mark.slow  # seconds each on 2 cores: `pytest -m "not slow"` skips them


@pytest.fixture(scope="module")
def request_log(tmp_path_factory):
    return tmp_path_factory.mktemp("spec_serve") / "requests.jsonl"


@pytest.fixture(scope="module")
def spec_server(start_server, tiny_dir, request_log):
    # as vLLM is started: --speculative-config for --spec mtp --draft-tokens 3, --max-num-seqs for --max-concurrency
    return start_server(tiny_dir, "--model-id", "tiny", "--speculative-config",
                        '{"method": "mtp", "num_speculative_tokens": 3}', "--max-num-seqs", "4",
                        "--request-log", str(request_log))


def test_spec_server_equals_plain_server_alone_and_concurrent(spec_server, client, goldens):
    sc = openai.OpenAI(base_url=spec_server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    prompts = [c["prompt"] for c in goldens["cases"][:4]]
    plain = [client.completions.create(model="tiny", prompt=p, max_tokens=40, temperature=0).choices[0].text
             for p in prompts]
    alone = [sc.completions.create(model="tiny", prompt=p, max_tokens=40, temperature=0).choices[0].text
             for p in prompts]
    assert alone == plain
    out = {}

    def go(i):
        text = []
        for ch in sc.completions.create(model="tiny", prompt=prompts[i], max_tokens=40, temperature=0, stream=True,
                                        stop=["\n\n\n\n"]):
            if ch.choices:
                text.append(ch.choices[0].text)
        out[i] = "".join(text)

    ts = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [out[i] for i in range(4)] == plain
    lines = spec_server.wait_request_lines(4)
    specs = [re.search(r"spec=mtp ([\d.]+) tok/round, (\d+) % accepted", ln) for ln in lines]
    assert all(specs) and all(float(m.group(1)) >= 1.0 for m in specs)
    for ln, m in zip(lines, specs):  # tokens per round: what the request took ((gen - 1) / steps), to the 2 decimals
        gen, steps = (int(re.search(rf" {f}=(\d+)", ln).group(1)) for f in ("gen", "steps"))
        assert float(m.group(1)) == pytest.approx((gen - 1) / steps, abs=0.006), ln
    assert any(float(m.group(1)) > 1.2 for m in specs)  # the fixture's head accepts ~20-50 % of its drafts


def test_spec_counters_in_metrics_and_records_in_the_request_log(spec_server, request_log):
    """The ``spec_decode`` counters of /metrics sum the ended requests' rounds, drafts and acceptances, as their
    JSON-lines records give them; each record names its arrival time, endpoint and whether it streamed."""
    import json
    from datetime import datetime, timezone

    sc = openai.OpenAI(base_url=spec_server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    import time

    n0 = len(spec_server.wait_request_lines(0))
    t_before = datetime.now(timezone.utc)
    sc.completions.create(model="tiny", prompt="def add(a, b):", max_tokens=24, temperature=0)
    "".join(ch.choices[0].delta.content or "" for ch in sc.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "import sys"}], max_tokens=16, temperature=0,
        stream=True) if ch.choices)
    sc.completions.create(model="tiny", prompt="x", max_tokens=1, temperature=0)  # the prefill's token only: no round
    lines = spec_server.wait_request_lines(3, after=n0)
    deadline = time.monotonic() + 10  # the record is written just after the stderr line
    while len(recs := [json.loads(ln) for ln in request_log.read_text().splitlines()]) < n0 + 3:
        assert time.monotonic() < deadline, recs
        time.sleep(0.05)
    m = spec_server.metrics()
    spec = [r["spec"] for r in recs if "spec" in r]
    assert len(spec) >= 2
    assert m["ninferc:spec_decode_num_drafts_total"] == sum(s["rounds"] for s in spec) > 0
    assert m["ninferc:spec_decode_num_draft_tokens_total"] == sum(s["drafted"] for s in spec) == 3 * sum(
        s["rounds"] for s in spec)
    assert m["ninferc:spec_decode_num_accepted_tokens_total"] == sum(s["accepted"] for s in spec) > 0
    assert all(len(s["accepted_at"]) == 3 for s in spec)  # a count per draft position, rounds or none
    for pos in range(3):
        assert m.get(f"ninferc:spec_decode_num_accepted_tokens_per_pos_total{{position={pos}}}", 0.0) == sum(
            s["accepted_at"][pos] for s in spec)
    assert "spec=mtp no rounds" in lines[-1] and "tok/round" not in lines[-1], lines[-1]
    assert recs[-1]["spec"]["rounds"] == 0 and recs[-1]["spec"]["tokens_per_round"] is None
    last2 = recs[-3:-1]
    assert [(r["endpoint"], r["stream"]) for r in last2] == [("completions", False), ("chat.completions", True)]
    for r in last2:
        when = datetime.fromisoformat(r["time"].replace("Z", "+00:00"))
        assert r["time"].endswith("Z") and abs(when.timestamp() - r["arrival_unix"]) < 1e-3
        assert (when - t_before).total_seconds() > -1.0 and when <= datetime.now(timezone.utc)


def test_spec_chat_with_stop_and_usage(spec_server, client):
    sc = openai.OpenAI(base_url=spec_server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    msgs = [{"role": "user", "content": "import os"}]
    a = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=30, temperature=0)
    b = sc.chat.completions.create(model="tiny", messages=msgs, max_tokens=30, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.completion_tokens == b.usage.completion_tokens and a.usage.prompt_tokens == b.usage.prompt_tokens
    kw = dict(model="tiny", prompt="class Parser:\n", max_tokens=20, temperature=0.8, seed=77)
    assert sc.completions.create(**kw).choices[0].text == sc.completions.create(**kw).choices[0].text


def test_spec_with_logit_bias_and_min_tokens_equals_plain(spec_server, client, goldens):
    """logit_bias and min_tokens move a request's acceptance to the host (its rows' logits, adjusted as the plain
    sampler adjusts them, position by position within a round): greedy output equals the plain server's, where the
    bias and the held-back stop id change what greedy emits."""
    sc = openai.OpenAI(base_url=spec_server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    c = goldens["cases"][2]
    ids = c["greedy_ids"]
    first = ids.index(ids[5])
    kw = dict(model="tiny", prompt=c["prompt"], max_tokens=24, temperature=0, logit_bias={str(ids[1]): -100},
              extra_body={"stop_token_ids": [ids[5]], "min_tokens": first + 4})
    a, b = client.completions.create(**kw), sc.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text and a.usage.completion_tokens == b.usage.completion_tokens
    assert not a.choices[0].text.startswith(goldens["cases"][2]["greedy_text"][:8])  # the bias did change it
    assert a.usage.completion_tokens > first + 4  # the stop id was held back


def test_spec_with_response_format_equals_plain(spec_server, client):
    """A response_format request's rounds are accepted on the host, each verify row masked by the grammar state the
    tokens accepted before it left: the JSON equals the plain server's."""
    import json

    sc = openai.OpenAI(base_url=spec_server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green"]}, "n": {"type": "integer"}},
              "required": ["color", "n"], "additionalProperties": False}
    kw = dict(model="tiny", messages=[{"role": "user", "content": "config"}], max_tokens=250, temperature=0,
              response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    a, b = client.chat.completions.create(**kw), sc.chat.completions.create(**kw)
    assert a.choices[0].message.content == b.choices[0].message.content and b.choices[0].finish_reason == "stop"
    assert set(json.loads(b.choices[0].message.content)) == {"color", "n"}


@pytest.mark.parametrize("args,needle", [
    (["--draft-tokens", "2"], "--draft-tokens applies with --spec mtp"),
    (["--spec", "mtp", "--draft-tokens", "0"], "--draft-tokens must be an integer in 1..5, found 0"),
    (["--draft-lm-head", "w4"], "--draft-lm-head applies with --spec mtp"),
    (["--spec-disable-by-batch-size", "4"], "--spec-disable-by-batch-size applies with --spec mtp"),
    (["--spec", "mtp", "--spec-disable-by-batch-size", "0"], "--spec-disable-by-batch-size must be an integer >= 1, "
                                                             "found 0"),
])
def test_spec_flags_refused_clearly(tiny_dir, args, needle):
    r = CliRunner().invoke(main, ["serve", str(tiny_dir), *args])
    assert r.exit_code == 2 and needle in r.output, r.output


def test_vllm_flag_names_set_the_same_options(tiny_dir):
    """vLLM's names for serve's options (``--max-model-len``, ``--max-num-seqs``, ``--num-speculative-tokens``,
    ``--served-model-name``) set ours, as a vLLM user types them."""
    ctx = main.commands["serve"].make_context("serve", [
        str(tiny_dir), "--max-model-len", "512", "--max-num-seqs", "6", "--spec", "mtp", "--num-speculative-tokens",
        "2", "--served-model-name", "m"])
    assert {k: ctx.params[k] for k in ("max_context", "max_concurrency", "draft_tokens", "model_id")} == {
        "max_context": 512, "max_concurrency": 6, "draft_tokens": 2, "model_id": "m"}


@pytest.mark.parametrize("text,want", [
    ('{"method": "mtp", "num_speculative_tokens": 2}', ("mtp", 2, None)),
    ('{"method": "qwen3_next_mtp", "num_speculative_tokens": 4, "disable_by_batch_size": 6}', ("mtp", 4, 6)),
    ('{"method": "mtp"}', ("mtp", None, None)),
])
def test_vllm_speculative_config_reads_as_the_spec_options(text, want):
    from ninferc.cmd_serve import parse_speculative_config

    assert parse_speculative_config(text) == want


@pytest.mark.parametrize("args,needle", [
    (['{"method": "eagle3", "model": "x"}'], "key 'model' is not supported; ninferc takes method, "
                                             "num_speculative_tokens, disable_by_batch_size"),
    (['{"method": "ngram"}'], "method must be one of mtp, qwen3_next_mtp (the checkpoint's own MTP head; ninferc "
                              "has no other drafter), found 'ngram'"),
    (['{"num_speculative_tokens": 2}'], "method must be one of mtp, qwen3_next_mtp"),
    (['{"method": "mtp", "num_speculative_tokens": "2"}'], "num_speculative_tokens must be an integer, found '2'"),
    (['{"method": "mtp", "num_speculative_tokens": 9}'], "--draft-tokens must be an integer in 1..5, found 9"),
    (['{"method": "mtp", "disable_by_batch_size": 0}'], "--spec-disable-by-batch-size must be an integer >= 1"),
    (['[1]'], "must be a JSON object, found list"),
    (['{"method": mtp}'], "--speculative-config is not JSON"),
    (['{"method": "mtp"}', "--draft-tokens", "2"], "--speculative-config and --draft-tokens both set"),
    (['{"method": "mtp"}', "--spec", "mtp"], "--speculative-config and --spec both set"),
])
def test_vllm_speculative_config_refused_clearly(tiny_dir, args, needle):
    r = CliRunner().invoke(main, ["serve", str(tiny_dir), "--speculative-config", *args])
    assert r.exit_code == 2 and needle in r.output, r.output


def test_spec_refused_for_a_model_without_mtp(tmp_path, tiny_dir):
    import json
    import shutil

    d = tmp_path / "nomtp"
    shutil.copytree(tiny_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["mtp_num_hidden_layers"]
    (d / "config.json").chmod(0o644)
    (d / "config.json").write_text(json.dumps(cfg))
    for cmd in (["serve", str(d), "--spec", "mtp"], ["run", str(d), "--prompt", "x", "--spec", "mtp"]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 2 and "declares no MTP head" in r.output, r.output
