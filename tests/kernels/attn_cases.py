"""Scenarios shared by the attention kernel tests (CPU: test_attention.py, GPU: test_attention_gpu.py):
the two model shapes and random paged KV caches whose free memory is garbage."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ninferc.targets.kernels.attention import AttentionProblem, round_bf16

#: the tiny fixture's attention (4 q / 2 kv heads of 64, rotary 16) and the 27B one (24 / 4 of 256,
#: rotary 64); 72 pages of 64 = 4608 tokens per sequence (room for a 4096 context plus a 200-token chunk)
TINY = AttentionProblem(4, 2, 64, 16, 1e7, 1e-6, page_size=64, max_pages=72)
BIG = AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, page_size=64, max_pages=72)
PROBLEMS = {"tiny": TINY, "27b": BIG}

#: magnitude of the garbage in free pages / rows (bf16-representable: 9984)
GARBAGE = 1e4


@dataclass
class PagedCache:
    """A paged KV cache in numpy: k_pages / v_pages fp32 [num_pages, Hkv, P, hd] holding bf16 values;
    page_table int32 [B, max_pages]; ``lengths[b]`` positions of sequence b hold real K/V (``k_ctx[b]``,
    ``v_ctx[b]``, [lengths[b], Hkv, hd]); everything else is garbage."""

    problem: AttentionProblem
    k_pages: np.ndarray
    v_pages: np.ndarray
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


def make_cache(problem: AttentionProblem, lengths, capacity, rng, *, extra_free: int = 3, nan: bool = True,
               scale: float = 1.0) -> PagedCache:
    """Random page tables: sequence b owns ceil(capacity[b] / P) pages drawn from a shuffled pool (plus
    ``extra_free`` never-used pages); positions < lengths[b] hold N(0, scale^2) bf16 K/V; free pages,
    rows at or after lengths[b], and unused page-table entries (pointing at a free page) hold garbage."""
    P, Hkv, hd = problem.page_size, problem.heads_kv, problem.head_dim
    B = len(lengths)
    need = [-(-int(c) // P) for c in capacity]
    assert all(int(l) <= int(c) for l, c in zip(lengths, capacity)) and max(need) <= problem.max_pages
    n_pages = sum(need) + extra_free
    perm = rng.permutation(n_pages)
    k_pages = garbage((n_pages, Hkv, P, hd), rng, nan)
    v_pages = garbage((n_pages, Hkv, P, hd), rng, nan)
    free_page = int(perm[-1])
    table = np.full((B, problem.max_pages), free_page, np.int32)
    k_ctx, v_ctx = [], []
    at = 0
    for b in range(B):
        table[b, :need[b]] = perm[at:at + need[b]]
        at += need[b]
        L = int(lengths[b])
        K = round_bf16(rng.standard_normal((L, Hkv, hd)).astype(np.float32) * scale)
        V = round_bf16(rng.standard_normal((L, Hkv, hd)).astype(np.float32) * scale)
        for p in range(L):
            k_pages[table[b, p // P], :, p % P] = K[p]
            v_pages[table[b, p // P], :, p % P] = V[p]
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
