"""ChooseFormats: storage dtypes of activations and params for the CUDA lowering.

* Every Linear / LMHead input (the GEMM ``A`` operand) is stored in bf16: its producer writes bf16.
* Linear weights, the LM head and the embedding keep the checkpoint's bf16 (quantised formats come
  with the ``weights`` recipe later).
* Small params (norm weights, conv weights, A_log, dt_bias) are stored in fp32 — exact conversions of
  the stored bf16 values, so kernels form (1 + w) and the gating in fp32 like the reference.
"""

from __future__ import annotations

from dataclasses import replace

from ninferc.ir.graph import Graph
from ninferc.ir.ops import ShapeError
from ninferc.ir.passes.common import mark

WEIGHT_FORMATS = ("bf16",)


def choose_formats(graph: Graph, *, weights: str = "bf16") -> Graph:
    """Return a copy with tensor and param dtypes set for the CUDA engine.

    Raises:
        ShapeError: an unknown weight format, or a GEMM input produced by a View (cannot be narrowed
            without a copy).
    """
    if weights not in WEIGHT_FORMATS:
        raise ShapeError(f"weight format {weights!r} is not supported; choose from {list(WEIGHT_FORMATS)}")
    g = graph.copy()
    for op in list(g.ops()):
        if op.kind in ("Linear", "LMHead"):
            t = op.inputs[0]
            prod = g.producer(t)
            if prod is None or prod.kind == "View":
                raise ShapeError(f"op {op.name}: GEMM input {t} is produced by {prod and prod.kind}; "
                                 "it must be a kernel output to be stored in bf16")
            g.tensors[t] = replace(g.tensors[t], dtype="bf16")
            w = op.params["weight"]
            g.params[w] = replace(g.params[w], dtype=weights)
    big = {op.params["weight"] for op in g.ops() if op.kind in ("Linear", "LMHead", "Embedding")}
    for name, spec in list(g.params.items()):
        if name not in big:
            g.params[name] = replace(spec, dtype="f32")
    g.meta["weights"] = weights
    return mark(g, "ChooseFormats")
