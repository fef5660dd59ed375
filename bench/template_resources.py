"""Registers, static shared memory and local memory of every kernel variant of one or more families, per arch.

The guard rail for template rewrites (a rewrite must leave every kernel's resources as they were): run it before
the change, keep the JSON, run it after with ``--compare``.

Which kernels: for each family named, every ``KernelSpec`` of ``family_variants(fam, p, arch)`` for ``p`` in the
family's ``sample_problems()``, plus the family's extra variants in :data:`EXTRAS` (the test suites' variants and
the 27B problem, where a family has them). Each is compiled with ``ninferc.targets.plan.compile_variants`` (NVRTC,
disk-cached; no GPU needed) and recorded per URI: ``registers``, ``static_smem_bytes``, ``local_bytes``.

Usage (CPU machine):
    python bench/template_resources.py gdn_recurrent --json /tmp/gdn_before.json
    python bench/template_resources.py gdn_recurrent --compare /tmp/gdn_before.json   # exit 1 on any difference
Options: ``--arch sm_90`` (repeatable; default sm_86, sm_89, sm_90, sm_120a), ``--jobs N`` (parallel NVRTC calls).
``--compare`` reports URIs only in one file and every changed number; URIs missing after a change are listed but
only changed numbers (or new URIs) fail the comparison unless ``--strict`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("sm_86", "sm_89", "sm_90", "sm_120a")
FIELDS = ("registers", "static_smem_bytes", "local_bytes")


def _gdn_recurrent_extras(fam, arch):
    """The decode variants tests/kernels/gdn_cases.py runs (DECODE_VARIANTS) on the tiny and the 27B problem, the
    registered family on the 27B problem, and the trace probe's kernels (bench/attn_trace_probe.py)."""
    sys.path.insert(0, str(ROOT / "tests" / "kernels"))
    from gdn_cases import DECODE_VARIANTS, decode_family

    from ninferc.targets.kernels import gdn

    problems = list(fam.sample_problems()) + [gdn.QWEN38_27B]
    specs = [s for v in DECODE_VARIANTS for p in problems for s in decode_family(v).variants(p)]
    sys.path.insert(0, str(ROOT / "bench"))
    from attn_trace_probe import traced_gdn_spec

    return specs + [traced_gdn_spec(fam.spec(p)) for p in problems]


def _attn_decode_extras(fam, arch):
    """The decode kernels the attention tests build (tests/kernels/test_attention*.py): on the sample problems and
    the emulator's one-KV-head 27B shape (both KV dtypes), page-aligned and balanced splits (granules 1 and 16), the
    global-memory kernel and the staged one with tiles of a page, 32 and 16 keys, each plain, on tensor cores
    (``stage_mma``) and with the folded prep, the staged kernel without its launch bound, and the trace probe's kernels
    (bench/attn_trace_probe.py traced_attn_spec; global and staged). Combinations a family refuses (PlanError) are
    skipped."""
    import dataclasses

    from ninferc.targets.kernels import attention as A
    from ninferc.targets.plan import PlanError

    hd256 = A.AttentionProblem(6, 1, 256, 64, 1e7, 1e-6, page_size=64, max_pages=4)
    problems = list(fam.sample_problems()) + [hd256, dataclasses.replace(hd256, kv_dtype="int8")]
    St = A.DecodeStaging
    # (family keyword arguments, traced?)
    options = [(dict(balance_keys=b, balance_keys_int8=b, staging=St(stage_kv=False), fuse_prep=False), False)
               for b in (0, 1, 16)]
    options += [(dict(balance_keys=b, balance_keys_int8=b, staging=St(stage_kv=True, stage_keys=k, stage_mma=m),
                      fuse_prep=f), False)
                for b in (0, 1, 16) for k in (0, 32, 16) for m, f in ((False, False), (True, False), (False, True))]
    options += [(dict(staging=St(stage_kv=True, stage_min_ctas=0), fuse_prep=False), False),
                (dict(staging=St(stage_kv=False)), True), (dict(staging=St(stage_kv=True), fuse_prep=False), True)]
    sys.path.insert(0, str(ROOT / "bench"))
    from attn_trace_probe import traced_attn_spec

    specs = []
    for p in problems:
        for o, trace in options:
            try:
                spec = A.AttnDecodeFamily(**o).spec(p, o["staging"].stage_kv)
            except PlanError:
                continue
            specs.append(traced_attn_spec(spec) if trace else spec)
    return specs


