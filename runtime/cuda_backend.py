"""The CUDA engine behind the batched backend interface (:mod:`ninferc.runtime.backend`), for ``ninferc serve``.

The policy (scheduler) owns the page tables and GDN slots; this class turns each call into engine steps:

* ``prefill(seq, ids)``: one prefill chunk of one sequence (the engine's chunked prefill, T = len(ids) tokens at
  positions ``seq.length ..``; the kernels start GDN state from zero at position 0, so a reused slot needs no
  clearing);
* ``decode(seqs, tokens)``: one decode step of B sequences: the metadata block (positions, context lengths, slots,
  page tables, the B token ids) is uploaded, then the decode step is replayed from a CUDA graph captured once per
  batch size B (:meth:`~ninferc.runtime.engine.Engine.model_graph`; ``cuda_graph=False`` launches it eagerly) --
  the batch changes between steps with no new capture;
* ``sample(logits, rows)``: every row without a grammar is drawn on the device with its own seed and draw counter
  (the GPU sampler's temperature, top-k and top-p; the Philox counter of :mod:`ninferc.targets.kernels.sample`, so a
  row's draw does not depend on its neighbours); the step then reads back B ids. The rest of the host sampler's
  rules is applied to such a row's logits on the device first (:meth:`CudaBatchBackend._adjust_rows`, CuPy array
  operations in the host sampler's order and fp32 arithmetic: logit_bias, min_tokens' held stop ids, the repetition,
  frequency and presence penalties over a token count per GDN slot kept on the device -- fp32 ``[num_slots, V]``
  output counts and a uint8 ``[num_slots, V]`` prompt mask, the memory plan's ``sampling_history`` -- and min_p in
  fp64 as the host compares it), so such rows keep decode ahead; counted in ``adjusted_rows`` of :attr:`stats`.
  A row asking for logprobs also has its raw logits row (``[V]`` fp32) copied to pinned host memory before any of
  that, and its logprobs are computed on the host when the ids are read (:func:`~ninferc.sampling.raw_logprobs`;
  ``logprob_rows``). Rows under a grammar (``response_format``, a forced tool call: llguidance's mask is computed on
  the host) take the host sampler on
  their own logits (those rows, ``[b, V]`` fp32, copied to the host; the step's other rows are still drawn on the
  device), counted in ``host_rows`` of :attr:`stats`. A row with non-finite logits
  becomes :class:`~ninferc.sampling.NonFiniteLogits`: on the host, any NaN or Inf; on the device, the sampler's -1
  for a row whose maximum is not finite (a NaN or +Inf in it, or only -Inf; ``targets/kernels/sample.py``) -- a
  -Inf among finite logits is a token of probability 0 there, not an error, and the step needs no second pass over
  its logits;
* decode ahead (the scheduler's, :mod:`ninferc.runtime.scheduler`): ``sample_async(logits, rows)`` queues the
  device draw, copies the B ids to pinned host memory and returns a
  :class:`PendingSample` whose ``result()`` waits for that copy's event only (not for steps queued after it);
  ``decode_next(seqs, pending)`` queues the next decode step fed with those ids on the device, so the step is
  queued before the host has read them;
* speculative decoding (``spec_tokens`` K): ``draft`` chains the MTP head's step + greedy sampler K times,
  ``verify`` runs the model over each sequence's K + 1 tokens (``verify_ids``: + a draw from every row), ``accept``
  keeps a prefix (the state slot of the accepted count, the KV length rolled back); the head's steps and the
  verify step are replayed from CUDA graphs captured per shape (T tokens, B sequences) like the decode step.
  ``verify_round`` is a whole round with one host read: the verify step, the acceptance decided on the device, the
  head's rows and the next round's drafts queued behind it, then one copy of the ids, the accepted counts and the
  drafts (the scheduler takes it for rounds whose requests ask for no logprobs and have no grammar -- penalised,
  min_p, logit_bias and min_tokens rows adjusted on the device -- with the same next draft count).

Exactness: a sequence's logits do not depend on the other rows' values, but they do on how the step is cut: a
decode step of B sequences runs the GEMVs' B-token tiles (tensor-core or integer dot-product) where one sequence
runs the one-token kernels, and a prompt resumed from a prefix-cache checkpoint or split into chunks meets other
chunk boundaries -- each rounds differently, so greedy text can part between such paths at a near-tie (the GPU
serve tests compare with the goldens up to their first near-tie, as the engine tests do; bench/NOTES.md run 191).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ninferc.errors import NinfercError
from ninferc.sampling import (HostSampler, NonFiniteLogits, SampleError, Sampled, SamplingParams, raw_logprobs,
                              rows_on_device, score_rows)

#: sampled-id buffers (device + pinned host) in rotation: the scheduler holds at most two unread samples (the step
#: it reads and the one queued ahead of it), a synchronous sample a third
SAMPLE_RING = 4

_NON_FINITE = ("the model produced non-finite logits in row {i} of a step (NaN or Inf); no token can be drawn "
               "(NINFERC_CHECK_FINITE=1 names the op)")


class PendingSample:
    """The device draw of one step's rows, queued and not read (:meth:`CudaBatchBackend.sample_async`)."""

    def __init__(self, backend: "CudaBatchBackend", slot: int, rows: list, event):
        self.backend, self.slot, self.rows, self.event = backend, slot, rows, event
        self._got: list | None = None

    def result(self) -> list:
        """One :class:`~ninferc.sampling.Sampled` (recorded in the row's sampler) or
        :class:`~ninferc.sampling.NonFiniteLogits` per row; waits for this sample's copy only. Idempotent."""
        if self._got is None:
            self.event.synchronize()
            self._got = self.backend._read_sample(self)
        return self._got


#: the draw of a :meth:`CudaBatchBackend.verify_mixed` row whose logits go to the host (greedy: its id is not read)
_UNREAD_DRAW = HostSampler(SamplingParams())

#: device bytes per slot and vocabulary entry of the adjusted rows' token history: fp32 output counts + a uint8 prompt
#: mask (:meth:`CudaBatchBackend._adjust_rows`; 9.9 MB at 8 slots and the 27B's 248,320-token vocabulary)
HISTORY_BYTES_PER_TOKEN = 5

#: tokens per chunk of a scored prefill (a request's ``prompt_logprobs``, a completion's ``echo`` with ``logprobs``):
#: the engine's logit rows are at least this many, which costs SCORED_CHUNK x vocab x 4 bytes of device memory (32 MB
#: at the 27B's 248,320-token vocabulary) and lets such a prompt go through in chunks of 32 tokens, each one forward
#: pass, instead of the concurrency's 4
SCORED_CHUNK = 32


class _StepLogits:
    """The logits of the last step, left on the device: ``rows`` rows of ``engine.logits``; ``slots``: each row's
    sequence's GDN slot (``seq.slot``: where its token counts live, :meth:`CudaBatchBackend._adjust_rows`)."""

    def __init__(self, engine, rows: int, slots: list[int]):
        self.e, self.rows, self.slots = engine, rows, list(slots)

    def host(self) -> np.ndarray:
        """[rows, V] fp32 on the host (ordered after the step on the engine stream)."""
        return self.e.logits[:self.rows].get(stream=self.e.stream)


