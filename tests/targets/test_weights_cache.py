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


def _damaged(data: bytes, damage: str) -> bytes:
    """``data`` (an .npz of the arrays w and codes) damaged as named."""
    if damage == "not an npz":
        return b"not an npz"
    if damage == "truncated":
        return data[: len(data) // 2]  # a zip cut short
    magic = data.index(b"\x93NUMPY")  # the first member's .npy header
    if damage == "zero header":  # what run 205's device read: the member's header as zero bytes
        return data[:magic] + bytes(64) + data[magic + 64:]
    assert damage == "zero payload"  # a readable header, the w values zeros: the zip member's CRC-32 tells
    start = data.index(b"\n", magic) + 1
    return data[:start] + bytes(64 * 32 * 4) + data[start + 64 * 32 * 4:]


@pytest.mark.parametrize("damage", ["not an npz", "truncated", "zero header", "zero payload"])
def test_a_damaged_file_is_computed_again(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("NINFERC_TEST_WEIGHTS", str(tmp_path))
    counter = tmp_path / "calls"
    first = weights_cache.host_cached("w_64x32", _make(counter))
    (path,) = tmp_path.glob("w_64x32_*.npz")
    path.write_bytes(_damaged(path.read_bytes(), damage))
    out = weights_cache.host_cached("w_64x32", _make(counter))
    assert counter.read_text() == "xx"
    assert out.keys() == first.keys() and all(np.array_equal(out[k], first[k]) for k in out)
    assert weights_cache.host_cached("w_64x32", _make(counter))["w"].sum() == first["w"].sum()  # stored again, whole
    assert counter.read_text() == "xx"


def test_a_file_that_cannot_be_written_warns_and_returns_the_arrays(tmp_path, monkeypatch):
    monkeypatch.setenv("NINFERC_TEST_WEIGHTS", str(tmp_path))

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weights_cache.np, "savez", full_disk)
    with pytest.warns(UserWarning, match="No space left"):
        out = weights_cache.host_cached("w_64x32", _make(tmp_path / "calls"))
    assert out["w"].shape == (64, 32) and not list(tmp_path.glob("*.npz"))


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
