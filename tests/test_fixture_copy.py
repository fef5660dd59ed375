"""The repository's copy of the fixture checkpoint (tests/fixtures/qwen35-tiny-code) is byte-identical to the shared
fixture (../shared/models/qwen35-tiny-code, the external truth), where that folder is present."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COPY = REPO / "tests" / "fixtures" / "qwen35-tiny-code"
SHARED = REPO.parent / "shared" / "models" / "qwen35-tiny-code"


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def test_copy_has_the_checkpoint_and_its_goldens():
    names = set(_digests(COPY))
    for want in ("config.json", "model.safetensors.index.json", "model-mtp.safetensors", "tokenizer.json",
                 "chat_template.jinja", "goldens.json", "goldens-long.json", "goldens-mtp.json", "goldens-chat.json"):
        assert want in names, want


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/models is not beside this checkout")
def test_copy_is_byte_identical_to_the_shared_fixture():
    assert _digests(COPY) == _digests(SHARED)
