"""One kernel, one name (issue 39, "Must show"): every kernel a plan launches -- the rows of the checked-in plan
goldens of the four archs (tests/golden/<arch>/plan_*.txt, equal to ``ninferc plan``'s output by
test_plan_goldens.py) -- names a family by its URI prefix, and that name is a key of the family registry, the stem of
its template files (``templates/<family>*.cu.j2``; the GEMV's one per compute engine, ``gemv_fma`` / ``gemv_dp`` /
``gemv_mma``) and of its test files (``tests/**/test_<stem>*.py``). Families of one kernel group share a test module
named for the group (:data:`TEST_GROUPS`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ninferc.targets.kernels import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
ARCHS = sorted(p.name for p in (ROOT / "tests" / "golden").iterdir() if p.is_dir())

#: family-name prefix -> the test-module stem its families share (the attention kernels' tests are test_attention*,
#: the GDN kernels' test_gdn*, the embedding's and the norm's test_elementwise*)
TEST_GROUPS = {"attn_": "attention", "gdn_": "gdn", "embed": "elementwise", "rmsnorm": "elementwise"}


def stem_of(family: str) -> str:
    return next((stem for prefix, stem in TEST_GROUPS.items() if family.startswith(prefix)), family)


def planned_families(arch: str) -> set[str]:
    """The families of every kernel URI in the arch's plan goldens (``[family__params]`` in each row)."""
    out = set()
    for f in sorted((ROOT / "tests" / "golden" / arch).glob("plan_*.txt")):
        out |= set(re.findall(r"\[([a-z0-9_]+?)__", f.read_text()))
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_every_planned_kernel_has_one_name(arch):
    fams = planned_families(arch)
    assert {"gemv", "attn_decode", "gdn_recurrent", "rmsnorm"} <= fams, fams  # the goldens were read
    for fam in sorted(fams):
        assert fam in FAMILIES, f"{arch}: plan row family {fam!r} is not a registered family"
        assert FAMILIES[fam].name == fam
        assert list((ROOT / "templates").glob(f"{fam}*.cu.j2")), f"no templates/{fam}*.cu.j2"
        stem = stem_of(fam)
        assert list((ROOT / "tests").rglob(f"test_{stem}*.py")), f"{fam}: no tests/**/test_{stem}*.py"


def test_the_name_check_can_fail():
    assert stem_of("attn_prep") == "attention" and stem_of("gemv") == "gemv"
    assert "gemv_coop" not in FAMILIES and not list((ROOT / "templates").glob("gemv_coop*.cu.j2"))
