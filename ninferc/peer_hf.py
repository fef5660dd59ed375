"""HF transformers as the peer of ``ninferc bench --peer hf``: the same model, the same weights, the same
process, timed the way :func:`ninferc.bench.run_bench` times ours (DESIGN.md section 8).

Two halves:

* **Weight mapping (numpy only, CPU-tested).** The engine holds one device array per *graph param*
  (:class:`ninferc.ir.graph.ParamSpec`); a fused param (``L0.mlp.gate_up``, ``L3.attn.q_k_v``,
  ``L0.gdn.in_qkv_in_z_in_b_in_a``) is its unfused parts concatenated along dim 0, in order.
  :func:`hf_weight_map` lists, for every HF checkpoint tensor, which graph param and which row window
  of it holds the tensor; :func:`hf_tensors_from_params` applies it to numpy arrays and
  :func:`hf_torch_tensors` to device arrays (CuPy, via DLPack, zero-copy: a row window of a row-major
  array is a contiguous view). Names are the checkpoint's (:func:`ninferc.ir.qwen3_5.hf_name`:
  ``model.layers.{i}...`` or, for a ``qwen3_5`` multimodal config, ``model.language_model.layers...``;
  ``lm_head.weight`` at the top level).
* **The HF model (torch + transformers, imported lazily).** :func:`build_hf_model` instantiates
  ``transformers.Qwen3_5ForCausalLM`` (``model_type`` ``qwen3_5_text``, config class
  ``Qwen3_5TextConfig``; transformers 5.x ``models/qwen3_5/modeling_qwen3_5.py``) on the ``meta`` device
  and materialises it with ``load_state_dict(..., assign=True, strict=True)`` on those tensors, so the
  peer reads the engine's own weight memory. :func:`run_hf_peer` times prefill and greedy decode;
  :func:`hf_logits` returns teacher-forced logits (the GPU test checks them against the goldens).

Conventions checked against ``modeling_qwen3_5.py`` (transformers 5.17): the in-memory module names of
``Qwen3_5ForCausalLM`` are ``model.embed_tokens.weight``, ``model.layers.{i}.{input_layernorm,
post_attention_layernorm}.weight``, ``model.layers.{i}.self_attn.{q,k,v,o}_proj.weight`` (q_proj has
``2 * heads * head_dim`` rows: per head [query | gate]), ``...self_attn.{q,k}_norm.weight``,
``model.layers.{i}.linear_attn.{in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj}.weight``,
``...linear_attn.conv1d.weight`` ([C, 1, W], a depthwise ``nn.Conv1d``; ours is [C, W]),
``...linear_attn.{A_log,dt_bias}`` (bare ``nn.Parameter``), ``...linear_attn.norm.weight``,
``model.layers.{i}.mlp.{gate,up,down}_proj.weight``, ``model.norm.weight``, ``lm_head.weight``. The norm
weights are stored zero-centred in both (``Qwen3_5RMSNorm`` computes ``x * (1 + w)``, our
``RMSNorm(unit_offset=True)`` the same) and the GDN output norm (``Qwen3_5RMSNormGated``) uses plain
``w`` in both, so the stored values are passed through unchanged. The only non-persistent buffers are the
rotary ``inv_freq`` / ``original_inv_freq`` of ``Qwen3_5TextRotaryEmbedding``, recomputed from the config.

Dtypes: HF runs the model in bf16. Our bf16 params (uint16 bits on the device) are viewed as
``torch.bfloat16``; our fp32 small params (norms, conv, A_log, dt_bias: exact fp32 copies of the
checkpoint's bf16 values, see ``ChooseFormats``) are converted back to bf16, which is exact for
checkpoint weights. (Synthetic fp32 weights are random fp32 and get rounded: irrelevant for timing.)
Quantised params (``w8``/``w4``) are not supported: the peer runs the bf16 model.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ninferc.errors import NinfercError
from ninferc.ir.config import ModelConfig
from ninferc.ir.graph import Graph, ParamSpec

#: the HF classes the peer instantiates (transformers >= 5.2, where Qwen3.5 was added)
HF_MODEL_CLASS = "Qwen3_5ForCausalLM"
HF_CONFIG_CLASS = "Qwen3_5TextConfig"
HF_MODEL_TYPE = "qwen3_5_text"
#: the functions of ``modeling_qwen3_5`` that dispatch to flash-linear-attention / causal-conv1d when those
#: packages are importable (transformers 5.17: ``use_kernel_func_from_hub_with_fallback``), keyed by the
#: module attribute, valued by the kernel's name in its package
FAST_PATH_FUNCTIONS = {
    "causal_conv1d_fn": "causal_conv1d.causal_conv1d_fn",
    "causal_conv1d_update": "causal_conv1d.causal_conv1d_update",
    "torch_chunk_gated_delta_rule": "fla.chunk_gated_delta_rule",
    "torch_recurrent_gated_delta_rule": "fla.fused_recurrent_gated_delta_rule",
}
_PEER_NAME = "hf-transformers"


# ---- weight mapping (numpy only) -------------------------------------------------------------------
@dataclass(frozen=True)
class HFEntry:
    """Where one HF checkpoint tensor lives in the compiled graph's params.

    Attributes:
        hf_name: checkpoint name (e.g. ``model.layers.0.mlp.gate_proj.weight``).
        ir_name: the unfused IR param (e.g. ``L0.mlp.gate``).
        param: the graph param holding it (e.g. ``L0.mlp.gate_up``; equal to ``ir_name`` when unfused).
        rows: ``(start, stop)`` window of ``param`` along dim 0.
        hf_shape: the checkpoint tensor's shape (the window reshaped: conv [C, W] -> [C, 1, W]).
        dtype: the graph param's stored dtype, ``"bf16"`` or ``"f32"``.
    """

    hf_name: str
    ir_name: str
    param: str
    rows: tuple[int, int]
    hf_shape: tuple[int, ...]
    dtype: str


def graph_config(graph: Graph) -> ModelConfig:
    """The :class:`ModelConfig` a graph was built from (``graph.meta["model"]``).

    Raises:
        NinfercError: the graph carries no model config.
    """
    d = graph.meta.get("model")
    if not isinstance(d, dict):
        raise NinfercError("the graph carries no model config (graph.meta['model']); build it with "
                           "ninferc.ir.qwen3_5.build_graph")
    return ModelConfig.from_dict(d)


def _leaves(spec: ParamSpec) -> list[ParamSpec]:
    if not spec.parts:
        return [spec]
    return [leaf for p in spec.parts for leaf in _leaves(p)]


def hf_weight_map(graph: Graph) -> list[HFEntry]:
    """One :class:`HFEntry` per HF checkpoint tensor the graph's params hold, in graph-param order.

    With tied embeddings there is no ``lm_head.weight`` entry (the LM head reads ``embed``;
    :func:`build_hf_model` aliases it).

    Raises:
        NinfercError: a quantised param (the peer runs bf16 weights), a param whose IR name has no HF
            name, or a fused param whose parts do not add up to its rows.
    """
    from ninferc.ir.qwen3_5 import hf_name

    cfg = graph_config(graph)
    quant = [f"{n} ({p.dtype})" for n, p in graph.params.items() if p.dtype not in ("bf16", "f32")]
    if quant:
        raise NinfercError("the HF peer runs the bf16 model, but these params are stored quantised: "
                           + ", ".join(quant) + "; benchmark a bf16 artifact (--weights bf16) against the peer")
    out = []
    for name, spec in graph.params.items():
        start = 0
        for leaf in _leaves(spec):
            try:
                hf = hf_name(leaf.name, cfg)
            except (KeyError, ValueError):
                raise NinfercError(f"graph param {name}: part {leaf.name} has no HF checkpoint name") from None
            if tuple(leaf.shape[1:]) != tuple(spec.shape[1:]):
                raise NinfercError(f"graph param {name} {list(spec.shape)}: part {leaf.name} has shape "
                                   f"{list(leaf.shape)} (trailing dims differ)")
            stop = start + leaf.shape[0]
            shape = tuple(leaf.shape)
            if leaf.name.endswith(".gdn.conv"):  # nn.Conv1d depthwise weight [C, 1, W]
                shape = (shape[0], 1) + shape[1:]
            out.append(HFEntry(hf, leaf.name, name, (start, stop), shape, spec.dtype))
            start = stop
        if start != spec.shape[0]:
            raise NinfercError(f"graph param {name}: parts cover {start} rows of {spec.shape[0]}")
    return out


def hf_tensors_from_params(graph: Graph, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """HF checkpoint name -> numpy ``ml_dtypes.bfloat16`` array, from numpy graph-param arrays.

    Args:
        graph: the compiled graph (its params, fused or not, and ``meta["model"]``).
        params: graph param name -> numpy array of the param's shape: bf16 params as ``bfloat16`` or their
            bits as ``uint16``/``int16`` (viewed, bit-exact), fp32 params as ``float32`` (rounded to bf16:
            exact for values that came from bf16). A :class:`ninferc.ir.weights.GraphWeights` works.

    Returns:
        Checkpoint-named arrays in the checkpoint's shapes (views of ``params`` where the dtype allows).

    Raises:
        NinfercError: see :func:`hf_weight_map`; a missing param; a shape or dtype that does not fit.
    """
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    out, done = {}, {}
    for e in hf_weight_map(graph):
        if e.param not in done:
            if e.param not in params:
                raise NinfercError(f"graph param {e.param} is missing from the params given")
            arr = np.asarray(params[e.param])
            spec = graph.params[e.param]
            if tuple(arr.shape) != tuple(spec.shape):
                raise NinfercError(f"graph param {e.param}: array shape {list(arr.shape)} != spec {list(spec.shape)}")
            if arr.dtype == bf16:
                pass
            elif arr.dtype in (np.uint16, np.int16):
                arr = arr.view(bf16)
            elif arr.dtype in (np.float32, np.float64):
                arr = arr.astype(bf16)
            else:
                raise NinfercError(f"graph param {e.param}: dtype {arr.dtype} is neither bf16 bits nor a float")
            done[e.param] = arr
        out[e.hf_name] = done[e.param][e.rows[0]:e.rows[1]].reshape(e.hf_shape)
    return out


def hf_text_config_dict(cfg: ModelConfig) -> dict:
    """The HF ``Qwen3_5TextConfig`` fields (``config.json`` of a ``qwen3_5_text`` checkpoint) for ``cfg``.

    ``mtp_num_hidden_layers`` is given when the model has an MTP head (transformers ignores the head itself).
    ``partial_rotary_factor`` is given both inside ``rope_parameters`` (where the rotary embedding reads
    it) and at the top level (where ``Qwen3_5TextConfig.__post_init__`` defaults it to 0.25), as
    transformers' own ``save_pretrained`` writes it.
    """
    eos = list(cfg.eos_token_ids)
    mtp = {"mtp_num_hidden_layers": cfg.mtp_num_hidden_layers} if cfg.mtp_num_hidden_layers else {}
    return {
        **mtp,
        "model_type": HF_MODEL_TYPE,
        "architectures": [HF_MODEL_CLASS],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "layer_types": list(cfg.layer_types),
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": cfg.hidden_act,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "attention_bias": cfg.attention_bias,
        "partial_rotary_factor": cfg.partial_rotary_factor,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta,
                            "partial_rotary_factor": cfg.partial_rotary_factor},
        "linear_conv_kernel_dim": cfg.linear_conv_kernel_dim,
        "linear_key_head_dim": cfg.linear_key_head_dim,
        "linear_value_head_dim": cfg.linear_value_head_dim,
        "linear_num_key_heads": cfg.linear_num_key_heads,
        "linear_num_value_heads": cfg.linear_num_value_heads,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": (eos[0] if len(eos) == 1 else (eos or None)),
        "pad_token_id": cfg.pad_token_id,
        "use_cache": True,
    }


def peer_ratios(ours: dict, peer: dict) -> dict:
    """Ours / peer speed ratios matched by decode context and prompt length.

    Args:
        ours: a :func:`ninferc.bench.run_bench` result (``decode``: [{context, tok_s}], ``prefill``:
            [{prompt_tokens, tok_s, ttft_ms}]). peer: a :func:`run_hf_peer` result (same keys).

    Returns:
        ``{"decode": [{context, tok_s, peer_tok_s, ratio}], "prefill": [{prompt_tokens, tok_s, peer_tok_s,
        ratio, ttft_ms, peer_ttft_ms}]}`` — ``ratio`` = ours / peer (> 1: we are faster); entries present
        on one side only are left out.
    """
    pd = {d["context"]: d for d in peer.get("decode", [])}
    pp = {p["prompt_tokens"]: p for p in peer.get("prefill", [])}
    dec = [{"context": d["context"], "tok_s": d["tok_s"], "peer_tok_s": pd[d["context"]]["tok_s"],
            "ratio": d["tok_s"] / pd[d["context"]]["tok_s"]} for d in ours.get("decode", []) if d["context"] in pd]
    pre = [{"prompt_tokens": p["prompt_tokens"], "tok_s": p["tok_s"], "peer_tok_s": pp[p["prompt_tokens"]]["tok_s"],
            "ratio": p["tok_s"] / pp[p["prompt_tokens"]]["tok_s"], "ttft_ms": p.get("ttft_ms"),
            "peer_ttft_ms": pp[p["prompt_tokens"]].get("ttft_ms")}
           for p in ours.get("prefill", []) if p["prompt_tokens"] in pp]
    return {"decode": dec, "prefill": pre}


# ---- torch / transformers (imported lazily) --------------------------------------------------------
def _import_hf():
    """(torch, transformers, modeling_qwen3_5 module) or a NinfercError saying what is missing."""
    try:
        import torch
    except ImportError:
        raise NinfercError("the HF peer needs PyTorch (pip install torch); it is not installed") from None
    try:
        import transformers
    except ImportError:
        raise NinfercError("the HF peer needs transformers >= 5.2 (pip install 'transformers>=5.2'); "
                           "it is not installed") from None
    try:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as mod
    except ImportError as exc:
        raise NinfercError(f"transformers {transformers.__version__} has no Qwen3.5 model ({HF_MODEL_CLASS}, "
                           f"model_type {HF_MODEL_TYPE!r}; added in 5.2): {exc}") from None
    if not hasattr(mod, HF_MODEL_CLASS):
        raise NinfercError(f"transformers {transformers.__version__}: modeling_qwen3_5 has no {HF_MODEL_CLASS}")
    return torch, transformers, mod


def _param_to_torch(arr, spec: ParamSpec, torch):
    """One graph param as a bf16 torch tensor on the array's own device (a DLPack view for bf16 bits)."""
    if isinstance(arr, torch.Tensor):
        t = arr
    elif isinstance(arr, np.ndarray):
        a = np.ascontiguousarray(arr)
        if a.dtype.itemsize == 2 and a.dtype != np.float16:  # bf16 or its uint16 bits
            a = a.view(np.int16)
        t = torch.from_numpy(a)
    elif hasattr(arr, "__dlpack__"):  # CuPy (and any other DLPack producer)
        if str(arr.dtype) in ("uint16", "bfloat16"):
            arr = arr.view(np.int16)  # torch's DLPack import of uint16 is newer than its int16
        t = torch.from_dlpack(arr)
    else:
        raise NinfercError(f"graph param {spec.name}: cannot convert {type(arr).__name__} to a torch tensor")
    if tuple(t.shape) != tuple(spec.shape):
        raise NinfercError(f"graph param {spec.name}: array shape {list(t.shape)} != spec {list(spec.shape)}")
    if t.dtype in (torch.int16, getattr(torch, "uint16", torch.int16)):
        return t.view(torch.bfloat16)
    if t.dtype == torch.bfloat16:
        return t
    if t.is_floating_point():
        return t.to(torch.bfloat16)
    raise NinfercError(f"graph param {spec.name}: dtype {t.dtype} is neither bf16 bits nor a float")