class CudaBatchBackend:
    """A compiled artifact on the GPU as a batched backend (see the module docstring).

    Args:
        art: an opened :class:`~ninferc.artifact.Artifact` (or a path).
        max_context: tokens one sequence may hold. num_slots: GDN state slots (= the server's concurrency: the
            largest decode batch). num_pages: KV pages in the pool. prefill_chunk: most tokens per prefill step.
        cuda_graph: replay decode steps from per-batch-size CUDA graphs. log: progress lines.

    Raises:
        TargetError / PlanError / RuntimeMemoryError: as :class:`~ninferc.runtime.engine.Engine` (the memory plan
            is checked against free device memory before anything is uploaded, naming every term).
    """

    name = "cuda"
    #: the verify step's draw applies penalties, min_p, logit_bias and min_tokens on the device (:meth:`verify_ids`):
    #: the scheduler accepts such requests' rounds from the drawn ids (:func:`~ninferc.runtime.spec.ids_suffice`)
    adjusts_verify_rows = True

    def __init__(self, art, *, max_context: int, num_slots: int, num_pages: int, prefill_chunk: int,
                 cuda_graph: bool = True, log=None, cache_bytes: int = 0, spec_tokens: int = 0,
                 draft_lm_head: str = "bf16"):
        from ninferc.runtime.engine import Engine

        from ninferc.artifact import Artifact

        if not hasattr(art, "header"):
            art = Artifact.open(art)
        reserve = {"sampling_history": num_slots * art.config.vocab_size * HISTORY_BYTES_PER_TOKEN}
        if cache_bytes:
            reserve["prefix_cache_budget"] = cache_bytes
        engine = Engine.from_artifact(art, max_context=max_context, max_batch=num_slots, num_pages=num_pages,
                                      prefill_chunk=prefill_chunk, max_logit_rows=max(num_slots, SCORED_CHUNK),
                                      cuda_graph=cuda_graph, log=log, reserve=reserve,
                                      spec_tokens=spec_tokens, draft_lm_head=draft_lm_head)
        self._setup(engine, num_slots=num_slots, max_context=max_context, cuda_graph=cuda_graph,
                    spec_tokens=spec_tokens)
        self.warm_adjustments()

    def _setup(self, engine, *, num_slots: int, max_context: int, cuda_graph: bool, spec_tokens: int) -> None:
        """The backend's state around a built engine (the CPU tests pass an engine double here)."""
        self.engine = e = engine
        #: speculative decoding with the MTP head (:mod:`ninferc.runtime.spec`): K draft tokens, K + 1 GDN state
        #: slots per sequence group g (``g * (K + 1) + j``), the slot each group continues from in ``_cur``
        self.spec_tokens = spec_tokens
        self.has_mtp = spec_tokens > 0
        self.no_mtp_reason = "" if self.has_mtp else "the backend was built without speculation (spec_tokens 0)"
        self._group = spec_tokens + 1
        self._cur = [0] * num_slots
        self._mtp_len = [0] * num_slots   # MTP head rows computed (positions 0 .. _mtp_len - 1) per group
        self._verify: dict[int, tuple] = {}  # group -> (length before the verify step, first row, its tokens)
        self.page_size, self.num_pages, self.num_slots = e.page_size, e.num_pages, num_slots
        self.max_context, self.vocab_size = max_context, e.vocab
        self.memory = e.memory
        self.cuda_graph = cuda_graph
        self.stats = {"device_rows": 0, "host_rows": 0, "logprob_rows": 0, "adjusted_rows": 0, "one_read_rounds": 0}
        # per rotation slot: num_slots sampled ids (int32) on the device and in pinned host memory
        self._ids_dev = e.cp.zeros((SAMPLE_RING, num_slots), e.cp.int32)
        self._ids_host = [e.pinned_int32(num_slots) for _ in range(SAMPLE_RING)]
        # per rotation slot, made on first use: the logits rows of the slot's device-drawn rows that ask for
        # logprobs, pinned fp32 [num_slots, V] (num_slots x V x 4 bytes of host memory each: 7.9 MB at 8 slots and
        # the 27B's 248,320-token vocabulary)
        self._lp_host: list = [None] * SAMPLE_RING
        # the token history of the rows adjusted on the device, per GDN slot (made on first use, in the memory plan's
        # sampling_history term): fp32 output counts and a uint8 prompt mask, [num_slots, V] each, and per slot the
        # sampler they count for and how many of its tokens they hold
        self._hist_counts = self._hist_prompt = None
        self._hist_owner: list = [None] * num_slots
        self._ring_next = 0
        self._unread: dict[int, int] = {}  # id(HostSampler) -> its rows queued and not read

    # -- steps ------------------------------------------------------------------------------------------
    def prefill(self, seq, ids: list[int]) -> _StepLogits:
        """One chunk of ``seq``'s prompt; the logits of its last token stay on the device (row 0)."""
        T = len(ids)  # noqa: N806
        if not 1 <= T <= self.engine.prefill_chunk:
            raise NinfercError(f"prefill chunk of {T} tokens; the engine takes 1 to {self.engine.prefill_chunk}")
        return self._prefill(seq, ids)[0]

    @property
    def max_scored_tokens(self) -> int:
        """Most tokens of one :meth:`prefill_scored` chunk: the engine's logit rows (``Engine.max_logit_rows``)."""
        return self.engine.max_logit_rows

    def prefill_scored(self, seq, ids: list[int], targets: list[int], top_n: int):
        """:meth:`prefill` of the chunk ``ids`` with the logits of every token, which score the prompt on the device:
        ``targets[i]`` (the prompt's token after ``ids[i]``; ``len(targets) <= len(ids)``) under row ``i``, with
        ``top_n`` alternatives (:func:`~ninferc.sampling.score_rows`, in cupy: only the scores are read back). The
        last token's logits are then moved to row 0, where :meth:`sample` reads a prefill's.

        Returns:
            (the last token's logits on the device, as :meth:`prefill`'s, one PromptScore per target).

        Raises:
            NinfercError: an empty chunk, more tokens than :attr:`max_scored_tokens` or more targets than tokens.
            NonFiniteLogits: a scored row is not finite (the chunk is appended all the same).
        """
        T = len(ids)  # noqa: N806
        if not 1 <= T <= self.max_scored_tokens or len(targets) > T:
            raise NinfercError(f"a scored prefill chunk takes 1 to {self.max_scored_tokens} tokens (the engine's logit "
                               f"rows) and one target per token; found {T} tokens, {len(targets)} targets")
        return self._prefill(seq, ids, (targets, top_n))

    def _prefill(self, seq, ids: list[int], score: tuple | None = None) -> tuple:
        """One prefill chunk (checked by the caller): the last token's logits in row 0 and, with ``score`` =
        (targets, top_n), every token's logits scored first; returns (logits, scores or None)."""
        e = self.engine
        T = len(ids)  # noqa: N806
        self._check_pages(seq, T)
        s = seq.length
        if s == 0:
            self._cur[seq.slot] = self._mtp_len[seq.slot] = 0
        scores = None
        with e.stream:
            e.write_meta(tok_pos=np.arange(s, s + T, dtype=np.int32), tok_seq=np.zeros(T, np.int32),
                         seq_start=[0, T], seq_ctx=[s + T], seq_slot=[self._state_slot(seq)],
                         row_index=[T - 1] if score is None else np.arange(T, dtype=np.int32),
                         page_rows=[seq.pages], tokens=list(ids))
            e.run("prefill", T, 1, 1 if score is None else T)
            seq.length += T  # appended, whether or not its rows score (NonFiniteLogits)
            if score is not None:
                scores = score_rows(e.logits, score[0], score[1], xp=e.cp)
                if T > 1:
                    e.logits[0] = e.logits[T - 1]
        if self.spec_tokens and getattr(seq, "mtp", False):  # the head's rows whose next token is in the chunk
            self._mtp_rows([(seq, s, list(ids), 0, s + T - 1)])
        return _StepLogits(e, 1, [seq.slot]), scores

    def _state_slot(self, seq) -> int:
        """The GDN state slot ``seq`` continues from: its group's slot ``_cur`` (the group itself when not
        speculating)."""
        return seq.slot * self._group + self._cur[seq.slot]

    def decode(self, seqs: list, tokens: list[int]) -> _StepLogits:
        """One decode step of B = ``len(seqs)`` sequences (graph-replayed per B); logits [B, V] on the device."""
        if len(tokens) != len(seqs):
            raise NinfercError(f"decode of {len(seqs)} sequences with {len(tokens)} tokens; one token each")
        return self._decode(seqs, [int(t) for t in tokens])

    def decode_next(self, seqs: list, pending: PendingSample) -> _StepLogits:
        """One decode step of ``seqs`` fed with the ids ``pending`` drew (the same rows, in order), queued on the
        device before those ids are read (decode ahead); logits [B, V] on the device."""
        if len(pending.rows) != len(seqs):
            raise NinfercError(f"decode_next of {len(seqs)} sequences after a sample of {len(pending.rows)} rows")
        e = self.engine
        with e.stream:
            e.tokens[:len(seqs)] = self._ids_dev[pending.slot, :len(seqs)]
        return self._decode(seqs, None)

    def _decode(self, seqs: list, tokens: list[int] | None) -> _StepLogits:
        e, cp = self.engine, self.engine.cp
        B = len(seqs)  # noqa: N806
        if not 1 <= B <= e.max_batch:
            raise NinfercError(f"decode of {B} sequences; the engine takes 1 to {e.max_batch} sequences, one token "
                               "each")
        for x in seqs:
            self._check_pages(x, 1)
        spec = self.spec_tokens and any(getattr(x, "mtp", False) for x in seqs)
        if spec:  # speculating sequences in a step that drafts nothing: the head's rows go on (_mtp_decode_rows)
            self._mtp_decode_rows(seqs, tokens)
        rows = np.arange(B, dtype=np.int32)
        with e.stream:
            e.write_meta(tok_pos=[x.length for x in seqs], tok_seq=rows, seq_start=np.arange(B + 1, dtype=np.int32),
                         seq_ctx=[x.length + 1 for x in seqs], seq_slot=[self._state_slot(x) for x in seqs],
                         row_index=rows, page_rows=[x.pages for x in seqs], tokens=tokens)
            if self.cuda_graph:
                e.model_graph(B).launch(stream=e.stream)
            else:
                e.run("decode", B, B, B)
            if spec:  # the step's hidden rows become the pending rows (the next row of the head reads them)
                slots = cp.asarray([x.slot for x in seqs], dtype=cp.int32)
                e.mtp_src[slots] = e.mtp_src[self._main_row(0):self._main_row(B)]
        if spec:
            for x in seqs:
                self._mtp_len[x.slot] = x.length
        for x in seqs:
            x.length += 1
        return _StepLogits(e, B, [x.slot for x in seqs])

    def _mtp_decode_rows(self, seqs: list, tokens: list[int] | None) -> None:
        """Before a decode step of speculating ``seqs`` (lengths L not yet advanced) -- a step of a ``--spec mtp``
        server that drafts nothing (``--spec-disable-by-batch-size``) -- the MTP head's row of each sequence's
        position L - 1 from its pending hidden row and the step's input token (as :meth:`draft`'s
        first step computes it, without the LM head: R = 0), so that drafting can resume at any later step; the
        decode step then makes its own hidden rows the pending ones (:meth:`_decode`). ``tokens``: the step's host
        ids, or None when the device token buffer holds them (:meth:`decode_next`). A row the head computed already
        (after :meth:`verify_round`'s or :meth:`draft`'s first draft) is computed again, to the same values.

        Raises:
            NinfercError: a step mixing speculating and plain sequences (a server's are all one or the other); a
                sequence whose head rows stop before L - 1 (a step that skipped them)."""
        e = self.engine
        if not all(getattr(x, "mtp", False) for x in seqs):
            raise NinfercError("decode: a step of speculating and plain sequences together; the head's rows need "
                               "every sequence of the step to speculate, or none")
        for x in seqs:
            if not x.length - 1 <= self._mtp_len[x.slot] <= x.length:
                raise NinfercError(f"decode: MTP rows of group {x.slot} stop at {self._mtp_len[x.slot]}, the step "
                                   f"appends at {x.length}")
        n, ar = len(seqs), np.arange(len(seqs), dtype=np.int32)
        with e.stream:
            e.write_meta(tok_pos=[x.length - 1 for x in seqs], tok_seq=ar, seq_start=np.arange(n + 1, dtype=np.int32),
                         seq_ctx=[x.length for x in seqs], seq_slot=np.zeros(n, np.int32), row_index=ar,
                         page_rows=[x.pages for x in seqs], tokens=tokens, hidden_rows=[x.slot for x in seqs])
            if self.cuda_graph:
                e.step_graph("decode", n, n, 0, mtp=True).launch(stream=e.stream)
            else:
                e.run("decode", n, n, 0, mtp=True)

    def _check_pages(self, seq, tokens: int) -> None:
        need = -(-(seq.length + tokens) // self.page_size)
        if need > len(seq.pages):
            raise NinfercError(f"sequence at {seq.length} tokens + {tokens} needs {need} KV pages but holds "
                               f"{len(seq.pages)} (page size {self.page_size})")
        if seq.length + tokens > self.max_context:
            raise NinfercError(f"context of {seq.length + tokens} tokens exceeds the max context {self.max_context}")

    # -- sampling -----------------------------------------------------------------------------------------
    def samples_on_device(self, rows: list) -> bool:
        """Whether the GPU sampler draws every row (``rows[i] = (HostSampler, logprobs or None)``): no grammar
        (penalties, min_p, logit_bias and min_tokens are applied on the device, logprobs computed from a copy of the
        row) -- the rows :meth:`sample_async` takes (:func:`~ninferc.sampling.rows_on_device`)."""
        return rows_on_device(rows)

    def sample(self, logits: _StepLogits, rows: list) -> list:
        """One :class:`~ninferc.sampling.Sampled` (or :class:`~ninferc.sampling.NonFiniteLogits`) per row; see the
        module docstring for which rows the GPU sampler draws. In a step whose rows need both samplers, the device
        rows are still drawn on the device (their seeded draws are the same whoever shares the step) and only the
        host rows' logits are copied to the host."""
        if self.samples_on_device(rows):
            return self.sample_async(logits, rows).result()
        if len(rows) != logits.rows:
            raise NinfercError(f"sample: {len(rows)} parameter rows for {logits.rows} logit rows")
        on_device = [rows_on_device([r]) for r in rows]
        pending = self._queue_sample(logits, [r if d else None for r, d in zip(rows, on_device)]) \
            if any(on_device) else None
        host_idx = [i for i, d in enumerate(on_device) if not d]
        e = self.engine
        with e.stream:
            host = logits.host() if len(host_idx) == logits.rows else \
                e.logits[e.cp.asarray(np.array(host_idx, np.int64))].get(stream=e.stream)
        self.stats["host_rows"] += len(host_idx)
        out: list = pending.result() if pending is not None else [None] * logits.rows
        for k, i in enumerate(host_idx):
            s, lp = rows[i]
            try:
                out[i] = s.sample(host[k], lp)
            except SampleError as exc:  # NaN / Inf logits, or a grammar that allows no token
                out[i] = exc
        return out

    def sample_async(self, logits: _StepLogits, rows: list) -> PendingSample:
        """Queue the GPU sampler over the step's B rows (all :meth:`samples_on_device`), each with its seed and draw
        counter (draws recorded + draws queued and not read), and one copy of the B ids (-1 where a row's maximum is
        not finite) to pinned host memory -- before the draw, a copy of the logits row of each row asking for
        logprobs (read with the ids: :meth:`PendingSample.result`); returns without waiting.

        Raises:
            NinfercError: a row the GPU sampler cannot draw, or rows that do not match the step's logits.
        """
        B = logits.rows  # noqa: N806
        if len(rows) != B:
            raise NinfercError(f"sample: {len(rows)} parameter rows for {B} logit rows")
        if not self.samples_on_device(rows):
            raise NinfercError("sample_async: a row needs the host sampler (a grammar)")
        return self._queue_sample(logits, rows)

    def _queue_sample(self, logits: _StepLogits, rows: list) -> PendingSample:
        """:meth:`sample_async` of the step's B rows where ``rows[i]`` is None for a row drawn elsewhere (the host):
        the device draws it too, with a fixed seed and counter, and :meth:`_read_sample` drops that id."""
        e, cp = self.engine, self.engine.cp
        B = logits.rows  # noqa: N806
        slot = self._ring_next
        self._ring_next = (slot + 1) % SAMPLE_RING
        dev = self._ids_dev[slot]
        mine = [r for r in rows if r is not None]
        greedy = all(s.params.greedy for s, _ in mine)
        lp_rows = [i for i, r in enumerate(rows) if r is not None and r[1] is not None]
        with e.stream:
            if lp_rows:  # their logits rows, copied before the sampler runs over them
                if self._lp_host[slot] is None:
                    self._lp_host[slot] = e.pinned_float32(self.num_slots * e.vocab).reshape(self.num_slots, e.vocab)
                buf, row_bytes = self._lp_host[slot], e.vocab * 4
                for k, i in enumerate(lp_rows):
                    cp.cuda.runtime.memcpyAsync(buf.ctypes.data + k * row_bytes, e.logits[i].data.ptr, row_bytes,
                                                cp.cuda.runtime.memcpyDeviceToHost, e.stream.ptr)
            counted = self._adjust_rows(rows, logits.slots)
            if not greedy:  # a row drawn elsewhere: temperature 1, no top-k / top-p, seed 0 (its id is dropped)
                sp = e.sampling
                sp["temperature"][:B] = cp.asarray([1.0 if r is None else r[0].params.temperature for r in rows],
                                                   cp.float32)
                sp["top_k"][:B] = cp.asarray([0 if r is None else r[0].params.top_k for r in rows], cp.int32)
                sp["top_p"][:B] = cp.asarray([1.0 if r is None else r[0].params.top_p for r in rows], cp.float32)
                sp["seed"][:B] = cp.asarray(np.array([0 if r is None else r[0].params.seed for r in rows], np.uint64))
                sp["rng_step"][:B] = cp.asarray([0 if r is None else r[0].draws + self._unread.get(id(r[0]), 0)
                                                 for r in rows], cp.int32)
            e.sample_step(greedy, B)
            dev[:B] = e.tokens[:B]
            if counted:
                self._count_drawn(dev, counted)
            host = self._ids_host[slot]
            cp.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, host.nbytes,
                                        cp.cuda.runtime.memcpyDeviceToHost, e.stream.ptr)
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(e.stream)
        for s, _ in mine:
            self._unread[id(s)] = self._unread.get(id(s), 0) + 1
        self.stats["device_rows"] += len(mine)
        self.stats["logprob_rows"] += len(lp_rows)
        return PendingSample(self, slot, list(rows), ev)

    def _count_drawn(self, dev, counted: list[tuple[int, int]]) -> None:
        """The penalised rows' new tokens (``dev[row]``, int32 on the device; -1, a row that drew none, counts nothing)
        join their slots' counts; ``counted``: (row, slot) pairs (:meth:`_adjust_rows`'). Index arithmetic, no boolean
        mask: a mask's data-dependent shape would make CuPy wait for the draw."""
        cp = self.engine.cp
        tok = dev[cp.asarray(np.array([i for i, _ in counted], np.int64))].astype(cp.int64)
        ks = cp.asarray(np.array([k for _, k in counted], np.int64))
        self._hist_counts[ks, cp.maximum(tok, 0)] += (tok >= 0).astype(cp.float32)

    def warm_adjustments(self) -> None:
        """Build, before the first request, the CuPy kernels the device-side adjustments launch (:meth:`_adjust`,
        :meth:`_penalise`, :meth:`_count_drawn`: logit_bias, min_tokens' held stop ids, the three penalties with a
        verify row's drafts, min_p): CuPy compiles each elementwise, reduction and indexing kernel at its first use
        (NVRTC), unless its on-disk kernel cache (``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``) has it -- the
        likely cause of run 290's ~2 s TTFT stall of the first penalised requests and of every request sharing their
        steps, on a machine whose cache was cold (bench/NOTES.md; the A/B that would confirm it is
        ``bench/serve_no_warm.py``). Runs one made-up row through them on ``engine.logits`` row 0 (scratch before any
        step) and GDN slot 0's history, then clears that history and the ``adjusted_rows`` count; waits for the
        stream."""
        e = self.engine
        V = e.vocab  # noqa: N806
        s = HostSampler(SamplingParams(temperature=0.7, top_k=20, top_p=0.8, min_p=0.05, presence_penalty=1.5,
                                       frequency_penalty=0.5, repetition_penalty=1.1,
                                       logit_bias=((0, 1.0), (V - 1, -1.0)), min_tokens=2),
                        prompt_ids=(0, 1), stop_ids=(V - 1,))
        s.counts = {1: 1}  # a history to rebuild on the device
        with e.stream:
            self._adjust([(0, s, 0, (1, 1))], counted=False)  # a verify row: drafts before it
            self._adjust([(0, s, 0, ())], counted=True)  # a decode row, its draw counted
            self._count_drawn(self._ids_dev[0], [(0, 0)])
            self._hist_counts[0] = 0
            self._hist_prompt[0] = 0
        e.stream.synchronize()
        self._hist_owner[0] = None
        self.stats["adjusted_rows"] = 0

    def _adjust_rows(self, rows: list, slots: list[int]) -> list[tuple[int, int]]:
        """Apply step 1 of :mod:`ninferc.sampling`'s rules but the grammar's (logit_bias, min_tokens' held stop ids,
        the repetition, frequency and presence penalties) and min_p to the step's rows that ask for them, in place in
        ``engine.logits`` on the engine stream, as :meth:`HostSampler.adjust <ninferc.sampling.HostSampler.adjust>`
        and :func:`~ninferc.sampling.filtered_probs` compute them on the host (fp32; min_p's comparison in fp64).
        ``rows[i]``: (HostSampler, logprobs) or None; ``slots[i]``: row i's GDN slot, whose token history
        (``_hist_counts`` / ``_hist_prompt``) is rebuilt from the sampler's host record when another sampler, or
        a count of other tokens, holds it. Returns the penalised rows' (row, slot) pairs, whose drawn tokens the
        caller adds to the counts.

        Raises:
            NinfercError: a penalised row whose slot history must be rebuilt while draws of it are queued and not
                read (the host record is behind; the scheduler never asks this)."""
        todo = [(i, r[0], slots[i], ()) for i, r in enumerate(rows)
                if r is not None and not r[0].device_ok]  # device_ok: nothing to apply
        self._adjust(todo, counted=True)
        return [(i, k) for i, s, k, _ in todo if s.params.penalised]

    def _adjust(self, todo: list, counted: bool) -> None:
        """:meth:`_adjust_rows`' work on ``todo`` = [(logits row, HostSampler, GDN slot, extra)]: ``extra``, the
        tokens the row's request has after the sampler's record (a verify row's drafts before it; the row draws the
        request's token number draws + unread + len(extra)); ``counted``: as :meth:`_penalise`."""
        e, cp = self.engine, self.engine.cp
        if not todo:
            return
        V = e.vocab  # noqa: N806
        for i, s, _, ex in todo:
            p, x = s.params, e.logits[i]
            if p.logit_bias:
                keep = s.bias_ids < V
                ids = cp.asarray(s.bias_ids[keep])
                x[ids] = x[ids] + cp.asarray(s.bias_values[keep])
            drawn = s.draws + self._unread.get(id(s), 0) + len(ex)  # the row draws the request's token number `drawn`
            if drawn < p.min_tokens and s.held_stop_ids.size:
                x[cp.asarray(s.held_stop_ids[s.held_stop_ids < V])] = -np.inf
        pen = [t for t in todo if t[1].params.penalised]
        if pen:
            self._penalise(pen, counted)
        for i, s, _, _ in todo:
            p = s.params
            if p.min_p > 0.0 and not p.greedy:  # p_i >= min_p p_max  <=>  x_i / t - x_max / t >= log(min_p), fp64
                x = e.logits[i].astype(cp.float64) / p.temperature
                e.logits[i] = cp.where(x - x.max() < math.log(p.min_p), cp.float32(-np.inf), e.logits[i])
        self.stats["adjusted_rows"] += len(todo)

    def _penalise(self, pen: list, counted: bool) -> None:
        """The penalties of the rows ``pen`` = [(row, HostSampler, slot, extra)], all rows at once:
        :func:`~ninferc.sampling.apply_penalties` over the slot's device counts plus the tokens ``extra`` (a verify
        row's drafts before it, known on the host). ``counted``: the caller adds each row's drawn token to its slot's
        counts (decode), so the slot then holds one more of the sampler's tokens; otherwise (verify) the slot keeps
        what it held and is rebuilt from the host record when the sampler has drawn more."""
        e, cp = self.engine, self.engine.cp
        V = e.vocab  # noqa: N806
        if self._hist_counts is None:
            self._hist_counts = cp.zeros((self.num_slots, V), cp.float32)
            self._hist_prompt = cp.zeros((self.num_slots, V), cp.uint8)
        for s, k in dict.fromkeys((s, k) for _, s, k, _ in pen):  # each (sampler, slot) once
            drawn = s.draws + self._unread.get(id(s), 0)
            owner = self._hist_owner[k]
            if owner is not None and owner[0] is s and owner[1] == drawn:
                continue
            if drawn != s.draws:
                raise NinfercError(f"GDN slot {k}: a penalised row's token history is not on the device and "
                                   f"{drawn - s.draws} of its draws are not read yet")
            self._hist_counts[k] = 0
            if s.counts:
                ids = np.fromiter(s.counts.keys(), np.int64)
                cnt = np.fromiter(s.counts.values(), np.float32)
                keep = ids < V
                self._hist_counts[k, cp.asarray(ids[keep])] = cp.asarray(cnt[keep])
            self._hist_prompt[k] = 0
            if s.prompt_ids:
                ids = np.unique(np.asarray(s.prompt_ids, np.int64))
                self._hist_prompt[k, cp.asarray(ids[(ids >= 0) & (ids < V)])] = 1
            self._hist_owner[k] = (s, drawn)
        idx = cp.asarray(np.array([i for i, _, _, _ in pen], np.int64))
        ks = cp.asarray(np.array([k for _, _, k, _ in pen], np.int64))
        x, c = e.logits[idx], self._hist_counts[ks]
        extra = [(r, t, n) for r, (_, _, _, ex) in enumerate(pen) for t, n in Counter(ex).items() if 0 <= t < V]
        if extra:  # unique (row, token) pairs, so one fancy-index add is exact
            c[cp.asarray(np.array([r for r, _, _ in extra], np.int64)),
              cp.asarray(np.array([t for _, t, _ in extra], np.int64))] += cp.asarray(
                np.array([n for _, _, n in extra], np.float32))

        def col(vals):
            return cp.asarray(np.array(vals, np.float32).reshape(-1, 1))

        rp = [s.params.repetition_penalty for _, s, _, _ in pen]
        if any(r != 1.0 for r in rp):
            r = col(rp)
            seen = (c > 0) | (self._hist_prompt[ks] > 0)
            x = cp.where(seen, cp.where(x > 0, x / r, x * r), x)
        if any(s.params.frequency_penalty or s.params.presence_penalty for _, s, _, _ in pen):
            x = x - (col([s.params.frequency_penalty for _, s, _, _ in pen]) * c
                     + col([s.params.presence_penalty for _, s, _, _ in pen]) * (c > 0))
        e.logits[idx] = x  # fp32 throughout (fp32 operands, no float64 scalar)
        if counted:
            for _, s, k, _ in pen:
                self._hist_owner[k] = (s, self._hist_owner[k][1] + 1)  # counts after this row's draw

    def _read_sample(self, p: PendingSample) -> list:
        """The rows of a finished :class:`PendingSample`, recorded in their samplers, with the logprobs of the rows
        that ask for them (from their logits rows' copies: :func:`~ninferc.sampling.raw_logprobs`)."""
        h = self._ids_host[p.slot]
        lp_k = 0  # the next logits row copied for logprobs (in row order)
        out: list = []
        for i, row in enumerate(p.rows):
            if row is None:  # a row the host draws
                out.append(None)
                continue
            s = row[0]
            left = self._unread.get(id(s), 0) - 1
            if left > 0:
                self._unread[id(s)] = left
            else:
                self._unread.pop(id(s), None)
            lp = row[1]
            if lp is not None:
                lp_k += 1
            if h[i] < 0:  # the sampler's answer to a row whose maximum is not finite
                out.append(NonFiniteLogits(_NON_FINITE.format(i=i)))
                continue
            tok = int(h[i])
            s.observe(tok)
            got = Sampled(tok)
            if lp is not None:
                got.logprob, got.top = raw_logprobs(self._lp_host[p.slot][lp_k - 1], tok, lp)
            out.append(got)
        return out

    # -- speculative decoding with the MTP head (:mod:`ninferc.runtime.spec`) ------------------------------
    # The head's input for position p is the model's hidden row of p (bf16, the rows Engine.mtp_src holds: group g's
    # pending row at g, the draft chain's rows at B + i, then the last prefill / verify step's rows from 2B) and the
    # token at p + 1; its rows are computed as soon as that token is known, except the last position's, whose hidden
    # row waits in the pending row (its token is the one the scheduler samples next).
    def _main_row(self, r: int) -> int:
        return 2 * self.engine.max_batch + r

    def _mtp_rows(self, items: list) -> None:
        """The MTP head's rows now known, in one packed step of the head's program: ``items`` are
        ``(seq, s0, toks, r0, end)`` -- the model's last step put ``toks`` at positions ``s0 ..`` with hidden rows from
        ``r0``; rows ``_mtp_len .. end - 1`` are computed (position s0 - 1 from the pending row), then the hidden row of
        position ``end`` becomes the pending row. Only the rows' KV is kept (what later drafts attend to): the step
        computes no logits, so it does not read the LM head (:meth:`Engine.step_plan` with R = 0)."""
        e = self.engine
        pos, seq_of, starts, ctx, pages, toks_in, hid = [], [], [0], [], [], [], []
        for seq, s0, toks, r0, end in items:
            g = seq.slot
            lo = self._mtp_len[g]
            if lo < s0 - 1:
                raise NinfercError(f"MTP rows of group {g}: {lo} computed, the step starts at {s0}")
            if end <= lo:
                continue
            b = len(ctx)
            for p in range(lo, end):
                pos.append(p)
                seq_of.append(b)
                toks_in.append(int(toks[p - s0 + 1]))
                hid.append(g if p == s0 - 1 else self._main_row(r0 + p - s0))
            starts.append(len(pos))
            ctx.append(end)
            pages.append(seq.pages)
        if pos:
            T, B = len(pos), len(ctx)  # noqa: N806
            # a round's few rows per sequence run the head's verify mode (each row's attention split over the keys,
            # as the model's verify step does); a prompt chunk's rows its prefill mode
            rows = max(b - a for a, b in zip(starts, starts[1:]))
            mode = "verify" if T <= e.verify_rows and rows <= self._group else "prefill"
            with e.stream:
                e.write_meta(tok_pos=pos, tok_seq=seq_of, seq_start=starts, seq_ctx=ctx, seq_slot=np.zeros(B, np.int32),
                             row_index=[0], page_rows=pages, tokens=toks_in, hidden_rows=hid,
                             token_rows=mode == "verify")
                e.run(mode, T, B, 0, mtp=True)  # the head's KV rows only: no logits row (no LM head read)
        with e.stream:
            for seq, s0, toks, r0, end in items:
                e.mtp_src[seq.slot] = e.mtp_src[self._main_row(r0 + end - s0)]
                self._mtp_len[seq.slot] = max(self._mtp_len[seq.slot], end)

    def draft(self, seqs: list, last_tokens: list[int], ks: list[int]) -> list[list[int]]:
        """Greedy MTP drafts: ``ks[i]`` ids following ``last_tokens[i]`` (sampled, not appended) for sequence i.

        Row ``L - 1`` of each sequence (its pending hidden row, the sampled token) gives draft 1; drafts 2..k chain the
        head on its own output rows (position + 1 each, their KV written past the sequence's rows and dropped -- the
        next rows overwrite them). Sequences are ordered by k (descending) so that every chained step is a prefix of
        the rows; all drafts are read back in one copy.

        Raises:
            NinfercError: a sequence that does not speculate, or whose pending row is not at its last position.
        """
        e, cp = self.engine, self.engine.cp
        out: list[list[int]] = [[] for _ in seqs]
        order = [i for i in sorted(range(len(seqs)), key=lambda i: -ks[i]) if ks[i] > 0]
        if not order:
            return out
        for i in order:
            x = seqs[i]
            if not getattr(x, "mtp", False) or self._mtp_len[x.slot] != x.length - 1:
                raise NinfercError(f"draft: sequence in group {x.slot} does not speculate or its MTP rows "
                                   f"({self._mtp_len[x.slot]}) are not at its length - 1 ({x.length - 1})")
            self._check_pages(x, ks[i])
        kmax, mb = ks[order[0]], e.max_batch
        drafts = cp.empty((kmax, len(order)), cp.int32)
        with e.stream:
            for step in range(kmax):
                rows = [i for i in order if ks[i] > step]
                B = len(rows)  # noqa: N806
                if step:  # the chained rows read the head's own output rows (mtp_hidden, gathered R = B rows)
                    e.mtp_src[mb:mb + B] = e.mtp_hidden_rows(B)
                ar = np.arange(B, dtype=np.int32)
                e.write_meta(tok_pos=[seqs[i].length - 1 + step for i in rows], tok_seq=ar,
                             seq_start=np.arange(B + 1, dtype=np.int32),
                             seq_ctx=[seqs[i].length + step for i in rows], seq_slot=np.zeros(B, np.int32),
                             row_index=ar, page_rows=[seqs[i].pages for i in rows],
                             tokens=[int(last_tokens[i]) for i in rows] if step == 0 else None,
                             hidden_rows=[seqs[i].slot for i in rows] if step == 0 else mb + ar)
                # the head's step and its greedy sampler, which writes the draft ids where the next step reads them
                if self.cuda_graph:
                    e.step_graph("decode", B, B, B, then="sample_argmax", mtp=True).launch(stream=e.stream)
                else:
                    e.run("decode", B, B, B, mtp=True)
                    e.run("sample_argmax", B, B, B, mtp=True)
                drafts[step, :B] = e.tokens[:B]
            host = e.host(drafts)
        for c, i in enumerate(order):
            d = [int(host[j, c]) for j in range(ks[i])]
            # a draft from non-finite head logits (the sampler's -1) ends the chain: the verify step judges the rest
            out[i] = d[:next((j for j, t in enumerate(d) if t < 0), len(d))]
            self._mtp_len[seqs[i].slot] = seqs[i].length
        return out

    def verify(self, seqs: list, token_lists: list[list[int]]) -> list[np.ndarray]:
        """The model over ``[last token, draft 1 .. draft k]`` of each sequence in one ``verify`` step: logits
        ``[k + 1, V]`` each (fp32, on the host), the GDN state after token j of sequence group g in slot
        ``g * (K + 1) + j``, every token's hidden row kept for the head. :meth:`accept` then keeps a prefix."""
        return self._verify_step(seqs, token_lists, draw=None)

    def verify_ids(self, seqs: list, token_lists: list[list[int]], samplers: list) -> list[np.ndarray]:
        """:meth:`verify` with every row's token drawn on the device: int32 ``[k + 1]`` ids per sequence (-1 for a row
        whose maximum is not finite), one read of the step's T ids instead of its ``[T, V]`` logits -- the round's
        acceptance (:func:`~ninferc.runtime.spec.accept_ids`). Row j of sequence i is drawn with ``samplers[i]``'s
        parameters at Philox counter ``draws + j`` (a greedy sampler's rows: the argmax; all greedy: the argmax
        kernel).

        A sampler with penalties, min_p, logit_bias or min_tokens has its rows adjusted on the device first (row j
        with the drafts before it counted: :meth:`_adjust`), so :func:`~ninferc.runtime.spec.accept_ids` stays
        lossless for it (:attr:`adjusts_verify_rows`).

        Raises:
            NinfercError: a sampler under a grammar (its mask is the host's)."""
        return self._verify_step(seqs, token_lists, draw=self._verify_draw(token_lists, samplers), samplers=samplers)

    def verify_mixed(self, seqs: list, token_lists: list[list[int]], samplers: list) -> list[np.ndarray]:
        """:meth:`verify_ids` for the sequences with a sampler and :meth:`verify`'s logits (fp32 ``[k + 1, V]``, copied
        before the draw) for those whose ``samplers[i]`` is None -- a round mixing requests accepted from drawn ids
        with requests accepted from their logits (logprobs, a grammar), so the first keep their device draws (a seeded
        one the text it gets in any round) and only the second's rows leave the device. The draw runs over every row
        (the logits sequences' rows as greedy ones, their ids unread).

        Raises:
            NinfercError: as :meth:`verify_ids`."""
        return self._verify_step(seqs, token_lists, draw=self._verify_draw(
            token_lists, [s if s is not None else _UNREAD_DRAW for s in samplers]), samplers=samplers)

    def _verify_draw(self, token_lists: list[list[int]], samplers: list) -> str:
        """The verify step's draw for ``samplers``: ``"argmax"`` (all greedy) or ``"sample"`` (the rows' parameters
        and Philox counters written to the engine's sampling arrays).

        Raises:
            NinfercError: a sampler under a grammar (its mask is the host's)."""
        if any(not s.device_drawable for s in samplers):
            raise NinfercError("verify_ids: a request needs the host sampler (a grammar)")
        if all(s.params.greedy for s in samplers):
            return "argmax"
        e, cp = self.engine, self.engine.cp
        rows = [(s, j) for s, t in zip(samplers, token_lists) for j in range(len(t))]
        T = len(rows)  # noqa: N806
        with e.stream:
            sp = e.sampling
            sp["temperature"][:T] = cp.asarray([0.0 if s.params.greedy else s.params.temperature for s, _ in rows],
                                               cp.float32)
            sp["top_k"][:T] = cp.asarray([s.params.top_k for s, _ in rows], cp.int32)
            sp["top_p"][:T] = cp.asarray([s.params.top_p for s, _ in rows], cp.float32)
            sp["seed"][:T] = cp.asarray(np.array([s.params.seed for s, _ in rows], np.uint64))
            sp["rng_step"][:T] = cp.asarray([s.draws + self._unread.get(id(s), 0) + j for s, j in rows], cp.int32)
        return "sample"

    def _verify_step(self, seqs: list, token_lists: list[list[int]], *, draw: str | None,
                     read: bool = True, samplers: list | None = None) -> list[np.ndarray] | list[int]:
        """The verify step of every sequence's tokens; with ``draw``, a token drawn from every row (read back as int
        ids per sequence, or left in ``engine.tokens`` without ``read``), where a sequence whose ``samplers[i]`` is
        None gets its logits rows instead (:meth:`verify_mixed`); without ``draw``, every row's logits."""
        e = self.engine
        B = len(seqs)  # noqa: N806
        pos, seq_of, starts, toks = [], [], [0], []
        for b, (x, t) in enumerate(zip(seqs, token_lists)):
            if not 1 <= len(t) <= self._group:
                raise NinfercError(f"verify of {len(t)} tokens; this engine verifies 1 to {self._group} "
                                   f"(--draft-tokens {self.spec_tokens} + 1)")
            self._check_pages(x, len(t))
            self._verify[x.slot] = (x.length, len(pos), [int(v) for v in t])
            pos += range(x.length, x.length + len(t))
            seq_of += [b] * len(t)
            toks += [int(v) for v in t]
            starts.append(len(pos))
        T = len(pos)  # noqa: N806
        with e.stream:
            e.write_meta(tok_pos=pos, tok_seq=seq_of, seq_start=starts,
                         seq_ctx=[x.length + len(t) for x, t in zip(seqs, token_lists)],
                         seq_slot=[self._state_slot(x) for x in seqs],
                         seq_slot_out=[x.slot * self._group for x in seqs], row_index=np.arange(T, dtype=np.int32),
                         page_rows=[x.pages for x in seqs], tokens=toks, token_rows=True)
            then = {"argmax": "sample_rows", "sample": "sample_rows_sample", None: None}[draw]
            todo = [] if draw is None or samplers is None else [
                (starts[b] + j, s, x.slot, [int(v) for v in t[1:j + 1]])
                for b, (x, t, s) in enumerate(zip(seqs, token_lists, samplers)) if s is not None and not s.device_ok
                for j in range(len(t))]
            logits_of = [] if draw is None or samplers is None else [b for b, s in enumerate(samplers) if s is None]
            if self.cuda_graph:  # one graph per (T, B, draw): at most max_batch x (K + 1) shapes each
                e.step_graph("verify", T, B, T, then=None if todo or logits_of else then).launch(stream=e.stream)
            else:
                e.run("verify", T, B, T)
            # the logits sequences' rows, before anything adjusts or draws over the logits
            rows_of = {b: e.host(e.logits[starts[b]:starts[b + 1]]) for b in logits_of}
            if todo:  # the rows' adjustments between the step and its draw
                self._adjust(todo, counted=False)
            if then and (todo or logits_of or not self.cuda_graph):
                e.run(then, T, B, T)
            n_host = sum(starts[b + 1] - starts[b] for b in logits_of)
            # rows drawn on the device, or whose logits went to the host
            self.stats["device_rows" if draw else "host_rows"] += T - n_host
            self.stats["host_rows"] += n_host
            if not read:  # verify_round: the ids stay in e.tokens[:T]
                host = None
            elif draw:
                host = e.host(e.tokens[:T])
            else:
                host = e.host(e.logits[:T])
        for x, t in zip(seqs, token_lists):
            x.length += len(t)
        if host is None:
            return starts
        return [rows_of[b] if b in rows_of else host[starts[b]:starts[b + 1]] for b in range(B)]

    def accept(self, seqs: list, accepted: list[int]) -> None:
        """Keep the first ``accepted[i] + 1`` tokens of sequence i's last :meth:`verify`: the length rolls back to
        them (later KV is overwritten by later steps), the group continues from state slot ``accepted[i]`` (no copy,
        no recompute), and the head's rows of the kept tokens whose next token is known are computed."""
        items = []
        for x, m in zip(seqs, accepted):
            L, r0, toks = self._verify.pop(x.slot)  # noqa: N806
            if not 0 <= m < len(toks):
                raise NinfercError(f"accept: {m} drafts of a verify over {len(toks)} tokens")
            self._cur[x.slot] = m
            x.length = L + m + 1
            items.append((x, L, toks, r0, L + m))
        self._mtp_rows(items)

    def verify_round(self, seqs: list, token_lists: list[list[int]], samplers: list,
                     next_k: int) -> tuple[list[np.ndarray], list[int], list[list[int]]]:
        """One speculative round with one host read: :meth:`verify_ids`'s step, then -- queued behind it, nothing
        read in between -- the round's acceptance decided on the device and the next round's drafts.

        On the device, per sequence i of L tokens verifying ``token_lists[i] = [last, d_1 .. d_k]``: m = the
        leading drafts equal to their row's drawn id (:func:`~ninferc.runtime.spec.accept_ids`'s rule; a -1 row
        ends it); the MTP head's rows not yet computed up to position ``L + k - 1``, as if every draft were kept
        (the rows past ``L + m`` are recomputed by later rounds before any row reads them: a row reads keys at or
        before its own position); the pending hidden row becomes the model's row of position ``L + m``; then ``next_k`` drafts
        chained from the bonus id (row m's) at position ``L + m`` -- the draft chain's metadata written from the
        host as for m = 0 and moved by m on the device. One copy then brings back every row's id, the m's and the
        drafts; the host keeps the state :meth:`accept` would (length ``L + m + 1``, state slot m) with the first
        draft row computed, as after :meth:`draft`.

        Args:
            seqs, token_lists, samplers: as :meth:`verify_ids`. next_k: drafts per sequence for the next round
                (1..K, the same for every sequence; its KV rows must fit the pages as if every draft were kept).

        Returns:
            (ids per sequence: int32 [k + 1], -1 for a non-finite row; accepted drafts m per sequence, as decided on
            the device -- the caller's :func:`~ninferc.runtime.spec.accept_ids` must agree; the next drafts per
            sequence, ``next_k`` each, cut before a -1).

        Raises:
            NinfercError: as :meth:`verify_ids`; ``next_k`` outside 1..K; a sequence's pages too few for its rows.
        """
        e, cp = self.engine, self.engine.cp
        if not 1 <= next_k <= self.spec_tokens:
            raise NinfercError(f"verify_round: {next_k} next drafts; this backend drafts 1 to {self.spec_tokens}")
        B, G, mb = len(seqs), self._group, e.max_batch  # noqa: N806
        base = [x.length for x in seqs]
        for x, t in zip(seqs, token_lists):  # the draft chain's KV rows, if every draft were kept
            self._check_pages(x, len(t) + next_k - 1)
        draw = self._verify_draw(token_lists, samplers)
        starts = self._verify_step(seqs, token_lists, draw=draw, read=False, samplers=samplers)
        T = starts[-1]  # noqa: N806
        o = e.meta_off
        with e.stream:
            ids = e.tokens[:T].copy()
            ss = e.meta[o["seq_start"]:o["seq_start"] + B + 1]
            tin = e.meta[o["tokens_in"]:o["tokens_in"] + T]
            j = cp.arange(G, dtype=cp.int32)
            n = (ss[1:] - ss[:B])[:, None]
            row = ss[:B, None] + cp.minimum(j[None, :], n - 1)  # [B, G]: row j of sequence b (its last repeated)
            keep = (ids[row] == tin[cp.minimum(row + 1, T - 1)]) & (j[None, :] < n - 1)
            m = cp.argmin(keep.astype(cp.int32), axis=1).astype(cp.int32)  # first row j whose id is not draft j + 1
            first = ss[:B] + m
            bonus = ids[first]
            pending = e.mtp_src[2 * mb + first]  # the model's hidden row of position L + m, before the head's rows
        # the head's rows of every verified position (as if all drafts were kept), then the pending rows
        items = []
        for x, t, L in zip(seqs, token_lists, base):  # noqa: N806
            _, r0, toks = self._verify.pop(x.slot)
            items.append((x, L, toks, r0, L + len(t) - 1))
        self._mtp_rows(items)
        with e.stream:
            for b, x in enumerate(seqs):
                e.mtp_src[x.slot] = pending[b]
        # the draft chain from (bonus, pending row) at position L + m: the host's metadata for m = 0, moved by m
        drafts = cp.empty((next_k, B), cp.int32)
        ar = np.arange(B, dtype=np.int32)
        with e.stream:
            for step in range(next_k):
                if step:
                    e.mtp_src[mb:mb + B] = e.mtp_hidden_rows(B)
                e.write_meta(tok_pos=[L + step for L in base], tok_seq=ar, seq_start=np.arange(B + 1, dtype=np.int32),
                             seq_ctx=[L + step + 1 for L in base], seq_slot=np.zeros(B, np.int32), row_index=ar,
                             page_rows=[x.pages for x in seqs], tokens=None,
                             hidden_rows=[x.slot for x in seqs] if step == 0 else mb + ar)
                e.meta[o["tok_pos"]:o["tok_pos"] + B] += m
                e.meta[o["seq_ctx"]:o["seq_ctx"] + B] += m
                if step == 0:
                    e.tokens[:B] = bonus
                if self.cuda_graph:
                    e.step_graph("decode", B, B, B, then="sample_argmax", mtp=True).launch(stream=e.stream)
                else:
                    e.run("decode", B, B, B, mtp=True)
                    e.run("sample_argmax", B, B, B, mtp=True)
                drafts[step] = e.tokens[:B]
            out = cp.concatenate([ids, m, drafts.ravel()])
            host = e.host(out)
        got_ids = [host[starts[b]:starts[b + 1]] for b in range(B)]
        ms = [int(v) for v in host[T:T + B]]
        nxt = host[T + B:].reshape(next_k, B)
        out_drafts = []
        for b, (x, L) in enumerate(zip(seqs, base)):  # noqa: N806
            g = x.slot
            self._cur[g] = ms[b]
            x.length = L + ms[b] + 1
            self._mtp_len[g] = x.length  # the first draft's row (position L + m) is the head's row of that position
            d = [int(v) for v in nxt[:, b]]
            out_drafts.append(d[:next((i for i, t in enumerate(d) if t < 0), len(d))])
        self.stats["one_read_rounds"] += 1
        return got_ids, ms, out_drafts

    # -- prefix-cache checkpoints (device-to-device copies on the engine stream) ---------------------------
    def _gdn_states(self):
        return [(n, a) for n, a in self.engine.states.items() if not isinstance(a, dict)]

    def state_nbytes(self, seq) -> int:
        """Bytes of one checkpoint: the conv ring and recurrent state of every GDN layer for one slot (and for a
        speculating sequence the MTP head's pending hidden row, bf16)."""
        n = sum(a[0].nbytes for _, a in self._gdn_states())
        if self.spec_tokens and getattr(seq, "mtp", False):
            n += self.engine.mtp_src[0].nbytes
        return n

    def save_state(self, seq) -> dict:
        """Device copies of ``seq``'s GDN state slot (and MTP pending row), ordered after the steps queued before."""
        e = self.engine
        with e.stream:
            out = {n: a[self._state_slot(seq)].copy() for n, a in self._gdn_states()}
            if self.spec_tokens and getattr(seq, "mtp", False):
                out["mtp.pending"] = e.mtp_src[seq.slot].copy()
        return out

    def restore_state(self, seq, state: dict, tokens) -> None:
        """Copy a checkpoint into ``seq``'s slot; ``seq`` is then at ``len(tokens)`` tokens (its pages hold the KV;
        a speculating sequence's MTP rows up to the last position, whose row waits for the next token)."""
        e = self.engine
        self._cur[seq.slot] = 0
        with e.stream:
            for n, a in self._gdn_states():
                a[self._state_slot(seq)] = state[n]
            if "mtp.pending" in state:
                e.mtp_src[seq.slot] = state["mtp.pending"]
        seq.length = len(tokens)
        self._mtp_len[seq.slot] = max(0, seq.length - 1)

    def copy_page(self, src: int, dst: int) -> None:
        """Copy KV page ``src`` into ``dst`` in every attention layer (codes and int8 scales)."""
        e = self.engine
        with e.stream:
            for _, st in e.states.items():
                if isinstance(st, dict):
                    for arr in st.values():
                        arr[dst] = arr[src]

    def settle(self, seq) -> None:
        """Nothing to settle: a speculating sequence's MTP rows are computed as soon as their next token is known
        (all but the last position's, kept as the pending hidden row, which a checkpoint saves)."""

    def close(self) -> None:
        """Wait for the stream; the engine's memory is freed with it."""
        self.engine.stream.synchronize()
