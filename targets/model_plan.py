"""The plan of a whole model for one target: every lowered step's launch at representative token
counts, per mode, with the compiled kernels' real resources and every plan-time check applied.

Decode steps are evaluated at T = B (one token per sequence) for ``decode_batches``; prefill steps at
T = ``prefill_tokens`` (one sequence); with ``draft_tokens`` K, the speculative verify step too, at each decode batch
B: B sequences of K + 1 tokens (T = B (K + 1), every token's logits), the step ``ninferc serve --spec mtp
--draft-tokens K`` runs each round. Steps that run in both modes appear in both sets (each grid is
tagged with its mode). A plan for a smaller SKU is a plan like any other: the runtime replays it on a
larger device unchanged (grids, routes, caps), which is how each arch's plan is exercised on the H200.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from ninferc.errors import PlanError
from ninferc.ir.config import ModelConfig
from ninferc.ir.graph import Graph
from ninferc.targets.arch import Arch
from ninferc.targets.cubin import KernelResources
from ninferc.targets.lower import (MAX_DRAFT_TOKENS, Program, Step, drop_unneeded_steps, lower, step_launch,
                                  step_variants)
from ninferc.targets.nvrtc import DEFAULT_OPTIONS, nvrtc_version
from ninferc.targets.plan import KernelSpec, Launch, PlanContext, check_launch, compile_variants
from ninferc.targets.skus import Sku
from ninferc.targets.target import Target, as_target

DECODE_BATCHES = (1, 4, 8, 16)  # 8: the server benches' largest concurrency, the GEMVs' 8-token tile
PREFILL_TOKENS = (1, 64, 1024, 8192)


def _fold_layers(step: str) -> str:
    """A step name with its layer number folded (``L12.mlp.down`` -> ``L*.mlp.down``): the table's and ``--explain``'s
    key for steps identical across layers."""
    return re.sub(r"^L\d+\.", "L*.", step)


@dataclass
class ModelPlan:
    """Result of :func:`plan_model` (see module docstring).

    Attributes:
        planned_for: the :class:`~ninferc.targets.target.Target` (arch, SKU or None, SM count, bandwidth);
            :attr:`target` (its arch name), :attr:`sku` and :attr:`sms` read it. program: the lowered steps.
        kernels: URI -> KernelSpec of every variant any step may launch (the artifact stores them all,
            so the runtime can re-derive launches for any T and SM count).
        resources: URI -> KernelResources (from the cubins). launches: (step name, mode) -> [Launch] (mode
        ``decode``, ``prefill``, ``verify``).
        options: NVRTC options; nvrtc: version that compiled. draft_tokens: K of the verify steps planned (0: none).
    """

    planned_for: Target
    program: Program
    kernels: dict[str, KernelSpec]
    resources: dict[str, KernelResources]
    launches: dict[tuple[str, str], list[Launch]] = field(default_factory=dict)
    options: tuple[str, ...] = DEFAULT_OPTIONS
    nvrtc: tuple[int, int] = (0, 0)
    decode_batches: tuple[int, ...] = DECODE_BATCHES
    prefill_tokens: tuple[int, ...] = PREFILL_TOKENS
    draft_tokens: int = 0
    #: weight recipe and KV dtype of the planned graph (ChooseFormats)
    weights: str = "bf16"
    kv_dtype: str = "bf16"

    @property
    def target(self) -> str:
        """The arch name planned for (``"sm_89"``)."""
        return self.planned_for.name

    @property
    def sku(self) -> Sku | None:
        """The SKU planned for, or None for a bare SM count."""
        return self.planned_for.sku

    @property
    def sms(self) -> int:
        """The SM count planned for."""
        return self.planned_for.sms

    def formats_json(self) -> dict:
        """``{"weights", "kv_dtype"}`` when either differs from bf16 (bf16 plans keep their old JSON)."""
        if self.weights == "bf16" and self.kv_dtype == "bf16":
            return {}
        return {"weights": self.weights, "kv_dtype": self.kv_dtype}

    def context(self) -> PlanContext:
        """A PlanContext over this plan's target, SM count and resources."""
        return PlanContext.for_target(self.planned_for, self.resources)

    def records(self) -> list[dict]:
        """One record per (step, kernel URI) in execution order (``kernel`` = step name)."""
        out = []
        for step in self.program.steps:
            by_uri: dict[str, list[tuple[str, Launch]]] = {}
            for mode in ("decode", "prefill", "verify"):
                for ln in self.launches.get((step.name, mode), []):
                    by_uri.setdefault(ln.kernel.uri, []).append((mode, ln))
            for uri, lns in by_uri.items():
                r, first = self.resources[uri], lns[0][1]
                out.append({
                    "kernel": step.name, "uri": uri, "threads_per_cta": first.threads, "registers": r.registers,
                    "static_smem_bytes": r.static_smem_bytes,
                    "dynamic_smem_bytes": max(ln.dynamic_smem_bytes for _, ln in lns),
                    "local_bytes": r.local_bytes, "ctas_per_sm": first.ctas_per_sm, "limiter": first.limiter,
                    "cooperative": first.cooperative, "coop_cap": first.coop_cap,
                    "grids": [{"mode": m, "tokens": ln.tokens, "ctas": ln.ctas, "waves": ln.waves, "route": ln.route,
                               "split_k": ln.split_k, "workspace_bytes": ln.workspace_bytes} for m, ln in lns],
                })
        return out

    def to_json(self) -> dict:
        """``{"target", "sku", "sms", "nvrtc", "options", "max_context", "page_size", "decode_batches",
        "prefill_tokens", ["draft_tokens" when verify steps are planned,] "kernels": [record...]}`` (record fields as
        :meth:`records`; a verify grid's ``tokens`` is its T = B (K + 1))."""
        return {"target": self.target, "sku": self.sku.key if self.sku else None, "sms": self.sms,
                "nvrtc": f"{self.nvrtc[0]}.{self.nvrtc[1]}", "options": list(self.options),
                "max_context": self.program.max_context, "page_size": self.program.page_size,
                "decode_batches": list(self.decode_batches), "prefill_tokens": list(self.prefill_tokens),
                **({"draft_tokens": self.draft_tokens} if self.draft_tokens else {}),
                **self.formats_json(), "kernels": self.records()}

    def dumps(self) -> str:
        """``to_json()`` as stable, diff-friendly JSON text."""
        return _dump_json(self.to_json(), 0) + "\n"

    def explain(self, pattern: str) -> list[dict]:
        """Why each GEMV launch of the steps whose name matches ``pattern`` (an ``fnmatch`` glob: ``L0.mlp.*``,
        ``*gate_up``) is the variant it is: the candidates the GEMV's route selection compared
        (:meth:`~ninferc.targets.kernels.gemv.family.GemvFamily.candidates`), best first, with the cost model's
        estimate (:func:`~ninferc.targets.kernels.gemv.cost.estimate_us`, microseconds; only its order is used) for
        this plan's SM count and DRAM bandwidth per SM. Launches of the same problem, mode and T in several layers
        are one record (``step`` names the first, ``steps`` counts them).

        Returns:
            ``[{"step", "steps", "mode", "columns", "tokens", "k", "n", "epilogue", "wfmt", "chosen", "candidates":
            [{"estimate_us", "route", "threads", "k_warps", "splits", "grid", "ctas_per_sm", "uri"}...]}...]`` in
            execution order: ``columns`` the table's columns the launch serves (``B=4``; an LM head's prefill
            launches, one logits row each, serve every ``T=n``), ``tokens`` the GEMV's T; where the token tile's dp
            variants do not serve the problem, a ``note`` says why and what runs instead, whose variants are the
            candidates (:meth:`~ninferc.targets.kernels.gemv.family.GemvFamily.deciding`). The columns a GEMM serves
            (more tokens than the GEMV takes) have no record; steps of other families (attention, GDN) have their own
            routes, shown in the table's ``route`` column.
        """
        import dataclasses
        import fnmatch

        from ninferc.targets.kernels import FAMILIES
        from ninferc.targets.lower import linear_problem

        gemv, ctx = FAMILIES["gemv"], self.context()
        k1 = self.draft_tokens + 1
        sizes = {"decode": list(self.decode_batches), "prefill": list(self.prefill_tokens),
                 "verify": [b * k1 for b in self.decode_batches]}
        label = {"decode": "B={}", "prefill": "T={}", "verify": "V={}"}
        out, seen = [], {}
        for step in self.program.steps:
            if not fnmatch.fnmatchcase(step.name, pattern):
                continue
            for mode in ("decode", "prefill", "verify"):
                lns = self.launches.get((step.name, mode), [])
                cols = sizes[mode] if len(sizes[mode]) == len(lns) else [ln.tokens for ln in lns]
                for col, ln in zip(cols, lns):
                    if ln.kernel.family != "gemv":
                        continue
                    prob = linear_problem(step.problem)
                    key = (_fold_layers(step.name), dataclasses.astuple(prob), mode, ln.tokens)
                    column = label[mode].format(col)
                    if key in seen:
                        rec = seen[key]
                        if step.name not in rec["_names"]:
                            rec["_names"].add(step.name)
                            rec["steps"] += 1
                        if column not in rec["columns"]:
                            rec["columns"].append(column)
                        continue
                    why, cands = gemv.deciding(prob, ln.tokens, ctx)
                    rec = {"step": step.name, "steps": 1, "mode": mode, "columns": [column], "tokens": ln.tokens,
                           "k": prob.k, "n": prob.n, "epilogue": prob.epilogue, "wfmt": prob.wfmt,
                           "chosen": ln.kernel.uri,
                           "candidates": [{"estimate_us": round(c.estimate_us, 2), "route": c.route,
                                           "threads": c.threads, "k_warps": c.k_warps, "splits": c.splits,
                                           "grid": c.grid, "ctas_per_sm": c.ctas_per_sm, "uri": c.spec.uri}
                                          for c in cands], "_names": {step.name}}
                    if why:
                        rec["note"] = why
                    seen[key] = rec
                    out.append(rec)
        for rec in out:
            del rec["_names"]
        return out

    def explain_text(self, pattern: str, top: int = 6) -> str:
        """:meth:`explain` as text: per record the ``top`` best candidates (``*`` marks the chosen one) and how much
        slower than the best each is modelled, then how many more there were."""
        recs = self.explain(pattern)
        bw = self.context().bandwidth_per_sm_gbs
        lines = [f"why (the GEMV cost model, targets/kernels/gemv/cost.py, on {self.sms} SMs at {bw:.1f} GB/s of DRAM "
                 f"bandwidth per SM; {self.planned_for.bandwidth_note()}): the variants compared per launch, best "
                 "first (ties: the plain route, fewer k_warps, fewer threads); est = modelled microseconds, only their order "
                 "is used"]
        if not recs:
            lines.append(f"  no GEMV launch in the steps matching {pattern!r} (a case-sensitive glob over the table's "
                         "step names, a layer number for L*: e.g. 'L0.mlp.*' or '*gate_up'; columns of more tokens "
                         "than a GEMV takes run the GEMM)")
        for r in recs:
            many = f" (and {r['steps'] - 1} more layer{'s' if r['steps'] > 2 else ''} like it)" if r["steps"] > 1 else ""
            lines.append(f"{r['step']}{many}: gemv K={r['k']} N={r['n']} {r['epilogue']} {r['wfmt']}, "
                         f"{r['mode']} {' '.join(r['columns'])} (T = {r['tokens']} in the GEMV)")
            if "note" in r:
                lines.append(f"    {r['note']}")
            cands = r["candidates"]
            if not cands:
                continue
            best = cands[0]["estimate_us"]
            rows = [["", "est us", "vs best", "route", "threads", "k_warps", "splits", "grid", "CTAs/SM", "kernel"]]
            for c in cands[:top]:
                rows.append(["*" if c["uri"] == r["chosen"] and c is cands[0] else "", f"{c['estimate_us']:.2f}",
                             f"+{100 * (c['estimate_us'] / best - 1):.1f} %" if c is not cands[0] else "",
                             c["route"], str(c["threads"]), str(c["k_warps"]), str(c["splits"]), str(c["grid"]),
                             str(c["ctas_per_sm"]), c["uri"]])
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            for row in rows:
                lines.append("    " + "  ".join(c.ljust(w) if i in (0, 3, 9) else c.rjust(w)
                                                for i, (c, w) in enumerate(zip(row, widths))).rstrip())
            if len(cands) > top:
                lines.append(f"    ... {len(cands) - top} more, up to +{100 * (cands[-1]['estimate_us'] / best - 1):.0f} %")
        return "\n".join(lines) + "\n"

    def table(self) -> str:
        """Human table; steps identical across layers are folded into one row (``L*``, with a count)."""
        groups: dict[tuple, dict] = {}
        order = []
        for rec in self.records():
            key = (_fold_layers(rec["kernel"]), rec["uri"],
                   tuple((g["mode"], g["tokens"], g["ctas"], g["route"]) for g in rec["grids"]))
            if key not in groups:
                groups[key] = {"rec": rec, "n": 0}
                order.append(key)
            groups[key]["n"] += 1
        k1 = self.draft_tokens + 1
        cols = [("decode", b) for b in self.decode_batches] + [("prefill", t) for t in self.prefill_tokens]
        cols += [("verify", b * k1) for b in self.decode_batches] if self.draft_tokens else []
        label = {"decode": "B={}", "prefill": "T={}", "verify": "V={}"}
        head = ["step", "x", "block", "regs", "smem", "local", "CTAs/SM", "limiter"]
        head += [label[m].format(t) for m, t in cols] + ["cap", "waves", "route"]
        rows = [head]
        for key in order:
            rec, n = groups[key]["rec"], groups[key]["n"]
            by = {(g["mode"], g["tokens"]): g for g in rec["grids"]}
            cells = []
            for c in cols:
                g = by.get(c)
                cells.append("-" if g is None else (f"{g['ctas']}=k{g['split_k']}" if g["split_k"] > 1 and
                                                     rec["cooperative"] else str(g["ctas"])))
            waves = "/".join(str(by[c]["waves"]) if c in by else "-" for c in cols)
            routes = "/".join(dict.fromkeys(g["route"] for g in rec["grids"]))
            rows.append([f"{key[0]} [{rec['uri']}]", str(n), str(rec["threads_per_cta"]), str(rec["registers"]),
                         str(rec["static_smem_bytes"] + rec["dynamic_smem_bytes"]), str(rec["local_bytes"]),
                         str(rec["ctas_per_sm"]), rec["limiter"], *cells, str(rec["coop_cap"]), waves, routes])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        sku = f" ({self.sku.name})" if self.sku else ""
        fmts = self.formats_json()
        fmt = f", weights {fmts['weights']}, KV {fmts['kv_dtype']}" if fmts else ""
        bw = self.planned_for.bandwidth_note()
        lines = [f"target {self.target}{sku}, {self.sms} SM{'s' if self.sms != 1 else ''}, {bw}, NVRTC {self.nvrtc[0]}.{self.nvrtc[1]}, "
                 f"max context {self.program.max_context}, KV page {self.program.page_size} tokens{fmt}",
                 "columns: x = layers sharing the row; B=n / T=n = grid CTAs for a decode step of n sequences / a "
                 "prefill chunk of n tokens" + (f" / V=n: a speculative verify step of n tokens (n / {k1} sequences "
                                                f"of K + 1 = {k1})" if self.draft_tokens else "") +
                 " ('-': another kernel serves it; 'c=kS': a cooperative grid of c CTAs "
                 "over S K-splits); cap = resident CTAs/SM x SMs; waves = CTAs / cap per column, in the same "
                 "order (" + "/".join(label[m].format(t) for m, t in cols) + ")"]
        for i, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines) + "\n"


