"""Fixtures for tests/targets (helpers live in targets_testlib.py)."""

from __future__ import annotations

import pytest

from ninferc.targets.kernels import FAMILIES


@pytest.fixture(scope="session")
def gemv():
    """The registered gemv family instance."""
    return FAMILIES["gemv"]
