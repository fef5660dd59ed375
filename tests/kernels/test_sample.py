"""CPU tests of the GPU sampler family (targets/kernels/sample.py, templates/sample.cu.j2): compiles for
the four targets without spills, Philox known answers, the kept-set definition against
``ninferc.sampling.filtered_probs`` (top-k / top-p edge cases), a numpy replay of the kernel's radix-select
algorithm against that definition (ties, -inf, -0.0), the reference sampler's distribution, and the split argmax
(rows over several CTAs meeting through ws) run by the CPU emulator (tests/kernels/cuda_host.py).
GPU twin: test_sample_gpu.py."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

from ninferc.errors import PlanError
from ninferc.sampling import SamplingParams, filtered_probs
from ninferc.targets.arch import ARCHS
from ninferc.targets.kernels.sample import (SampleFamily, SampleProblem, arg_names, fixed_masses, kept_mask,
                                            kernel_args, philox4x32_10, reference, uniforms)
from ninferc.targets.plan import PlanContext, check_launch, compile_variants

sys.path.insert(0, str(Path(__file__).resolve().parent))

FAM = SampleFamily()
ALL_ARCHS = tuple(ARCHS)


@functools.lru_cache(maxsize=None)
def resources(arch: str):
    specs = [s for p in FAM.sample_problems() for s in FAM.variants(p)]
    return {uri: r for uri, (_, r) in compile_variants(specs, arch).items()}


def test_launch_and_args():
    ctx = PlanContext("sm_90", 132, resources("sm_90"))
    assert FAM.threads_for(SampleProblem(4096)) == 256
    assert FAM.threads_for(SampleProblem(248320)) == 1024
    for p in FAM.sample_problems():
        ln = FAM.launch(p, 3, ctx)
        check_launch(ln, "sm_90", ctx.resources_of(ln.kernel), ctx.sms)
        if p.mode == "sample":
            assert ln.grid == (3, 1, 1) and ln.block == (1024, 1, 1) and ln.route == "row_per_cta"
        else:  # 62,080 groups of 4 over 256-thread CTAs of 4 groups per thread: 61 CTAs per row
            assert ln.grid == (3, 61, 1) and ln.block == (256, 1, 1) and ln.route == "split_row"
            with pytest.raises(PlanError, match="needs ws"):
                kernel_args(p, ln, "L", "O")
    small = FAM.launch(SampleProblem(4096, "argmax"), 2, ctx)  # one CTA covers 4,096 logits in one pass
    assert small.grid == (2, 1, 1) and small.route == "row_per_cta"
    # the split never exceeds one wave of the variant on the device: 2 SMs
    few = PlanContext("sm_90", 2, resources("sm_90"))
    assert FAM.argmax_splits(SampleProblem(248320, "argmax"), few) == few.cap(FAM.spec(SampleProblem(1, "argmax"), 256))
    assert FAM.argmax_splits(SampleProblem(248320, "sample"), ctx) == 1
    with pytest.raises(PlanError, match="rows = 0"):
        FAM.launch(SampleProblem(10), 0, ctx)
    with pytest.raises(PlanError, match="vocab = 0"):
        SampleProblem(0)
    p = SampleProblem(4096, "sample")
    ln = FAM.launch(p, 2, ctx)
    with pytest.raises(PlanError, match="temperature"):
        kernel_args(p, ln, "L", "O")
    args = kernel_args(p, ln, "L", "O", temperature="T", top_k="K", top_p="P", seed="S", step="ST",
                       history="H", hist_pos="HP", hist_ld=64, advance=True)
    assert len(args) == len(arg_names(p)) == 17 and args[14:] == (0, 0, 0)
    assert args[0] == "L" and [int(args[i]) for i in (1, 2, 3)] == [4096, 4096, 2]
    assert args[4:10] == ("T", "K", "P", "S", "ST", "O") and args[10:12] == ("H", "HP")
    assert int(args[12]) == 64 and int(args[13]) == 1
    a2 = kernel_args(SampleProblem(4096, "argmax"), ln, "L", "O", ld=4100)
    assert int(a2[1]) == 4100 and a2[4:9] == (0, 0, 0, 0, 0) and a2[10:12] == (0, 0) and int(a2[13]) == 0
    assert kernel_args(p, ln, "L", "O", temperature="T", top_k="K", top_p="P", seed="S", tok_pos="TP",
                       seq_ctx="SC")[15:] == ("TP", "SC")


def test_philox_known_answers():
    # Random123 kat_vectors: counter (4 words), key (2 words) -> output (4 words)
    kat = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for ctr, key, want in kat:
        got = philox4x32_10(np.array([ctr], dtype=np.uint64), np.array(key, dtype=np.uint64))
        assert tuple(int(v) for v in got[0]) == want


def test_uniforms_open_interval_and_deterministic():
    u = uniforms(10_001, seed=(7 << 32) | 3, step=5)
    assert u.dtype == np.float32 and u.shape == (10_001,)
    assert (u > 0).all() and (u < 1).all()
    assert np.isfinite(-np.log(-np.log(u))).all()
    np.testing.assert_array_equal(u, uniforms(10_001, seed=(7 << 32) | 3, step=5))
    assert not np.array_equal(u, uniforms(10_001, seed=(7 << 32) | 3, step=6))
    assert not np.array_equal(u, uniforms(10_001, seed=(8 << 32) | 3, step=5))
    assert abs(float(u.mean()) - 0.5) < 0.02


def _random_cases(rng, n):
    """(logits, temperature, top_k, top_p) with plenty of ties, -inf entries and -0.0."""
    cases = []
    for i in range(n):
        V = int(rng.integers(1, 300))
        if i % 3 == 0:
            x = rng.integers(-6, 4, V).astype(np.float32) * np.float32(0.5)  # heavy ties
        else:
            x = (rng.standard_normal(V) * 3).astype(np.float32)
        if V > 3 and i % 4 == 1:
            x[rng.choice(V, V // 3, replace=False)] = -np.inf
        if i % 5 == 2:
            x[x == 0] = -0.0
        if not np.isfinite(x.max()):
            x[0] = 0.0
        t = float(rng.choice([0.3, 0.7, 1.0, 1.7]))
        k = int(rng.choice([0, 1, 2, 5, V, V + 3, max(1, V // 2)]))
        p = float(rng.choice([1.0, 0.9, 0.5, 0.1, 1e-6, 0.999]))
        cases.append((x, t, k, p))
    return cases


def test_kept_mask_matches_filtered_probs_semantics():
    rng = np.random.default_rng(11)
    checked = 0
    for x, t, k, p in _random_cases(rng, 300):
        z = x.astype(np.float64) / t
        with np.errstate(invalid="ignore"):
            positive = np.exp(z - z.max()) > 0  # -inf logits (or float64 underflow) have probability 0
        keep = kept_mask(x, t, k, p) & positive
        probs = filtered_probs(x, SamplingParams(temperature=t, top_k=k, top_p=p))
        ref = probs > 0
        if not np.array_equal(keep, ref):
            # the only allowed difference: fixed-point vs float64 cumulative mass within 1e-8 of top_p
            order = np.argsort(-z, kind="stable")
            sp = np.exp(z[order] - z.max())
            if 0 < k < x.shape[0]:
                sp[k:] = 0
            cum = np.cumsum(sp / sp.sum())
            assert np.min(np.abs(cum - p)) < 1e-8, (x, t, k, p, np.flatnonzero(keep ^ ref))
        else:
            checked += 1
        assert keep[int(np.argmax(x))]  # top-1 always kept
    assert checked > 280


def test_kept_mask_edge_cases():
    x = np.array([1.0, 3.0, 3.0, 2.0, -np.inf, 3.0], dtype=np.float32)
    # k = 1 -> argmax only (lowest index among the tied maxima)
    assert np.flatnonzero(kept_mask(x, 1.0, 1, 1.0)).tolist() == [1]
    # k = 2 cuts inside the tie: lowest indices kept
    assert np.flatnonzero(kept_mask(x, 1.0, 2, 1.0)).tolist() == [1, 2]
    # tiny p -> top-1 only
    assert np.flatnonzero(kept_mask(x, 1.0, 0, 1e-9)).tolist() == [1]
    # p that needs two of the three tied maxima
    assert np.flatnonzero(kept_mask(x, 1.0, 0, 0.5)).tolist() == [1, 2]
    # k >= V and p = 1: everything (including -inf, whose mass is 0)
    assert kept_mask(x, 1.0, 10, 1.0).all()
    # -0.0 and +0.0 tie (lowest index first)
    z = np.array([-0.0, 0.0, -1.0], dtype=np.float32)
    assert np.flatnonzero(kept_mask(z, 1.0, 1, 1.0)).tolist() == [0]


# ---- numpy replay of the kernel's selection algorithm (radix select + index cuts) -------------------


def _f2key(x: np.ndarray) -> np.ndarray:
    b = np.where(x == 0, np.float32(0), x).astype(np.float32).view(np.uint32).astype(np.uint64)
    neg = (b & 0x80000000) != 0
    return np.where(neg, (~b) & 0xFFFFFFFF, b | 0x80000000).astype(np.uint64)


def _radix_select(keys, in_set, weights, want, mass):
    """Mirror of radix_select in sample.cu.j2 (levels, digit pick per warp lane, fallbacks)."""
    prefix, above, total, eq, target = 0, 0, 0, 0, float(want)
    for level in range(4):
        shift = 24 - 8 * level
        sel = in_set.copy()
        if level:
            sel &= (keys >> (shift + 8)) == (prefix >> (shift + 8))
        digits = ((keys[sel] >> shift) & 255).astype(np.int64)
        cnt = np.bincount(digits, minlength=256)
        q = np.zeros(256, dtype=object)
        for d, wv in zip(digits, weights[sel]):
            q[d] += int(wv)
        q = q if mass else cnt.astype(object)
        level_total = int(sum(q))
        if level == 0:
            total = level_total
            if mass:
                target = want * float(total)
        if target > above + level_total:
            target = float(above + level_total)
        sel_digit, sel_above, sel_eq = 0, above, 0
        lanes = [sum(q[8 * ln:8 * ln + 8]) for ln in range(32)]
        suf = [sum(lanes[ln:]) for ln in range(32)]
        for ln in range(32):
            excl = suf[ln] - lanes[ln]
            if above + excl < target <= above + suf[ln]:
                run = above + excl
                for j in range(7, -1, -1):
                    before = run
                    run += q[8 * ln + j]
                    if run >= target:
                        sel_digit, sel_above, sel_eq = 8 * ln + j, before, int(cnt[8 * ln + j])
                        break
        if not target > 0:
            present = [int(cnt[8 * ln:8 * ln + 8].sum()) for ln in range(32)]
            top = max([ln for ln in range(32) if present[ln] > 0] or [0])
            excl = suf[top] - lanes[top]
            for j in range(7, -1, -1):
                if cnt[8 * top + j] > 0 or j == 0:
                    sel_digit, sel_above, sel_eq = 8 * top + j, above + excl, int(cnt[8 * top + j])
                    break
        prefix |= sel_digit << shift
        above, eq = sel_above, sel_eq
        if mass and level == 0:
            target = want * float(total)
    return prefix, above, eq, total


def _nth(pred, n):
    idx = np.flatnonzero(pred)
    return int(idx[n - 1]) if n <= idx.shape[0] else 0x7FFFFFFF


def _kernel_kept(x, t, k, p):
    V = x.shape[0]
    keys = _f2key(x)
    idx = np.arange(V)
    tau_k, cut_k = 0, 0x7FFFFFFF
    if 0 < k < V:
        tau_k, above, eq, _ = _radix_select(keys, np.ones(V, bool), np.ones(V, np.uint64), k, False)
        need = k - above
        if need < eq:
            cut_k = _nth(keys == tau_k, need)
    in_k = (keys > tau_k) | ((keys == tau_k) & (idx <= cut_k))
    tau_p, cut_p = 0, 0x7FFFFFFF
    if np.float32(p) < 1:
        mf = fixed_masses(x, t)
        tau_p, above, eq, total = _radix_select(keys, in_k, mf, float(np.float32(p)), True)
        target = float(np.float32(p)) * float(total)
        need = int(np.ceil(target)) if target > 0 else 0
        q = int(fixed_masses(np.array([x.max(), np.float32(_key2f(tau_p))], np.float32), t)[1])
        lo, hi = 1, eq
        while lo < hi:
            mid = lo + (hi - lo) // 2
            if above + mid * q >= need:
                hi = mid
            else:
                lo = mid + 1
        if lo < eq:
            cut_p = _nth((keys == tau_p) & in_k, lo)
    in_p = (keys > tau_p) | ((keys == tau_p) & (idx <= cut_p))
    return in_k & in_p


def _key2f(k: int) -> float:
    bits = (k & 0x7FFFFFFF) if (k & 0x80000000) else (~k & 0xFFFFFFFF)
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def test_kernel_selection_algorithm_matches_kept_mask():
    rng = np.random.default_rng(5)
    for x, t, k, p in _random_cases(rng, 160):
        got = _kernel_kept(x, t, k, p)
        want = kept_mask(x, t, k, p)
        assert np.array_equal(got, want), (x.tolist(), t, k, p, np.flatnonzero(got ^ want))


def test_reference_argmax_and_greedy_rows():
    x = np.array([[1, 5, 5, -np.inf], [-np.inf] * 4, [0, np.nan, 3, np.nan], [2, -0.0, 0.0, 2],
                  [0, np.inf, 1, 2]], np.float32)
    # a row whose maximum is not finite (only -inf; a NaN; +inf) gives no token, -1
    np.testing.assert_array_equal(reference(SampleProblem(4, "argmax"), x), [1, -1, -1, 0, -1])
    # temperature 0 falls back to argmax in sample mode; the non-finite rows give -1 there too
    got = reference(SampleProblem(4, "sample"), x, temperature=[0.0, 1.0, 1.0, 0.0, 1.0], top_k=[0] * 5,
                    top_p=[1.0] * 5, seed=[1, 2, 3, 4, 5])
    np.testing.assert_array_equal(got, [1, -1, -1, 0, -1])


def test_reference_sampler_distribution_and_determinism():
    rng = np.random.default_rng(2)
    V, N = 23, 20_000
    row = (rng.standard_normal(V) * 1.5).astype(np.float32)
    row[4] = -np.inf
    for t, k, p in ((1.0, 0, 1.0), (0.7, 8, 1.0), (1.3, 0, 0.8), (1.0, 10, 0.9), (1.0, 1, 1.0), (1.0, 0, 1e-7)):
        logits = np.broadcast_to(row, (N, V))
        seeds = np.arange(N, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15 % 2**63) + np.uint64(17)
        toks = _vector_reference(logits[0], t, k, p, seeds, step=3)
        probs = filtered_probs(row, SamplingParams(temperature=t, top_k=k, top_p=p))
        assert np.array_equal(kept_mask(row, t, k, p) & np.isfinite(row), probs > 0)
        counts = np.bincount(toks, minlength=V)
        assert counts[probs == 0].sum() == 0, "sampled a token outside the kept set"
        _chi_square_ok(counts, probs, N)
        # determinism: the scalar reference (kernel order of operations) agrees with the vectorised one
        few = reference(SampleProblem(V), logits[:50], temperature=[t] * 50, top_k=[k] * 50, top_p=[p] * 50,
                        seed=seeds[:50], step=[3] * 50)
        np.testing.assert_array_equal(few, toks[:50])
        if k == 1 or p < 1e-6:
            assert (toks == int(np.argmax(row))).all()


def test_reference_sampler_at_the_smallest_temperature():
    """At the temperature range's floor (1e-5; sampling.TEMPERATURE_RANGE) the kernel's arithmetic (fp32 logits times
    1 / t) still draws between near-ties -- a gap of 2^-20 is 0.095 after scaling -- as the host's fp64 distribution
    does, and never a token 0.01 below the top (a gap of 1,000)."""
    V, N, t = 8, 20_000, 1e-5
    row = np.array([0.5, 2.0, 2.0 - 2.0 ** -20, -1.0, 1.99, 0.0, 0.0, -np.inf], np.float32)
    seeds = np.arange(N, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15 % 2**63) + np.uint64(5)
    for k, p in ((0, 1.0), (0, 0.9), (2, 1.0), (1, 1.0)):
        probs = filtered_probs(row, SamplingParams(temperature=t, top_k=k, top_p=p))
        toks = _vector_reference(row, t, k, p, seeds, step=1)
        counts = np.bincount(toks, minlength=V)
        assert counts[probs == 0].sum() == 0 and set(np.flatnonzero(counts)) <= {1, 2}
        _chi_square_ok(counts, probs, N)
        if k == 1:
            assert (toks == 1).all()
        else:
            assert abs(probs[1] - 1 / (1 + np.exp(-2.0 ** -20 / t))) < 1e-6 and counts[2] > 0.4 * N
        few = reference(SampleProblem(V), np.broadcast_to(row, (50, V)), temperature=[t] * 50, top_k=[k] * 50,
                        top_p=[p] * 50, seed=seeds[:50], step=[1] * 50)
        np.testing.assert_array_equal(few, toks[:50])


def _vector_reference(row, t, k, p, seeds, step):
    """reference() vectorised over many seeds of one row (same arithmetic)."""
    keep = kept_mask(row, t, k, p)
    m = row.max()
    inv_t = np.float32(1) / np.float32(t)
    u = uniforms(row.shape[0], seeds, step)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = (-np.log(-np.log(u))).astype(np.float32)
        score = ((row - m).astype(np.float64) * np.float64(inv_t) + g.astype(np.float64)).astype(np.float32)
    score = np.where(keep[None, :], score, -np.inf)
    return np.argmax(score, axis=1)


def _chi_square_ok(counts, probs, n):
    """Pearson chi-square over tokens with expected count >= 5 (the rest pooled); fixed seeds make this
    deterministic, the bound is ~df + 6 sd."""
    exp = probs * n
    big = exp >= 5
    obs = np.append(counts[big], counts[~big].sum())
    ex = np.append(exp[big], exp[~big].sum())
    keep = ex > 0
    obs, ex = obs[keep], ex[keep]
    df = max(1, obs.shape[0] - 1)
    chi2 = float(((obs - ex) ** 2 / ex).sum())
    assert chi2 <= df + 6 * np.sqrt(2 * df) + 10, f"chi2 {chi2:.1f} with df {df}: counts {counts} vs {exp.round(1)}"


# ------------------------------------------------------------------------------------------------
# the split argmax on the CPU emulator
# ------------------------------------------------------------------------------------------------

def _emulated_argmax(x: np.ndarray, splits: int, *, ld: int | None = None, ws=None, step=None, history=None,
                     hist_pos=None, advance: bool = False, tok_pos=None, seq_ctx=None):
    from cuda_host import HostKernel

    B, V = x.shape
    p = SampleProblem(V, "argmax")
    spec = FAM.spec(p, 256)
    ctx = PlanContext("sm_90", 132, resources("sm_90"))
    ln = ctx.make_launch(spec, (B, splits, 1), route="split_row", tokens=B)
    ld = ld or V
    buf = np.full((B, ld), np.float32(7e30), np.float32)  # the row tails (past V) must never be read
    buf[:, :V] = x
    out = np.full(B, -1, np.int32)
    ws = np.zeros(2 * B, np.uint64) if ws is None else ws
    z = np.uint64(0)
    args = kernel_args(p, ln, buf, out, ld=ld, ws=ws, step=z if step is None else step,
                       history=z if history is None else history, hist_pos=z if hist_pos is None else hist_pos,
                       hist_ld=0 if history is None else history.shape[1], advance=advance,
                       tok_pos=z if tok_pos is None else tok_pos, seq_ctx=z if seq_ctx is None else seq_ctx)
    HostKernel(spec.render(), spec.entry).launch(ln.grid, ln.block, args)
    return out, ws


@pytest.mark.parametrize("splits", [1, 2, 3, 7, 64])
def test_emulated_split_argmax_matches_numpy(splits):
    rng = np.random.default_rng(splits)
    V = 5003  # not a multiple of 4: a partial last group; 64 splits leave some CTAs an empty share
    x = rng.standard_normal((3, V)).astype(np.float32)
    x[1, 4000] = x[1, 17] = np.float32(9.0)  # a tie across shares: the lower index wins
    x[2, 2500] = np.nan  # a NaN in one CTA's share: the row gives no token (-1) whichever CTA finishes it
    x[2, 4999] = np.nan
    ws = np.zeros(6, np.uint64)
    for _ in range(2):  # the words are left zero, so the same buffer serves the next launch
        out, ws = _emulated_argmax(x, splits, ld=V + 5, ws=ws)
        assert out.tolist() == [int(np.argmax(x[0])), 17, -1] == reference(SampleProblem(V, "argmax"), x).tolist()
        assert not ws.any()


def test_emulated_split_argmax_history_and_advance():
    x = np.full((2, 4096 + 9), -np.inf, np.float32)
    x[0, 4100] = 1.0
    x[1, 3] = -1e30
    step = np.array([5, 9], np.int32)
    hist = np.full((2, 4), -1, np.int32)
    hp = np.array([1, 3], np.int32)
    pos, ctx = np.array([40, 7, -5], np.int32), np.array([41, 8, -5], np.int32)  # a third entry: not a row
    out, ws = _emulated_argmax(x, 5, step=step, history=hist, hist_pos=hp, advance=True, tok_pos=pos, seq_ctx=ctx)
    assert out.tolist() == [4100, 3]
    assert hist.tolist() == [[-1, 4100, -1, -1], [-1, -1, -1, 3]]
    assert hp.tolist() == [2, 4] and step.tolist() == [6, 10] and not ws.any()
    # the decode metadata advanced once per row (the split's last CTA only), nothing past the rows
    assert pos.tolist() == [41, 8, -5] and ctx.tolist() == [42, 9, -5]
    out, _ = _emulated_argmax(x, 1, step=step, history=hist, hist_pos=hp, advance=False, tok_pos=pos, seq_ctx=ctx)
    assert pos.tolist() == [41, 8, -5] and ctx.tolist() == [42, 9, -5] and hp.tolist() == [2, 4]
