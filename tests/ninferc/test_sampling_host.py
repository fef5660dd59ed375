"""The host sampler's parameters: min_p, the three penalties (vLLM / OpenAI semantics), logprobs, validation,
and non-finite logits never becoming a token."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ninferc.errors import NinfercError
from ninferc.sampling import (HostSampler, NonFiniteLogits, SamplingParams, apply_penalties, filtered_probs,
                              log_softmax)


def test_min_p_keeps_tokens_at_least_min_p_times_the_top():
    x = np.log(np.array([0.5, 0.3, 0.1, 0.06, 0.04]))
    p = filtered_probs(x, SamplingParams(temperature=1.0, min_p=0.15))  # keeps p >= 0.075
    assert (p > 0).tolist() == [True, True, True, False, False]
    np.testing.assert_allclose(p[:3], np.array([0.5, 0.3, 0.1]) / 0.9)
    # min_p acts on the temperature-scaled distribution (vLLM: after temperature)
    p2 = filtered_probs(x, SamplingParams(temperature=2.0, min_p=0.15))
    assert (p2 > 0).sum() == 5


def test_penalties_follow_openai_and_hf():
    x = np.array([2.0, -1.0, 0.5, 3.0], np.float32)
    sp = SamplingParams(repetition_penalty=2.0)
    y = apply_penalties(x, sp, prompt_ids=[0], output_counts={1: 1})
    np.testing.assert_allclose(y, [1.0, -2.0, 0.5, 3.0])  # positive / r, negative * r; unseen ids untouched
    sp = SamplingParams(frequency_penalty=0.5, presence_penalty=0.25)
    y = apply_penalties(x, sp, prompt_ids=[3], output_counts={2: 3, 3: 1})
    np.testing.assert_allclose(y, [2.0, -1.0, 0.5 - 1.5 - 0.25, 3.0 - 0.5 - 0.25])  # prompt not counted


def test_greedy_with_penalty_avoids_repeating():
    s = HostSampler(SamplingParams(frequency_penalty=2.0))
    x = np.array([1.0, 0.9, 0.0], np.float32)
    assert [s.sample(x).token for _ in range(4)] == [0, 1, 2, 0]  # 1-2 = -1 > 0.9-2 > 0-2
    assert s.counts == {0: 2, 1: 1, 2: 1}


def test_logprobs_are_the_raw_distribution():
    x = np.array([1.0, 3.0, 2.0, -1.0], np.float32)
    s = HostSampler(SamplingParams(presence_penalty=1.0))
    got = s.sample(x, logprobs=2)
    lp = log_softmax(x)
    assert got.token == 1 and math.isclose(got.logprob, lp[1])
    assert [i for i, _ in got.top] == [1, 2] and math.isclose(got.top[1][1], lp[2])
    assert s.sample(x, logprobs=None).logprob is None


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0.7, top_p=0.9, seed=3)])
def test_non_finite_logits_never_become_a_token(bad, params):
    x = np.zeros(16, np.float32)
    x[5] = bad
    with pytest.raises(NonFiniteLogits, match="1 non-finite logits of 16"):
        HostSampler(params).sample(x)


def test_seeded_draws_repeat_and_depend_only_on_the_seed():
    x = np.random.default_rng(0).normal(size=64).astype(np.float32)
    p = SamplingParams(temperature=1.0, top_k=20, min_p=0.01, seed=42)
    a = [HostSampler(p).sample(x).token for _ in range(3)]
    s1, s2 = HostSampler(p), HostSampler(p)
    seq1 = [s1.sample(x).token for _ in range(20)]
    seq2 = [s2.sample(x).token for _ in range(20)]
    assert seq1 == seq2 and len(set(a)) == 1 and len(set(seq1)) > 1


def test_sampling_matches_the_filtered_distribution():
    """Chi-square bound over 20,000 draws: the empirical distribution equals filtered_probs."""
    x = np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))
    p = SamplingParams(temperature=0.8, min_p=0.05, top_p=0.95, seed=7)
    want = filtered_probs(x, p)
    s = HostSampler(p)
    n = 20_000
    counts = np.bincount([s(x) for _ in range(n)], minlength=6)
    keep = want > 0
    assert counts[~keep].sum() == 0
    chi2 = float((((counts[keep] - n * want[keep]) ** 2) / (n * want[keep])).sum())
    assert chi2 < 20.5  # 99.9th percentile of chi-square with <= 5 degrees of freedom


def test_small_temperatures_are_accepted_down_to_the_floor():
    """0.005 (a client's "nearly greedy") is a temperature like any other; 1e-5 is the floor (TEMPERATURE_RANGE): a
    gap of 1e-6 between two logits is still a draw there (ratio e^0.1), a gap of 0.01 is not."""
    x = np.array([1.0, 3.0, 3.0 - 1e-6, 2.99, -2.0])
    for t in (0.005, 1e-5):
        SamplingParams(temperature=t)
    p = filtered_probs(x, SamplingParams(temperature=1e-5))
    assert p[0] == p[3] == p[4] == 0
    np.testing.assert_allclose(p[1] / p[2], math.exp((x[1] - x[2]) / 1e-5), rtol=1e-9)
    with pytest.raises(NinfercError, match=r"temperature must be 0 \(greedy\) or in \[1e-05, 100\], found 1e-06"):
        SamplingParams(temperature=1e-6)


@pytest.mark.parametrize("kw,needle", [
    (dict(min_p=1.5), "min_p must be in [0, 1]"),
    (dict(min_p=float("nan")), "min_p must be in [0, 1]"),
    (dict(presence_penalty=2.5), "presence_penalty must be in [-2, 2]"),
    (dict(frequency_penalty=-3), "frequency_penalty must be in [-2, 2]"),
    (dict(repetition_penalty=0.0), "repetition_penalty must be in (0, 10]"),
    (dict(temperature=float("nan")), "temperature must be 0 (greedy) or in [1e-05, 100]"),
    (dict(temperature=-1), "temperature must be 0 (greedy) or in [1e-05, 100]"),
    (dict(top_p=0.0), "top_p must be in (0, 1]"),
    (dict(top_k=-1), "top_k must be an integer >= 0"),
    (dict(top_k=1.5), "top_k must be an integer >= 0"),
    (dict(temperature="hot"), "temperature must be a number"),
    (dict(seed=-1), "seed must be an integer in [0, 2**64)"),
    (dict(logit_bias=((3, 100.5),)), "logit_bias[3] must be in [-100, 100], found 100.5"),
    (dict(logit_bias=((3, float("nan")),)), "logit_bias[3] must be in [-100, 100]"),
    (dict(logit_bias=((-1, 1.0),)), "logit_bias: token id must be an integer >= 0, found -1"),
    (dict(logit_bias=((3, 1.0), (3, 2.0))), "logit_bias: token id 3 is given twice"),
    (dict(min_tokens=-2), "min_tokens must be an integer >= 0, found -2"),
])
def test_bad_parameters_name_the_value_and_range(kw, needle):
    with pytest.raises(NinfercError) as e:
        SamplingParams(**kw)
    assert needle in str(e.value)


def test_logit_bias_adds_to_the_logits_and_logprobs_stay_raw():
    """OpenAI's logit_bias: added to the token's logit before anything else (-100 bans, +100 forces under greedy and
    nearly under sampling); the reported logprobs are the model's raw distribution (vLLM's default), not the biased."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=64).astype(np.float32)
    top = int(np.argmax(x))
    s = HostSampler(SamplingParams(logit_bias=((top, -100.0),)))
    got = s.sample(x, logprobs=1)
    assert got.token == int(np.argsort(-x)[1]) and got.top[0][0] == top  # the raw top-1 is still reported first
    assert s.adjust(x)[top] == pytest.approx(x[top] - 100.0) and s.adjust(x)[5] == x[5]
    forced = HostSampler(SamplingParams(temperature=1.0, seed=3, logit_bias=((7, 100.0),)))
    assert [forced.sample(x).token for _ in range(20)] == [7] * 20
    mild = HostSampler(SamplingParams(logit_bias=((9, 0.5), (11, -0.25))))
    y = mild.adjust(x)
    assert y[9] == pytest.approx(x[9] + 0.5) and y[11] == pytest.approx(x[11] - 0.25)
    assert not mild.device_ok and HostSampler(SamplingParams(temperature=1.0)).device_ok
    # ids past the row (a bias given for a larger vocabulary) are left out, not an IndexError
    assert HostSampler(SamplingParams(logit_bias=((500, 5.0),))).adjust(x).shape == (64,)


