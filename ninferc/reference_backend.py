"""The CPU backend: the numpy reference executor behind the :class:`~ninferc.generate.Backend` API."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ninferc.errors import NinfercError
from ninferc.ir.config import ModelConfig
from ninferc.ir.qwen3_5 import build_graph, build_mtp_graph, mtp_param_specs
from ninferc.ir.reference import ReferenceExecutor, ref_linear
from ninferc.sampling import HostSampler, SampleError, SamplingParams, rows_on_device, score_rows


class ReferenceBackend:
    """One sequence on the numpy reference executor (fp32 math on the stored weights).

    Args:
        config: the model config.
        weights: IR param name -> array (a Checkpoint or an artifact's tensors).
        gdn_mode: see :class:`ReferenceExecutor`.
        graph: the graph to execute (an artifact's compiled graph, whose weights are the artifact's
            tensors); default the unfused graph of ``config`` over checkpoint weights.
        max_context: most tokens a sequence may hold (prompt + generated), like the CUDA engine's KV
            capacity; None = unbounded.

    Raises:
        NinfercError: from prefill/decode when the sequence would exceed ``max_context``.
    """

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray], *, gdn_mode: str = "auto",
                 graph=None, max_context: int | None = None):
        self.config = config
        self.max_context = max_context
        self.exec = ReferenceExecutor(graph if graph is not None else build_graph(config, lm_rows="last"), weights,
                                      gdn_mode=gdn_mode)
        self.state = self.exec.new_state()
        self.logits: np.ndarray | None = None
        self._sampler: HostSampler | None = None

    def prefill(self, ids: list[int], chunk: int) -> None:
        """Reset the sequence and run ``ids`` in chunks of ``chunk`` tokens; keeps the last logits."""
        self._check(len(ids))
        self.state = self.exec.new_state()
        self._sampler = None
        for s in range(0, len(ids), chunk):
            self.logits = self.exec.forward(ids[s:s + chunk], self.state)[-1]

    def decode(self, token: int) -> None:
        """Append ``token`` and compute the logits after it."""
        self._check(self.state.length + 1)
        self.logits = self.exec.forward([token], self.state)[-1]

    def sample(self, params: SamplingParams) -> int:
        """Sample the next id from the latest logits on the host (seeded numpy Generator)."""
        if self._sampler is None or self._sampler.params != params:
            self._sampler = HostSampler(params)
        return self._sampler.sample(self.logits).token

    def _check(self, tokens: int) -> None:
        if self.max_context is not None and tokens > self.max_context:
            raise NinfercError(f"context of {tokens} tokens exceeds the max context {self.max_context} (--max-context)")

    def synchronize(self) -> None:
        """Nothing to wait for on the CPU."""
        pass


class _SlotStates:
    """A mapping state name -> the array of one GDN slot in a pool (what :class:`SequenceState` keeps in a dict):
    reads return the slot's array, writes copy into it."""

    def __init__(self, pool: dict, slot: int):
        self.pool, self.slot = pool, slot

    def __getitem__(self, name: str) -> np.ndarray:
        return self.pool[name][self.slot]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.pool[name][self.slot] = value


class _PagedSequence:
    """The :class:`~ninferc.ir.reference.SequenceState` interface over a backend's pools for one
    :class:`~ninferc.runtime.paged_kv.Sequence`: K/V rows are written into the pages its page table lists and
    read back through it; conv / recurrent state live in its GDN slot. ``length`` is the sequence's."""

    def __init__(self, backend: "ReferenceBatchBackend", seq, length_attr: str = "length"):
        self.b, self.seq, self._len = backend, seq, length_attr
        self.conv = _SlotStates(backend.conv, seq.slot)
        self.recurrent = _SlotStates(backend.recurrent, seq.slot)

    @property
    def length(self) -> int:
        return getattr(self.seq, self._len)

    @length.setter
    def length(self, n: int) -> None:
        setattr(self.seq, self._len, n)

    def kv_append(self, name: str, k: np.ndarray, v: np.ndarray):
        """Store K / V rows [T, Hkv, d] at positions length.. through the page table; return the context's
        (K, V) [length + T, Hkv, d] gathered back from the pages."""
        P = self.b.page_size  # noqa: N806
        start, T = self.length, k.shape[0]  # noqa: N806
        end = start + T
        if -(-end // P) > len(self.seq.pages):
            raise NinfercError(f"sequence at {start} tokens + {T} needs {-(-end // P)} KV pages but holds "
                               f"{len(self.seq.pages)} (page size {P})")
        kp, vp = self.b.k_pages[name], self.b.v_pages[name]
        pos = np.arange(start, end)
        pages = np.asarray(self.seq.pages, np.int64)
        kp[pages[pos // P], pos % P] = k
        vp[pages[pos // P], pos % P] = v
        pos = np.arange(end)
        return kp[pages[pos // P], pos % P], vp[pages[pos // P], pos % P]


def reference_memory_plan(config: ModelConfig, graph, *, num_pages: int, page_size: int, num_slots: int,
                          weights=None, mtp_graph=None):
    """Host bytes the :class:`ReferenceBatchBackend` will hold: ``weights`` (every graph parameter converted to
    fp32 once, 4 bytes per element), ``kv_pages`` (``num_pages * page_size`` tokens x K and V of every attention
    layer in fp32) and ``gdn_state`` (``num_slots`` x the conv window and recurrent matrix of every GDN layer,
    fp32). Returns a :class:`~ninferc.runtime.memory.MemoryPlan`."""
    from ninferc.runtime.memory import MemoryPlan

    g = graph if graph is not None else build_graph(config, lm_rows="last")
    mp = MemoryPlan()
    mp.add("weights", sum(4 * p.numel for p in g.params.values()))
    kv = sum(4 * 2 * s.shape[1] * s.shape[2] for s in g.states.values() if s.kind == "kv")
    if mtp_graph is not None:
        mp.add("mtp_weights", sum(4 * p.numel for n, p in mtp_graph.params.items() if n not in g.params))
        kv += sum(4 * 2 * s.shape[1] * s.shape[2] for s in mtp_graph.states.values() if s.kind == "kv")
    mp.add("kv_pages", num_pages * page_size * kv)
    fixed = 0
    for s in g.states.values():
        if s.kind in ("conv", "recurrent"):
            n = 4
            for d in s.shape:
                n *= d
            fixed += n
    mp.add("gdn_state", num_slots * fixed)
    return mp


class _Sampled:
    """A sample already drawn, behind the pending-sample interface (``result()``)."""

    def __init__(self, got: list):
        self.got = got

    def result(self) -> list:
        return self.got


class ReferenceBatchBackend:
    """The numpy reference executor behind the batched backend interface (:mod:`ninferc.runtime.backend`): a
    loop over sequences, each step computed exactly as :class:`ReferenceBackend` computes it for one sequence
    alone (so a request's greedy output does not depend on what shares its steps), with K/V held in a paged pool
    and GDN state in slots, like the CUDA engine's.

    Args:
        config, weights, graph: as :class:`ReferenceBackend`.
        num_pages: KV pages in the pool. page_size: tokens per page. num_slots: GDN state slots.
        max_context: most tokens one sequence may hold.

    Memory: K and V are kept in fp32 (the reference's arithmetic): ``num_pages * page_size`` tokens x
    ``2 * Hkv * head_dim * 4`` bytes per attention layer; GDN state ``num_slots`` x (conv + recurrent) fp32.
    """

    name = "reference"

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray], *, num_pages: int, page_size: int,
                 num_slots: int, max_context: int, graph=None, mtp_graph=None, draft_lm_head: str = "bf16"):
        if min(num_pages, page_size, num_slots, max_context) < 1:
            raise NinfercError(f"num_pages ({num_pages}), page_size ({page_size}), num_slots ({num_slots}) and "
                               f"max_context ({max_context}) must be >= 1")
        self.config, self.vocab_size = config, config.vocab_size
        self.page_size, self.num_pages, self.num_slots, self.max_context = page_size, num_pages, num_slots, max_context
        self.exec = ReferenceExecutor(graph if graph is not None else build_graph(config, lm_rows="last"), weights)
        g = self.exec.graph
        #: the tensor the LM head reads: the model's hidden state after its final norm (the MTP head's input), and
        #: the head's weight (a scored prefill applies it to every row)
        self._lm_in, self._lm_weight = next((op.inputs[0], op.params["weight"]) for op in g.ops() if op.kind == "LMHead")
        self.mtp_exec = None
        if mtp_graph is None and config.mtp_num_hidden_layers and all(n in weights for n in mtp_param_specs(config)):
            mtp_graph = build_mtp_graph(config, lm_rows="last")
        if draft_lm_head not in ("bf16", "w8", "w4"):
            raise NinfercError(f"--draft-lm-head must be bf16, w8 or w4, found {draft_lm_head!r}")
        self.draft_lm_head = draft_lm_head
        if mtp_graph is not None:
            self.mtp_exec = ReferenceExecutor(mtp_graph, weights)
            if draft_lm_head != "bf16":  # the drafts' LM head in a narrower format (verify keeps the full head)
                from ninferc.ir.quant import dequantize, quantize

                head = next(op.params["weight"] for op in mtp_graph.ops() if op.kind == "LMHead")
                values = self.mtp_exec.w(head)  # fp32, dequantised when the artifact stores it quantised
                self.mtp_exec._w[head] = dequantize(quantize(values, draft_lm_head, name=head))
        self.k_pages, self.v_pages, self.conv, self.recurrent = {}, {}, {}, {}
        states = list(g.states.values()) + (list(mtp_graph.states.values()) if mtp_graph is not None else [])
        self._hidden: dict[int, list] = {}   # slot -> hidden rows of positions mtp_length .. length-1
        self._tokens: dict[int, list] = {}   # slot -> the tokens at positions 0 .. length-1 (speculating sequences)
        self._verify: dict[int, tuple] = {}  # slot -> (start, GDN state after each token, hidden rows, tokens)
        for s in states:
            if s.kind == "kv":
                _, hkv, d = s.shape
                self.k_pages[s.name] = np.zeros((num_pages, page_size, hkv, d), np.float32)
                self.v_pages[s.name] = np.zeros((num_pages, page_size, hkv, d), np.float32)
            elif s.kind == "conv":
                self.conv[s.name] = np.zeros((num_slots,) + tuple(s.shape), np.float32)
            elif s.kind == "recurrent":
                self.recurrent[s.name] = np.zeros((num_slots,) + tuple(s.shape), np.float32)
        self.memory = reference_memory_plan(config, g, num_pages=num_pages, page_size=page_size, num_slots=num_slots,
                                            mtp_graph=mtp_graph)

    @property
    def has_mtp(self) -> bool:
        """Whether the model's MTP head is loaded (speculative decoding with ``--spec mtp`` is possible)."""
        return self.mtp_exec is not None

    # -- state ------------------------------------------------------------------------------------------
    def reset_slot(self, slot: int) -> None:
        """Zero GDN slot ``slot`` (a new sequence starts from zero state)."""
        for pool in (*self.conv.values(), *self.recurrent.values()):
            pool[slot] = 0.0

    def poison(self, pages=(), slots=()) -> None:
        """Fill KV ``pages`` and GDN ``slots`` with NaN (tests: free memory is never trusted clean)."""
        pages = list(pages)
        for pool in (*self.k_pages.values(), *self.v_pages.values()):
            pool[pages] = np.nan
        for s in slots:
            for pool in (*self.conv.values(), *self.recurrent.values()):
                pool[s] = np.nan

    def _view(self, seq) -> _PagedSequence:
        if not 0 <= seq.slot < self.num_slots:
            raise NinfercError(f"sequence holds GDN slot {seq.slot}, outside 0..{self.num_slots - 1}")
        if seq.length == 0:
            self.reset_slot(seq.slot)
            seq.mtp_length = 0
            self._hidden[seq.slot], self._tokens[seq.slot] = [], []
            self._verify.pop(seq.slot, None)
        if seq.mtp and self.mtp_exec is None:
            raise NinfercError("this model has no MTP head: speculative decoding (--spec mtp) is not possible")
        return _PagedSequence(self, seq)

    def _forward(self, seq, ids: list[int], *, hidden: bool = False):
        """The model over ``ids`` appended to ``seq``; logits of the last token [V] (with ``hidden``: and the
        hidden rows the LM head reads, [T, H] fp32). A speculating sequence keeps the hidden rows (the MTP head's
        input) and the tokens."""
        view = self._view(seq)
        if not (seq.mtp or hidden):
            return self.exec.forward(list(ids), view)[-1]
        logits, env = self.exec.forward(list(ids), view, capture=True)
        rows = np.asarray(env[self._lm_in], np.float32)
        if seq.mtp:
            self._hidden[seq.slot].extend(rows)
            self._tokens[seq.slot].extend(int(t) for t in ids)
        return (logits[-1], rows) if hidden else logits[-1]

    def _snapshot(self, slot: int) -> dict:
        return {n: p[slot].copy() for n, p in (*self.conv.items(), *self.recurrent.items())}

    def _restore(self, slot: int, snap: dict) -> None:
        for n, a in snap.items():
            (self.conv if n in self.conv else self.recurrent)[n][slot] = a

    def _check(self, seq, tokens: int) -> None:
        if seq.length + tokens > self.max_context:
            raise NinfercError(f"context of {seq.length + tokens} tokens exceeds the max context {self.max_context}")

    # -- steps ------------------------------------------------------------------------------------------
    def prefill(self, seq, ids: list[int]) -> np.ndarray:
        """Append the chunk ``ids`` to ``seq``; logits of its last token [1, V] fp32. A speculating sequence also
        gets the MTP rows of every position whose next token is now known (all but the last), so the KV pages of
        a finished prefill are complete for the head too (the prefix cache shares them)."""
        if not ids:
            raise NinfercError("prefill needs at least one token")
        self._check(seq, len(ids))
        logits = self._forward(seq, ids)[None]
        if seq.mtp:
            self._mtp_rows(seq, seq.length - 1)
        return logits

    #: most tokens of one :meth:`prefill_scored` chunk (the scheduler's cap; the CUDA backend's is its engine's logit
    #: rows): small, so that the CPU tests score a prompt over several chunks as the GPU does
    max_scored_tokens = 16

    def prefill_scored(self, seq, ids: list[int], targets: list[int], top_n: int):
        """:meth:`prefill` of the chunk ``ids`` that also scores the prompt: ``targets[i]`` (the prompt's token after
        ``ids[i]``; ``len(targets) <= len(ids)``, the chunk's last token unscored where the prompt ends there) under
        the logits after ``ids[i]``, with ``top_n`` alternatives (:func:`~ninferc.sampling.score_rows`).

        Returns:
            (the last token's logits [1, V] fp32, as :meth:`prefill`'s, one PromptScore per target).

        Raises:
            NinfercError: an empty chunk, more targets than tokens or than :attr:`max_scored_tokens`, a context over
                ``max_context``. NonFiniteLogits: a scored row is not finite (the chunk is appended all the same).
        """
        if not ids:
            raise NinfercError("prefill needs at least one token")
        if len(ids) > self.max_scored_tokens or len(targets) > len(ids):
            raise NinfercError(f"a scored prefill chunk takes at most {self.max_scored_tokens} tokens and one target "
                               f"per token; found {len(ids)} tokens, {len(targets)} targets")
        self._check(seq, len(ids))
        last, hidden = self._forward(seq, ids, hidden=True)
        if seq.mtp:
            self._mtp_rows(seq, seq.length - 1)
        logits = ref_linear(hidden[:len(targets)], self.exec.w(self._lm_weight))
        return last[None], score_rows(logits, targets, top_n)

    def _mtp_rows(self, seq, upto: int, last_token: int | None = None):
        """MTP rows ``seq.mtp_length .. upto - 1`` (row t: hidden at t, token at t + 1; the token after the last
        appended one is ``last_token``); kept in the MTP KV. Returns the head's (logits, env) of the pass, or None
        when there is no row to compute."""
        slot = seq.slot
        n = upto - seq.mtp_length
        if n < 1:
            return None
        toks = self._tokens[slot][seq.mtp_length + 1:upto + 1]
        if len(toks) < n:
            toks = toks + [int(last_token)]
        hidden = np.stack(self._hidden[slot][:n])
        out = self.mtp_exec.forward(toks, _PagedSequence(self, seq, "mtp_length"), capture=True,
                                    inputs={"hidden": hidden})
        del self._hidden[slot][:n]
        return out

    # -- prefix-cache checkpoints ------------------------------------------------------------------------
    def settle(self, seq) -> None:
        """Compute the MTP rows of a speculating sequence whose next tokens are appended already (all but the last
        position), so the pages up to its length hold the head's KV too."""
        if seq.mtp:
            self._mtp_rows(seq, seq.length - 1)

    def state_nbytes(self, seq) -> int:
        """Bytes of :meth:`save_state` for ``seq``: every GDN layer's conv window and recurrent matrix (fp32), plus a
        speculating sequence's pending hidden rows."""
        n = sum(p[0].nbytes for p in (*self.conv.values(), *self.recurrent.values()))
        if seq.mtp:
            n += sum(h.nbytes for h in self._hidden.get(seq.slot, []))
        return n

    def save_state(self, seq) -> dict:
        """A copy of what resuming ``seq`` at its current length needs besides its KV pages."""
        st = {"gdn": self._snapshot(seq.slot), "mtp_length": seq.mtp_length}
        if seq.mtp:
            st["hidden"] = [h.copy() for h in self._hidden.get(seq.slot, [])]
        return st

    def restore_state(self, seq, state: dict, tokens) -> None:
        """Put ``seq`` (its pages already holding the prefix's KV) at ``len(tokens)`` tokens with the saved state."""
        if seq.mtp != ("hidden" in state):
            raise NinfercError("restore_state: a speculating sequence needs a speculating sequence's checkpoint")
        self._restore(seq.slot, state["gdn"])
        seq.length, seq.mtp_length = len(tokens), state["mtp_length"]
        self._verify.pop(seq.slot, None)
        self._hidden[seq.slot] = [h.copy() for h in state.get("hidden", [])]
        self._tokens[seq.slot] = [int(t) for t in tokens] if seq.mtp else []

    def copy_page(self, src: int, dst: int) -> None:
        """Copy KV page ``src`` into page ``dst`` (every attention layer, the MTP head's included)."""
        for pool in (*self.k_pages.values(), *self.v_pages.values()):
            pool[dst] = pool[src]

    def decode(self, seqs: list, tokens: list[int]) -> np.ndarray:
        """One token per sequence (row order); logits [B, V] fp32."""
        if len(seqs) != len(tokens) or not seqs:
            raise NinfercError(f"decode: {len(tokens)} tokens for {len(seqs)} sequences")
        out = []
        for seq, t in zip(seqs, tokens):
            self._check(seq, 1)
            out.append(self._forward(seq, [int(t)]))
        return np.stack(out)

    # -- speculative decoding (MTP) ----------------------------------------------------------------------
    def draft(self, seqs: list, last_tokens: list[int], ks: list[int], *, return_logits: bool = False):
        """Greedy MTP drafts: for sequence i, ``ks[i]`` draft ids following ``last_tokens[i]`` (its sampled, not yet
        appended token).

        First the MTP rows of every position the head has not seen (``seq.mtp_length .. seq.length - 1``: row t
        takes the hidden state at t and the token at t + 1, the last one ``last_tokens[i]``) are computed and kept
        in the MTP KV (``mtp_length`` becomes ``length``); the last row's logits give draft 1. Drafts 2..k chain the
        head on its own output (row t + 1 takes draft j and the previous row's ``mtp_hidden``); those chained rows
        are dropped afterwards (``mtp_length`` is restored). Returns the draft lists (and their logits rows when
        ``return_logits``)."""
        out, lg = [], []
        for seq, last, k in zip(seqs, last_tokens, ks):
            if k < 1:
                out.append([])
                lg.append([])
                continue
            if not seq.mtp or self.mtp_exec is None:
                raise NinfercError("draft: the sequence does not speculate, or the model has no MTP head")
            self._check(seq, k)
            logits, env = self._mtp_rows(seq, seq.length, last)
            mview = _PagedSequence(self, seq, "mtp_length")
            committed = seq.mtp_length
            rows = [logits[-1]]
            d = [int(np.argmax(logits[-1]))]
            for _ in range(1, k):
                logits, env = self.mtp_exec.forward([d[-1]], mview, capture=True,
                                                    inputs={"hidden": env["mtp_hidden"][-1:]})
                rows.append(logits[-1])
                d.append(int(np.argmax(logits[-1])))
            seq.mtp_length = committed
            out.append(d)
            lg.append(rows)
        return (out, lg) if return_logits else out

    def verify(self, seqs: list, token_lists: list[list[int]]) -> list[np.ndarray]:
        """The model over ``[last token, draft 1 .. draft k]`` of each sequence: logits [k + 1, V] each. Computed one
        token at a time (the same arithmetic as plain decode steps, so speculation is lossless bit for bit), keeping
        the GDN state after every token (the CUDA engine keeps it in k + 1 state slots); :meth:`accept` then picks
        the one to continue from."""
        out = []
        for seq, toks in zip(seqs, token_lists):
            self._check(seq, len(toks))
            start, snaps, hid, rows = seq.length, [], [], []
            for t in toks:
                view = self._view(seq)
                logits, env = self.exec.forward([int(t)], view, capture=True)
                rows.append(logits[-1])
                hid.append(np.asarray(env[self._lm_in][-1], np.float32))
                snaps.append(self._snapshot(seq.slot))
            self._verify[seq.slot] = (start, snaps, hid, [int(t) for t in toks])
            out.append(np.stack(rows))
        return out

    def verify_ids(self, seqs: list, token_lists: list[list[int]], samplers: list) -> list[np.ndarray]:
        """:meth:`verify`, returning a token drawn from every row instead of its logits (int [k + 1] per sequence; -1
        for a row whose maximum is not finite, as the GPU sampler answers): a greedy sampler's rows give their argmax,
        a sampling one's a draw from its generator (:meth:`~ninferc.sampling.HostSampler.__call__`, not recorded)."""
        return self.verify_mixed(seqs, token_lists, samplers)

    def verify_mixed(self, seqs: list, token_lists: list[list[int]], samplers: list) -> list[np.ndarray]:
        """:meth:`verify_ids` for the sequences with a sampler, :meth:`verify`'s logits ``[k + 1, V]`` for those whose
        ``samplers[i]`` is None (a round mixing requests accepted from drawn ids with requests accepted from their
        logits: logprobs, a grammar)."""
        out = []
        for lg, s in zip(self.verify(seqs, token_lists), samplers):
            if s is None:
                out.append(lg)
                continue
            m = lg.max(axis=1)
            ids = np.argmax(lg, axis=1) if s.params.greedy else np.array(
                [s(row) if np.isfinite(row).all() else -1 for row in lg])
            out.append(np.where(np.isfinite(m), ids, -1))
        return out

    def accept(self, seqs: list, accepted: list[int]) -> None:
        """Keep the first ``accepted[i] + 1`` tokens of sequence i's last :meth:`verify` (its last token and the
        accepted drafts): the length rolls back to them (later KV is garbage, overwritten by the next step) and the
        GDN state becomes the one after the last kept token -- no recompute."""
        for seq, m in zip(seqs, accepted):
            start, snaps, hid, toks = self._verify.pop(seq.slot)
            if not 0 <= m < len(toks):
                raise NinfercError(f"accept: {m} drafts of a verify over {len(toks)} tokens")
            self._restore(seq.slot, snaps[m])
            seq.length = start + m + 1
            if seq.mtp:
                self._hidden[seq.slot].extend(hid[:m + 1])
                self._tokens[seq.slot].extend(toks[:m + 1])

    def sample(self, logits: np.ndarray, rows: list) -> list:
        """One :class:`~ninferc.sampling.Sampled` per row (``rows[i] = (HostSampler, logprobs or None)``), or the
        :class:`~ninferc.sampling.NonFiniteLogits` error of a row whose logits hold NaN / Inf (the other rows are
        sampled as usual)."""
        out = []
        for i, (s, lp) in enumerate(rows):
            try:
                out.append(s.sample(logits[i], lp))
            except SampleError as exc:  # NaN / Inf logits, or a grammar that allows no token
                out.append(exc)
        return out

    # -- decode ahead (the scheduler's; computed at once here, with the CUDA backend's rules) ------------------
    @staticmethod
    def samples_on_device(rows: list) -> bool:
        """Whether these rows are the ones the CUDA backend draws on its device (no grammar;
        :func:`~ninferc.sampling.rows_on_device`): the reference takes decode ahead for exactly those, so
        the CPU tests schedule as the GPU does."""
        return rows_on_device(rows)

    def sample_async(self, logits: np.ndarray, rows: list) -> "_Sampled":
        """:meth:`sample`, drawn now; ``result()`` returns it (the CUDA backend's is read later)."""
        return _Sampled(self.sample(logits, rows))

    def decode_next(self, seqs: list, pending: "_Sampled") -> np.ndarray:
        """:meth:`decode` fed with the ids ``pending`` drew (a row whose logits were not finite feeds id 0: its
        request ends and the row's result is dropped)."""
        got = pending.result()
        if len(got) != len(seqs):
            raise NinfercError(f"decode_next of {len(seqs)} sequences after a sample of {len(got)} rows")
        return self.decode(seqs, [0 if isinstance(x, Exception) else x.token for x in got])

    def close(self) -> None:
        """Drop the pools."""
        self.k_pages, self.v_pages, self.conv, self.recurrent = {}, {}, {}, {}
