"""Weights as a graph's params want them: fused params concatenated from their parts, dtypes converted
to the format ChooseFormats picked, quantised params (``w8``/``w4``) as their codes and scales tensors.
Used by the reference executor on fused graphs and by the artifact writer (which stores exactly these
arrays)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping

import ml_dtypes
import numpy as np

from ninferc.ir.graph import SCALES_SUFFIX, Graph, ParamSpec

NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "f16": np.float16, "i8": np.int8, "u8": np.uint8}
_QUANT_CACHE = 2  # quantised params kept (codes and scales are read one after the other)


class GraphWeights(Mapping):
    """Mapping storage-tensor name -> numpy array in its stored dtype and shape.

    The names are those of :meth:`ninferc.ir.graph.ParamSpec.storage` over the graph's params: one per
    unquantised param (the param name), two per ``w8``/``w4`` param (``name``: the codes, ``name.scales``:
    the fp32 scales, both as :func:`ninferc.ir.quant.quantize` makes them from the bf16 values).

    Args:
        graph: the (possibly fused / formatted) IR graph.
        source: IR param name -> array for the *unfused* params (a Checkpoint), or already-final
            arrays (an artifact): a name present in ``source`` is used as is after a dtype conversion; for a
            quantised param, a source array with the storage shape and dtype (codes / scales) is used as
            is, anything else is taken as the param's values and quantised.

    Raises:
        KeyError: a param (or one of its parts) missing from ``source``, or an unknown name.
        ValueError: an array's shape differs from its spec.
        QuantError: non-finite values in a param being quantised.
    """

    def __init__(self, graph: Graph, source: Mapping[str, np.ndarray]):
        self.graph, self.source = graph, source
        self._storage = {}
        for spec in graph.params.values():
            for name, shape, dtype in spec.storage():
                self._storage[name] = (spec, shape, dtype)
        self._quant: OrderedDict[str, object] = OrderedDict()

    def _values(self, spec: ParamSpec, dtype: str) -> np.ndarray:
        """The param's values (parts concatenated) as ``dtype``, checked against the logical shape."""
        if spec.name in self.source:
            arr = np.asarray(self.source[spec.name])
        elif spec.parts:
            arr = np.concatenate([self._values(p, dtype) for p in spec.parts], axis=0)
        else:
            raise KeyError(spec.name)
        if tuple(arr.shape) != tuple(spec.shape):
            raise ValueError(f"param {spec.name}: array shape {list(arr.shape)} != spec {list(spec.shape)}")
        want = NP_DTYPES[dtype]
        return arr if arr.dtype == want else arr.astype(want)

    def quantised(self, name: str):
        """The :class:`ninferc.ir.quant.QuantTensor` of quantised param ``name`` (cached for the next read)."""
        from ninferc.ir.quant import quantize

        if name in self._quant:
            self._quant.move_to_end(name)
            return self._quant[name]
        spec = self.graph.params[name]
        qt = quantize(self._values(spec, "bf16"), spec.dtype, name=name)
        self._quant[name] = qt
        while len(self._quant) > _QUANT_CACHE:
            self._quant.popitem(last=False)
        return qt

    def __getitem__(self, name: str) -> np.ndarray:
        spec, shape, dtype = self._storage[name]
        if not spec.quantised:
            return self._values(spec, dtype)
        if name in self.source:
            arr = np.asarray(self.source[name])
            if tuple(arr.shape) == tuple(shape) and arr.dtype == NP_DTYPES[dtype]:
                return arr  # already stored codes / scales (an artifact)
        qt = self.quantised(spec.name)
        return qt.scales if name.endswith(SCALES_SUFFIX) and name != spec.name else qt.codes

    def storage(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Storage-tensor name -> (shape, dtype) in graph param order (codes before scales)."""
        return {n: (shape, dt) for n, (_, shape, dt) in self._storage.items()}

    def __iter__(self) -> Iterator[str]:
        return iter(self._storage)

    def __len__(self) -> int:
        return len(self._storage)
