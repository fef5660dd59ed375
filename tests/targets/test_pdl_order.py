"""The PDL ordering rule that gdn_recurrent's decode preload relies on (templates/ninfer_common.cuh section 7): every kernel
lets its dependents launch only after its own ``griddepcontrol.wait``, so a grid that is running implies every kernel
two or more launches back has completed. A template that called ``pdl_launch_dependents()`` (or the PTX itself)
anywhere but inside ``NINFER_PDL_ENTRY`` -- wait, then launch_dependents -- would let a preload read stale state."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
_CALLS = re.compile(r"pdl_launch_dependents\s*\(\s*\)|griddepcontrol\.launch_dependents|pdl_wait\s*\(\s*\)|"
                    r"griddepcontrol\.wait")


def _uses(text: str) -> list[str]:
    return [m.group(0).replace(" ", "") for m in _CALLS.finditer(text)]


def test_only_ninfer_pdl_entry_triggers_dependents_after_its_wait():
    common = (TEMPLATES / "ninfer_common.cuh").read_text()
    entry = common[common.index("#define NINFER_PDL_ENTRY()"):]
    assert _uses(entry)[:2] == ["pdl_wait()", "pdl_launch_dependents()"], "NINFER_PDL_ENTRY must wait, then trigger"
    offenders = []
    for path in sorted(TEMPLATES.glob("*")):
        if path.suffix not in (".j2", ".cuh") or path.name == "ninfer_common.cuh":
            continue
        if _uses(path.read_text()):
            offenders.append(path.name)
    assert not offenders, f"templates calling the PDL primitives outside NINFER_PDL_ENTRY: {offenders}"


def test_detector_sees_a_direct_trigger():
    assert _uses("ninfer::pdl_launch_dependents();") == ["pdl_launch_dependents()"]
    assert _uses('asm volatile("griddepcontrol.launch_dependents;");') == ["griddepcontrol.launch_dependents"]
    assert _uses("NINFER_PDL_ENTRY();") == []
