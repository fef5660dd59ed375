"""CPU tests of the runtime's host-side bookkeeping: the memory plan's error and the page/slot pools."""

import pytest

from ninferc.errors import NinfercError, RuntimeMemoryError
from ninferc.runtime.memory import MemoryPlan
from ninferc.runtime.paged_kv import PagePool, PoolExhausted, Sequence, SlotPool


def test_memory_plan_error_lists_every_term_in_bytes():
    mp = MemoryPlan()
    for name, n in [("weights", 54_558_543_296), ("kv_pages", 1 << 30), ("gdn_state", 160_161_792),
                    ("activations", 960_000_000), ("workspace", 500_000_000), ("graph_allowance", 64 << 20)]:
        mp.add(name, n)
    mp.check(mp.total)  # exactly fits
    with pytest.raises(RuntimeMemoryError) as e:
        mp.check(mp.total - 1, device="GPU 0")
    msg = str(e.value)
    assert f"needs {mp.total:,} bytes" in msg and "short by 1 bytes" in msg and "GPU 0" in msg
    for name, n in mp.terms.items():
        assert name in msg and f"{n:,} B" in msg


def test_pages_and_slots():
    pool = PagePool(4, 64)
    s = Sequence(slot=SlotPool(1).take())
    s.ensure_capacity(65, pool, max_pages=3)
    assert s.pages == [0, 1] and pool.free == 2
    with pytest.raises(NinfercError, match="exceeds the max context 192"):
        s.ensure_capacity(193, pool, max_pages=3)
    s.ensure_capacity(192, pool, max_pages=3)
    with pytest.raises(PoolExhausted, match="2 pages requested, 1 of 4 free"):
        Sequence(slot=0).ensure_capacity(65, pool, max_pages=3)
    slots = SlotPool(1)
    slots.take()
    with pytest.raises(PoolExhausted, match="all 1 in use"):
        slots.take()
