"""Probe (``bench/gpu.sh``: ``SB_SPEC=K SB_ACCEPT=R serve_27b W``): ``ninferc serve --spec mtp`` with each speculative
round's acceptance forced to a profile, as ``ninferc bench --accept-rate`` forces it for one sequence: synthetic
weights' MTP drafts are never accepted (run 290: 0 of 3,006), so a served tok/s under speculation at the field's
acceptance (73-80 % at K = 3, README-mtp.md beside the fixture) needs the drafts' fate decided for them.

How: every verify step that draws a token from each row (``CudaBatchBackend._verify_step`` with ``draw``, the
rounds of :meth:`~ninferc.runtime.cuda_backend.CudaBatchBackend.verify_round` and ``verify_ids``) has its drawn ids
overwritten, before anything reads them, so that the first m of a sequence's k drafts match and the next does not,
m drawn by :func:`ninferc.bench.accepted_schedule` (``floor(R k)`` or one more, mean ``R k``) per sequence and round.
The device then decides acceptance, moves the draft chain and keeps GDN state slot m as for a real acceptance of m,
and the host's rule agrees; the output text is junk (a forced draft stands for the model's token). A round's kernels
do not depend on m (K drafts, K + 1 verified tokens per sequence), so its time is the real round's; what m changes
is the tokens each round delivers. Rows whose logits go to the host (logprobs, a grammar) are not forced.

Usage: ``python3 bench/serve_forced_accept.py --accept-rate R serve ARGS...`` (the ``ninferc`` command line after).
"""

from __future__ import annotations

import sys

import numpy as np

from ninferc.bench import accepted_schedule
from ninferc.errors import NinfercError
from ninferc.runtime.cuda_backend import CudaBatchBackend


def forced_ids(tokens: list[int], m: int, vocab: int) -> list[int]:
    """The drawn ids of a verify step's rows for ``tokens = [last, d_1 .. d_k]`` that accept exactly ``m`` drafts
    (0 <= m <= k): row j < m draws d_{j+1}; row m draws d_{m+1} + 1 (mod ``vocab``), a token that is not the draft,
    when m < k. The bonus row (m = k) is left out: its own draw stands. Returns the ids of rows 0 .. min(m, k - 1)."""
    k = len(tokens) - 1
    ids = [int(t) for t in tokens[1:m + 1]]
    if m < k:
        ids.append((int(tokens[m + 1]) + 1) % vocab)
    return ids


def force_acceptance(rate: float, seed: int = 0):
    """Patch :class:`CudaBatchBackend` so that every drawn verify step accepts the profile ``rate`` (accepted /
    drafted, in [0, 1]); returns a function that undoes it. ``counts`` on the returned function lists, per drawn
    verify step, the (k, m) forced on each of its sequences that had drafts (for tests).

    Raises:
        NinfercError: ``rate`` outside [0, 1] (:func:`ninferc.bench.accepted_schedule`)."""
    rng = np.random.default_rng(seed)
    accepted_schedule(rate, 1, 1, rng)  # checks the rate
    orig = CudaBatchBackend._verify_step
    counts: list[list[tuple[int, int]]] = []

    def _verify_step(self, seqs, token_lists, *, draw, read=True, samplers=None):
        out = orig(self, seqs, token_lists, draw=draw, read=read, samplers=samplers)
        if draw is None:
            return out
        e = self.engine
        starts = np.cumsum([0] + [len(t) for t in token_lists])
        rows, vals, ms = [], [], []
        for b, t in enumerate(token_lists):
            k = len(t) - 1
            if k < 1 or (samplers is not None and samplers[b] is None):  # no draft, or logits rows (verify_mixed)
                continue
            m = accepted_schedule(rate, k, 1, rng)[0]
            ms.append((k, m))
            ids = forced_ids(t, m, e.vocab)
            if read:
                out[b][:len(ids)] = ids
            else:  # verify_round: the ids stay on the device in e.tokens[:T]
                rows += range(int(starts[b]), int(starts[b]) + len(ids))
                vals += ids
        if rows:
            with e.stream:
                e.tokens[e.cp.asarray(np.array(rows, np.int64))] = e.cp.asarray(np.array(vals, np.int32))
        counts.append(ms)
        return out

    CudaBatchBackend._verify_step = _verify_step

    def undo():
        CudaBatchBackend._verify_step = orig

    undo.counts = counts
    return undo


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] != "--accept-rate":
        raise SystemExit("usage: python3 bench/serve_forced_accept.py --accept-rate R serve ARGS...")
    if any(a == "reference" or a.endswith("=reference") for a in argv):  # only the CUDA backend's rounds are forced
        raise SystemExit("serve_forced_accept: forces the CUDA backend's rounds only (found --backend reference)")
    try:
        force_acceptance(float(argv[1]))
    except (ValueError, NinfercError) as exc:
        raise SystemExit(f"serve_forced_accept: {exc}") from None
    from ninferc.cli import main as cli

    cli(argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