def test_min_tokens_holds_the_stop_ids_back_until_reached_then_frees_the_gpu_sampler():
    """vLLM's min_tokens: the stop ids cannot be drawn while fewer than min_tokens tokens were generated (the k-th
    token, k <= min_tokens, is drawn without them), then can; the sampler is host-only meanwhile, device-capable
    after; without stop ids nothing is held."""
    x = np.zeros(16, np.float32)
    x[2] = 5.0  # the stop id is the argmax
    s = HostSampler(SamplingParams(min_tokens=3), stop_ids=[2, 15])
    toks = []
    for _ in range(5):
        assert s.device_ok == (len(toks) >= 3)
        toks.append(s.sample(x).token)
    assert toks[:3] == [0, 0, 0] and toks[3:] == [2, 2]
    assert not HostSampler(SamplingParams(min_tokens=3)).holding_stops  # no stop ids: nothing to hold
    assert HostSampler(SamplingParams(min_tokens=3)).device_ok


def test_raw_logprobs_equal_a_full_sort_of_the_log_softmax_ties_included():
    """The partition-based top (:func:`ninferc.sampling.raw_logprobs`) gives exactly what a stable sort of the whole
    log softmax gives: values, order, and ties broken toward the lower id, across the k-th place too."""
    import numpy as np

    from ninferc.sampling import log_softmax, raw_logprobs

    rng = np.random.default_rng(5)
    for trial in range(30):
        x = rng.normal(size=500).astype(np.float32)
        if trial % 2:  # ties: repeated values around the top, across the k-th place
            x[rng.choice(500, 40, replace=False)] = np.sort(x)[-3]
        lp = log_softmax(x)
        for n in (0, 1, 3, 5, 20):
            tok = int(rng.integers(500))
            got, top = raw_logprobs(x, tok, n)
            want = np.argsort(-lp, kind="stable")[:n]
            assert [i for i, _ in top] == [int(i) for i in want]
            assert [v for _, v in top] == pytest.approx([lp[i] for i in want], abs=1e-12)
            assert got == pytest.approx(lp[tok], abs=1e-12)
    assert raw_logprobs(np.zeros(3, np.float32), 1, 20)[1] == [(0, pytest.approx(-np.log(3))),
                                                             (1, pytest.approx(-np.log(3))),
                                                             (2, pytest.approx(-np.log(3)))]