def _attn_prefill_extras(fam, arch):
    """The prefill kernels the attention tests build beyond the sample problems': both routes on the emulator's
    one-KV-head 27B shape (tests/kernels/test_attention_emulated.py, both KV dtypes) and on the hd-512 shape of the
    route fallback test (tests/kernels/test_attention.py, bf16)."""
    import dataclasses

    from ninferc.targets.kernels import attention as A

    hd256 = A.AttentionProblem(6, 1, 256, 64, 1e7, 1e-6, page_size=64, max_pages=4)
    hd512 = A.AttentionProblem(8, 1, 512, 64, 1e7, 1e-6, 64, 64)
    return [s for p in (hd256, dataclasses.replace(hd256, kv_dtype="int8"), hd512) for s in fam.variants(p)]


#: family name -> fn(family, arch) giving KernelSpecs beyond the family's sample variants
EXTRAS = {"gdn_recurrent": _gdn_recurrent_extras, "attn_decode": _attn_decode_extras,
          "attn_prefill": _attn_prefill_extras}


def collect(family: str, arch: str) -> list:
    """Every KernelSpec of ``family`` for ``arch`` (sample variants + :data:`EXTRAS`)."""
    from ninferc.targets.kernels import FAMILIES
    from ninferc.targets.plan import family_variants

    fam = FAMILIES[family]
    specs = [s for p in fam.sample_problems() for s in family_variants(fam, p, arch)]
    if family in EXTRAS:
        specs += EXTRAS[family](fam, arch)
    return specs


def measure(families: list[str], archs: list[str], jobs: int | None = None) -> dict:
    """{arch: {uri: {registers, static_smem_bytes, local_bytes}}}."""
    from ninferc.targets.plan import compile_variants

    out = {}
    for arch in archs:
        specs = [s for f in families for s in collect(f, arch)]
        built = compile_variants(specs, arch, jobs=jobs)
        out[arch] = {uri: {k: getattr(r, k) for k in FIELDS} for uri, (_, r) in sorted(built.items())}
        print(f"{arch}: {len(out[arch])} kernels", file=sys.stderr)
    return out


def compare(before: dict, after: dict) -> tuple[list[str], list[str], int]:
    """(differences, URIs missing after, pairs compared)."""
    diffs, missing, n = [], [], 0
    for arch in sorted(set(before) | set(after)):
        b, a = before.get(arch, {}), after.get(arch, {})
        missing += [f"{arch} {u}" for u in sorted(set(b) - set(a))]
        diffs += [f"{arch} {u}: new" for u in sorted(set(a) - set(b))]
        for u in sorted(set(a) & set(b)):
            n += 1
            ch = [f"{k} {b[u][k]} -> {a[u][k]}" for k in FIELDS if b[u][k] != a[u][k]]
            if ch:
                diffs.append(f"{arch} {u}: " + ", ".join(ch))
    return diffs, missing, n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("families", nargs="+")
    ap.add_argument("--arch", action="append", default=None)
    ap.add_argument("--json", default=None, help="write the measurements here")
    ap.add_argument("--compare", default=None, help="a JSON of an earlier run to compare against")
    ap.add_argument("--strict", action="store_true", help="with --compare: URIs missing now also fail")
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args(argv)
    res = measure(a.families, a.arch or list(ARCHS), a.jobs)
    if a.json:
        Path(a.json).write_text(json.dumps({"families": a.families, "resources": res}, indent=1) + "\n")
    if not a.compare:
        if not a.json:
            print(json.dumps(res, indent=1))
        return 0
    before = json.loads(Path(a.compare).read_text())["resources"]
    before = {k: v for k, v in before.items() if k in res}
    diffs, missing, n = compare(before, res)
    for m in missing:
        print(f"missing now: {m}")
    for d in diffs:
        print(f"DIFFERS: {d}")
    print(f"{n} (URI, arch) pairs compared, {len(diffs)} differ, {len(missing)} missing now")
    return 1 if diffs or (a.strict and missing) else 0


if __name__ == "__main__":
    sys.exit(main())
