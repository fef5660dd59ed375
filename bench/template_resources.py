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
Options: ``--arch sm_90`` (repeatable; default sm_86, sm_89, sm_90, sm_120a), ``--jobs N`` (parallel NVRTC calls),
``--code`` (also record ``text_sha256``, the SHA-256 of the kernel's machine code -- the cubin's ``.text.<entry>``
section -- so a rewrite that should not change the code can show it did not; compared where both files have it).
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


def _gemv_extras(fam, arch):
    """The GEMV kernels the tests and probes build beyond the registered family's (on the sample problems; K and N are
    not part of a kernel's identity): every engine at both token tiles (fp32 FMA, tensor-core mma, integer dot
    products), the emulator's CTA shapes, the dp variants persistent or not, with and without the carry, with weight
    rings (2, 3 stages; late preload), the late preload, depth 2, the min_ctas caps, an L2 prefetch of 0 / 2
    steps (store GEMVs), the "fma" staging round and the trace probe's kernels. Combinations a family refuses (PlanError) are
    skipped."""
    from ninferc.targets.kernels.gemv import EPILOGUES, GemvFamily, GemvTuning
    from ninferc.targets.plan import KernelSpec, PlanError

    small = ((128, 1), (128, 2), (128, 4))
    dp_all = dict(w8_dp_tiles=(1, 4), w4_dp_tiles=(1, 4), w8_mma_tiles=(), w4_mma_tiles=())
    caps = tuple((f, e, 1, t, 4) for f in ("w8", "w4") for e in EPILOGUES for t in (128, 256))
    configs = [dict(w8_dp_tiles=(), w4_dp_tiles=()), dict(w4_mma_tiles=(1, 4), w8_mma_tiles=(1, 4), bf16_mma_tiles=(1, 4)),
               dict(plain_shapes=small, coop_threads=(256,), mma_shapes=small, w4_mma_tiles=(1, 4),
                    w8_mma_tiles=(1, 4), bf16_mma_tiles=(1, 4)),
               dict(dp_all, dp_shapes=((128, 4), (256, 2), (128, 1), (256, 1))),
               dict(dp_all, dp_shapes=small, dp_persistent=False), dict(dp_all, dp_carry=(True,)),
               dict(dp_all, dp_carry=(False,), dp_preload="late"), dict(dp_all, dp_carry=(False,), dp_ring=3),
               dict(dp_all, dp_carry=(False,), dp_ring=2, dp_shapes=((256, 1),)),
               dict(dp_all, dp_carry=(False,), dp_ring=3, dp_preload="late", dp_shapes=((256, 1),)),
               dict(dp_all, dp_carry=(False,), dp_deep_threads=(256, 640)), dict(dp_all, dp_min_ctas=caps),
               dict(prefetch_steps=0), dict(prefetch_steps=2, w4_dp_tiles=(1, 4), w8_dp_tiles=(1, 4))]
    specs = []
    for c in configs:
        f = GemvFamily(GemvTuning(**c))
        for p in fam.sample_problems():
            if "prefetch_steps" in c and (p.epilogue != "store" or p.norm_in):
                continue  # (the prefetch loop does not depend on the epilogue)
            try:
                specs += f.variants(p)
            except PlanError:
                pass
    # the trace probe's kernels (bench/dp_trace_probe.py): every dp kernel of the registered family and of one without
    # the carry, with the probe's hooks
    sys.path.insert(0, str(ROOT / "bench"))
    from dp_trace_probe import traced_gemv_spec

    traced = [fam, GemvFamily(GemvTuning(**dp_all, dp_carry=(False,)))]
    specs += [traced_gemv_spec(s) for f in traced for p in fam.sample_problems() for s in f.variants(p)
              if dict(s.params).get("dp")]
    # the staging's "fma" rounding (a probe's option, bench/NOTES.md): the registered family's dp kernels
    specs += [KernelSpec.make(s.family, s.template, {**dict(s.params), "stage_round": "fma"}, s.threads, s.cooperative)
              for p in fam.sample_problems() for s in fam.variants(p) if dict(s.params).get("dp")]
    return specs


#: family name -> fn(family, arch) giving KernelSpecs beyond the family's sample variants
EXTRAS = {"gdn_recurrent": _gdn_recurrent_extras, "attn_decode": _attn_decode_extras,
          "attn_prefill": _attn_prefill_extras, "gemv": _gemv_extras}


