"""Target-independent IR passes, one per file (CamelCase names in ``graph.meta['passes']``).

Each pass takes a graph and returns a transformed copy; a pass that does not apply returns the graph
unchanged (but for its mark). :func:`run_pipeline` is the one list of passes ``ninferc compile`` runs.

What is decided after the passes, in lowering (:func:`ninferc.targets.lower.lower`), and why it is not a pass: the
graph is one step of any size, and three choices depend on the step's size or on the kernels' layout, not on the
graph -- folding an AddRMSNorm between two Linears into their GEMVs (only where both launches of a step are GEMVs:
decode-size steps; a prefill chunk runs the GEMM and the norm as its own kernel, from the same graph), running a
whole MLP as one fused decode kernel (where :class:`~ninferc.targets.kernels.mlp_decode.MlpDecodeFamily` serves the
step), and writing the MTP head's Concat as two norms into one row (a layout of the kernels' outputs). A pass would
have to fix one choice for every step size. The graph marks what makes them possible (``FuseAddRMSNorm``'s ops,
PlanMemory's early births of the folded norms' outputs); ``ninferc plan`` shows what each step size runs (a folded
norm's row reads ``-`` in the decode columns, and its two GEMVs are the ``add_norm_parts`` / ``in_norm-parts``
kernels there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ninferc.ir.graph import Graph
from ninferc.ir.passes.choose_formats import choose_formats
from ninferc.ir.passes.fuse_add_norm import fuse_add_rmsnorm
from ninferc.ir.passes.fuse_gate_up import fuse_gate_up_swiglu
from ninferc.ir.passes.fuse_linear import fuse_sibling_linears
from ninferc.ir.passes.fuse_mixers import fuse_gated_attention, fuse_gated_deltanet
from ninferc.ir.passes.plan_memory import plan_memory
from ninferc.ir.passes.validate import validate_shapes

__all__ = ["PIPELINE", "run_pipeline", "validate_shapes", "fuse_gate_up_swiglu", "fuse_sibling_linears",
           "fuse_gated_deltanet", "fuse_gated_attention", "fuse_add_rmsnorm", "choose_formats", "plan_memory"]


def _pipeline(weights: str, kv_dtype: str = "bf16") -> list[tuple[str, Callable[[Graph], Graph]]]:
    return [
        ("ValidateShapes", validate_shapes),            # the builder's graph honours every op contract
        ("FuseGateUpSwiGLU", fuse_gate_up_swiglu),      # gate|up stacked, SwiGLU as the GEMM epilogue
        ("FuseSiblingLinears", fuse_sibling_linears),   # q|k|v and GDN qkv|z|b|a: one GEMM per mixer input
        ("FuseGatedDeltaNet", fuse_gated_deltanet),     # conv..gated-norm: one op, kernels chosen per mode
        ("FuseGatedAttention", fuse_gated_attention),   # qk-norm, rope, paged attention, gate: one op
        ("FuseAddRMSNorm", fuse_add_rmsnorm),           # residual add + next norm: one pass over the row
        ("ChooseFormats", lambda g: choose_formats(g, weights=weights, kv_dtype=kv_dtype)),  # weight recipe, KV dtype
        ("PlanMemory", plan_memory),                    # activation arena by liveness; state inventory
        ("ValidateShapes", validate_shapes),            # the result still honours every contract
    ]


PIPELINE = [name for name, _ in _pipeline("bf16")]


def run_pipeline(graph: Graph, *, weights: str = "bf16", kv_dtype: str = "bf16",
                 dump_dir: str | Path | None = None) -> Graph:
    """Run the compile pipeline on ``graph``; with ``dump_dir``, write the graph before the first pass
    (``00-input.json``/``.txt``) and after each pass (``NN-<Pass>.json``/``.txt``).

    ``weights`` is the weight recipe (``bf16``/``w8``/``w4`` with optional ``,group=format`` overrides, see
    :func:`ninferc.ir.quant.recipe`), ``kv_dtype`` the KV cache dtype (``bf16``/``int8``); both are applied
    by ChooseFormats. Raises what the passes raise (ShapeError, QuantError)."""
    if dump_dir is not None:
        graph.dump(Path(dump_dir) / "00-input.json")
    for i, (name, fn) in enumerate(_pipeline(weights, kv_dtype), start=1):
        graph = fn(graph)
        if dump_dir is not None:
            graph.dump(Path(dump_dir) / f"{i:02d}-{name}.json")
    return graph
