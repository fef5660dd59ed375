"""`ninferc bench`: decode and prefill speed on the current GPU against the memory roofline measured in the
same run, with provenance, written as JSON (bench/results/).

Method (DESIGN.md section 8): the decode floor at batch 1 is (bytes read per token) / (measured copy
bandwidth). Bytes per token are counted from the compiled graph: every weight except the embedding
table (one row of it), the KV cache of every attention layer over the context, and the GDN state read
and written once. Decode speed is the median per-token latency of the real generation loop (graph
replay of model + sampler, metadata upload, one 4-byte read of the sampled id). Prefill speed is the
wall time of a chunked prefill of random tokens; its FLOPs count 2 per parameter outside the embedding
and LM head per prompt token (the issue's convention; attention and GDN core FLOPs are not counted).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ninferc.errors import NinfercError
from ninferc.sampling import SamplingParams


def copy_bandwidth_gbps(cp, nbytes: int = 4 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s counting bytes read + written (median of ``reps``)."""
    a = cp.empty(nbytes // 4, cp.float32)
    a.fill(1.0)
    b = cp.empty_like(a)
    times = []
    for _ in range(3):
        b[...] = a
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        cp.copyto(b, a)
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e) / 1e3)
    del a, b
    return 2 * nbytes / float(np.median(times)) / 1e9


