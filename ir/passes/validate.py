"""ValidateShapes: re-infer every op's outputs and check them against the declared tensor specs."""

from __future__ import annotations

import networkx as nx

from ninferc.ir.graph import Graph
from ninferc.ir.ops import ShapeError, infer


def validate_shapes(g: Graph) -> Graph:
    """Check the graph is a DAG whose every op satisfies its kind's contract, whose tensors match the
    inferred shapes (dtypes may be narrowed to bf16 by ChooseFormats), whose params and states exist,
    and whose outputs are produced. Returns ``g`` unchanged.

    Raises:
        ShapeError: the first violation, naming op, tensor, expected and found.
    """
    if not nx.is_directed_acyclic_graph(g.g):
        raise ShapeError(f"graph has a cycle: {nx.find_cycle(g.g)}")
    for op in g.ops():
        for role, pname in op.params.items():
            if pname not in g.params:
                raise ShapeError(f"op {op.name}: param {role}={pname!r} is not declared")
        for role, sname in op.states.items():
            if sname not in g.states:
                raise ShapeError(f"op {op.name}: state {role}={sname!r} is not declared")
        for name, (shape, dtype) in zip(op.outputs, infer(g, op)):
            spec = g.tensors[name]
            if spec.shape != shape:
                raise ShapeError(f"op {op.name}: output {name} declared {spec.shape}, inferred {shape}")
            if spec.dtype != dtype and not (dtype == "f32" and spec.dtype == "bf16"):
                raise ShapeError(f"op {op.name}: output {name} dtype {spec.dtype}, inferred {dtype}")
    for t in g.outputs:
        if t not in g.tensors:
            raise ShapeError(f"graph output {t!r} is not produced")
    return g
