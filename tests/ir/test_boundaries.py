"""Exactness at boundaries: split prefill and prefill+decode equal one full forward."""

import numpy as np
import pytest

from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.reference import ReferenceExecutor
from ninferc.ir.tolerances import FP32_REORDER


@pytest.fixture(scope="module")
def ex(tiny_ckpt):
    return ReferenceExecutor(build_graph(tiny_ckpt.config), tiny_ckpt)


@pytest.fixture(scope="module")
def long_ids(goldens_long):
    return goldens_long["prompt_ids"]


@pytest.mark.parametrize("T", [1, 5, 63, 64, 65, 127, 128, 129])
def test_prefill_plus_decode_equals_full(ex, long_ids, T):
    ids = long_ids[:T]
    full = ex.forward(ids, ex.new_state())
    st = ex.new_state()
    parts = [ex.forward(ids[:T - 1], st)] if T > 1 else []
    parts.append(ex.forward(ids[T - 1:], st))  # one decode step (recurrent GDN when T > 1)
    split = np.concatenate(parts)
    FP32_REORDER.check(split, full, f"T={T}")
    assert st.length == T


@pytest.mark.parametrize("split", [(1024, 1), (512, 513), (1000, 25)])
def test_split_prefill_equals_unsplit(ex, long_ids, split):
    ids = long_ids[:1025]
    st_full = ex.new_state()
    full = ex.forward(ids, st_full)
    st = ex.new_state()
    a = ex.forward(ids[:split[0]], st)
    b = ex.forward(ids[split[0]:], st)
    FP32_REORDER.check(np.concatenate([a, b]), full, f"split {split} logits")
    for name in st.conv:
        FP32_REORDER.check(st.conv[name], st_full.conv[name], f"split {split} {name}")
    for name in st.recurrent:
        FP32_REORDER.check(st.recurrent[name], st_full.recurrent[name], f"split {split} {name}")
    for name in st.kv:
        FP32_REORDER.check(st.kv[name][0], st_full.kv[name][0], f"split {split} {name} K")