def matmul_peak_tflops(n: int = 8192, reps: int = 10) -> float | None:
    """bf16 matrix-product throughput through PyTorch (the ceiling only; None without torch/GPU)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n ** 3 / float(np.median(times)) / 1e12


def bytes_per_decode_token(graph, context: int) -> int:
    """Bytes a batch-1 decode step must read (and the GDN state it writes) at ``context`` tokens: every
    param as stored (codes + scales for w8/w4; the embedding table only one row unless it is also the LM
    head), the KV cache of ``context`` tokens in its dtype (int8: codes + scales), and the GDN state read
    and written once."""
    total = 0
    emb = next(op.params["weight"] for op in graph.ops() if op.kind == "Embedding")
    lm = next(op.params["weight"] for op in graph.ops() if op.kind == "LMHead")
    for name, p in graph.params.items():
        total += p.nbytes if (name != emb or name == lm) else p.row_bytes()
    for s in graph.states.values():
        if s.kind == "kv":
            total += s.nbytes * context
        else:
            total += 2 * s.nbytes
    return total


def non_embedding_params(graph) -> int:
    """Parameters outside the embedding and the LM head."""
    emb = {op.params["weight"] for op in graph.ops() if op.kind in ("Embedding", "LMHead")}
    return sum(p.numel for n, p in graph.params.items() if n not in emb)


def git_commit(repo: Path | None = None) -> str:
    """The commit benchmarked, for a result file's provenance: ``$NINFERC_COMMIT`` when set (by whoever ships the
    tree to a machine whose ``.git`` is absent or stale), else ``git rev-parse --short HEAD`` of ``repo`` (default:
    this checkout) with ``-dirty`` appended when a tracked file differs from that commit -- so a stale ``.git``
    under a newer tree (the lent device's, ``bench/NOTES.md`` runs 192-201) says so instead of naming a commit that
    is not the one measured. ``"unknown"`` without git or outside a repository."""
    import os

    if os.environ.get("NINFERC_COMMIT"):
        return os.environ["NINFERC_COMMIT"]
    cwd = repo if repo is not None else Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        if not head:
            return "unknown"
        return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except OSError:
        return "unknown"


def family_key(step_name: str, family: str) -> str:
    """The row a step's time is summed into: its kernel family, and for the GEMV / GEMM families also the
    projection without its layer prefix (``"L12.mlp.down"`` -> ``"gemv:mlp.down"``)."""
    import re

    return f"{family}:{re.sub(r'^L[0-9]+[.]', '', step_name)}" if family in ("gemv", "gemm") else family


def profile_table(rows: list[tuple[str, str, float]], title: str) -> tuple[str, dict]:
    """Aggregate :meth:`Engine.profile` rows by kernel family (:func:`family_key`): (text table, {family: ms})."""
    fam: dict[str, list[float]] = {}
    for name, family, ms in rows:
        fam.setdefault(family_key(name, family), []).append(ms)
    total = sum(ms for _, _, ms in rows)
    lines = [f"{title}: {total:.3f} ms in {len(rows)} launches (sum of kernel times)",
             f"  {'family':<44} {'launches':>8} {'ms':>9} {'share':>6}"]
    agg = {k: sum(v) for k, v in fam.items()}
    for k, v in sorted(agg.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {k:<44} {len(fam[k]):>8} {v:>9.3f} {v / total:>6.1%}")
    return "\n".join(lines), agg


def run_bench(engine, *, prompt_tokens=(512, 8192), decode_tokens: int = 64, chunk: int = 8192,
              log: Callable[[str], None] = print, seed: int = 0, profile: bool = False, batch: int = 1,
              tokens_per_seq: tuple[int, ...] = ()) -> dict:
    """Prefill and decode timings on ``engine`` (one sequence), and with ``batch`` > 1 the decode of ``batch``
    sequences together at each prompt length.

    Decode at each prompt length: ``tok_s`` is 1 / the median time between consecutive ids of
    :meth:`Session.decode_stream` (how ``generate`` / ``ninferc run`` stream: one graph-replayed step queued ahead
    of the id read back); ``step_by_step_tok_s`` is 1 / the median of ``decode(tok); sample()`` with the host
    waiting for every id before the next launch (the GPU idles for the host's turn).
    ``batch_decode``: aggregate tok/s = batch / median step time, each step a replay of the captured B-sequence
    graph with the greedy sampler, timed up to reading back its B ids.
    ``tokens_per_seq``: at each prompt length, :func:`multi_token_steps` for these T (one sequence x T tokens with
    logits for every token: the shape of a speculative verify step; the ``verify`` program too where the engine has
    ``spec_tokens`` >= T - 1) against the one-token step, in this process; with ``profile``, per-family kernel
    times of each.
    Returns the result dict (no provenance).

    Raises:
        NinfercError: ``batch`` above the engine's ``max_batch``; a T above its ``max_logit_rows``."""
    if batch > engine.max_batch:
        raise NinfercError(f"--batch {batch} exceeds the engine's max_batch {engine.max_batch}")
    if tokens_per_seq and max(tokens_per_seq) > engine.max_logit_rows:
        raise NinfercError(f"--tokens-per-seq {max(tokens_per_seq)} exceeds the engine's logit rows "
                           f"({engine.max_logit_rows})")
    cp = engine.cp
    rng = np.random.default_rng(seed)
    V = engine.vocab  # noqa: N806
    res = {"decode": [], "prefill": []}
    greedy = SamplingParams()
    for L in prompt_tokens:  # noqa: N806
        ids = rng.integers(0, V, L).tolist()
        s = engine.session()
        s.prefill(ids[:min(L, 64)], min(chunk, 64))  # warm the kernels / routes of small steps
        s.synchronize()
        t0 = time.perf_counter()
        s.prefill(ids, min(chunk, L))
        s.synchronize()
        t1 = time.perf_counter()
        tok = s.sample(greedy)
        ttft = time.perf_counter() - t0
        res["prefill"].append({"prompt_tokens": L, "tok_s": L / (t1 - t0), "ttft_ms": ttft * 1e3,
                               "prefill_s": t1 - t0})
        res["peak_device_memory_bytes"] = max(res.get("peak_device_memory_bytes", 0), device_memory_used(cp))
        lat = []
        for i in range(decode_tokens):  # step by step: the host waits for each id before the next launch
            t = time.perf_counter()
            s.decode(tok)
            tok = s.sample(greedy)
            lat.append(time.perf_counter() - t)
        lat = lat[3:] if len(lat) > 8 else lat  # the first steps capture the graph
        gaps, t = [], time.perf_counter()
        for tok in s.decode_stream(greedy, decode_tokens):  # as generate() streams: one step queued ahead
            now = time.perf_counter()
            gaps.append(now - t)
            t = now
        gaps = gaps[3:] if len(gaps) > 8 else gaps  # the queue filling
        if tokens_per_seq:  # before the profile, whose prefill of one chunk resets the session
            rows = multi_token_steps(engine, s, tokens_per_seq, rng=rng, profile=profile, log=log)
            res.setdefault("tokens_per_seq", []).extend({"prompt_tokens": L, "context": s.seq.length, **r}
                                                        for r in rows)
            log(f"prompt {L} (context {s.seq.length}): one sequence x T tokens per step (logits for every token), "
                "median step time: " + ", ".join(
                    f"T={r['tokens']} {r['median_step_ms']:.2f} ms ({r['ratio_to_one']:.2f}x"
                    + (f"; verify program {r['verify_median_step_ms']:.2f} ms, {r['verify_ratio_to_one']:.2f}x"
                       if "verify_median_step_ms" in r else "") + ")" for r in rows))
        if profile:
            txt, agg = profile_table(engine.profile("decode", 1, 1, 1), f"decode step at context {L}")
            log(txt)
            res.setdefault("profile", {})[f"decode@{L}"] = agg
            T = min(chunk, L)  # noqa: N806
            s.prefill(ids[:T], T)  # leaves the metadata of one full chunk in place
            txt, agg = profile_table(engine.profile("prefill", T, 1, 1, reps=2), f"prefill chunk of {T} tokens")
            log(txt)
            res["profile"][f"prefill@{T}"] = agg
        med, smed = float(np.median(gaps)), float(np.median(lat))
        res["decode"].append({"context": L, "tok_s": 1.0 / med, "median_ms": med * 1e3,
                              "p90_ms": float(np.percentile(gaps, 90)) * 1e3,
                              "step_by_step_tok_s": 1.0 / smed, "step_by_step_median_ms": smed * 1e3,
                              "bytes_per_token": bytes_per_decode_token(engine.graph, L)})
        log(f"prompt {L}: prefill {L / (t1 - t0):,.0f} tok/s (TTFT {ttft * 1e3:.0f} ms); decode {1 / med:.2f} tok/s "
            f"(median {med * 1e3:.2f} ms between streamed ids; step by step {1 / smed:.2f} tok/s)")
        s.close()
        cp.cuda.runtime.deviceSynchronize()
        if batch > 1:
            ss = [engine.session() for _ in range(batch)]
            for x in ss:
                x.prefill(rng.integers(0, V, L).tolist(), min(chunk, L))
            engine.decode_batch(ss, [int(t) for t in rng.integers(0, V, batch)])  # eager; samples the next ids
            blat = []
            for i in range(decode_tokens):
                t = time.perf_counter()
                engine.decode_batch(ss, None)  # graph replay (captured on the first call)
                engine.batch_tokens(batch)
                blat.append(time.perf_counter() - t)
            blat = blat[3:] if len(blat) > 8 else blat
            bmed = float(np.median(blat))
            res.setdefault("batch_decode", []).append({"context": L, "batch": batch, "tok_s": batch / bmed,
                                                       "median_step_ms": bmed * 1e3, "single_tok_s": 1.0 / med})
            log(f"prompt {L}: batched decode of {batch}: {batch / bmed:,.1f} tok/s ({bmed * 1e3:.2f} ms per step)")
            for x in ss:
                x.close()
            cp.cuda.runtime.deviceSynchronize()
    return res


def multi_token_graph(engine, seq, mode: str, T: int, rng):  # noqa: N803
    """The captured step graph of one sequence x T tokens after ``seq``'s L tokens (positions L .. L + T - 1, a logit
    row per token), its metadata written on the engine stream: ``mode`` "decode" (T = 1), "prefill" (the GDN layers as
    a chunk) or "verify" (token by token, the state after token j into slot j: the speculative verify step). The tokens are drawn
    from ``rng``; ``seq`` must hold pages for L + T positions (``ensure_capacity``). Shared by
    :func:`multi_token_steps` and ``bench/graph_profile.py``.

    Raises:
        NinfercError: a T past the engine's prefill chunk or logit rows (:meth:`Engine.step_plan`)."""
    e, L = engine, seq.length  # noqa: N806
    with e.stream:
        e.write_meta(tok_pos=np.arange(L, L + T, dtype=np.int32), tok_seq=np.zeros(T, np.int32),
                     seq_start=[0, T], seq_ctx=[L + T], seq_slot=[seq.slot], row_index=np.arange(T, dtype=np.int32),
                     page_rows=[seq.pages], tokens=[int(x) for x in rng.integers(0, e.vocab, T)],
                     **({"seq_slot_out": [0], "token_rows": True} if mode == "verify" else {}))  # states: slots 0..T-1
        return e.step_graph(mode, T, 1, T)


def multi_token_steps(engine, session, tokens_per_seq, *, reps: int = 30, rng=None, profile: bool = False,
                      log: Callable[[str], None] | None = None) -> list[dict]:
    """Step time of one sequence x T tokens (positions L .. L + T - 1 after the session's L tokens; logits for all
    T rows, as a speculative verify step needs) for each T in ``tokens_per_seq``, and of the one-token decode step,
    each a CUDA graph (:meth:`~ninferc.runtime.engine.Engine.step_graph`) replayed ``reps`` times, each replay timed
    by CUDA events on the engine stream. T = 1 replays the decode program; T > 1 the prefill program (the GDN layers
    as a chunk) and, on an engine built with ``spec_tokens`` >= T - 1, also the ``verify`` program (the GDN layers
    token by token, the state after each token into its own slot: what speculative decoding runs).

    With ``profile``, each program's kernels are also timed one by one (:meth:`Engine.profile`, eager, CUDA events
    between launches, the median of min(5, ``reps``) runs) and summed per kernel family (``profile_table``; ``log``
    prints the tables): where the T-token step's time goes against the one-token step's.

    The session's KV at positions L.. and its GDN state are overwritten (the timing does not depend on them); its
    length is unchanged, so close it afterwards.

    Returns:
        [{"tokens": T, "median_step_ms", "ratio_to_one": median / the one-token step's median}] (T = 1 first); with
        the verify program, also ``verify_median_step_ms`` and ``verify_ratio_to_one``; with ``profile``,
        ``profile`` {family: ms} (the prefill program's) and ``verify_profile``.

    Raises:
        NinfercError: a T past the engine's prefill chunk or logit rows, or a context past ``max_context``.
    """
    e, cp = engine, engine.cp
    rng = rng if rng is not None else np.random.default_rng(0)
    seq = session.seq
    L = seq.length  # noqa: N806
    ts = [1] + [int(t) for t in tokens_per_seq if int(t) != 1]
    seq.ensure_capacity(L + max(ts), e.pages, e.max_pages)
    k_spec = int(getattr(e, "spec_tokens", 0) or 0)

    def timed(mode: str, T: int) -> tuple[float, dict | None]:  # noqa: N803
        g = multi_token_graph(e, seq, mode, T, rng)
        with e.stream:
            g.launch(stream=e.stream)  # warm
            evs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
            for a, b in evs:
                a.record(e.stream)
                g.launch(stream=e.stream)
                b.record(e.stream)
        e.stream.synchronize()
        ms = float(np.median([cp.cuda.get_elapsed_time(a, b) for a, b in evs]))
        agg = None
        if profile:
            txt, agg = profile_table(e.profile(mode, T, 1, T, reps=min(5, reps)),
                                     f"{mode} step of one sequence x {T} tokens at context {L}")
            if log is not None:
                log(txt)
        return ms, agg

    out = []
    for T in ts:  # noqa: N806
        ms, agg = timed("decode" if T == 1 else "prefill", T)
        r = {"tokens": T, "median_step_ms": ms, "ratio_to_one": ms / out[0]["median_step_ms"] if out else 1.0}
        if agg is not None:
            r["profile"] = agg
        if 1 < T <= k_spec + 1:
            vms, vagg = timed("verify", T)
            r.update(verify_median_step_ms=vms, verify_ratio_to_one=vms / out[0]["median_step_ms"])
            if vagg is not None:
                r["verify_profile"] = vagg
        out.append(r)
    return out


def accepted_schedule(rate: float, k: int, rounds: int, rng) -> list[int]:
    """Drafts accepted in each of ``rounds`` rounds of ``k`` drafts, for a forced acceptance ``rate`` (accepted /
    drafted): ``floor(rate k)`` or one more, drawn so that the mean is ``rate k`` (e.g. 0.76 at K = 3: 2 or 3
    accepted, 3.28 tokens per round -- the 27B heads' field reports, 73-80 % and 3.2-3.4 tokens per round).

    Raises:
        NinfercError: ``rate`` outside [0, 1] or ``k`` < 1."""
    if not 0.0 <= rate <= 1.0 or k < 1:
        raise NinfercError(f"--accept-rate must be in [0, 1] (found {rate}) with --draft-tokens >= 1 (found {k})")
    lo = int(np.floor(rate * k))
    frac = rate * k - lo
    return [min(k, lo + int(rng.random() < frac)) for _ in range(rounds)]


def spec_rounds(backend, *, prompt_tokens: int, rounds: int, accept_rate: float, chunk: int, log=print,
                seed: int = 0) -> dict:
    """Speculative decoding's machinery on ``backend`` (a :class:`~ninferc.runtime.cuda_backend.CudaBatchBackend`
    built with ``spec_tokens`` K), one sequence, at a forced acceptance profile: synthetic weights make real
    acceptance meaningless, so the drafts the head computes (their cost is timed) are replaced by a recorded greedy
    continuation of the same prompt, each round's draft after its scheduled accepted count corrupted
    (:func:`accepted_schedule`); the verify step then accepts exactly that many where the verify's greedy token
    equals the recording's (a near-tie between the two paths can part them: the measured acceptance is reported).

    Times (seconds on the host, each round synchronous: the verify rows' argmax ids are read back, as the server's
    greedy rounds do): the plain step
    (``decode`` + the greedy sampler, the sequence's id read back), the draft chain of K steps, the verify step of
    K + 1 tokens, and whole rounds; ``tok_s`` = tokens emitted per round / the rounds' median, ``plain_tok_s`` = 1 /
    the plain step's median. A round's work does not depend on how many drafts it keeps (K drafts, K + 1 verified
    tokens, the same reads), so ``profile_tok_s`` = the schedule's tokens per round / the rounds' median is the
    speed at the asked profile even where a near-tie parted the verify from the recording (on synthetic weights the
    logits are flat and near-ties common: at the 27B shape on an H100, 2026-12-05, rounds 12-18 of 24 parted and
    the measured acceptance was 0.61 of the 0.76 asked).

    With a backend that has ``verify_round`` the same schedule runs again as the server's rounds with one host read
    (acceptance on the device, the next round's K drafts chained behind the verify step, then replaced by the forced
    ones): ``one_read_round_ms``, ``one_read_tok_s``, ``one_read_tokens_per_round``, ``one_read_speedup``.

    Returns:
        dict: draft_tokens, accept_rate (asked and measured), tokens_per_round (measured) and
        schedule_tokens_per_round (asked), medians in ms (plain_step, draft_chain, draft_step = chain / K,
        verify_step, round), their ratios to the plain step, tok_s, plain_tok_s, speedup, profile_tok_s,
        profile_speedup (and the one-read figures above, with one_read_profile_tok_s / one_read_profile_speedup).
    Raises:
        NinfercError: a backend without speculation, or a context past its max."""
    from ninferc.runtime.paged_kv import Sequence
    from ninferc.runtime.spec import accept_ids
    from ninferc.sampling import HostSampler

    k = backend.spec_tokens
    if not k:
        raise NinfercError("spec_rounds needs a backend built with spec_tokens (the MTP head)")
    e = backend.engine
    rng = np.random.default_rng(seed)
    V = e.vocab  # noqa: N806
    ids = [int(x) for x in rng.integers(0, V, prompt_tokens)]
    n_rec = rounds * (k + 1) + k + 1
    pages = list(range(-(-(prompt_tokens + n_rec + k + 1) // e.page_size)))
    if len(pages) > e.num_pages:
        raise NinfercError(f"--prompt-tokens {prompt_tokens} + {n_rec} recorded tokens exceed the engine's KV pool")

    def prefill(seq):
        for s0 in range(0, prompt_tokens, chunk):
            lg = backend.prefill(seq, ids[s0:s0 + chunk])
        return lg

    def forced(pos, m_want):  # the recording's next k tokens, the one after m_want accepted corrupted
        drafts = rec[pos + 1:pos + 1 + k]
        if m_want < k:
            drafts[m_want] = (drafts[m_want] + 1) % V
        return drafts

    greedy = HostSampler(SamplingParams())
    # 1. the recording: plain greedy decode (timed: the plain step)
    rec_seq = Sequence(slot=0, pages=pages)
    rec = [backend.sample(prefill(rec_seq), [(greedy, None)])[0].token]
    plain = []
    while len(rec) < n_rec:
        t0 = time.perf_counter()
        rec.append(backend.sample(backend.decode([rec_seq], [rec[-1]]), [(greedy, None)])[0].token)
        plain.append(time.perf_counter() - t0)
    # 2. speculative rounds from the same prompt, drafts forced onto the recording
    seq = Sequence(slot=0, pages=pages)
    seq.mtp = True
    prefill(seq)
    sched = accepted_schedule(accept_rate, k, rounds, rng)
    pos, emitted, acc, t_draft, t_verify, t_round = 0, 0, [], [], [], []
    sampler = HostSampler(greedy.params)
    for m_want in sched:
        t0 = time.perf_counter()
        backend.draft([seq], [rec[pos]], [k])
        e.stream.synchronize()
        t1 = time.perf_counter()
        drafts = forced(pos, m_want)
        got = backend.verify_ids([seq], [[rec[pos]] + drafts], [sampler])[0]  # the rows' argmax, as a server does
        t2 = time.perf_counter()
        toks = accept_ids(sampler, got, drafts)
        backend.accept([seq], [len(toks) - 1])
        e.stream.synchronize()
        t3 = time.perf_counter()
        t_draft.append(t1 - t0)
        t_verify.append(t2 - t1)
        t_round.append(t3 - t0)
        acc.append(len(toks) - 1)
        emitted += len(toks)
        pos += len(toks)
        if [t.token for t in toks] != rec[pos - len(toks) + 1:pos + 1]:
            log(f"spec bench: round {len(acc)} parted from the recording (a near-tie between the verify and the "
                "plain step); later rounds accept less")
    # 3. the same rounds with one host read each (verify_round: acceptance on the device, the next round's drafts
    # chained behind the verify -- timed, then replaced by the forced ones as above)
    t_one, emitted_one = [], 0
    if hasattr(backend, "verify_round"):
        seq = Sequence(slot=0, pages=pages)
        seq.mtp = True
        prefill(seq)
        pos, sampler = 0, HostSampler(greedy.params)
        backend.draft([seq], [rec[pos]], [k])
        for m_want in sched:
            drafts = forced(pos, m_want)
            t0 = time.perf_counter()
            got, _, _ = backend.verify_round([seq], [[rec[pos]] + drafts], [sampler], k)
            t_one.append(time.perf_counter() - t0)
            toks = accept_ids(sampler, got[0], drafts)
            emitted_one += len(toks)
            pos += len(toks)
    med = lambda xs: float(np.median(xs)) * 1e3  # noqa: E731
    out = {"draft_tokens": k, "rounds": rounds, "prompt_tokens": prompt_tokens, "accept_rate_asked": accept_rate,
           "accept_rate": sum(acc) / (k * rounds), "tokens_per_round": emitted / rounds,
           "plain_step_ms": med(plain), "draft_chain_ms": med(t_draft), "draft_step_ms": med(t_draft) / k,
           "verify_step_ms": med(t_verify), "round_ms": med(t_round)}
    out["verify_ratio"] = out["verify_step_ms"] / out["plain_step_ms"]
    out["draft_step_ratio"] = out["draft_step_ms"] / out["plain_step_ms"]
    out["schedule_tokens_per_round"] = sum(m + 1 for m in sched) / rounds
    out["tok_s"] = out["tokens_per_round"] * 1e3 / out["round_ms"]
    out["plain_tok_s"] = 1e3 / out["plain_step_ms"]
    out["speedup"] = out["tok_s"] / out["plain_tok_s"]
    out["profile_tok_s"] = out["schedule_tokens_per_round"] * 1e3 / out["round_ms"]
    out["profile_speedup"] = out["profile_tok_s"] / out["plain_tok_s"]
    if t_one:
        out.update(one_read_round_ms=med(t_one), one_read_tokens_per_round=emitted_one / rounds)
        out["one_read_tok_s"] = out["one_read_tokens_per_round"] * 1e3 / out["one_read_round_ms"]
        out["one_read_speedup"] = out["one_read_tok_s"] / out["plain_tok_s"]
        out["one_read_profile_tok_s"] = out["schedule_tokens_per_round"] * 1e3 / out["one_read_round_ms"]
        out["one_read_profile_speedup"] = out["one_read_profile_tok_s"] / out["plain_tok_s"]
    return out


def synthetic_graph(preset: str, recipe_name: str, kv_dtype: str):
    """The compiled graph (:class:`~ninferc.ir.graph.Graph`) ``ninferc bench --preset`` runs: the preset's model
    through the pass pipeline with ``recipe_name`` weights and ``kv_dtype`` KV. Needs no GPU.

    Raises:
        NinfercError: unknown preset (ConfigError) or a recipe the pipeline rejects (QuantError, e.g. a w4
            embedding); ShapeError only for a graph the builder got wrong."""
    from ninferc.ir.config import preset as get_preset
    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph

    return run_pipeline(build_graph(get_preset(preset), lm_rows="last"), weights=recipe_name, kv_dtype=kv_dtype)


def device_target(arch=None, sku=None):
    """The :class:`~ninferc.targets.target.Target` a synthetic artifact is planned for on this GPU: ``arch`` (an
    :class:`~ninferc.targets.arch.Arch`; default the device's) with ``sku`` (a :class:`~ninferc.targets.skus.Sku`
    of that arch) or, without one, the device's SM count (``sms_source`` ``"device"``, bandwidth unknown: the
    arch's typical figure per SM, as a plan for ``--sms``).

    Raises:
        TargetError: a SKU of another arch than the target's; NinfercError: no usable GPU (CuPy missing)."""
    from ninferc.runtime.kernels import device_arch, device_sm_count
    from ninferc.targets.arch import get_arch
    from ninferc.targets.target import make_target

    a = arch if arch is not None else get_arch(device_arch())
    if sku is not None:
        return make_target(a, sku)
    return make_target(a, None, device_sm_count(), sms_source="device")


def synthetic_artifact(preset: str, recipe_name: str, kv_dtype: str, *, target=None, max_context: int,
                       batch: int = 1, graph=None, mtp: bool = False):
    """The in-memory artifact ``ninferc bench --preset`` runs: the preset's graph through the pipeline with
    ``recipe_name`` weights and ``kv_dtype`` KV, planned for ``target`` (a :class:`~ninferc.targets.target.Target`;
    default :func:`device_target`: the device's arch and SM count) with KV capacity ``max_context`` tokens and
    decode batches 1 and ``batch``; weights are generated on the GPU when the engine loads it. ``graph``: the
    :func:`synthetic_graph` of the same arguments when the caller has built it already. ``mtp``: with the MTP head
    the Qwen3.5 / 3.6 checkpoints carry (one layer; the preset's own count when it declares one), planned alike.

    Raises:
        NinfercError: unknown preset, a recipe the pipeline rejects, or a plan that does not fit."""
    from ninferc.ir.config import preset as get_preset
    from ninferc.runtime.synthetic import SyntheticArtifact
    from ninferc.targets.model_plan import plan_model

    cfg = get_preset(preset)
    graph = graph if graph is not None else synthetic_graph(preset, recipe_name, kv_dtype)
    target = target if target is not None else device_target()
    mp = plan_model(graph, target, max_context=max_context,
                    decode_batches=(1, batch) if batch > 1 else (1,), prefill_tokens=(1, 64, 1024))
    if not mtp:
        return SyntheticArtifact(cfg, graph, mp)
    import dataclasses

    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_mtp_graph

    cfg = dataclasses.replace(cfg, mtp_num_hidden_layers=cfg.mtp_num_hidden_layers or 1)
    mg = run_pipeline(build_mtp_graph(cfg, lm_rows="last"), weights=recipe_name, kv_dtype=kv_dtype)
    mtp_plan = plan_model(mg, target, max_context=max_context, decode_batches=(1,), prefill_tokens=(1, 8))
    return SyntheticArtifact(cfg, graph, mp, mtp_graph=mg, mtp_plan=mtp_plan)


def device_memory_used(cp) -> int:
    """Bytes of device memory in use now (cudaMemGetInfo: total - free; every process and context on the
    device counts, so run benchmarks alone)."""
    free, total = cp.cuda.runtime.memGetInfo()
    return int(total - free)


def device_identity(cp, props: dict) -> dict:
    """Which physical GPU ran a benchmark, so results from different machines of one SKU can be told apart:
    ``uuid`` (the GPU's UUID, hex), ``pci_bus_id`` (``domain:bus:device``), ``driver`` / ``runtime`` (CUDA versions
    as ``major.minor``), ``clock_khz`` / ``memory_clock_khz`` (the device's rated clocks, kHz; where the runtime
    reports them -- CUDA 13 dropped them from cudaDeviceProp) -- all from the CUDA runtime's device properties
    (cudaGetDeviceProperties, cudaDriverGetVersion, cudaRuntimeGetVersion). Fields the runtime does not
    report are left out."""
    out: dict = {}
    uuid = props.get("uuid")
    if isinstance(uuid, (bytes, bytearray)) and uuid:
        out["uuid"] = bytes(uuid).hex()
    if all(k in props for k in ("pciDomainID", "pciBusID", "pciDeviceID")):
        out["pci_bus_id"] = f"{props['pciDomainID']:04x}:{props['pciBusID']:02x}:{props['pciDeviceID']:02x}"
    for key, field in (("clock_khz", "clockRate"), ("memory_clock_khz", "memoryClockRate")):
        if props.get(field):
            out[key] = int(props[field])

    def ver(v: int) -> str:
        return f"{v // 1000}.{v % 1000 // 10}"

    try:
        out["driver"] = ver(int(cp.cuda.runtime.driverGetVersion()))
        out["runtime"] = ver(int(cp.cuda.runtime.runtimeGetVersion()))
    except Exception:  # noqa: BLE001 -- provenance only; a runtime without these calls leaves them out
        pass
    return out


def finish(res: dict, *, engine, copy_gbps: float, peak_tflops: float | None, command: str, weights: str) -> dict:
    """Add provenance, rooflines and fractions to a :func:`run_bench` result.

    ``weights`` names the weight format (recipe); the KV dtype comes from the engine's graph. The memory
    terms are the engine's memory plan (weights as stored, KV pages for max_context, GDN state, the
    activation arena, workspaces, logits, metadata, CUDA-graph allowance); ``peak_device_memory_bytes`` is
    the largest total-minus-free seen after a prefill (includes the CUDA context and CuPy's pool)."""
    cp = engine.cp
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    host = device_identity(cp, props)
    for d in res["decode"]:
        d["roofline_tok_s"] = copy_gbps * 1e9 / d["bytes_per_token"]
        d["fraction_of_roofline"] = d["tok_s"] / d["roofline_tok_s"]
    flops_per_token = 2 * non_embedding_params(engine.graph)
    for p in res["prefill"]:
        p["tflops"] = flops_per_token * p["tok_s"] / 1e12
        if peak_tflops:
            p["fraction_of_matmul_peak"] = p["tflops"] / peak_tflops
    free, total = cp.cuda.runtime.memGetInfo()
    out = {"gpu": name, "sms": engine.dev_sms, "commit": git_commit(), "command": command,
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "target": engine.target, "plan": engine.plan_mode,
           "weights": weights, "kv_dtype": engine.graph.meta.get("kv_dtype", "bf16"), "copy_bandwidth_gbps": copy_gbps, "matmul_peak_tflops": peak_tflops,
           "memory_plan_bytes": dict(engine.memory.terms), "device_memory_used_bytes": int(total - free),
           "weights_bytes_by_format": engine.graph.bytes_by_format(), "device": host,
           **res}
    return out


def write_json(result: dict, path: str | Path) -> None:
    """Write ``result`` as indented JSON to ``path`` (parent folders created)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result, indent=1) + "\n")