def hf_torch_tensors(graph: Graph, params: Mapping[str, Any], *, device=None) -> dict:
    """HF checkpoint name -> ``torch.bfloat16`` tensor, zero-copy where possible.

    Args:
        graph: the compiled graph. params: graph param name -> array of the param's shape: CuPy arrays as
            the engine holds them (``Engine.params``: bf16 as uint16 bits, fp32 as float32), torch tensors,
            or numpy arrays (as :func:`hf_tensors_from_params` accepts).
        device: move every tensor there (e.g. ``"cuda"``); ``None`` keeps each on its array's device.

    Returns:
        bf16 tensors in the checkpoint's shapes. bf16 params are DLPack views of the engine's memory (a
        fused param's parts are row windows of it, contiguous); fp32 params are converted (small copies).
        The views keep the CuPy arrays alive.

    Raises:
        NinfercError: torch missing; see :func:`hf_weight_map`; a missing or misshapen param.
    """
    try:
        import torch
    except ImportError:
        raise NinfercError("the HF peer needs PyTorch (pip install torch); it is not installed") from None
    _sync_cupy()
    out, done = {}, {}
    for e in hf_weight_map(graph):
        if e.param not in done:
            if e.param not in params:
                raise NinfercError(f"graph param {e.param} is missing from the params given")
            done[e.param] = _param_to_torch(params[e.param], graph.params[e.param], torch)
        t = done[e.param][e.rows[0]:e.rows[1]].reshape(e.hf_shape)  # a view: row windows are contiguous
        out[e.hf_name] = t if device is None else t.to(device)
    return out


