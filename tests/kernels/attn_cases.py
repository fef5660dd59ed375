"""Scenarios shared by the attention kernel tests (CPU: test_attention.py, GPU: test_attention_gpu.py):
the two model shapes (each with a bf16 and an int8 KV cache) and random paged KV caches whose free memory
is garbage."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ninferc.ir.reference import ref_partial_rope, ref_rmsnorm
from ninferc.targets.kernels.attention import (KV_GROUP, AttentionProblem, Int8Pages, bf16_bits, dequantize_kv,
                                               quantize_kv, round_bf16)

#: the tiny fixture's attention (4 q / 2 kv heads of 64, rotary 16) and the 27B one (24 / 4 of 256,
#: rotary 64); 72 pages of 64 = 4608 tokens per sequence (room for a 4096 context plus a 200-token chunk)
TINY = AttentionProblem(4, 2, 64, 16, 1e7, 1e-6, page_size=64, max_pages=72)
BIG = AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, page_size=64, max_pages=72)
PROBLEMS = {"tiny": TINY, "27b": BIG}
#: the same shapes with the int8 KV cache
TINY8 = replace(TINY, kv_dtype="int8")
BIG8 = replace(BIG, kv_dtype="int8")
PROBLEMS_INT8 = {"tiny-int8": TINY8, "27b-int8": BIG8}
ALL_PROBLEMS = {**PROBLEMS, **PROBLEMS_INT8}

#: magnitude of the garbage in free pages / rows (bf16-representable: 9984)
GARBAGE = 1e4


@dataclass
class PagedCache:
    """A paged KV cache in numpy: k_pages / v_pages fp32 [num_pages, Hkv, P, hd] holding bf16 values (int8
    problems: :class:`Int8Pages` codes + scales); page_table int32 [B, max_pages]; ``lengths[b]`` positions of
    sequence b hold real K/V (``k_ctx[b]``, ``v_ctx[b]``, [lengths[b], Hkv, hd] fp32: the stored bf16 values,
    or the dequantised int8 ones); everything else is garbage."""

    problem: AttentionProblem
    k_pages: np.ndarray | Int8Pages
    v_pages: np.ndarray | Int8Pages
    page_table: np.ndarray
    lengths: list
    k_ctx: list
    v_ctx: list


def garbage(shape, rng, nan: bool) -> np.ndarray:
    """+-GARBAGE (bf16), with a sprinkle of NaN and +-Inf when ``nan`` (catches 0 * garbage leaks)."""
    g = (rng.choice([-1.0, 1.0], size=shape) * GARBAGE).astype(np.float32)
    if nan:
        flat = g.reshape(-1)
        idx = rng.choice(flat.size, size=max(1, flat.size // 16), replace=False)
        flat[idx] = rng.choice([np.nan, np.inf, -np.inf], size=idx.size).astype(np.float32)
    return round_bf16(g)


def garbage_int8(shape, rng, nan: bool) -> Int8Pages:
    """int8 pages of garbage: any code (-128 included) and +-GARBAGE scales (NaN / +-Inf sprinkled in when
    ``nan``) -- a kernel that reads a free row gets huge or non-finite values."""
    codes = rng.integers(-128, 128, size=shape, dtype=np.int8)
    return Int8Pages(codes, garbage(shape[:-1] + (shape[-1] // 64,), rng, nan))


def make_cache(problem: AttentionProblem, lengths, capacity, rng, *, extra_free: int = 3, nan: bool = True,
               scale: float = 1.0) -> PagedCache:
    """Random page tables: sequence b owns ceil(capacity[b] / P) pages drawn from a shuffled pool (plus
    ``extra_free`` never-used pages); positions < lengths[b] hold N(0, scale^2) K/V, stored as bf16 or (int8
    problems) quantised by :func:`quantize_kv`; free pages, rows at or after lengths[b], and unused
    page-table entries (pointing at a free page) hold garbage."""
    P, Hkv, hd = problem.page_size, problem.heads_kv, problem.head_dim
    int8 = problem.kv_dtype == "int8"
    B = len(lengths)
    need = [-(-int(c) // P) for c in capacity]
    assert all(int(l) <= int(c) for l, c in zip(lengths, capacity)) and max(need) <= problem.max_pages
    n_pages = sum(need) + extra_free
    perm = rng.permutation(n_pages)
    make = garbage_int8 if int8 else garbage
    k_pages = make((n_pages, Hkv, P, hd), rng, nan)
    v_pages = make((n_pages, Hkv, P, hd), rng, nan)
    free_page = int(perm[-1])
    table = np.full((B, problem.max_pages), free_page, np.int32)
    k_ctx, v_ctx = [], []
    at = 0
    for b in range(B):
        table[b, :need[b]] = perm[at:at + need[b]]
        at += need[b]
        L = int(lengths[b])
        K = rng.standard_normal((L, Hkv, hd)).astype(np.float32) * np.float32(scale)
        V = rng.standard_normal((L, Hkv, hd)).astype(np.float32) * np.float32(scale)
        if int8:
            (kc, ks), (vc, vs) = quantize_kv(K), quantize_kv(V)
            K, V = dequantize_kv(kc, ks), dequantize_kv(vc, vs)
        else:
            K, V = round_bf16(K), round_bf16(V)
        for p in range(L):
            page, row = table[b, p // P], p % P
            if int8:
                k_pages.codes[page, :, row], k_pages.scales[page, :, row] = kc[p], ks[p]
                v_pages.codes[page, :, row], v_pages.scales[page, :, row] = vc[p], vs[p]
            else:
                k_pages[page, :, row] = K[p]
                v_pages[page, :, row] = V[p]
        k_ctx.append(K)
        v_ctx.append(V)
    return PagedCache(problem, k_pages, v_pages, table, [int(x) for x in lengths], k_ctx, v_ctx)


def make_step(problem: AttentionProblem, prev, new, rng):
    """Metadata + inputs of one step: sequence b appends ``new[b]`` tokens after ``prev[b]`` positions.

    Returns dict: proj [T, Dp] fp32 N(0,1); q_norm_w, k_norm_w [hd] fp32 N(0, 0.1^2); tok_pos, tok_seq [T];
    seq_start [B+1]; seq_ctx [B] (= prev + new) -- all int32."""
    B = len(prev)
    T = int(sum(new))
    seq_start = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    tok_seq = np.repeat(np.arange(B), new).astype(np.int32)
    tok_pos = np.concatenate([np.arange(p, p + n) for p, n in zip(prev, new)]).astype(np.int32)
    return {
        "proj": rng.standard_normal((T, problem.proj_dim)).astype(np.float32),
        "q_norm_w": (0.1 * rng.standard_normal(problem.head_dim)).astype(np.float32),
        "k_norm_w": (0.1 * rng.standard_normal(problem.head_dim)).astype(np.float32),
        "tok_pos": tok_pos,
        "tok_seq": tok_seq,
        "seq_start": seq_start,
        "seq_ctx": (np.asarray(prev) + np.asarray(new)).astype(np.int32),
    }


def check_int8_rows(problem: AttentionProblem, cache: PagedCache, st: dict, kp_dev: Int8Pages, vp_dev: Int8Pages,
                    kp_ref: Int8Pages, vp_ref: Int8Pages) -> None:
    """attn_prep's int8 rows (``kp_dev``, ``vp_dev``, read back from the device or the emulator) vs
    reference_prep's (``kp_ref``, ``vp_ref``) for the step ``st`` appended to ``cache``.

    v: codes and scales bit-exact (the quantiser's input is the same fp32 projection value on both sides).
    k: the quantiser's input is the fp32 k after RMSNorm + RoPE, which a kernel computes within a few ulps of
    numpy (warp-order sum of squares; attn_common.cuh rope_cos_sin within ~3 ulp of numpy's correctly rounded
    cos / sin), so
    codes may differ by one (>= 99 % equal), scales by a few ulps (relative 2^-20 allowed: the group max moves
    by a few ulps, the division adds one), and each dequantised kernel value must be a valid quantisation of
    numpy's fp32 k: |k - fl32(code * scale)| <= scale * (1/2 + 2^-12) (the slack covers the few-ulp difference
    of k itself: 127 * scale * a few 2^-24).
    Every row outside the step's positions is bitwise untouched (garbage codes and NaN scales included).

    Raises:
        AssertionError: naming what differs.
    """
    p = problem
    rows = [(cache.page_table[b, ps // p.page_size], ps % p.page_size) for b, ps in zip(st["tok_seq"], st["tok_pos"])]
    pg = np.array([r[0] for r in rows])
    rw = np.array([r[1] for r in rows])
    np.testing.assert_array_equal(vp_dev.codes[pg, :, rw], vp_ref.codes[pg, :, rw], "attn_prep int8 v codes")
    np.testing.assert_array_equal(vp_dev.scales[pg, :, rw].view(np.uint32), vp_ref.scales[pg, :, rw].view(np.uint32),
                                  "attn_prep int8 v scales")
    kc_dev, ks_dev = kp_dev.codes[pg, :, rw], kp_dev.scales[pg, :, rw]
    kc_ref, ks_ref = kp_ref.codes[pg, :, rw], kp_ref.scales[pg, :, rw]
    dk = np.abs(kc_dev.astype(np.int16) - kc_ref.astype(np.int16))
    assert dk.max() <= 1, f"attn_prep int8 k codes differ by up to {dk.max()} from numpy (at most 1 allowed)"
    assert np.mean(dk == 0) >= 0.99, f"attn_prep int8 k codes: only {np.mean(dk == 0):.4f} equal numpy's"
    rel = np.abs(ks_dev.astype(np.float64) / ks_ref.astype(np.float64) - 1)
    assert np.all(np.isfinite(ks_dev)) and rel.max() <= 2.0 ** -20, \
        f"attn_prep int8 k scales: relative difference up to {rel.max():.3g} from numpy (2^-20 allowed)"
    _, _, k, _ = p.split_proj(st["proj"])
    k_fp32 = ref_partial_rope(ref_rmsnorm(k, st["k_norm_w"], p.eps, True), st["tok_pos"], p.rotary_dim, p.theta)
    err = np.abs(k_fp32.astype(np.float64) - dequantize_kv(kc_dev, ks_dev))
    bound = np.repeat(ks_dev.astype(np.float64), KV_GROUP, axis=-1) * (0.5 + 2.0 ** -12)
    assert np.all(err <= bound), f"attn_prep int8 k: {int(np.sum(err > bound))} values off by more than scale / 2"
    keep = np.ones(kp_dev.codes.shape[:1] + kp_dev.codes.shape[2:3], bool)  # [page, row]
    keep[pg, rw] = False
    for what, got, was in (("k", kp_dev, cache.k_pages), ("v", vp_dev, cache.v_pages)):
        assert np.array_equal(got.codes.transpose(0, 2, 1, 3)[keep], was.codes.transpose(0, 2, 1, 3)[keep]), \
            f"attn_prep changed int8 {what} codes outside this step's positions"
        assert np.array_equal(got.scales.transpose(0, 2, 1, 3)[keep].view(np.uint32),
                              was.scales.transpose(0, 2, 1, 3)[keep].view(np.uint32)), \
            f"attn_prep changed int8 {what} scales outside this step's positions"


#: the decode tests' balanced split modes -> the kernel's keys granule (the other modes, "plan" / "one" /
#: "per_page", take the family's granule for the problem's KV dtype, AttnDecodeFamily.granule)
BALANCED = {"balanced16": 16, "balanced1": 1}
SPLIT_MODES = ("plan", "one", "per_page", *BALANCED)


def split_geometry(problem: AttentionProblem, batch: int, ctx, split_mode: str, decode) -> tuple[int, int, int]:
    """(splits, pages_per_split, keys granule) of a decode test's ``split_mode`` for B = ``batch`` on the plan
    context ``ctx``: "plan" the family ``decode``'s split rule, "one" a single split over every page, "per_page" a
    split per page (both page-aligned at the family's granule), the :data:`BALANCED` modes the plan's splits with
    their granule."""
    splits, pps = decode.splits(problem, batch, ctx)
    if split_mode == "one":
        splits, pps = 1, problem.max_pages
    elif split_mode == "per_page":
        splits, pps = problem.max_pages, 1
    return splits, pps, BALANCED.get(split_mode, decode.granule(problem))


def pool_bits(problem: AttentionProblem, k_pages, v_pages) -> dict:
    """Pool arrays by kernel argument name as a kernel holds them (host copies): bf16 bits (uint16) of fp32 pages,
    or the int8 codes and fp32 scales of :class:`Int8Pages`."""
    if problem.kv_dtype == "int8":
        return {"k_pages": k_pages.codes.copy(), "v_pages": v_pages.codes.copy(), "k_scales": k_pages.scales.copy(),
                "v_scales": v_pages.scales.copy()}
    return {"k_pages": bf16_bits(k_pages), "v_pages": bf16_bits(v_pages)}


#: positions past sinf / cosf's fast-path range (~1e5 rad at inv_freq 1), up to 2^18 - 1, and two near the start
FAR_POSITIONS = np.array([0, 1, 105_614, 105_616, 200_003, 262_143], np.int32)


def far_prep_case(problem: AttentionProblem, rng) -> tuple[PagedCache, dict]:
    """attn_prep's RoPE at :data:`FAR_POSITIONS` (one token per sequence): (cache, dev) with dev the kernel's
    arrays by argument name (host numpy; q_out NaN). Only positions 0 and 1 lie inside the page table (its rows are
    written); the rest are past it (not written). Check with :func:`check_far_prep`."""
    T = len(FAR_POSITIONS)
    qn = (0.1 * rng.standard_normal(problem.head_dim)).astype(np.float32)
    cache = make_cache(problem, [0] * T, [1] * T, rng)
    pools = pool_bits(problem, cache.k_pages, cache.v_pages)
    dev = {"proj": rng.standard_normal((T, problem.proj_dim)).astype(np.float32), "q_norm_w": qn, "k_norm_w": qn,
           "inv_freq": problem.inv_freq(), "tok_pos": FAR_POSITIONS.copy(), "tok_seq": np.arange(T, dtype=np.int32),
           "page_table": cache.page_table, **pools,
           "q_out": np.full((T, problem.heads_q, problem.head_dim), np.nan, np.float32)}
    return cache, dev


def check_far_prep(problem: AttentionProblem, cache: PagedCache, dev: dict, tol) -> None:
    """q_out of :func:`far_prep_case` (``dev`` read back to numpy) vs numpy's RMSNorm + RoPE of the same fp32 angles
    within ``tol`` (attn_common.cuh rope_cos_sin reduces a / pi in double; an fp32 reduction is off by up to ~0.02
    rad at 2^18), the in-table rows written and every other pool byte unchanged."""
    pos = FAR_POSITIONS
    q = problem.split_proj(dev["proj"])[0]
    q_ref = ref_partial_rope(ref_rmsnorm(q, dev["q_norm_w"], problem.eps, True), pos, problem.rotary_dim,
                             problem.theta)
    tol.check(dev["q_out"], q_ref, "attn_prep q_out at far positions")
    before = pool_bits(problem, cache.k_pages, cache.v_pages)
    near = pos // problem.page_size < cache.page_table.shape[1]
    pg, rw = cache.page_table[np.arange(len(pos))[near], pos[near] // problem.page_size], pos[near] % problem.page_size
    for k, v in before.items():
        got = np.array(dev[k])
        assert not np.array_equal(got[pg, :, rw], v[pg, :, rw]), f"{k}: the in-table rows were not written"
        got[pg, :, rw] = v[pg, :, rw]
        np.testing.assert_array_equal(got, v, err_msg=f"{k}: a row past the page table was written")
