"""Kernel families (one module per template, or a package: ``gemv/``, one template per compute engine) and the registry
the plan, CLI and CI iterate over.

Each ``targets/kernels/<family>.py`` (or package) implements :class:`ninferc.targets.plan.KernelFamily` (``name``,
``template``, ``variants``, ``launch``, ``sample_problems``, plus ``arg_names`` and a numpy ``reference``
per templates/README.md) and exports its instance as a module-level ``FAMILY`` (or several as a
``FAMILIES`` list). :data:`FAMILIES` is built by importing every module of this package, so a new family
is registered by adding its file -- nothing here to edit. CI then compiles its sample variants for every
target and reads their resources (tests/targets/test_templates_compile.py), and fails if a template in
``templates/`` is rendered by no family.

:func:`representative_instances` lists just the projection GEMVs of a model shape (both layer kinds) plus
the LM head, as (name, family, problem): the family-level tests plan them with the pieces the product's plan
uses (:func:`ninferc.targets.plan.compile_variants`, the family's ``launch`` on a
:class:`~ninferc.targets.plan.PlanContext`, :func:`ninferc.targets.plan.check_launch`). Whole models are lowered
and planned by :mod:`ninferc.targets.lower` / :mod:`ninferc.targets.model_plan`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Mapping

from ninferc.errors import ConfigError
from ninferc.targets.kernels.gemv import GemvProblem
from ninferc.targets.plan import KernelFamily


def _discover() -> dict[str, KernelFamily]:
    found: dict[str, KernelFamily] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        fams = list(getattr(mod, "FAMILIES", ()))
        if getattr(mod, "FAMILY", None) is not None:
            fams.append(mod.FAMILY)
        for fam in fams:
            if fam.name in found and found[fam.name] is not fam:
                raise ImportError(f"kernel family {fam.name!r} registered twice ({info.name})")
            found[fam.name] = fam
    return found


FAMILIES: dict[str, KernelFamily] = _discover()
"""Registered kernel families by name (every ``FAMILY`` / ``FAMILIES`` in this package's modules)."""

PRESETS: dict[str, dict[str, int]] = {
    # Qwen3.8-27B text model (DESIGN.md section 1): hidden 5120, MLP 17408, vocab 248320; attention
    # 24 q heads (q_proj also yields a per-head output gate) / 4 kv heads of 256; GDN 16 q/k heads and
    # 48 v heads of 128.
    "qwen3.8-27b": {
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "vocab_size": 248320,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
    },
}
"""Model-shape presets accepted by :func:`representative_instances` and ``ninferc plan --preset``."""

_DIM_KEYS = tuple(PRESETS["qwen3.8-27b"])


def dims_from_config(config: Mapping[str, Any]) -> dict[str, int]:
    """Pick the projection dimensions out of a HF ``config.json`` dict (``qwen3_5_text``, or
    ``qwen3_5`` with a ``text_config``).

    Raises:
        ConfigError: a required key is missing (lists all missing keys).
    """
    cfg = config.get("text_config", config)
    missing = [k for k in _DIM_KEYS if k not in cfg]
    if missing:
        raise ConfigError(f"config lacks {', '.join(missing)} (needed for the projection shapes)")
    return {k: int(cfg[k]) for k in _DIM_KEYS}


def representative_instances(preset_or_dims: str | Mapping[str, Any]) -> list[tuple[str, KernelFamily, Any]]:
    """The projection GEMVs of the model as (instance name, family, problem), in layer order.

    Args:
        preset_or_dims: a preset name (``"qwen3.8-27b"``), a dims dict (the keys of a
            :data:`PRESETS` entry) or a HF config dict.

    Returns (27B shapes in brackets):
        gdn.in_proj    K=hidden -> 2*kh*dk + 2*vh*dv + 2*vh (q|k|v|z|b|a fused) [5120 -> 16480] store
        gdn.out_proj   K=vh*dv -> hidden, residual_add                         [6144 -> 5120]
        attn.qkv_proj  K=hidden -> 2*qh*hd + 2*kvh*hd (q with gate | k | v)    [5120 -> 14336] store
        attn.o_proj    K=qh*hd -> hidden, residual_add                         [6144 -> 5120]
        mlp.gate_up    K=hidden -> 2*I, swiglu to I                            [5120 -> 2*17408]
        mlp.down       K=I -> hidden, residual_add                             [17408 -> 5120]
        lm_head        K=hidden -> vocab, store                                [5120 -> 248320]

    Raises:
        ConfigError: unknown preset or missing dims.
    """
    if isinstance(preset_or_dims, str):
        try:
            d = PRESETS[preset_or_dims]
        except KeyError:
            raise ConfigError(f"unknown preset {preset_or_dims!r}; presets: {', '.join(PRESETS)}") from None
    elif set(_DIM_KEYS) <= set(preset_or_dims):
        d = {k: int(preset_or_dims[k]) for k in _DIM_KEYS}
    else:
        d = dims_from_config(preset_or_dims)
    h, inter = d["hidden_size"], d["intermediate_size"]
    kh, vh = d["linear_num_key_heads"], d["linear_num_value_heads"]
    dk, dv = d["linear_key_head_dim"], d["linear_value_head_dim"]
    qh, kvh, hd = d["num_attention_heads"], d["num_key_value_heads"], d["head_dim"]
    g = FAMILIES["gemv"]
    return [
        ("gdn.in_proj", g, GemvProblem(h, 2 * kh * dk + 2 * vh * dv + 2 * vh, "store")),
        ("gdn.out_proj", g, GemvProblem(vh * dv, h, "residual_add")),
        ("attn.qkv_proj", g, GemvProblem(h, 2 * qh * hd + 2 * kvh * hd, "store")),
        ("attn.o_proj", g, GemvProblem(qh * hd, h, "residual_add")),
        ("mlp.gate_up", g, GemvProblem(h, inter, "swiglu")),
        ("mlp.down", g, GemvProblem(inter, h, "residual_add")),
        ("lm_head", g, GemvProblem(h, d["vocab_size"], "store")),
    ]