def _sync_cupy() -> None:
    """Finish pending CuPy work (weight uploads) before torch reads the memory; no-op without CuPy/GPU."""
    try:
        import cupy

        cupy.cuda.Device().synchronize()
    except Exception:  # noqa: BLE001 - no CuPy or no device: nothing to wait for
        pass


def hf_config(config: ModelConfig, *, attn_implementation: str = "sdpa"):
    """A ``transformers.Qwen3_5TextConfig`` for ``config`` (:func:`hf_text_config_dict`).

    Raises:
        NinfercError: torch / transformers missing or without Qwen3.5.
    """
    _import_hf()
    from transformers.models.qwen3_5 import configuration_qwen3_5 as cmod

    d = {k: v for k, v in hf_text_config_dict(config).items() if k != "model_type"}
    return getattr(cmod, HF_CONFIG_CLASS)(**d, attn_implementation=attn_implementation)


def _checkpoint_to_module_names(expected: Sequence[str], hf_tensors: Mapping[str, Any], cfg: ModelConfig,
                                tied_source: str | None) -> dict[str, str]:
    """Module state-dict key -> checkpoint name, by the text-model-relative suffix.

    The checkpoint names carry ``cfg.weight_prefix`` (``model.`` or ``model.language_model.``); the
    module's keys carry whatever prefix its text model sits under (``model.`` for ``Qwen3_5ForCausalLM``).
    """
    anchor = "embed_tokens.weight"
    mod_pre = next((k[:-len(anchor)] for k in expected if k.endswith(anchor)), None)
    if mod_pre is None:
        raise NinfercError(f"the HF module has no *{anchor}; its keys: {sorted(expected)[:8]} ...")
    ck_rel = {}
    for name in hf_tensors:
        if name.startswith(cfg.weight_prefix):
            ck_rel[("text", name[len(cfg.weight_prefix):])] = name
        else:
            ck_rel[("top", name)] = name
    out, missing = {}, []
    for key in expected:
        rel = ("text", key[len(mod_pre):]) if key.startswith(mod_pre) else ("top", key)
        if rel in ck_rel:
            out[key] = ck_rel[rel]
        elif key == "lm_head.weight" and tied_source is not None:
            out[key] = tied_source
        else:
            missing.append(key)
    unused = sorted(set(ck_rel.values()) - set(out.values()))
    if missing or unused:
        raise NinfercError(
            f"the weights do not match {HF_MODEL_CLASS}'s state dict: "
            f"{len(missing)} module keys without a tensor {missing[:20]}"
            f"{' ...' if len(missing) > 20 else ''}; {len(unused)} tensors the module does not take "
            f"{unused[:20]}{' ...' if len(unused) > 20 else ''}")
    return out


