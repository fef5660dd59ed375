"""Weight formats as the GEMV and GEMM families see them (shared by ``gemv`` and ``gemm``; the
leading underscore keeps this module out of the family registry).

The formats themselves (codes, scales, rounding) are :mod:`ninferc.ir.quant`'s; what is added here is
the K alignment the kernels need per format:

* ``bf16``: K % 8 == 0 -- 16-byte rows of 8 bf16;
* ``w8``: K % 16 == 0 -- one 16-byte load holds 16 int8 codes, never split by the K edge;
* ``w4``: K % 64 == 0 -- whole scale groups (a 16-byte load holds 32 codes, half a group).
"""

from __future__ import annotations

from ninferc.errors import PlanError
from ninferc.ir.quant import FORMATS, GROUP_SIZE

WFORMATS = FORMATS
"""Weight formats: bf16 values, or the quantised formats of :mod:`ninferc.ir.quant`."""
K_MULTIPLE = {"bf16": 8, "w8": 16, "w4": GROUP_SIZE}
"""K must be a positive multiple of this per weight format (module docstring)."""
_WHY = {"bf16": "16-byte rows of 8 bf16", "w8": "16-byte loads of 16 int8 codes",
        "w4": f"whole int4 scale groups of {GROUP_SIZE}"}


def check_weight_k(family: str, k: int, wfmt: str) -> None:
    """Validate a problem's weight format and reduction length.

    Raises:
        PlanError: ``wfmt`` not in :data:`WFORMATS` (lists them), or ``k`` not a positive multiple of
            ``K_MULTIPLE[wfmt]`` (names K, the multiple, the format and why).
    """
    if wfmt not in WFORMATS:
        raise PlanError(f"{family}: unknown weight format wfmt = {wfmt!r}; supported: {', '.join(WFORMATS)}")
    mult = K_MULTIPLE[wfmt]
    if k <= 0 or k % mult:
        raise PlanError(f"{family}: K = {k} must be a positive multiple of {mult} for wfmt = {wfmt} ({_WHY[wfmt]})")
