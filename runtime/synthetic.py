"""Synthetic weights for benchmarking a model shape without its checkpoint (e.g. the 27B preset on a GPU
with no 54 GB download): an artifact-like object whose weights are drawn on the device.

Values are random, never zero: Linear/embedding weights N(0, 0.02^2) in bf16, norm weights N(0, 0.05^2)
(zero-centred: scale ~1), conv weights N(0, 0.2^2), A_log = log U(1, 16), dt_bias = 1 (HF init ranges).
The kernels do the same work on them as on real weights (no data-dependent shortcuts).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ninferc.ir.config import ModelConfig
from ninferc.ir.graph import Graph, tensor_nbytes


#: KV page size of a synthetic artifact (tokens), as ``ninferc compile``'s default
PAGE_SIZE = 64


class SyntheticArtifact:
    """Quacks like :class:`ninferc.artifact.Artifact` for :class:`ninferc.runtime.engine.Engine`.

    Args:
        config: model shape. graph: its compiled graph. plan: a :class:`~ninferc.targets.model_plan.ModelPlan`
            (kernel sources and resources come from it). seed: RNG seed for the weights.
    """

    def __init__(self, config: ModelConfig, graph: Graph, plan, *, seed: int = 0, page_size: int = PAGE_SIZE,
                 mtp_graph: Graph | None = None, mtp_plan=None):
        self.config, self._graph, self.seed, self._mtp = config, graph, seed, mtp_graph
        specs = {**(mtp_plan.kernels if mtp_plan is not None else {}), **plan.kernels}
        resources = {**(mtp_plan.resources if mtp_plan is not None else {}), **plan.resources}
        self._sources = {uri: spec.render() for uri, spec in specs.items()}
        params = dict(graph.params)
        if mtp_graph is not None:
            params.update({n: p for n, p in mtp_graph.params.items() if n not in params})
        self.header = {
            "target": {"arch": plan.target, "sku": plan.sku.key if plan.sku else None, "sms": plan.sms},
            "compile": {"page_size": page_size, "options": list(plan.options), "max_context": plan.program.max_context},
            "plan": plan.to_json(),
            "kernels": [{"uri": uri, "entry": spec.entry, "source_blob": uri, "family": spec.family,
                         "source_sha256": hashlib.sha256(self._sources[uri].encode()).hexdigest(),
                         "resources": resources[uri].to_json()} for uri, spec in specs.items()],
            "tensors": [{"name": n, "nbytes": tensor_nbytes(shape, dt)} for p in params.values()
                        for n, shape, dt in p.storage()],
        }

    def graph(self) -> Graph:
        """The compiled graph."""
        return self._graph

    def mtp_graph(self) -> Graph | None:
        """The MTP head's compiled graph (``ninferc bench --spec mtp``), or None."""
        return self._mtp

    def blob(self, name: str) -> bytes:
        """The rendered source of kernel ``name`` (its URI), as bytes."""
        return self._sources[name].encode()

    def device_tensor(self, name: str, shape, dtype: str, spec, cp):
        """Storage tensor ``name`` (``shape``, IR ``dtype``; of param ``spec``) generated on the device:
        bf16 as uint16 bits; a quantised param's codes uniform over the format's code range and its scales
        of magnitude 0.02 / code std (so dequantised weights have the bf16 weights' spread; w4 scales signed)."""
        rs = cp.random.RandomState(seed=(hash((self.seed, name)) & 0x7FFFFFFF))
        if spec.quantised:
            if dtype == "i8":  # w8 codes in [-127, 127]
                return rs.randint(-127, 128, shape, dtype=cp.int32).astype(cp.int8)
            if dtype == "u8":  # w4: two offset-binary nibbles per byte, every byte value valid
                return rs.randint(0, 256, shape, dtype=cp.int32).astype(cp.uint8)
            mag = 0.02 / (73.3 if spec.dtype == "w8" else 4.6)  # std of uniform codes: 127/sqrt(3), ~4.6
            sc = rs.uniform(0.5 * mag, 1.5 * mag, shape, dtype=cp.float32)
            if spec.dtype == "w4":
                sc *= cp.where(rs.uniform(0, 1, shape, dtype=cp.float32) < 0.5, -1.0, 1.0).astype(cp.float32)
            return sc
        if name.endswith("A_log"):
            return cp.log(rs.uniform(1.0, 16.0, shape, dtype=cp.float32))
        if name.endswith("dt_bias"):
            return cp.ones(shape, cp.float32)
        if dtype == "f32":
            std = 0.2 if name.endswith(".conv") else 0.05
            return (rs.standard_normal(shape, dtype=cp.float32) * std).astype(cp.float32)
        out = cp.empty(shape, cp.uint16)
        rows = max(1, (1 << 28) // max(1, int(np.prod(shape[1:], dtype=np.int64))))  # ~1 GiB of fp32 at a time
        for r in range(0, shape[0], rows):
            x = rs.standard_normal((min(rows, shape[0] - r),) + tuple(shape[1:]), dtype=cp.float32) * 0.02
            bits = x.view(cp.uint32)
            out[r:r + x.shape[0]] = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(cp.uint16)  # RNE
        return out

