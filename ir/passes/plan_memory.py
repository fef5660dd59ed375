"""PlanMemory: place every activation of one step in a single arena by liveness, and take stock of
the per-sequence state.

All activations are [T, ...] (T = tokens of the step), so each is placed at ``offset_per_token`` bytes
per token of the arena's token capacity: for a runtime capacity of T_max tokens, a tensor lives at
byte ``T_max * offset_per_token`` and spans ``T * row_bytes``. Offsets are multiples of
:data:`ALIGN` so every row of every tensor is 16-byte aligned for vector loads.

Aliases: a View aliases its base (no storage); ``AddRMSNorm``'s sum output reuses its residual input
(the kernel updates the residual stream in place; the pass checks that input dies there).
Early births: the output of an AddRMSNorm between two Linears (:func:`ninferc.ir.passes.common.norms_between_linears`)
is placed as if the producer Linear wrote it, because in a decode-size step it does (the GEMV's
``add_norm_parts`` epilogue): its storage then never overlaps the producer's own input.
Excluded: graph inputs (``tokens``, ``positions`` are batch metadata) and ``LMHead`` outputs (the
logits buffer is sized by sequences, not tokens, and allocated by the runtime).
"""

from __future__ import annotations

from ninferc.ir.graph import DTYPE_BYTES, Graph
from ninferc.ir.ops import ShapeError
from ninferc.ir.passes.common import mark, norms_between_linears

ALIGN = 256
INPLACE = {"AddRMSNorm": {0: 0}}  # kind -> {output index: input index it overwrites}


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(graph: Graph) -> Graph:
    """Return a copy with ``meta['memory']`` = {``arena_bytes_per_token``, ``tensors``: {name:
    {``offset_per_token``, ``row_bytes``}}, ``aliases``: {name: base}} and ``meta['state']`` (bytes per
    sequence by kind).

    Raises:
        ShapeError: an in-place output whose input is still read after the op.
    """
    g = graph.copy()
    ops = list(g.ops())
    index = {op.name: i for i, op in enumerate(ops)}
    alias: dict[str, str] = {}

    def root(t: str) -> str:
        while t in alias:
            t = alias[t]
        return t

    for op in ops:
        if op.kind == "View":
            alias[op.outputs[0]] = op.inputs[0]
        for o, i in INPLACE.get(op.kind, {}).items():
            alias[op.outputs[o]] = op.inputs[i]
    last_use: dict[str, int] = {}
    first: dict[str, int] = {}
    for op in ops:
        for t in op.inputs:
            last_use[root(t)] = max(last_use.get(root(t), -1), index[op.name])
        for t in op.outputs:
            first.setdefault(root(t), index[op.name])
    for t in g.outputs:
        last_use[root(t)] = len(ops)
    # in-place legality: the overwritten input must not be read after this op
    for op in ops:
        for o, i in INPLACE.get(op.kind, {}).items():
            src = op.inputs[i]
            readers = [other.name for other in ops if index[other.name] > index[op.name] and src in other.inputs]
            if readers:
                raise ShapeError(f"op {op.name} updates {src} in place but {readers[0]} reads it later")
    excluded = set(g.inputs) | {op.outputs[0] for op in ops if op.kind == "LMHead"}
    born_with: dict[str, list[str]] = {}  # producer Linear -> norm outputs placed with its own
    for norm, (prod, _) in norms_between_linears(g).items():
        born_with.setdefault(prod, []).append(g.op(norm).outputs[-1])
    live: list[tuple[int, int, int]] = []  # (offset, size, dies_at)
    placed: dict[str, dict] = {}
    end = 0
    for op in ops:
        i = index[op.name]
        live = [iv for iv in live if iv[2] >= i]  # free what died before this op
        for t in (*op.outputs, *born_with.get(op.name, ())):
            if t in alias or t in excluded or t in placed:
                continue
            spec = g.tensors[t]
            row = spec.row_elems() * DTYPE_BYTES[spec.dtype]
            size = _round(row)
            dies = last_use.get(t, i)
            # first fit among the gaps between live intervals
            off = 0
            for lo, sz, _ in sorted(live):
                if off + size <= lo:
                    break
                off = max(off, lo + sz)
            live.append((off, size, dies))
            end = max(end, off + size)
            placed[t] = {"offset_per_token": off, "row_bytes": row}
    g.meta["memory"] = {"arena_bytes_per_token": end, "tensors": placed,
                        "aliases": {t: root(t) for t in alias}}
    state: dict[str, int] = {}
    for s in g.states.values():
        state[s.kind] = state.get(s.kind, 0) + s.nbytes
    g.meta["state"] = {"bytes_per_sequence": {k: v for k, v in state.items() if k != "kv"},
                       "kv_bytes_per_token": state.get("kv", 0)}
    return mark(g, "PlanMemory")
