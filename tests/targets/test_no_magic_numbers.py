"""templates/ and runtime/ must not contain SM counts, resident-CTA counts or arch-specific numbers:
launch geometry comes from the plan (DESIGN.md section 4).

What is flagged (documented trade-off between robust and absurd):

1. Integer literals equal to an SM count of a SKU in the table (targets/skus.py), unless the count is a
   multiple of 16: multiples of 16 (80, 128) are everyday tile/vector/head sizes that no grep can tell
   apart from an SM count, so those two are left to review. Every other count (36, 58, 70, 72, 78, 82,
   84, 92, 132, 142, 170, 188) has no business in a kernel or the runtime.
2. Literals equal to a per-arch shared-memory size in bytes (shared memory per SM, opt-in maximum per
   CTA: 102400, 233472, 101376, 232448) or the non-power-of-two threads-per-SM limit (1536).
3. Constructs that hard-code residency or branch on the arch: ``__launch_bounds__`` with a literal
   min-CTAs argument, ``__CUDA_ARCH__`` comparisons with a number, and names like ``num_sms``,
   ``sm_count``, ``multiProcessorCount``, ``ctas_per_sm``, ``blocks_per_sm`` assigned or compared to a
   literal. (Querying the device's SM count in runtime/ is fine; writing one down is not.)

Comments are scanned too: "tuned for 132 SMs" in a comment means the code was tuned to a constant.
Lines may opt out with ``ninferc: allow-magic`` and a reason, which review then sees.
"""

from __future__ import annotations

import re
from pathlib import Path

from ninferc.targets.arch import ARCHS
from ninferc.targets.skus import SKUS

ROOT = Path(__file__).resolve().parents[2]
SCANNED_DIRS = ("templates", "runtime")
SUFFIXES = (".j2", ".cuh", ".cu", ".h", ".py")

SM_COUNTS = {s.sms for s in SKUS if s.sms % 16}
ARCH_NUMBERS = {v for a in ARCHS.values() for v in (a.smem_per_sm, a.max_smem_per_cta_optin)}
ARCH_NUMBERS |= {a.max_threads_per_sm for a in ARCHS.values() if a.max_threads_per_sm & (a.max_threads_per_sm - 1)}
FORBIDDEN = SM_COUNTS | ARCH_NUMBERS

_NUM = re.compile(r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+)[uUlL]*(?![\w.])")
_PATTERNS = [
    (re.compile(r"__launch_bounds__\s*\([^,()]*(\([^()]*\))?[^,()]*,\s*\d"), "__launch_bounds__ with a literal min-CTAs"),
    (re.compile(r"__CUDA_ARCH__\s*(==|!=|>=|<=|>|<)\s*\d"), "__CUDA_ARCH__ compared with a number"),
    (re.compile(r"(?i)\b(num_?sms?|sm_?count|n_?sms|multi_?processor_?count|ctas?_per_sm|blocks?_per_sm)\b"
                r"\s*(=|==|!=|<=|>=|<|>)\s*\d"), "SM or resident-CTA count written as a literal"),
]


def find_magic(text: str) -> list[tuple[int, str]]:
    """(line number, reason) for every violation in ``text``."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if "ninferc: allow-magic" in line:
            continue
        for m in _NUM.finditer(line):
            tok = m.group(1)
            val = int(tok, 16) if tok.lower().startswith("0x") else int(tok)
            if val in FORBIDDEN:
                out.append((i, f"literal {tok} is an SM count / arch number"))
        for rx, why in _PATTERNS:
            if rx.search(line):
                out.append((i, why))
    return out


def test_detector_catches_the_bad_and_spares_the_good():
    bad = [
        "const int grid = 132 * 4;", "if (sms == 84) {", "num_sms = 82", "__launch_bounds__(256, 2)",
        "#if __CUDA_ARCH__ >= 900", "smem = 232448;", "// tuned for 170 SMs", "ctas_per_sm = 3",
        "__launch_bounds__(kThreads, 4)", "threads_per_sm = 1536",
    ]
    good = [
        "constexpr int kWarpSize = 32;", "__launch_bounds__(kThreads)", "for (int o = 16; o > 0; o >>= 1)",
        "uint4 v; // 16 bytes", "x = 0x80000000u - (n - 1u);", "head_dim 128, tile 64", "__nanosleep(32);",
        "sms = device.attributes['MultiProcessorCount']", "float eps = 1e-6f; int k = 4096;",
    ]
    assert all(find_magic(s) for s in bad), [s for s in bad if not find_magic(s)]
    assert not any(find_magic(s) for s in good), [s for s in good if find_magic(s)]


def test_templates_and_runtime_are_free_of_magic_numbers():
    files = [p for d in SCANNED_DIRS for p in sorted((ROOT / d).rglob("*")) if p.suffix in SUFFIXES and p.is_file()]
    assert any(p.name == "gemv_fma.cu.j2" for p in files) and any(p.name == "gemv_common.cuh" for p in files)
    problems = [f"{p.relative_to(ROOT)}:{ln}: {why}" for p in files for ln, why in find_magic(p.read_text())]
    assert not problems, "\n".join(problems)
