"""The CUDA backend's speculative bookkeeping on the CPU (:class:`ninferc.runtime.cuda_backend.CudaBatchBackend`
over an engine double): which GDN state slot each verify step reads and writes, and for every MTP head row the
position, the token and the hidden row it reads -- the head's input for position p must be the model's hidden row
of p and the token at p + 1 (README-mtp.md beside the fixture), the draft chain's rows the head's own previous
output. The double labels every hidden row with (kind, sequence, position) instead of computing a model; the GPU
file (tests/server/test_spec_cuda_gpu.py) runs the real engine."""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest

from ninferc.errors import NinfercError
from ninferc.runtime.cuda_backend import CudaBatchBackend
from ninferc.runtime.paged_kv import Sequence

V = 1000
HID, OUT = 1, 2  # label kinds: the model's hidden row of a position, the head's output row of a position


def label(kind, seq, pos):
    return kind * 10**7 + seq * 10**5 + pos


class EngineDouble:
    """The engine surface the backend's speculative path uses. A main prefill / verify step labels the hidden rows
    of its tokens (``mtp_src`` from row 2B); an MTP step records its rows; the draft sampler's id for a row is a
    function of its token and position."""

    def __init__(self, max_batch: int, k: int, t_cap: int = 64, page_size: int = 16):
        self.cp = types.SimpleNamespace(zeros=np.zeros, empty=np.empty, int32=np.int32)
        self.max_batch, self.spec_tokens, self.page_size, self.vocab = max_batch, k, page_size, V
        self.verify_rows = max_batch * (k + 1)
        self.num_pages, self.prefill_chunk, self.memory = 64, t_cap, None
        self.config = types.SimpleNamespace(hidden_size=1)
        self.stream = contextlib.nullcontext()
        self.mtp_src = np.full(2 * max_batch + t_cap, -1, np.int64)
        self.tokens = np.zeros(t_cap, np.int64)
        self.logits = np.zeros((max_batch * (k + 1), V), np.float32)
        self.states = {}
        self._out = np.zeros(max_batch, np.int64)
        self.main, self.mtp_rows, self.chain, self.mtp_modes = [], [], [], []

    def pinned_int32(self, n):
        return np.zeros(n, np.int32)

    def host(self, a):
        return np.array(a)

    def mtp_hidden_rows(self, b):
        return self._out[:b].copy()

    def write_meta(self, **kw):
        self.meta = kw
        if kw.get("tokens") is not None:
            self.tokens[:len(kw["tokens"])] = kw["tokens"]

    def run(self, mode, T, B, R, *, mtp=False):  # noqa: N803
        m = self.meta
        sid = [pages[0] for pages in m["page_rows"]]  # a sequence's first page names it
        if not mtp:
            for t in range(T):
                self.mtp_src[2 * self.max_batch + t] = label(HID, sid[m["tok_seq"][t]], m["tok_pos"][t])
            self.main.append((mode, list(m["seq_slot"]), None if m.get("seq_slot_out") is None
                              else list(m["seq_slot_out"])))
        elif mode in ("prefill", "verify"):  # the head's rows: a prompt chunk's, or a round's (<= K + 1 each)
            self.mtp_modes.append((mode, max(np.diff(m["seq_start"]))))
            for t in range(T):
                self.mtp_rows.append((sid[m["tok_seq"][t]], int(m["tok_pos"][t]), int(self.tokens[t]),
                                      int(self.mtp_src[m["hidden_rows"][t]])))
        elif mode == "decode":
            for b in range(B):
                pos = int(m["tok_pos"][b])
                self.chain.append((sid[b], pos, int(self.tokens[b]), int(self.mtp_src[m["hidden_rows"][b]])))
                self._out[b] = label(OUT, sid[b], pos)
                self.tokens[b] = (7 * int(self.tokens[b]) + pos) % V  # this row's draft (the sampler below keeps it)
        else:
            assert mode == "sample_argmax"


def _backend(max_batch=2, k=3):
    be = CudaBatchBackend.__new__(CudaBatchBackend)
    be._setup(EngineDouble(max_batch, k), num_slots=max_batch, max_context=256, cuda_graph=False, spec_tokens=k)
    return be


def _seq(slot):
    s = Sequence(slot=slot, pages=[10 * (slot + 1) + i for i in range(8)])
    s.mtp = True
    return s


