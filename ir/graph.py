"""The model-graph IR: a networkx DiGraph of op nodes connected by typed tensors.

One graph describes one model step over ``T`` tokens of one sequence (prefill chunk: T = chunk length;
decode: T = 1). Shapes are tuples whose entries are ints or the symbol ``"T"`` (the token extent).

* **Tensors** (:class:`TensorSpec`) are the values flowing between ops; each has exactly one producer
  (an op, or the graph inputs ``tokens`` and ``positions``).
* **Params** (:class:`ParamSpec`) are checkpoint weights, referenced by ops by IR name.
* **States** (:class:`StateSpec`) persist across steps of one sequence: the KV cache of every attention
  layer, the conv window and fp32 recurrent matrix of every Gated DeltaNet layer.
* **Ops** (:class:`Op`) are nodes of the networkx graph, keyed by their unique name; an edge u -> v
  carries ``tensor=<name>`` for every tensor v reads from u. Op kinds and their contracts are in
  :mod:`ninferc.ir.ops`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import networkx as nx

Dim = int | str
#: bytes per element of the IR dtypes
DTYPE_BYTES = {"f32": 4, "bf16": 2, "i32": 4, "i8": 1, "u8": 1}
#: quantised weight formats a matrix param may take (:mod:`ninferc.ir.quant` defines them); a param of
#: such a dtype keeps its logical shape [N, K] and is stored as two tensors (see :meth:`ParamSpec.storage`)
QUANT_FORMATS = ("w8", "w4")
#: K elements per fp32 scale of the ``w4`` format
W4_GROUP = 64
#: elements of one head's K (or V) row per fp32 scale of an int8 KV cache
KV_GROUP = 64
#: suffix of the scales tensor of a quantised param in artifacts and on the device
SCALES_SUFFIX = ".scales"
GRAPH_INPUT = "<input>"


def tensor_nbytes(shape, dtype: str) -> int:
    """Bytes of a dense tensor of ``shape`` (ints) and IR ``dtype`` (a key of :data:`DTYPE_BYTES`)."""
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= int(d)
    return n


@dataclass(frozen=True)
class TensorSpec:
    """A value of the graph: ``shape`` (ints and ``"T"``), ``dtype`` in :data:`DTYPE_BYTES`."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "f32"

    def concrete(self, tokens: int) -> tuple[int, ...]:
        """Shape with ``"T"`` replaced by ``tokens``."""
        return tuple(tokens if d == "T" else int(d) for d in self.shape)

    def row_elems(self) -> int:
        """Elements per token (product of the non-T dims)."""
        n = 1
        for d in self.shape:
            if d != "T":
                n *= int(d)
        return n


