"""ChooseFormats: storage dtypes of activations, params and the KV cache for the CUDA lowering.

* Every Linear / LMHead input (the GEMM ``A`` operand) is stored in bf16: its producer writes bf16.
* Matrix params (Linear weights, the LM head, the embedding table) take the format the weight recipe
  gives their tensor class (:func:`ninferc.ir.quant.recipe`: ``bf16``, ``w8`` or ``w4``); a matrix that
  cannot take its class's format (w4 with K % 64 != 0) stays bf16 and is listed in
  ``graph.meta["format_fallbacks"]`` (and reported by ``ninferc compile``).
* Small params (norm weights, conv weights, A_log, dt_bias) are stored in fp32 -- exact conversions of
  the stored bf16 values, so kernels form (1 + w) and the gating in fp32 like the reference.
* The KV cache state is ``bf16`` or ``i8`` (``kv_dtype="int8"``: codes + one fp32 scale per 64 elements
  per token per head, quantised on append by the attention kernels).
"""

from __future__ import annotations

from dataclasses import replace

from ninferc.ir.graph import Graph
from ninferc.ir.ops import ShapeError
from ninferc.ir.passes.common import mark

#: KV cache dtypes (CLI name -> IR state dtype)
KV_DTYPES = {"bf16": "bf16", "int8": "i8"}
#: formats the embedding gather kernel reads (it dequantises one row per token)
EMBED_FORMATS = ("bf16", "w8")


def choose_formats(graph: Graph, *, weights: str = "bf16", kv_dtype: str = "bf16") -> Graph:
    """Return a copy with tensor, param and KV-state dtypes set for the CUDA engine.

    Args:
        weights: a weight recipe (``bf16``, ``w8``, ``w4``, optionally with ``,group=format`` overrides;
            see :func:`ninferc.ir.quant.recipe`).
        kv_dtype: ``bf16`` or ``int8``.

    Raises:
        ShapeError: a GEMM input produced by a View (cannot be narrowed without a copy); an unknown KV
            dtype; a recipe that puts the embedding table at w4 (its gather kernel reads bf16 or w8).
        QuantError: a malformed recipe (names the bad group/format and lists the valid ones).
    """
    from ninferc.ir.quant import QuantError, assign_formats

    if kv_dtype not in KV_DTYPES:
        raise ShapeError(f"KV cache dtype {kv_dtype!r} is not supported; choose from {list(KV_DTYPES)}")
    g = graph.copy()
    for op in list(g.ops()):
        if op.kind in ("Linear", "LMHead"):
            t = op.inputs[0]
            prod = g.producer(t)
            if prod is None or prod.kind == "View":
                raise ShapeError(f"op {op.name}: GEMM input {t} is produced by {prod and prod.kind}; "
                                 "it must be a kernel output to be stored in bf16")
            g.tensors[t] = replace(g.tensors[t], dtype="bf16")
    big = {op.params["weight"] for op in g.ops() if op.kind in ("Linear", "LMHead", "Embedding")}
    emb = {op.params["weight"] for op in g.ops() if op.kind == "Embedding"}
    plan = assign_formats({n: g.params[n] for n in big}, weights)
    for name in big:
        fmt = plan.formats[name]  # bf16 for anything assign_formats does not treat as a matrix
        if name in emb and fmt not in EMBED_FORMATS:
            raise QuantError(f"weight recipe {weights!r} puts the embedding table {name} at {fmt}; the embedding "
                             f"gather reads {' or '.join(EMBED_FORMATS)} (override with ',embedding=w8')")
        g.params[name] = replace(g.params[name], dtype=fmt)
    for name, spec in list(g.params.items()):
        if name not in big:
            g.params[name] = replace(spec, dtype="f32")
    for name, st in list(g.states.items()):
        if st.kind == "kv":
            g.states[name] = replace(st, dtype=KV_DTYPES[kv_dtype])
    g.meta["weights"] = weights
    g.meta["kv_dtype"] = kv_dtype
    if plan.fallbacks:
        g.meta["format_fallbacks"] = dict(plan.fallbacks)
    return mark(g, "ChooseFormats")
