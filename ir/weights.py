"""Weights as a graph's params want them: fused params concatenated from their parts, dtypes converted
to the format ChooseFormats picked. Used by the reference executor on fused graphs and by the
artifact writer (which stores exactly these arrays)."""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np

from ninferc.ir.graph import Graph, ParamSpec

NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "f16": np.float16, "i8": np.int8, "u8": np.uint8}


class GraphWeights(Mapping):
    """Mapping graph param name -> numpy array in the param's dtype and shape.

    Args:
        graph: the (possibly fused / formatted) IR graph.
        source: IR param name -> array for the *unfused* params (a Checkpoint), or already-final
            arrays (an artifact): a name present in ``source`` is used as is after a dtype conversion.

    Raises:
        KeyError: a param (or one of its parts) missing from ``source``.
        ValueError: a part's shape differs from its spec.
    """

    def __init__(self, graph: Graph, source: Mapping[str, np.ndarray]):
        self.graph, self.source = graph, source

    def _get(self, spec: ParamSpec) -> np.ndarray:
        if spec.name in self.source:
            arr = np.asarray(self.source[spec.name])
        elif spec.parts:
            arrs = [self._get(p) for p in spec.parts]
            arr = np.concatenate([a.astype(NP_DTYPES[spec.dtype]) for a in arrs], axis=0)
        else:
            raise KeyError(spec.name)
        if tuple(arr.shape) != tuple(spec.shape):
            raise ValueError(f"param {spec.name}: array shape {list(arr.shape)} != spec {list(spec.shape)}")
        want = NP_DTYPES[spec.dtype]
        return arr if arr.dtype == want else arr.astype(want)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._get(self.graph.params[name])

    def __iter__(self):
        return iter(self.graph.params)

    def __len__(self) -> int:
        return len(self.graph.params)