def _materialise_buffers(model, device, torch) -> None:
    """Recompute the non-persistent buffers left on ``meta`` (the rotary ``inv_freq``) on ``device``."""
    left = []
    for mname, m in model.named_modules():
        meta = [n for n, b in m.named_buffers(recurse=False) if b is not None and b.is_meta]
        if not meta:
            continue
        if type(m).__name__.endswith("RotaryEmbedding") and hasattr(m, "config"):
            try:
                fresh = type(m)(config=m.config)  # on the CPU, like from_pretrained's own init of inv_freq
            except Exception as exc:  # noqa: BLE001 - a transformers release with another signature
                raise NinfercError(f"{HF_MODEL_CLASS}: cannot recompute the buffers {meta} of {mname} "
                                   f"({type(m).__name__}): {exc}") from None
            for n in meta:
                m._buffers[n] = fresh._buffers[n].to(device)
            m.attention_scaling = getattr(fresh, "attention_scaling", getattr(m, "attention_scaling", 1.0))
        else:
            left += [f"{mname}.{n}" for n in meta]
    if left:
        raise NinfercError(f"{HF_MODEL_CLASS}: buffers left on the meta device with no known initialiser: {left}")


def build_hf_model(config: ModelConfig, hf_tensors: Mapping[str, Any], *, device="cuda",
                   attn_implementation: str = "sdpa", dtype: str = "bfloat16"):
    """``transformers.Qwen3_5ForCausalLM`` for ``config`` holding ``hf_tensors`` (no copy where they are
    already bf16 on ``device``), in eval mode, gradients off.

    Args:
        config: the model configuration. hf_tensors: :func:`hf_torch_tensors` output (checkpoint names).
        device: where the model runs (tensors elsewhere are copied there).
        attn_implementation: transformers' attention backend for the full-attention layers
            (``"sdpa"``, ``"eager"``, ``"flash_attention_2"`` if installed).
        dtype: ``"bfloat16"`` (the peer: HF's bf16 inference) or ``"float32"`` (copies the weights up:
            the goldens' own setting, used by tests to check the mapping sharply).

    Raises:
        NinfercError: torch / transformers missing or without Qwen3.5; the tensors do not match the
            module's state dict (lists the unmatched names on both sides).
    """
    torch, _, mod = _import_hf()
    if dtype not in ("bfloat16", "float32"):
        raise NinfercError(f"dtype must be 'bfloat16' or 'float32', found {dtype!r}")
    want = getattr(torch, dtype)
    hcfg = hf_config(config, attn_implementation=attn_implementation)
    with torch.device("meta"):
        model = getattr(mod, HF_MODEL_CLASS)(hcfg)
    expected = list(model.state_dict().keys())
    tied = (config.weight_prefix + "embed_tokens.weight") if config.tie_word_embeddings else None
    names = _checkpoint_to_module_names(expected, hf_tensors, config, tied)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:  # "cuda" != "cuda:0" as torch compares devices
        dev = torch.device("cuda", torch.cuda.current_device())
    sd = {}
    for key, ck in names.items():
        t = hf_tensors[ck]
        if not isinstance(t, torch.Tensor):
            raise NinfercError(f"{ck}: expected a torch tensor (use hf_torch_tensors), got {type(t).__name__}")
        if t.dtype != want:
            t = t.to(want)
        sd[key] = t if t.device == dev else t.to(dev)
    model.load_state_dict(sd, strict=True, assign=True)
    _materialise_buffers(model, dev, torch)
    model.eval()
    model.requires_grad_(False)
    return model


