"""Plan goldens per arch: the 27B preset and the tiny fixture model, one SKU per arch. Any change to a
plan (registers, occupancy, grids, routes) shows up as a diff of tests/golden/<arch>/*.json.

To accept a reviewed change: NINFERC_UPDATE_GOLDENS=1 python -m pytest tests/targets/test_plan_goldens.py
"""

import difflib
import json
import os
from pathlib import Path

import pytest

from ninferc.targets.kernels import representative_instances
from ninferc.targets.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
TINY = ROOT.parent / "shared" / "models" / "qwen35-tiny-code" / "config.json"
SKU_PER_ARCH = {"sm_86": "rtx3090", "sm_89": "l20", "sm_90": "h200", "sm_120a": "rtx5090"}


def _check(path: Path, text: str):
    if os.environ.get("NINFERC_UPDATE_GOLDENS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"missing golden {path}; create it with NINFERC_UPDATE_GOLDENS=1"
    want = path.read_text()
    if want != text:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), str(path), "regenerated"))
        pytest.fail(f"plan differs from {path.relative_to(ROOT)} (NINFERC_UPDATE_GOLDENS=1 to accept):\n{diff[:6000]}")


@pytest.mark.parametrize("arch", sorted(SKU_PER_ARCH))
def test_plan_27b_golden(arch):
    plan = make_plan(representative_instances("qwen3.8-27b"), arch, sku=SKU_PER_ARCH[arch])
    text = plan.dumps()
    assert json.loads(text)["sku"] == SKU_PER_ARCH[arch]
    _check(GOLDEN / arch / "plan_27b.json", text)


@pytest.mark.skipif(not TINY.exists(), reason="tiny fixture model not present")
@pytest.mark.parametrize("arch", sorted(SKU_PER_ARCH))
def test_plan_tiny_golden(arch):
    plan = make_plan(representative_instances(json.loads(TINY.read_text())), arch, sku=SKU_PER_ARCH[arch])
    _check(GOLDEN / arch / "plan_tiny.json", plan.dumps())