def test_mtp_rows_slots_and_drafts_follow_the_recipe():
    be = _backend()
    e = be.engine
    a, b = _seq(0), _seq(1)
    ida, idb = a.pages[0], b.pages[0]
    rng = np.random.default_rng(0)
    S = {ida: [int(x) for x in rng.integers(0, V, 8)], idb: [int(x) for x in rng.integers(0, V, 3)]}
    be.prefill(a, S[ida][:7])   # 6 head rows (positions 0..5): more than K + 1, the head's prefill mode
    be.prefill(a, S[ida][7:])   # the second chunk's first row reads the first chunk's pending row
    be.prefill(b, S[idb])
    last = {ida: 11, idb: 22}
    G = 4
    cur = {ida: 0, idb: 0}
    for ks, ms in (([3, 1], [2, 0]), ([0, 2], [0, 2]), ([2, 2], [1, 2])):
        n0 = len(e.chain)
        L = {x.pages[0]: x.length for x in (a, b)}
        drafts = be.draft([a, b], [last[ida], last[idb]], ks)
        assert [len(d) for d in drafts] == ks
        chain = e.chain[n0:]
        for x, k, d in zip((a, b), ks, drafts):
            sid = x.pages[0]
            rows = [r for r in chain if r[0] == sid]
            assert len(rows) == k
            for i, (_, pos, tok, hid) in enumerate(rows):
                assert pos == L[sid] - 1 + i
                assert tok == (last[sid] if i == 0 else d[i - 1])
                assert hid == (label(HID, sid, pos) if i == 0 else label(OUT, sid, pos - 1))
                assert d[i] == (7 * tok + pos) % V
        n_main = len(e.main)
        logits = be.verify([a, b], [[last[ida]] + drafts[0], [last[idb]] + drafts[1]])
        assert [lg.shape for lg in logits] == [(k + 1, V) for k in ks]
        mode, slots, outs = e.main[n_main]
        assert mode == "verify" and slots == [0 * G + cur[ida], 1 * G + cur[idb]] and outs == [0, G]
        be.accept([a, b], ms)
        for x, m, d in zip((a, b), ms, drafts):
            sid = x.pages[0]
            S[sid] += [last[sid]] + d[:m]
            assert x.length == len(S[sid]) == L[sid] + m + 1
            cur[sid] = m
            last[sid] = 500 + len(S[sid])  # the token the scheduler samples next
    # every position's row was computed once (in a packed pass, or as a draft chain's first row, which is kept; the
    # chained rows after it are dropped), from the model's hidden row of that position and the next token
    kept = e.mtp_rows + [r for r in e.chain if r[3] // 10**7 == HID]
    for x in (a, b):
        sid = x.pages[0]
        rows = sorted((pos, tok, hid) for s, pos, tok, hid in kept if s == sid)
        assert [r[0] for r in rows] == list(range(len(S[sid]) - 1))
        assert all(tok == S[sid][pos + 1] and hid == label(HID, sid, pos) for pos, tok, hid in rows)
        assert e.mtp_src[x.slot] == label(HID, sid, len(S[sid]) - 1)  # the last position's row is pending
    # the head's rows ran its verify mode where a sequence had at most K + 1 of them (every round's), else prefill
    assert all(mode == ("verify" if rows <= G else "prefill") for mode, rows in e.mtp_modes)
    assert {mode for mode, _ in e.mtp_modes} == {"prefill", "verify"}
    be.draft([a, b], [last[ida], last[idb]], [0, 0])  # a round with no draft: a one-token verify from slot cur
    be.verify([a, b], [[last[ida]], [last[idb]]])
    assert e.main[-1] == ("verify", [cur[ida], G + cur[idb]], [0, G])


def test_checkpoint_restore_and_refusals():
    be = _backend(max_batch=2, k=2)
    e = be.engine
    a = _seq(0)
    be.prefill(a, [1, 2, 3, 4])
    st = be.save_state(a)
    assert st["mtp.pending"] == label(HID, a.pages[0], 3)
    b = _seq(1)
    b.pages = list(a.pages)  # the restored sequence shares the prefix's pages (same first page: same labels)
    be.restore_state(b, st, [1, 2, 3, 4])
    assert b.length == 4 and be._mtp_len[1] == 3 and e.mtp_src[1] == label(HID, a.pages[0], 3)
    d = be.draft([b], [9], [2])
    assert e.chain[-2][1:] == (3, 9, label(HID, a.pages[0], 3)) and len(d[0]) == 2
    with pytest.raises(NinfercError, match="verifies 1 to 3"):
        be.verify([b], [[1, 2, 3, 4]])
    from ninferc.sampling import HostSampler, SamplingParams

    greedy = HostSampler(SamplingParams())
    for bad in (0, 3):  # the next round's drafts: 1..K
        with pytest.raises(NinfercError, match="drafts 1 to 2"):
            be.verify_round([b], [[1]], [greedy], bad)
    short = _seq(0)
    short.pages = short.pages[:1]  # 16 tokens of KV
    be.prefill(short, list(range(14)))
    n = len(e.main)
    with pytest.raises(NinfercError, match="needs 2 KV pages but holds 1"):  # 14 + 3 verified + 2 chained rows
        be.verify_round([short], [[1, 2, 3]], [greedy], 2)
    assert len(e.main) == n and short.length == 14  # refused before any step: nothing changed
    plain = _seq(0)
    plain.mtp = False
    be.prefill(plain, [5, 6])
    with pytest.raises(NinfercError, match="does not speculate"):
        be.draft([plain], [1], [1])
