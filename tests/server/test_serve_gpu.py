"""``ninferc serve`` on the CUDA engine (fixture artifact for the device's arch): the openai-client checks of the CPU
tier against the GPU backend. Marked ``gpu`` (skipped without a GPU)."""

from __future__ import annotations

import threading

import openai
import pytest
from click.testing import CliRunner

from ninferc.cli import main

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def art(tmp_path_factory, tiny_dir):
    from ninferc.pipeline import compile_model
    from ninferc.runtime.kernels import device_arch, device_sm_count

    p = tmp_path_factory.mktemp("serve_gpu") / "tiny.ninfer"
    compile_model(tiny_dir, device_arch(), p, sms=device_sm_count())
    return p


@pytest.fixture(scope="module")
def gpu_server(start_server, art):
    return start_server(art, "--model-id", "tiny", "--max-concurrency", "8")


@pytest.fixture(scope="module")
def gclient(gpu_server):
    return openai.OpenAI(base_url=gpu_server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def _run_cli(path, prompt, n):
    r = CliRunner().invoke(main, ["run", str(path), "--prompt", prompt, "--max-new", str(n)])
    assert r.exit_code == 0, r.output
    return r.stdout[:-1]


def test_greedy_equals_ninferc_run_on_the_gpu(gclient, art, goldens):
    for c in goldens["cases"]:
        r = gclient.completions.create(model="tiny", prompt=c["prompt"], max_tokens=48, temperature=0)
        assert r.choices[0].text == _run_cli(art, c["prompt"], 48)
        assert r.usage.completion_tokens == 48


def test_eight_concurrent_equal_solo_on_the_gpu(gclient, gpu_server, goldens):
    prompts = [c["prompt"] for c in goldens["cases"]] + ["import re\n", "while True:\n    ", "x = [i for i in "]
    lengths = [40, 25, 33, 12, 48, 20, 30, 16]
    solo = [gclient.completions.create(model="tiny", prompt=p, max_tokens=n, temperature=0).choices[0].text
            for p, n in zip(prompts, lengths)]
    out = {}

    def go(i):
        text = []
        for ch in gclient.completions.create(model="tiny", prompt=prompts[i], max_tokens=lengths[i], temperature=0,
                                             stream=True):
            if ch.choices:
                text.append(ch.choices[0].text)
        out[i] = "".join(text)

    ts = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [out[i] for i in range(8)] == solo


def test_seeded_device_sampling_repeats_and_logprobs_take_the_host_path(gclient):
    kw = dict(model="tiny", prompt="class Parser:\n", max_tokens=24, temperature=0.9, top_p=0.95, seed=1234)
    assert gclient.completions.create(**kw).choices[0].text == gclient.completions.create(**kw).choices[0].text
    r = gclient.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "def f():"}],
                                        max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    assert len(r.choices[0].logprobs.content) == 5
    r = gclient.completions.create(model="tiny", prompt="def f():", max_tokens=8, temperature=0.8, seed=3,
                                   extra_body={"min_p": 0.05, "repetition_penalty": 1.2})
    assert r.usage.completion_tokens == 8


# -- prefix reuse on the CUDA engine: the CPU tier's checks against a cache-off GPU server -----------------------
# (imported test functions run here with this module's ``servers``: two GPU servers of the fixture artifact)
from test_prefix_serve import (  # noqa: E402
    test_eight_requests_share_a_system_prompt, test_reset_prefix_cache_restores_idle,
    test_the_same_prompt_again_reuses_all_but_its_last_token)

__all__ = ["test_eight_requests_share_a_system_prompt", "test_reset_prefix_cache_restores_idle",
           "test_the_same_prompt_again_reuses_all_but_its_last_token"]


@pytest.fixture(scope="module")
def servers(start_server, art):
    common = ["--model-id", "tiny", "--max-concurrency", "8", "--prefill-chunk", "128"]
    on = start_server(art, *common)
    off = start_server(art, *common, "--no-prefix-cache")
    mk = lambda s: openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=300)  # noqa: E731
    return on, mk(on), mk(off)


def test_multi_turn_chat_on_the_gpu_reuses_turn_one(servers, tiny_dir):
    from ninferc.chat import chat_template_for
    from ninferc.tokenizer import Tokenizer

    srv, on, off = servers
    tok = Tokenizer.from_dir(tiny_dir)
    kw = {"enable_thinking": False}
    base = "You write Python. " * 12  # > 128 tokens: a checkpoint at the interval too
    turn1 = [{"role": "system", "content": base}, {"role": "user", "content": "import os"}]
    ask = lambda c, m: c.chat.completions.create(model="tiny", messages=m, max_tokens=24, temperature=0,  # noqa
                                                 extra_body={"chat_template_kwargs": kw})
    r1 = ask(on, turn1)
    a1 = r1.choices[0].message.content
    assert a1 == ask(off, turn1).choices[0].message.content
    turn2 = turn1 + [{"role": "assistant", "content": "<think>\n\n</think>\n\n" + a1},
                     {"role": "user", "content": "class Parser:"}]
    n0 = len(srv.request_lines())
    r2 = ask(on, turn2)
    assert r2.choices[0].message.content == ask(off, turn2).choices[0].message.content
    p1 = tok.encode(chat_template_for(tok).render(turn1, add_generation_prompt=True, **kw))
    assert len(p1) - 1 <= r2.usage.prompt_tokens_details.cached_tokens < r2.usage.prompt_tokens
    assert f"cached={r2.usage.prompt_tokens_details.cached_tokens} " in srv.wait_request_lines(1, after=n0)[0]