def _resolved_impl(fn) -> tuple[bool | None, str]:
    """(uses a package kernel?, its qualified name) for one ``use_kernel_func_from_hub_with_fallback``
    wrapper: the decorator's closure holds ``implementation`` and ``is_new_implementation`` (its
    ``__module__``/``__name__`` are copied from the torch fallback, so they cannot tell)."""
    seen = 0
    while fn is not None and seen < 8:
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
        if code is not None and cells:
            free = dict(zip(code.co_freevars, cells))
            if "is_new_implementation" in free:
                new = bool(free["is_new_implementation"].cell_contents)
                impl = free["implementation"].cell_contents if "implementation" in free else None
                name = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', '?')}" if impl else "?"
                return new, (name if new else "torch reference")
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return None, "unknown"


def fast_path_report() -> dict:
    """Whether ``modeling_qwen3_5`` runs its Gated DeltaNet through the optimised kernels.

    transformers >= 5.15 resolves each of :data:`FAST_PATH_FUNCTIONS` at import time to the
    flash-linear-attention / causal-conv1d kernel when the package is importable, else to its torch
    reference (``use_kernel_func_from_hub_with_fallback``); older 5.x releases import them at module level
    and expose ``is_fast_path_available``. Both are read here.

    Returns:
        ``{"fast_path": bool | None, "fla": bool | None, "causal_conv1d": bool | None, "kernels": {function:
        kernel qualified name | "torch reference" | "unknown"}}``: ``fla`` (both delta-rule functions) and
        ``causal_conv1d`` (both conv functions) say which package kernels are in use, ``fast_path`` is True
        only if all four are; None where a function could not be read.

    Raises:
        NinfercError: torch / transformers missing or without Qwen3.5.
    """
    _, _, mod = _import_hf()
    kernels: dict[str, str] = {}
    flags: dict[str, bool | None] = {}
    if hasattr(mod, "is_fast_path_available"):
        for n in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                  "fused_recurrent_gated_delta_rule"):
            f = getattr(mod, n, None)
            flags[n] = f is not None
            kernels[n] = f"{f.__module__}.{f.__qualname__}" if f is not None else "torch reference"
    else:
        for attr in FAST_PATH_FUNCTIONS:
            flags[attr], kernels[attr] = _resolved_impl(getattr(mod, attr, None))

    def verdict(vals):
        vals = list(vals)
        return None if any(v is None for v in vals) else all(vals)

    return {"fast_path": verdict(flags.values()),
            "fla": verdict(v for k, v in flags.items() if "delta_rule" in k),
            "causal_conv1d": verdict(v for k, v in flags.items() if "conv1d" in k),
            "kernels": kernels}


