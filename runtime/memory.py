"""The device memory plan: every byte the runtime will allocate, summed and checked against the free
device memory *before* anything is uploaded; the error lists every term in bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ninferc.errors import PlanError, RuntimeMemoryError

#: kernel family -> the named workspace (``Ref("ws", name)``) its ``Launch.workspace_bytes`` sizes (a GEMV with
#: the ``add_norm_parts`` epilogue sizes ``norm_ss`` instead: :func:`workspace_of`; the fused decode MLP's is its
#: norm parts too)
WORKSPACE_OF = {"gemv": "gemv", "gdn_conv": "gdn_conv_out", "gdn_chunk": "gdn_o", "gdn_recurrent": "gdn_o",
                "gdn_chunk_wy": "gdn_wy",
                "attn_decode": "attn_partials", "mlp_decode": "norm_ss"}


def workspace_of(launch) -> str | None:
    """The named workspace ``launch.workspace_bytes`` sizes: :data:`WORKSPACE_OF` of its family, except
    ``norm_ss`` (the norm parts, fp32 [T, row blocks]) for a GEMV with the ``add_norm_parts`` epilogue."""
    k = launch.kernel
    if k.family == "gemv" and dict(k.params).get("epilogue") == "add_norm_parts":
        return "norm_ss"
    return WORKSPACE_OF.get(k.family)


@dataclass
class MemoryPlan:
    """Named byte counts. ``terms`` maps a readable name (``weights``, ``kv_pages``, ``gdn_state``,
    ``activations``, ``workspace``, ``logits``, ``graph_allowance``) to bytes."""

    terms: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, nbytes: int) -> None:
        """Add ``nbytes`` (int >= 0) under ``name`` (accumulates)."""
        if nbytes < 0:
            raise ValueError(f"memory term {name} is negative: {nbytes}")
        self.terms[name] = self.terms.get(name, 0) + int(nbytes)

    @property
    def total(self) -> int:
        """Sum of all terms, bytes."""
        return sum(self.terms.values())

    def describe(self) -> str:
        """One line per term and the total, in bytes and GiB."""
        w = max(len(k) for k in self.terms) if self.terms else 5
        lines = [f"  {k:<{w}} {v:>16,} B  ({v / 2**30:8.3f} GiB)" for k, v in self.terms.items()]
        lines.append(f"  {'total':<{w}} {self.total:>16,} B  ({self.total / 2**30:8.3f} GiB)")
        return "\n".join(lines)

    def check(self, free_bytes: int, *, device: str = "device") -> None:
        """Raise unless the plan fits in ``free_bytes``.

        Raises:
            RuntimeMemoryError: listing every term, the total, the free memory and the shortfall, with
                what to change (--max-context, batch size).
        """
        if self.total > free_bytes:
            raise RuntimeMemoryError(
                f"the memory plan needs {self.total:,} bytes but {device} has {free_bytes:,} bytes free "
                f"(short by {self.total - free_bytes:,} bytes):\n{self.describe()}\n"
                "reduce --max-context or the batch size, or free device memory")


def workspace_sizes(program, ctx, *, t_cap: int, max_batch: int, verify_tokens: int = 0) -> dict[str, int]:
    """Bytes of every named workspace the runtime allocates: for each, the largest ``Launch.workspace_bytes``
    of the kernels that use it (:data:`WORKSPACE_OF`) over every step the engine can make -- a prefill chunk
    of ``t_cap`` tokens, every GEMV-sized prefill (T = 1..16 and 64; split-K workspaces vary with T), a decode
    step of every batch size 1 .. ``max_batch`` and, speculating, a verify step of every B sequences and T tokens
    it can carry (B .. B x ``verify_tokens``: a row near its token budget verifies fewer drafts) -- plus ``attn_q``
    (fp32 [T, Hq * head_dim] of the attention prep) and the fused MLP's ``mlp_parts`` / ``mlp_sync``
    (:meth:`ninferc.targets.kernels.mlp_decode.MlpDecodeFamily.scratch_bytes`). Each rounded up to 256 bytes, at
    least 256. Every size is taken, not extrapolated from the ends: the attention's split count is chosen per
    launch to fill the SMs, so its partials need not be largest at either end (the tiny fixture on an H100 or H200
    needs more at B = 5 than at B = 8; sizing from B = 1 and 8 alone made a GPU write past them, 2026-12-05).

    Args:
        program: a :class:`ninferc.targets.lower.Program` (the model's, or the MTP head's). ctx: the plan context
            launches are derived on. t_cap: prefill chunk (tokens). max_batch: decode sequences.
        verify_tokens: K + 1 of a speculating engine (0: none): its verify steps count too.

    Raises:
        PlanError: a launch needs workspace bytes but its kernel family has no named workspace (it would write
            past whatever buffer it is given).
    """
    from ninferc.targets.kernels import FAMILIES
    from ninferc.targets.lower import step_launch

    ws = {"gemv": 16, "norm_ss": 16, "gdn_conv_out": 16, "gdn_o": 16, "gdn_wy": 16, "attn_q": 16, "attn_partials": 16,
          "mlp_parts": 16, "mlp_sync": 16}
    cases = [("prefill", t_cap, 1, 1)] + [("decode", b, b, b) for b in range(1, max_batch + 1)]
    cases += [("prefill", t, 1, 1) for t in list(range(1, 17)) + [64] if t <= t_cap]
    if verify_tokens:
        cases += [("verify", t, b, t) for b in range(1, max_batch + 1) for t in range(b, b * verify_tokens + 1)]
    seen = set()  # a launch depends only on the family, the problem and its counts (:func:`step_launch`)
    for mode, T, B, R in cases:  # noqa: N806
        for s in program.for_mode(mode):
            key = (s.family, s.problem, {"T": T, "B": B, "R": R}[s.rows], B if s.batch else None)
            if key in seen:
                continue
            seen.add(key)
            ln = step_launch(s, ctx, T=T, B=B, R=R)
            fam = ln.kernel.family
            if fam == "attn_prep":
                p = s.problem
                ws["attn_q"] = max(ws["attn_q"], 4 * T * p.heads_q * p.head_dim)
            if fam == "mlp_decode":  # its partial sums and counters (besides ss_out, its workspace_bytes)
                for name, nbytes in FAMILIES[fam].scratch_bytes(s.problem).items():
                    ws[name] = max(ws[name], nbytes)
            if ln.workspace_bytes:
                name = workspace_of(ln)
                if name is None:
                    raise PlanError(f"step {s.name}: kernel {ln.kernel.uri} needs {ln.workspace_bytes} B of workspace "
                                    f"but family {fam} has no named workspace (runtime.memory.workspace_of)")
                ws[name] = max(ws[name], ln.workspace_bytes)
    return {k: int(math.ceil(v / 256) * 256) for k, v in ws.items()}


def engine_workspace_sizes(program, mtp_program, ctx, *, t_cap: int, max_batch: int,
                           spec_tokens: int = 0) -> dict[str, int]:
    """The workspaces an engine allocates (bytes by name, as :func:`workspace_sizes`): the max over the model's
    program and, when speculating, the MTP head's (its decode steps are the draft chain of 1 .. ``max_batch``
    sequences, its verify steps a round's rows), both with verify steps of ``spec_tokens`` + 1 tokens per
    sequence.

    Args:
        program: the model's :class:`ninferc.targets.lower.Program`. mtp_program: the MTP head's, or None.
        ctx: the plan context launches are derived on (the resources of both programs' kernels).
        t_cap, max_batch: as :func:`workspace_sizes`. spec_tokens: K drafts per round (0: not speculating).

    Raises:
        PlanError: as :func:`workspace_sizes`.
    """
    vt = spec_tokens + 1 if spec_tokens else 0
    out = workspace_sizes(program, ctx, t_cap=t_cap, max_batch=max_batch, verify_tokens=vt)
    if mtp_program is not None:
        for k, v in workspace_sizes(mtp_program, ctx, t_cap=t_cap, max_batch=max_batch, verify_tokens=vt).items():
            out[k] = max(out.get(k, 0), v)
    return out
