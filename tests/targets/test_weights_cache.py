"""tests/targets/weights_cache.py: computed once across processes, reloaded equal, a damaged file computed again."""

import multiprocessing as mp

import numpy as np
import pytest

import weights_cache


def _make(counter_path):
    def make():
        with open(counter_path, "a") as f:
            f.write("x")
        rng = np.random.default_rng(0)
        return {"w": rng.standard_normal((64, 32), dtype=np.float32), "codes": np.arange(10, dtype=np.int8)}
    return make


def _worker(args):
    cache, counter = args
    import os

    os.environ["NINFERC_TEST_WEIGHTS"] = cache
    return float(weights_cache.host_cached("w_64x32", _make(counter))["w"].sum())


def test_computed_once_and_reloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("NINFERC_TEST_WEIGHTS", str(tmp_path / "c"))
    counter = tmp_path / "calls"
    a = weights_cache.host_cached("w_64x32", _make(counter))
    b = weights_cache.host_cached("w_64x32", _make(counter))
    assert counter.read_text() == "x"
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    b["w"][0, 0] = 99.0  # a copy: the next caller gets the stored values
    assert weights_cache.host_cached("w_64x32", _make(counter))["w"][0, 0] == a["w"][0, 0]
    assert not list((tmp_path / "c").glob("*.partial.npz"))


def test_processes_share_one_computation(tmp_path):
    counter = tmp_path / "calls"
    with mp.get_context("spawn").Pool(4) as pool:
        sums = pool.map(_worker, [(str(tmp_path / "c"), str(counter))] * 8)
    assert len(set(sums)) == 1
    assert counter.read_text() == "x"  # the lock made the other processes wait and load


@pytest.mark.parametrize("damage", ["not an npz", "truncated"])
def test_a_damaged_file_is_computed_again(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("NINFERC_TEST_WEIGHTS", str(tmp_path))
    counter = tmp_path / "calls"
    weights_cache.host_cached("w_64x32", _make(counter))
    (path,) = tmp_path.glob("w_64x32_*.npz")
    data = path.read_bytes()
    path.write_bytes(b"not an npz" if damage == "not an npz" else data[: len(data) // 2])  # a zip cut short
    out = weights_cache.host_cached("w_64x32", _make(counter))
    assert counter.read_text() == "xx" and out["w"].shape == (64, 32)


def test_changed_code_gets_its_own_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NINFERC_TEST_WEIGHTS", str(tmp_path))
    counter = tmp_path / "calls"
    weights_cache.host_cached("w_64x32", _make(counter), sources=("def quantize(): v1",))
    weights_cache.host_cached("w_64x32", _make(counter), sources=("def quantize(): v1",))
    assert counter.read_text() == "x"
    weights_cache.host_cached("w_64x32", _make(counter), sources=("def quantize(): v2",))
    assert counter.read_text() == "xx" and len(list(tmp_path.glob("w_64x32_*.npz"))) == 2


@pytest.mark.parametrize("name", ["", "a/b", ".hidden"])
def test_names_that_are_not_file_names_are_refused(name, tmp_path, monkeypatch):
    monkeypatch.setenv("NINFERC_TEST_WEIGHTS", str(tmp_path))
    with pytest.raises(ValueError, match="not a file name"):
        weights_cache.host_cached(name, dict)
