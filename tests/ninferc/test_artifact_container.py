"""The .ninfer container: round trip, and a clear error for each kind of damage."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from ninferc.artifact import ALIGN, CONTAINER_VERSION, MAGIC, Artifact, LazyTensor, read_container_version, write_artifact
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
    a = Artifact.open(art_path)
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
        Artifact.open(art_path)
    art_path.write_bytes(data[:30])
    with pytest.raises(ArtifactError, match="truncated inside the fixed prefix"):
        Artifact.open(art_path)


def test_flipped_byte_names_the_tensor(art_path):
    a = Artifact.open(art_path)
    t = next(t for t in a.header["tensors"] if t["name"] == "n")
    pos = a.header["payload_offset"] + t["offset"] + 5
    data = bytearray(art_path.read_bytes())
    data[pos] ^= 0x40
    art_path.write_bytes(bytes(data))
    b = Artifact.open(art_path)
    b.tensor("w")  # an intact tensor still reads
    with pytest.raises(ArtifactError, match="tensor 'n' is corrupt"):
        b.tensor("n")


def test_bad_magic(art_path):
    data = bytearray(art_path.read_bytes())
    data[:8] = b"GGUF\0\0\0\0"
    art_path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="bad magic"):
        Artifact.open(art_path)


def test_newer_container_version(art_path):
    data = bytearray(art_path.read_bytes())
    data[8:12] = struct.pack("<I", CONTAINER_VERSION + 1)
    art_path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=f"container version {CONTAINER_VERSION + 1} is not supported"):
        Artifact.open(art_path)


def test_header_corruption(art_path):
    data = bytearray(art_path.read_bytes())
    data[60] ^= 0x01
    art_path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="header checksum mismatch"):
        Artifact.open(art_path)