def collect(family: str, arch: str) -> list:
    """Every KernelSpec of ``family`` for ``arch`` (sample variants + :data:`EXTRAS`)."""
    from ninferc.targets.kernels import FAMILIES
    from ninferc.targets.plan import family_variants

    fam = FAMILIES[family]
    specs = [s for p in fam.sample_problems() for s in family_variants(fam, p, arch)]
    if family in EXTRAS:
        specs += EXTRAS[family](fam, arch)
    return specs


def text_sha256(cubin: bytes, entry: str) -> str:
    """SHA-256 (hex) of the machine code of kernel ``entry`` in ``cubin``: its ELF section ``.text.<entry>``."""
    import hashlib
    import io

    from elftools.elf.elffile import ELFFile

    sec = ELFFile(io.BytesIO(cubin)).get_section_by_name(f".text.{entry}")
    if sec is None:
        raise KeyError(f"cubin has no section .text.{entry}")
    return hashlib.sha256(sec.data()).hexdigest()


def measure(families: list[str], archs: list[str], jobs: int | None = None, code: bool = False) -> dict:
    """{arch: {uri: {registers, static_smem_bytes, local_bytes[, text_sha256]}}}."""
    from ninferc.targets.plan import compile_variants

    out = {}
    for arch in archs:
        specs = [s for f in families for s in collect(f, arch)]
        entries = {s.uri: s.entry for s in specs}
        built = compile_variants(specs, arch, jobs=jobs)
        out[arch] = {uri: {k: getattr(r, k) for k in FIELDS} for uri, (_, r) in sorted(built.items())}
        if code:
            for uri, (res, _) in built.items():
                out[arch][uri]["text_sha256"] = text_sha256(res.cubin, entries[uri])
        print(f"{arch}: {len(out[arch])} kernels", file=sys.stderr)
    return out


def compare(before: dict, after: dict) -> tuple[list[str], list[str], int, list[str]]:
    """(differences, URIs missing after, pairs compared, URIs whose machine code changed -- where both have it)."""
    diffs, missing, n, code = [], [], 0, []
    for arch in sorted(set(before) | set(after)):
        b, a = before.get(arch, {}), after.get(arch, {})
        missing += [f"{arch} {u}" for u in sorted(set(b) - set(a))]
        diffs += [f"{arch} {u}: new" for u in sorted(set(a) - set(b))]
        for u in sorted(set(a) & set(b)):
            n += 1
            ch = [f"{k} {b[u][k]} -> {a[u][k]}" for k in FIELDS if b[u][k] != a[u][k]]
            if ch:
                diffs.append(f"{arch} {u}: " + ", ".join(ch))
            if "text_sha256" in b[u] and "text_sha256" in a[u] and b[u]["text_sha256"] != a[u]["text_sha256"]:
                code.append(f"{arch} {u}")
    return diffs, missing, n, code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("families", nargs="+")
    ap.add_argument("--arch", action="append", default=None)
    ap.add_argument("--json", default=None, help="write the measurements here")
    ap.add_argument("--compare", default=None, help="a JSON of an earlier run to compare against")
    ap.add_argument("--strict", action="store_true",
                    help="with --compare: URIs missing now (and, with --code, changed machine code) also fail")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--code", action="store_true", help="also record (and compare) each kernel's machine code hash")
    a = ap.parse_args(argv)
    res = measure(a.families, a.arch or list(ARCHS), a.jobs, a.code)
    if a.json:
        Path(a.json).write_text(json.dumps({"families": a.families, "resources": res}, indent=1) + "\n")
    if not a.compare:
        if not a.json:
            print(json.dumps(res, indent=1))
        return 0
    before = json.loads(Path(a.compare).read_text())["resources"]
    before = {k: v for k, v in before.items() if k in res}
    diffs, missing, n, code = compare(before, res)
    for m in missing:
        print(f"missing now: {m}")
    for d in diffs:
        print(f"DIFFERS: {d}")
    for c in code:
        print(f"machine code differs: {c}")
    print(f"{n} (URI, arch) pairs compared, {len(diffs)} differ, {len(missing)} missing now"
          + (f", machine code of {len(code)} differs" if any("text_sha256" in v for r in res.values()
                                                              for v in r.values()) else ""))
    return 1 if diffs or (a.strict and (missing or code)) else 0


if __name__ == "__main__":
    sys.exit(main())