@dataclass(frozen=True)
class ParamSpec:
    """A checkpoint weight as the IR expects it: IR ``name``, ``shape``, stored ``dtype``, and ``group``
    (tensor class: embedding, lm_head, attention, gdn, mlp, norm) used by weight-format recipes."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "bf16"
    group: str = "other"
    #: a fused parameter is the concatenation of these specs along dim 0 (pass FuseSiblingLinears)
    parts: tuple["ParamSpec", ...] = ()

    @property
    def numel(self) -> int:
        """Number of elements (product of the shape)."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def quantised(self) -> bool:
        """True for a ``w8`` / ``w4`` param (codes + scales)."""
        return self.dtype in QUANT_FORMATS

    def storage(self) -> list[tuple[str, tuple[int, ...], str]]:
        """The tensors this param is stored as, ``(name, shape, dtype)`` with dtypes of :data:`DTYPE_BYTES`:

        * ``bf16`` / ``f32`` / ...: ``[(name, shape, dtype)]``;
        * ``w8`` (shape [N, K]): codes ``(name, (N, K), "i8")`` and scales ``(name.scales, (N,), "f32")``;
        * ``w4`` (shape [N, K], K % 64 == 0): codes ``(name, (N, K/2), "u8")`` (two nibbles per byte) and
          scales ``(name.scales, (N, K/64), "f32")``.

        Raises:
            ValueError: a quantised param that is not 2-D, or w4 with K not a multiple of 64.
        """
        if not self.quantised:
            return [(self.name, tuple(self.shape), self.dtype)]
        if len(self.shape) != 2:
            raise ValueError(f"param {self.name}: format {self.dtype} needs a 2-D [N, K] shape, got {list(self.shape)}")
        n, k = self.shape
        if self.dtype == "w8":
            return [(self.name, (n, k), "i8"), (self.name + SCALES_SUFFIX, (n,), "f32")]
        if k % W4_GROUP:
            raise ValueError(f"param {self.name}: w4 needs K % {W4_GROUP} == 0, got K = {k}")
        return [(self.name, (n, k // 2), "u8"), (self.name + SCALES_SUFFIX, (n, k // W4_GROUP), "f32")]

    @property
    def nbytes(self) -> int:
        """Bytes as stored: numel x dtype size, or codes + scales of a quantised format."""
        return sum(tensor_nbytes(shape, dt) for _, shape, dt in self.storage())

    def row_bytes(self) -> int:
        """Bytes of one row (dim 0) as stored, scales included (an embedding gather reads one row)."""
        return self.nbytes // self.shape[0]


@dataclass(frozen=True)
class StateSpec:
    """Per-sequence persistent state. ``kind``: ``kv`` (shape per token of context: (2, kv_heads,
    head_dim)), ``conv`` (channels, width-1) or ``recurrent`` (v_heads, k_dim, v_dim); dtype as stored."""

    name: str
    layer: int
    kind: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        """Bytes per sequence (``kv``: per token of context). An ``i8`` KV state also stores one fp32
        scale per :data:`KV_GROUP` elements per token per head (issue 6's int8 KV format)."""
        n = DTYPE_BYTES[self.dtype]
        for d in self.shape:
            n *= d
        if self.kind == "kv" and self.dtype == "i8":
            n += 4 * (n // KV_GROUP)
        return n


@dataclass
class Op:
    """One node: ``kind`` (see :mod:`ninferc.ir.ops`), ordered ``inputs``/``outputs`` tensor names,
    ``params`` (role -> IR param name, or tuple of names concatenated along the output dim), ``attrs``
    (kind-specific scalars), ``states`` (role -> state name) and ``layer`` (-1 outside decoder layers)."""

    name: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    states: dict = field(default_factory=dict)
    layer: int = -1

    def to_json(self) -> dict:
        """JSON-able dict of the op (lists for tuples)."""
        return {
            "name": self.name, "kind": self.kind, "inputs": list(self.inputs), "outputs": list(self.outputs),
            "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params.items()},
            "attrs": _jsonable(self.attrs), "states": dict(self.states), "layer": self.layer,
        }


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


class Graph:
    """A model step as a DAG of :class:`Op` nodes (networkx ``DiGraph``) plus tensor/param/state tables.

    Attributes:
        g: the networkx DiGraph; node key = op name, node attr ``op`` = :class:`Op`.
        tensors: name -> :class:`TensorSpec`, including the graph inputs ``tokens`` [T] i32 and
            ``positions`` [T] i32.
        params, states: name -> spec.
        outputs: names of graph outputs (``logits``).
        meta: free-form dict (the model config as a dict, applied passes).
    """

    def __init__(self) -> None:
        self.g = nx.DiGraph()
        self.tensors: dict[str, TensorSpec] = {}
        self.params: dict[str, ParamSpec] = {}
        self.states: dict[str, StateSpec] = {}
        self.inputs: tuple[str, ...] = ()
        self.outputs: tuple[str, ...] = ()
        self.meta: dict = {}
        self._producer: dict[str, str] = {}

    # ---- construction ----------------------------------------------------------------------
    def add_input(self, spec: TensorSpec) -> str:
        """Declare a graph input tensor; returns its name."""
        self._add_tensor(spec)
        self._producer[spec.name] = GRAPH_INPUT
        self.inputs = self.inputs + (spec.name,)
        return spec.name

    def add_param(self, spec: ParamSpec) -> str:
        """Declare a weight; raises ValueError when the name is taken."""
        if spec.name in self.params:
            raise ValueError(f"param {spec.name!r} declared twice")
        self.params[spec.name] = spec
        return spec.name

    def add_state(self, spec: StateSpec) -> str:
        """Declare a per-sequence state; raises ValueError when the name is taken."""
        if spec.name in self.states:
            raise ValueError(f"state {spec.name!r} declared twice")
        self.states[spec.name] = spec
        return spec.name

    def _add_tensor(self, spec: TensorSpec) -> None:
        if spec.name in self.tensors:
            raise ValueError(f"tensor {spec.name!r} defined twice")
        self.tensors[spec.name] = spec

    def add_op(self, op: Op, out_specs: Iterable[TensorSpec]) -> Op:
        """Insert ``op`` producing ``out_specs`` (same order as ``op.outputs``) and wire its edges.

        Raises:
            ValueError: unknown input tensor, duplicate op or tensor name, outputs mismatch.
        """
        out_specs = list(out_specs)
        if [s.name for s in out_specs] != list(op.outputs):
            raise ValueError(f"op {op.name}: out_specs {[s.name for s in out_specs]} != outputs {op.outputs}")
        if op.name in self.g:
            raise ValueError(f"op {op.name!r} defined twice")
        for t in op.inputs:
            if t not in self._producer:
                raise ValueError(f"op {op.name}: input tensor {t!r} has no producer")
        for s in out_specs:
            self._add_tensor(s)
            self._producer[s.name] = op.name
        self.g.add_node(op.name, op=op)
        self._wire(op)
        # re-attach consumers that already read these tensors (a pass replacing a producer)
        outs = set(op.outputs)
        for n in self.g.nodes:
            other = self.g.nodes[n]["op"]
            if other is not op and outs.intersection(other.inputs):
                if self.g.has_edge(op.name, n):
                    self.g.edges[op.name, n]["tensors"].update(outs.intersection(other.inputs))
                else:
                    self.g.add_edge(op.name, n, tensors=outs.intersection(other.inputs))
        return op

    def _wire(self, op: Op) -> None:
        for t in op.inputs:
            p = self._producer[t]
            if p != GRAPH_INPUT:
                if self.g.has_edge(p, op.name):
                    self.g.edges[p, op.name]["tensors"].add(t)
                else:
                    self.g.add_edge(p, op.name, tensors={t})

    def remove_op(self, name: str, *, drop_outputs: bool = True) -> Op:
        """Remove an op node (and, by default, the tensors it produced)."""
        op = self.op(name)
        self.g.remove_node(name)
        if drop_outputs:
            for t in op.outputs:
                self.tensors.pop(t, None)
                self._producer.pop(t, None)
        return op

    def replace_input(self, op_name: str, old: str, new: str) -> None:
        """Make op ``op_name`` read tensor ``new`` wherever it read ``old`` (edges are rebuilt)."""
        op = self.op(op_name)
        for p in list(self.g.predecessors(op_name)):
            self.g.remove_edge(p, op_name)
        op.inputs = tuple(new if t == old else t for t in op.inputs)
        self._wire(op)

    # ---- queries -----------------------------------------------------------------------------
    def op(self, name: str) -> Op:
        """The :class:`Op` named ``name`` (KeyError if absent)."""
        return self.g.nodes[name]["op"]

    def ops(self) -> Iterator[Op]:
        """Ops in a deterministic topological order (ties broken by insertion order)."""
        order = {n: i for i, n in enumerate(self.g.nodes)}
        for n in nx.lexicographical_topological_sort(self.g, key=lambda n: order[n]):
            yield self.g.nodes[n]["op"]

    def producer(self, tensor: str) -> Op | None:
        """The op producing ``tensor`` (None for graph inputs)."""
        p = self._producer[tensor]
        return None if p == GRAPH_INPUT else self.op(p)

    def consumers(self, tensor: str) -> list[Op]:
        """Ops reading ``tensor``, in topological order."""
        return [op for op in self.ops() if tensor in op.inputs]

    def bytes_by_format(self) -> dict[str, int]:
        """Stored bytes of the params per format (``bf16``, ``f32``, ``w8``, ``w4``; quantised formats count
        codes + scales, :meth:`ParamSpec.nbytes`), sorted by format name."""
        out: dict[str, int] = {}
        for p in self.params.values():
            out[p.dtype] = out.get(p.dtype, 0) + p.nbytes
        return dict(sorted(out.items()))

    def count_ops(self) -> dict[str, int]:
        """Op kind -> count."""
        out: dict[str, int] = {}
        for op in self.ops():
            out[op.kind] = out.get(op.kind, 0) + 1
        return dict(sorted(out.items()))

    def fresh_name(self, base: str) -> str:
        """An op/tensor name not used yet, derived from ``base``."""
        name, i = base, 1
        while name in self.g or name in self.tensors:
            name = f"{base}.{i}"
            i += 1
        return name

    def copy(self) -> "Graph":
        """Deep copy (passes transform copies, never the input)."""
        return copy.deepcopy(self)

    # ---- serialisation ---------------------------------------------------------------------
    def to_json(self) -> dict:
        """A JSON-able dump (ops in topological order with their tensors' specs)."""
        return {
            "meta": _jsonable(self.meta),
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "ops": [op.to_json() for op in self.ops()],
            "tensors": {n: {"shape": list(s.shape), "dtype": s.dtype} for n, s in self.tensors.items()},
            "params": {n: {"shape": list(p.shape), "dtype": p.dtype, "group": p.group,
                           "parts": [q.name for q in p.parts]} for n, p in self.params.items()},
            "part_specs": {q.name: {"shape": list(q.shape), "dtype": q.dtype, "group": q.group}
                           for p in self.params.values() for q in p.parts},
            "states": {n: {"layer": s.layer, "kind": s.kind, "shape": list(s.shape), "dtype": s.dtype}
                       for n, s in self.states.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> "Graph":
        """Inverse of :meth:`to_json` (ops re-inserted in the dumped topological order).

        Raises:
            ValueError: an inconsistent dump (unknown tensor, duplicate names).
        """
        g = cls()
        g.meta = d.get("meta", {})

        def pspec(name, p, table):
            parts = tuple(pspec(q, table[q], table) for q in p.get("parts", []) if q in table) \
                if p.get("parts") and all(q in table for q in p["parts"]) else ()
            return ParamSpec(name, tuple(p["shape"]), p["dtype"], p.get("group", "other"), parts)

        part_specs = d.get("part_specs", {})
        for n, p in d["params"].items():
            spec = ParamSpec(n, tuple(p["shape"]), p["dtype"], p.get("group", "other"),
                             tuple(pspec(q, part_specs[q], part_specs) for q in p.get("parts", []) if q in part_specs))
            g.add_param(spec)
        for n, s in d["states"].items():
            g.add_state(StateSpec(n, s["layer"], s["kind"], tuple(s["shape"]), s["dtype"]))
        tensors = d["tensors"]
        for n in d["inputs"]:
            t = tensors[n]
            g.add_input(TensorSpec(n, tuple(t["shape"]), t["dtype"]))
        for o in d["ops"]:
            op = Op(o["name"], o["kind"], tuple(o["inputs"]), tuple(o["outputs"]),
                    {k: (tuple(v) if isinstance(v, list) else v) for k, v in o["params"].items()},
                    _tuplify(o["attrs"]), dict(o["states"]), o["layer"])
            g.add_op(op, [TensorSpec(n, tuple(tensors[n]["shape"]), tensors[n]["dtype"]) for n in op.outputs])
        g.outputs = tuple(d["outputs"])
        return g

    def dump(self, path: str | Path) -> None:
        """Write :meth:`to_json` plus a readable one-line-per-op text file next to it (``.txt``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1))
        lines = []
        for op in self.ops():
            ins = ", ".join(f"{t}{list(self.tensors[t].shape)}" for t in op.inputs)
            outs = ", ".join(f"{t}{list(self.tensors[t].shape)}:{self.tensors[t].dtype}" for t in op.outputs)
            extra = ""
            if op.params:
                extra += " params=" + ",".join(f"{k}={v}" for k, v in op.params.items())
            if op.attrs:
                extra += " attrs=" + json.dumps(_jsonable(op.attrs), sort_keys=True)
            lines.append(f"{op.name}: {op.kind}({ins}) -> {outs}{extra}")
        path.with_suffix(".txt").write_text("\n".join(lines) + "\n")


def _tuplify(x):
    """JSON lists back to tuples inside op attrs (shapes, windows), recursively."""
    if isinstance(x, dict):
        return {k: _tuplify(v) for k, v in x.items()}
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    return x


def with_attrs(op: Op, **attrs) -> Op:
    """A copy of ``op`` with ``attrs`` merged in."""
    return replace(op, attrs={**op.attrs, **attrs})
