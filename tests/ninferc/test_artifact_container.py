"""The .ninfer container: round trip, and a clear error for each kind of damage."""

import re
import struct

import ml_dtypes
import numpy as np
import pytest

from ninferc.artifact import ALIGN, CONTAINER_VERSION, Artifact, LazyTensor, read_container_version, write_artifact
from ninferc.errors import ArtifactError


@pytest.fixture()
def art_path(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16),
        "n": rng.standard_normal(32).astype(np.float32),
        "lazy": LazyTensor((3, 4), np.float32, lambda: np.full((3, 4), 2.5, np.float32)),
    }
    p = tmp_path / "m.ninfer"
    write_artifact(p, {"model": {"name": "x"}, "target": {"arch": "sm_89"}}, tensors,
                   {"tokenizer.json": b'{"a": 1}'})
    return p


def test_round_trip_and_alignment(art_path):
    a = Artifact.open(art_path, model=False)
    assert read_container_version(art_path) == CONTAINER_VERSION
    assert a.header["payload_offset"] % ALIGN == 0
    for t in a.header["tensors"] + a.header["blobs"]:
        assert t["offset"] % ALIGN == 0
    assert a.tensor("w").dtype == ml_dtypes.bfloat16 and a.tensor("w").shape == (64, 32)
    np.testing.assert_array_equal(a.tensor("lazy"), np.full((3, 4), 2.5, np.float32))
    assert a.blob("tokenizer.json") == b'{"a": 1}'
    a.verify_all()


def test_truncated(art_path):
    data = art_path.read_bytes()
    art_path.write_bytes(data[:-100])
    with pytest.raises(ArtifactError, match="truncated: payloads end at byte"):
        Artifact.open(art_path, model=False)
    art_path.write_bytes(data[:30])
    with pytest.raises(ArtifactError, match="truncated inside the fixed prefix"):
        Artifact.open(art_path, model=False)
    # bytes appended after the last payload (`echo junk >> m.ninfer` passed --verify until 2026-12-06)
    art_path.write_bytes(data + b"junk\n")
    with pytest.raises(ArtifactError, match=f"5 bytes follow the last payload \\(it ends at byte {len(data):,}"):
        Artifact.open(art_path, model=False)


def test_flipped_byte_names_the_tensor(art_path):
    a = Artifact.open(art_path, model=False)
    t = next(t for t in a.header["tensors"] if t["name"] == "n")
    pos = a.header["payload_offset"] + t["offset"] + 5
    data = bytearray(art_path.read_bytes())
    data[pos] ^= 0x40
    art_path.write_bytes(bytes(data))
    b = Artifact.open(art_path, model=False)
    b.tensor("w")  # an intact tensor still reads
    with pytest.raises(ArtifactError, match="tensor 'n' is corrupt"):
        b.tensor("n")


def test_bad_magic(art_path):
    data = bytearray(art_path.read_bytes())
    data[:8] = b"GGUF\0\0\0\0"
    art_path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="bad magic"):
        Artifact.open(art_path, model=False)


def test_newer_container_version(art_path):
    data = bytearray(art_path.read_bytes())
    data[8:12] = struct.pack("<I", CONTAINER_VERSION + 1)
    art_path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=f"container version {CONTAINER_VERSION + 1} is not supported"):
        Artifact.open(art_path, model=False)


def test_header_corruption(art_path):
    data = bytearray(art_path.read_bytes())
    data[60] ^= 0x01
    art_path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="header checksum mismatch"):
        Artifact.open(art_path, model=False)


def _rewrite_header(path, header_bytes: bytes, hlen: int | None = None):
    """Replace the header (with a valid checksum) -- or only its declared length when ``hlen`` is given."""
    import hashlib

    from ninferc.artifact import _PREFIX

    data = path.read_bytes()
    magic, version, flags, old_len, _ = _PREFIX.unpack(data[:_PREFIX.size])
    rest = data[_PREFIX.size + old_len:]
    if hlen is not None:
        path.write_bytes(_PREFIX.pack(magic, version, flags, hlen, hashlib.sha256(data[_PREFIX.size:_PREFIX.size + old_len]).digest())
                         + data[_PREFIX.size:])
        return
    path.write_bytes(_PREFIX.pack(magic, version, flags, len(header_bytes), hashlib.sha256(header_bytes).digest())
                     + header_bytes + rest)


@pytest.mark.parametrize("header, hlen, needle", [
    (None, 2**62, "truncated inside the header (it declares 4611686018427387904 bytes"),
    (b"[1, 2]", None, "header is a JSON list, not an object"),
    (b'{"format_version": 1}', None, "payload table is missing or malformed (KeyError: 'payload_offset'"),
    (b'{"format_version": 1, "payload_offset": 64, "tensors": [{"offset": 0}], "blobs": []}', None,
     "payload table is missing or malformed (KeyError: 'nbytes'"),
])
def test_garbled_header_with_a_valid_checksum(art_path, header, hlen, needle):
    """A header that passes the checksum but is not what ninferc writes is an ArtifactError, not a
    MemoryError / KeyError / AttributeError from deep inside."""
    _rewrite_header(art_path, header or b"", hlen)
    with pytest.raises(ArtifactError, match=re.escape(needle)):
        Artifact.open(art_path, model=False)


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path):
    import subprocess
    import sys

    p = tmp_path / "m.ninfer"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"m.ninfer.tmp{int(dead.stdout)}"  # a pid that has exited
    stale.write_bytes(b"half an artifact")
    write_artifact(p, {"model": {}}, {"w": np.zeros(4, np.float32)}, {"tokenizer.json": b"{}"})
    assert not stale.exists() and Artifact.open(p, model=False).tensor("w").shape == (4,)


def test_a_failed_write_is_named_and_leaves_nothing(tmp_path, monkeypatch):
    """A full disk while writing (here: the fsync before the rename fails with ENOSPC) is an ArtifactError naming the
    path and the OS's reason, with no temporary file and no artifact left (it was a traceback, 2026-12-06)."""
    import errno

    import ninferc.artifact as artifact_mod

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(artifact_mod.os, "fsync", full)
    p = tmp_path / "m.ninfer"
    with pytest.raises(ArtifactError, match=re.escape(f"{p}: cannot write the artifact (No space left on device; "
                                                      "it takes ") + r"[\d,]+ bytes\); nothing was written at"):
        write_artifact(p, {"model": {}}, {"w": np.zeros(4, np.float32)}, {"tokenizer.json": b"{}"})
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_of_stdout_is_one_error_line(tiny_dir):
    """``> /dev/full``: one ``error:`` line and status 2, not a traceback (2026-12-06)."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "ninferc", "inspect", str(tiny_dir)], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: cannot write the output (No space left on device)"], r.stderr
