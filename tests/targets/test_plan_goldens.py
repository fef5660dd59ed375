"""Plan goldens per arch: the 27B preset and the tiny fixture model, one SKU per arch. Any change to a
plan (registers, occupancy, grids, routes) shows up as a diff of tests/golden/<arch>/*.json.

To accept a reviewed change: NINFERC_UPDATE_GOLDENS=1 python -m pytest tests/targets/test_plan_goldens.py
"""

import difflib
import os
from pathlib import Path

import pytest

from ninferc.testing import ARCH_SKUS, models_dir

from ninferc.ir.config import ModelConfig, preset
from ninferc.targets.model_plan import plan_for_config

pytestmark = pytest.mark.slow  # seconds each on 2 cores: `pytest -m "not slow"` skips them

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
TINY = models_dir() / "qwen35-tiny-code"


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


@pytest.mark.parametrize("arch", sorted(ARCH_SKUS))
def test_plan_27b_golden(arch):
    plan = plan_for_config(preset("qwen3.8-27b"), arch, sku=ARCH_SKUS[arch])
    assert plan.to_json()["sku"] == ARCH_SKUS[arch]
    # the 27B golden is the launch table (identical layers folded into one row): 65 layers of JSON would
    # bury a real change in thousands of repeated lines
    _check(GOLDEN / arch / "plan_27b.txt", plan.table())


@pytest.mark.parametrize("arch", sorted(ARCH_SKUS))
def test_plan_tiny_golden(arch):
    plan = plan_for_config(ModelConfig.from_dir(TINY), arch, sku=ARCH_SKUS[arch])
    _check(GOLDEN / arch / "plan_tiny.json", plan.dumps())


#: quantised variants with a golden per arch: (file suffix, weight recipe, KV dtype)
QUANT_VARIANTS = [("w8", "w8", "bf16"), ("w4_kv8", "w4", "int8")]


@pytest.mark.parametrize("arch", sorted(ARCH_SKUS))
@pytest.mark.parametrize("suffix,weights,kv", QUANT_VARIANTS)
def test_plan_27b_quantised_golden(arch, suffix, weights, kv):
    """The 27B plan with quantised weights (GEMV/GEMM/embedding variants that dequantise in registers)
    and, for w4, the int8 KV cache: its own launch table per arch."""
    plan = plan_for_config(preset("qwen3.8-27b"), arch, sku=ARCH_SKUS[arch], weights=weights, kv_dtype=kv)
    text = plan.table()
    assert f"weights {weights}, KV {kv}" in text.splitlines()[0]
    if weights != "bf16":
        assert f"wfmt-{weights}" in text
    _check(GOLDEN / arch / f"plan_27b_{suffix}.txt", text)