def _dump_json(obj: Any, level: int) -> str:
    """Indented JSON where dicts/lists of scalars stay on one line (readable golden diffs)."""
    scalar = (str, int, float, bool, type(None))
    if isinstance(obj, dict) and not all(isinstance(v, scalar) for v in obj.values()):
        pad = " " * (level + 1)
        items = [f"{pad}{json.dumps(k)}: {_dump_json(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    if isinstance(obj, list) and not all(isinstance(v, scalar) for v in obj):
        pad = " " * (level + 1)
        return "[\n" + ",\n".join(pad + _dump_json(v, level + 1) for v in obj) + "\n" + " " * level + "]"
    return json.dumps(obj)


def plan_steps(program: Program, ctx: PlanContext, *, T: int, B: int, R: int, mode: str) -> list[tuple[Step, Launch]]:
    """The checked launches of one step of ``mode`` (T tokens, B sequences, R logit rows), in order.

    Raises:
        PlanError: a launch breaks a limit (kernel, target, value, limit named by :func:`check_launch`).
    """
    out = {}
    steps = program.for_mode(mode)
    for s in steps:
        ln = step_launch(s, ctx, T=T, B=B, R=R)
        check_launch(ln, ctx.arch, ctx.resources_of(ln.kernel), ctx.sms)
        out[s.name] = (s, ln)
    kept = drop_unneeded_steps(steps, {n: ln for n, (_, ln) in out.items()})
    return [out[s.name] for s in kept]


def plan_model(
    graph: Graph,
    target: Target | str | Arch,
    *,
    sku: str | Sku | None = None,
    sms: int | None = None,
    max_context: int = 4096,
    page_size: int = 64,
    decode_batches: Sequence[int] = DECODE_BATCHES,
    prefill_tokens: Sequence[int] = PREFILL_TOKENS,
    options: tuple[str, ...] = DEFAULT_OPTIONS,
    progress=None,
    draft_tokens: int = 0,
) -> ModelPlan:
    """Lower ``graph`` and plan it for ``target``: a :class:`~ninferc.targets.target.Target` (what the command
    line parsed), or an arch name with ``sku`` or ``sms`` (converted by :func:`ninferc.targets.target.as_target`;
    for tests and scripts). ``progress``: a bar factory for the kernel compiles
    (:func:`ninferc.targets.plan.compile_variants`). ``draft_tokens`` K (0..``MAX_DRAFT_TOKENS``): also plan the
    speculative verify step of each decode batch B (B x (K + 1) tokens).

    Raises:
        PlanError: no SM count / SKU mismatch, a non-positive decode batch or prefill token count, ``draft_tokens``
            outside 0..``MAX_DRAFT_TOKENS``, two lowered steps of one name, or any launch that does not fit (named).
        TargetError: unknown arch or SKU. CompileError: NVRTC failure.
    """
    tgt = as_target(target, sku, sms)
    a = tgt.arch
    if max_context < 1:
        raise PlanError(f"max_context must be >= 1, found {max_context}")
    for what, counts in (("decode batches", decode_batches), ("prefill token counts", prefill_tokens)):
        if not counts or any(int(c) <= 0 for c in counts):
            raise PlanError(f"plan for {a.name}: {what} must be positive integers, got {list(counts)}")
    if not 0 <= int(draft_tokens) <= MAX_DRAFT_TOKENS:
        raise PlanError(f"plan for {a.name}: draft_tokens = {draft_tokens} must be in 0..{MAX_DRAFT_TOKENS} "
                        "(as ninferc serve --draft-tokens)")
    program = lower(graph, page_size=page_size, max_context=max_context)
    dup = sorted(n for n, k in Counter(s.name for s in program.steps).items() if k > 1)
    if dup:  # launches are keyed by step name: a second step of one name would replace the first's
        raise PlanError(f"plan for {a.name}: duplicate step names {dup}")
    specs = {}
    for s in program.steps:
        for v in step_variants(s, a):
            specs[v.uri] = v
    built = compile_variants(list(specs.values()), a, options=options, progress=progress)
    resources = {u: r for u, (_, r) in built.items()}
    mp = ModelPlan(tgt, program, specs, resources, options=tuple(options), nvrtc=nvrtc_version(),
                   decode_batches=tuple(decode_batches), prefill_tokens=tuple(prefill_tokens),
                   draft_tokens=int(draft_tokens), weights=graph.meta.get("weights", "bf16"), kv_dtype=graph.meta.get("kv_dtype", "bf16"))
    ctx = mp.context()
    for b in decode_batches:
        for s, ln in plan_steps(program, ctx, T=b, B=b, R=b, mode="decode"):
            mp.launches.setdefault((s.name, "decode"), []).append(ln)
        for greedy in (True, False):
            s = program.sampler(greedy)
            ln = step_launch(s, ctx, T=b, B=b, R=b)
            check_launch(ln, ctx.arch, ctx.resources_of(ln.kernel), ctx.sms)
            mp.launches.setdefault((s.name, "decode"), []).append(ln)
    for t in prefill_tokens:
        for s, ln in plan_steps(program, ctx, T=t, B=1, R=1, mode="prefill"):
            mp.launches.setdefault((s.name, "prefill"), []).append(ln)
    if draft_tokens:
        for b in decode_batches:
            t = b * (int(draft_tokens) + 1)
            for s, ln in plan_steps(program, ctx, T=t, B=b, R=t, mode="verify"):
                mp.launches.setdefault((s.name, "verify"), []).append(ln)
    return mp


def plan_for_config(cfg: ModelConfig, target: Target | str | Arch, *, weights: str = "bf16", kv_dtype: str = "bf16",
                    **kw) -> ModelPlan:
    """Build the graph of ``cfg``, run the compile pipeline with the weight recipe ``weights`` and KV dtype
    ``kv_dtype``, and :func:`plan_model` it for ``target`` (a Target, or an arch name with ``sku=`` / ``sms=`` in
    ``kw``; ``kw`` go to plan_model)."""
    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph

    return plan_model(run_pipeline(build_graph(cfg, lm_rows="last"), weights=weights, kv_dtype=kv_dtype), target, **kw)
