"""Model summary numbers used by `ninferc inspect` and the memory plan: parameter counts and bytes by
dtype and by tensor group, and per-sequence state bytes."""

from __future__ import annotations

from ninferc.ir.config import ModelConfig
from ninferc.ir.graph import DTYPE_BYTES
from ninferc.ir.qwen3_5 import mtp_param_specs, param_specs, state_specs


def param_summary(cfg: ModelConfig) -> dict:
    """{"count": total parameters, "bytes_by_dtype": {dtype: bytes}, "count_by_group": {group: n}}
    for the weights the config implies, the MTP head's included (group ``mtp`` and its norms; stored dtypes:
    bf16, see :func:`param_specs` and :func:`mtp_param_specs`)."""
    by_dtype: dict[str, int] = {}
    by_group: dict[str, int] = {}
    total = 0
    for p in [*param_specs(cfg).values(), *mtp_param_specs(cfg).values()]:
        total += p.numel
        by_dtype[p.dtype] = by_dtype.get(p.dtype, 0) + p.nbytes
        by_group[p.group] = by_group.get(p.group, 0) + p.numel
    return {"count": total, "bytes_by_dtype": by_dtype, "count_by_group": by_group}


def state_summary(cfg: ModelConfig) -> dict:
    """Per-sequence state: ``kv_bytes_per_token`` (K and V of every attention layer, one token of
    context, in the KV dtype) and ``fixed_bytes`` (GDN conv windows + fp32 recurrent matrices)."""
    kv = fixed = 0
    for s in state_specs(cfg).values():
        if s.kind == "kv":
            kv += s.nbytes
        else:
            fixed += s.nbytes
    return {"kv_bytes_per_token": kv, "fixed_bytes": fixed,
            "kv_dtype_bytes": DTYPE_BYTES[next((s.dtype for s in state_specs(cfg).values() if s.kind == "kv"), "bf16")]}
