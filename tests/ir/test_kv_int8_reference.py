"""The reference executor keeps an int8 KV cache exactly as the attention kernels store it: the round trip is
bit-exact with the kernels' numpy model (targets/kernels/attention.py), and an int8-KV graph's logits differ
from the bf16-KV graph's (before 2026-12-05 the reference kept K/V in fp32 for both: bit-identical logits)."""

from __future__ import annotations

import numpy as np
import pytest

from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.passes import run_pipeline
from ninferc.ir.quant import kv_int8_roundtrip
from ninferc.ir.reference import ReferenceExecutor
from ninferc.ir.weights import GraphWeights
from ninferc.targets.kernels.attention import dequantize_kv, quantize_kv


def test_round_trip_is_bit_exact_with_the_kernels_model():
    rng = np.random.default_rng(3)
    x = rng.normal(scale=3.0, size=(37, 2, 256)).astype(np.float32)
    x[0, 0, :64] = 0.0                       # an all-zero group: scale 1, codes 0
    x[1, 1, 64:128] = 1e-40                  # subnormal group
    x[2, 0, 5] = 1e6                         # one large value dominates its group
    want = dequantize_kv(*quantize_kv(x))
    got = kv_int8_roundtrip(x)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.slow
def test_int8_kv_reference_differs_from_bf16_and_agreement_at_4095_and_4097(tiny_ckpt, goldens_long):
    cfg = tiny_ckpt.config
    ids = (goldens_long["prompt_ids"] * 2)[:4097]
    logits = {}
    for kv in ("bf16", "int8"):
        g = run_pipeline(build_graph(cfg, lm_rows="all"), kv_dtype=kv)
        assert {s.dtype for s in g.states.values() if s.kind == "kv"} == {"bf16" if kv == "bf16" else "i8"}
        ex = ReferenceExecutor(g, GraphWeights(g, tiny_ckpt))
        st = ex.new_state()
        out = [ex.forward(ids[s:s + 1024], st) for s in range(0, len(ids), 1024)]
        logits[kv] = np.concatenate(out)
    a, b = logits["bf16"], logits["int8"]
    assert a.shape == b.shape == (4097, cfg.vocab_size)
    assert not np.array_equal(a, b)  # the int8 cache changes the numbers...
    top_a, top_b = a.argmax(-1), b.argmax(-1)
    agree = {n: float((top_a[:n] == top_b[:n]).mean()) for n in (4095, 4097)}
    print(f"int8 KV vs bf16 KV on the reference, top-1 agreement over positions: {agree}")
    assert min(agree.values()) > 0.99  # ...and keeps the choices (issue 6 measured 0.996 on the GPU)
    assert float(np.abs(a - b).max()) < 0.5