def _forward_kwargs(model, keep: int) -> dict:
    import inspect

    params = inspect.signature(model.forward).parameters
    if "logits_to_keep" in params:
        return {"logits_to_keep": keep}
    if "num_logits_to_keep" in params:
        return {"num_logits_to_keep": keep}
    return {}


def _greedy_step(model, tok, cache, fwd: dict):
    """One decode step: token ids [1, 1] through ``cache`` -> (greedy next ids [1, 1], the cache)."""
    out = model(input_ids=tok, past_key_values=cache, use_cache=True, **fwd)
    return out.logits[:, -1:].argmax(-1), out.past_key_values


def _free(torch, device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def hf_logits(config: ModelConfig, hf_tensors: Mapping[str, Any], ids: Sequence[int], *, device="cuda",
              attn_implementation: str = "sdpa", dtype: str = "bfloat16") -> np.ndarray:
    """Teacher-forced logits of HF transformers' forward over ``ids`` (one sequence, no cache), in bf16
    (the peer) unless ``dtype="float32"``.

    Args:
        config, hf_tensors, device, attn_implementation, dtype: as :func:`build_hf_model`.
        ids: token ids, length T >= 1.

    Returns:
        float32 numpy array [T, vocab]: row t predicts the token after ``ids[t]`` (in bf16 HF's LM head
        output is bf16, converted exactly).

    Raises:
        NinfercError: see :func:`build_hf_model`; an empty ``ids``.
    """
    torch, _, _ = _import_hf()
    if len(ids) < 1:
        raise NinfercError("hf_logits needs at least one token id")
    model = build_hf_model(config, hf_tensors, device=device, attn_implementation=attn_implementation, dtype=dtype)
    try:
        with torch.inference_mode():
            x = torch.tensor([list(map(int, ids))], dtype=torch.long, device=device)
            out = model(input_ids=x, use_cache=False, **_forward_kwargs(model, 0))
            logits = out.logits[0].float().cpu().numpy()
    finally:
        del model
        _free(torch, device)
    return logits


def run_hf_peer(config: ModelConfig, hf_tensors: Mapping[str, Any], *, prompt_tokens: Sequence[int] = (512, 8192),
                decode_tokens: int = 64, log: Callable[[str], None] = print, seed: int = 0, device="cuda",
                attn_implementation: str = "sdpa", warmup_tokens: int | None = None) -> dict:
    """Prefill and greedy-decode speed of HF transformers on the same model and weights.

    Method, mirroring :func:`ninferc.bench.run_bench`, per prompt length L (one sequence, batch 1):
    a warm-up prefill of ``warmup_tokens`` (default: all L) random tokens plus two decode steps on a
    fresh cache; then one forward of L random token ids with ``use_cache=True`` and only
    the last row's logits (``logits_to_keep=1``, as ``generate`` does), timed between CUDA
    synchronisations -> ``tok_s`` = L / seconds; ``ttft_ms`` adds the greedy argmax and the read of the
    token id. Decode: ``decode_tokens`` steps of one token each through the returned cache, each timed
    from the forward's start to the host read of the next greedy token id (the same per-token work as
    ours: model, sampling, one 4-byte read); the median latency after dropping the first 3 steps
    (when more than 8) gives ``tok_s`` at context L. All under ``torch.inference_mode()``, bf16.

    The warm-up is the full prompt by default (ours warms with 64 tokens): flash-linear-attention's
    Triton kernels compile and autotune on first use of a shape, and the peer is measured at its steady
    state, not its JIT. ``warmup_tokens=64`` reproduces our warm-up exactly.

    Args:
        config: the model configuration. hf_tensors: :func:`hf_torch_tensors` output.
        prompt_tokens: prompt lengths L (also the decode contexts). decode_tokens: steps timed per L.
        log: progress lines. seed: RNG seed of the random prompts. device: ``"cuda"`` (or ``"cpu"`` to
        test the code path). attn_implementation: see :func:`build_hf_model`.
        warmup_tokens: length of the untimed warm-up prefill (capped at L; None: L).

    Returns:
        ``{"name": "hf-transformers", "version", "torch", "device", "fast_path", "fla", "causal_conv1d",
        "fast_path_kernels",
        "attn_implementation", "warmup_tokens", "decode": [{"context", "tok_s", "median_ms", "p90_ms"}],
        "prefill": [{"prompt_tokens", "tok_s", "ttft_ms", "prefill_s"}], "peak_memory_bytes"}``
        (``peak_memory_bytes``: torch's allocator peak during the runs on CUDA, i.e. activations, caches and
        the bf16 copies of our fp32 small params; the shared weights are CuPy's and not counted).
        ``fast_path``, ``fla``, ``causal_conv1d`` are :func:`fast_path_report`'s verdicts (``fla`` False: the
        delta rule ran through transformers' torch reference code). CUDA memory of the model and its caches is released before
        returning (the weight views stay owned by ``hf_tensors``' arrays).

    Raises:
        NinfercError: torch / transformers missing or without Qwen3.5, no CUDA device for ``device``
            ``"cuda"``, bad lengths, or the weights do not match (see :func:`build_hf_model`).
    """
    torch, transformers, _ = _import_hf()
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise NinfercError(f"torch {torch.__version__} sees no CUDA device: the HF peer cannot run on the GPU")
    lens = [int(x) for x in prompt_tokens]
    if not lens or min(lens) < 1 or decode_tokens < 1 or (warmup_tokens is not None and warmup_tokens < 1):
        raise NinfercError(f"run_hf_peer needs positive prompt lengths, decode steps and warm-up tokens, found "
                           f"{lens}, {decode_tokens}, {warmup_tokens}")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    fp = fast_path_report()
    model = build_hf_model(config, hf_tensors, device=dev, attn_implementation=attn_implementation)
    attn = model.config._attn_implementation
    log(f"hf peer: transformers {transformers.__version__}, torch {torch.__version__}, attention {attn}, "
        f"flash-linear-attention {fp['fla']}, causal-conv1d {fp['causal_conv1d']} "
        f"({', '.join(f'{k}: {v}' for k, v in fp['kernels'].items())})")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    fwd = _forward_kwargs(model, 1)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    V = config.vocab_size  # noqa: N806
    res: dict = {"name": _PEER_NAME, "version": transformers.__version__, "torch": torch.__version__,
                 "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev),
                 "fast_path": fp["fast_path"], "fla": fp["fla"], "causal_conv1d": fp["causal_conv1d"],
                 "fast_path_kernels": fp["kernels"], "attn_implementation": attn,
                 "warmup_tokens": warmup_tokens, "decode": [], "prefill": []}
    try:
        with torch.inference_mode():
            for L in lens:  # noqa: N806
                ids = torch.randint(0, V, (1, L), generator=gen).to(dev)
                # warm-up (untimed): a prefill and two decode steps on their own cache
                w = model(input_ids=ids[:, :min(L, warmup_tokens or L)], use_cache=True, **fwd)
                tok, cache = w.logits[:, -1:].argmax(-1), w.past_key_values
                for _ in range(2):
                    tok, cache = _greedy_step(model, tok, cache, fwd)
                int(tok.item())
                del w, cache, tok
                sync()
                t0 = time.perf_counter()
                out = model(input_ids=ids, use_cache=True, **fwd)
                sync()
                t1 = time.perf_counter()
                tok = out.logits[:, -1:].argmax(-1)
                int(tok.item())
                ttft = time.perf_counter() - t0
                cache = out.past_key_values
                del out
                res["prefill"].append({"prompt_tokens": L, "tok_s": L / (t1 - t0), "ttft_ms": ttft * 1e3,
                                       "prefill_s": t1 - t0})
                lat = []
                for _ in range(decode_tokens):
                    t = time.perf_counter()
                    tok, cache = _greedy_step(model, tok, cache, fwd)
                    int(tok.item())
                    lat.append(time.perf_counter() - t)
                lat = lat[3:] if len(lat) > 8 else lat
                med = float(np.median(lat))
                res["decode"].append({"context": L, "tok_s": 1.0 / med, "median_ms": med * 1e3,
                                      "p90_ms": float(np.percentile(lat, 90)) * 1e3})
                log(f"hf peer, prompt {L}: prefill {L / (t1 - t0):,.0f} tok/s (TTFT {ttft * 1e3:.0f} ms); "
                    f"decode {1 / med:.2f} tok/s (median {med * 1e3:.2f} ms)")
                del cache, tok, ids
                sync()
        if dev.type == "cuda":
            res["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(dev))
    finally:
        del model
        _free(torch, dev)
    return res


def run_hf_peer_on_engine(engine, **kw) -> dict:
    """:func:`run_hf_peer` on the weights an :class:`ninferc.runtime.engine.Engine` holds (its graph, config
    and uploaded ``params``, shared through DLPack); ``kw`` as :func:`run_hf_peer`.

    Raises:
        NinfercError: see :func:`hf_torch_tensors` and :func:`run_hf_peer`.
    """
    tensors = hf_torch_tensors(engine.graph, engine.params)
    try:
        return run_hf_peer(engine.config, tensors, **kw)
    finally:
        del tensors
        gc.collect()