def test_draw_from_the_candidates_is_numpy_choice_over_the_dense_distribution():
    """``HostSampler`` draws among ``filtered_candidates`` (``draw_from``) the id ``rng.choice(V, p=dense)`` drew from
    the dense distribution for the same generator state -- so seeded host-sampled text did not change when the dense
    draw (~2 ms of a 248k row) went -- over 400 draws of 6 parameter sets, ties included."""
    from ninferc.sampling import draw_from, filtered_candidates, filtered_probs

    rng = np.random.default_rng(0)
    logits = rng.standard_normal(5000).astype(np.float32) * 3
    logits[[10, 20, 30]] = logits.max()  # ties at the top
    for p in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=20),
              SamplingParams(temperature=0.7, top_p=0.8), SamplingParams(temperature=1.3, min_p=0.05),
              SamplingParams(temperature=0.7, top_k=20, top_p=0.8, min_p=0.01),
              SamplingParams(temperature=0.5, top_k=2)):
        dense = filtered_probs(logits, p)
        ids, probs = filtered_candidates(logits, p)
        assert np.array_equal(np.flatnonzero(dense), ids) and np.array_equal(dense[ids], probs)
        a, b = np.random.default_rng(123), np.random.default_rng(123)
        for _ in range(400 // 6 + 1):
            assert draw_from(a, ids, probs) == int(b.choice(dense.shape[0], p=dense))
