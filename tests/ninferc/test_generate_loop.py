"""generate(): the same ids, stop and length rules with a step-by-step backend and with a streaming one
(decode_stream, as the CUDA session), and the stream is closed when generation stops."""

from __future__ import annotations

import pytest

from ninferc.errors import NinfercError
from ninferc.generate import generate
from ninferc.sampling import SamplingParams

GREEDY = SamplingParams()


class StepBackend:
    """Next id = (last id * 7 + 3) % 50: decode appends, sample computes."""

    def __init__(self):
        self.seq = []

    def prefill(self, ids, chunk):
        self.seq = list(ids)

    def sample(self, params):
        return (self.seq[-1] * 7 + 3) % 50

    def decode(self, token):
        self.seq.append(token)

    def synchronize(self):
        pass


class StreamBackend(StepBackend):
    """The same model, with decode_stream running one step ahead of what it yields (as the CUDA session)."""

    def __init__(self):
        super().__init__()
        self.closed = 0

    def decode_stream(self, params, n):
        nxt = self.sample(params)
        self.decode(nxt)  # step 0 queued
        try:
            for i in range(n):
                tok = self.sample(params)
                if i + 1 < n:
                    self.decode(tok)  # the step after it, queued before tok is handed out
                yield tok
        finally:
            self.closed += 1


def reference(prompt, n):
    out, last = [], prompt[-1]
    for _ in range(n):
        last = (last * 7 + 3) % 50
        out.append(last)
    return out


@pytest.mark.parametrize("backend", [StepBackend, StreamBackend])
def test_same_ids_and_stop_rules(backend):
    want = reference([5], 12)
    be = backend()
    seen = []
    r = generate(be, [5], max_new=12, params=GREEDY, on_token=seen.append)
    assert r.ids == want and seen == want and r.stopped_by == "length"
    stop = want[4]
    r = generate(be, [5], max_new=12, params=GREEDY, stop_ids=(stop,))
    assert r.ids == want[:want.index(stop) + 1] and r.stopped_by == "stop"
    r = generate(be, [5], max_new=1, params=GREEDY)
    assert r.ids == want[:1]


def test_stream_is_closed_when_generation_stops():
    be = StreamBackend()
    want = reference([9], 10)
    generate(be, [9], max_new=10, params=GREEDY, stop_ids=(want[3],))
    assert be.closed == 1
    generate(be, [9], max_new=10, params=GREEDY)
    assert be.closed == 2


def test_bad_arguments():
    with pytest.raises(NinfercError, match="max_new must be >= 1, found 0"):
        generate(StepBackend(), [1], max_new=0, params=GREEDY)
