"""Test support shared by the test tiers: where the fixture checkpoints live."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def models_dir() -> Path:
    """The folder holding the fixture checkpoints (``qwen35-tiny-code``): ``$NINFERC_MODELS``, else
    ``../shared/models`` beside the repository, else ``shared/models`` inside it (a device run's copy of the
    working tree carries ``shared/`` there), else ``/work/shared/models``, else ``.fixtures/models`` in the
    repository (where device runs carry it).

    Raises:
        FileNotFoundError: none of them holds ``qwen35-tiny-code/config.json`` (tests then fail rather
            than skip: the goldens are the external truth and a silent skip could never fail).
    """
    cands = [os.environ.get("NINFERC_MODELS"), REPO.parent / "shared" / "models", REPO / "shared" / "models",
             Path("/work/shared/models"), REPO / ".fixtures" / "models"]
    for c in cands:
        if c and (Path(c) / "qwen35-tiny-code" / "config.json").is_file():
            return Path(c)
    raise FileNotFoundError(
        "fixture checkpoints not found; set NINFERC_MODELS to the folder holding qwen35-tiny-code "
        f"(looked in {[str(c) for c in cands if c]})")
