"""Graph builder for the Qwen3.5 / 3.6 / 3.8 hybrid family, driven by :class:`ModelConfig`.

Mirrors `Qwen3_5ForCausalLM` (transformers 5.17 `modeling_qwen3_5.py`): embedding; per layer
``x += mixer(RMSNorm(x))`` with the mixer a Gated DeltaNet (``linear_attention``) or gated full attention
(``full_attention``), then ``x += MLP(RMSNorm(x))``; final RMSNorm; LM head.

IR parameter names (and the HF checkpoint names they map to, under ``cfg.weight_prefix``):

======================  ===============================================
``embed``                ``embed_tokens.weight``
``L{i}.input_norm``      ``layers.{i}.input_layernorm.weight``
``L{i}.post_norm``       ``layers.{i}.post_attention_layernorm.weight``
``L{i}.attn.{q,k,v,o}``  ``layers.{i}.self_attn.{q,k,v,o}_proj.weight``
``L{i}.attn.{q,k}_norm`` ``layers.{i}.self_attn.{q,k}_norm.weight``
``L{i}.gdn.in_qkv``      ``layers.{i}.linear_attn.in_proj_qkv.weight``
``L{i}.gdn.in_{z,b,a}``  ``layers.{i}.linear_attn.in_proj_{z,b,a}.weight``
``L{i}.gdn.conv``        ``layers.{i}.linear_attn.conv1d.weight`` ([C, 1, W] squeezed to [C, W])
``L{i}.gdn.A_log``       ``layers.{i}.linear_attn.A_log``
``L{i}.gdn.dt_bias``     ``layers.{i}.linear_attn.dt_bias``
``L{i}.gdn.norm``        ``layers.{i}.linear_attn.norm.weight``
``L{i}.gdn.out``         ``layers.{i}.linear_attn.out_proj.weight``
``L{i}.mlp.{gate,up,down}`` ``layers.{i}.mlp.{gate,up,down}_proj.weight``
``final_norm``           ``norm.weight``
``lm_head``              ``lm_head.weight`` (top level; absent when tied)
======================  ===============================================

The multi-token-prediction head (config ``mtp_num_hidden_layers`` > 0; :func:`mtp_param_specs`) is stored at
the top level, outside ``weight_prefix`` (vLLM ``qwen3_5_mtp.py``, the fixture's ``model-mtp.safetensors``):

===============================  ===============================================
``mtp.fc``                        ``mtp.fc.weight`` [H, 2H] (input: [embedding | hidden])
``mtp.pre_fc_norm_embedding``     ``mtp.pre_fc_norm_embedding.weight``
``mtp.pre_fc_norm_hidden``        ``mtp.pre_fc_norm_hidden.weight``
``mtp.L{j}.<as a layer above>``   ``mtp.layers.{j}.<as a layer above>`` (full attention + MLP)
``mtp.norm``                      ``mtp.norm.weight``
===============================  ===============================================
"""

from __future__ import annotations

from ninferc.ir.config import FULL_ATTENTION, ModelConfig
from ninferc.ir.graph import Graph, Op, ParamSpec, StateSpec, TensorSpec
from ninferc.ir.ops import infer

#: dtype the KV cache, conv window and recurrent state are kept in (per sequence)
KV_DTYPE = "bf16"
CONV_STATE_DTYPE = "f32"
RECURRENT_STATE_DTYPE = "f32"


def _attention_layer_specs(cfg: ModelConfig, L: str, p, matrix_group: str | None = None) -> None:
    """The params of one full-attention decoder layer named ``L`` (``L3``, ``mtp.L0``) through ``p``."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    hd, Hq, Hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    p(f"{L}.input_norm", (H,), "norm")
    p(f"{L}.post_norm", (H,), "norm")
    p(f"{L}.attn.q", (Hq * hd * 2, H), matrix_group or "attention")
    p(f"{L}.attn.k", (Hkv * hd, H), matrix_group or "attention")
    p(f"{L}.attn.v", (Hkv * hd, H), matrix_group or "attention")
    p(f"{L}.attn.o", (H, Hq * hd), matrix_group or "attention")
    p(f"{L}.attn.q_norm", (hd,), "norm")
    p(f"{L}.attn.k_norm", (hd,), "norm")
    p(f"{L}.mlp.gate", (I, H), matrix_group or "mlp")
    p(f"{L}.mlp.up", (I, H), matrix_group or "mlp")
    p(f"{L}.mlp.down", (H, I), matrix_group or "mlp")


def param_specs(cfg: ModelConfig) -> dict[str, ParamSpec]:
    """Every weight of the main model the config implies: IR name -> :class:`ParamSpec` (shape, stored dtype,
    group). The MTP head's are :func:`mtp_param_specs`.

    A_log and dt_bias are stored in the checkpoint as bf16 like everything else (the loader accepts
    fp32 too); the rest are bf16.
    """
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    out: dict[str, ParamSpec] = {}

    def p(name, shape, group, dtype="bf16"):
        out[name] = ParamSpec(name, tuple(shape), dtype, group)

    p("embed", (V, H), "embedding")
    for i, t in enumerate(cfg.layer_types):
        if t == FULL_ATTENTION:
            _attention_layer_specs(cfg, f"L{i}", p)
            continue
        p(f"L{i}.input_norm", (H,), "norm")
        p(f"L{i}.post_norm", (H,), "norm")
        Hv = cfg.linear_num_value_heads
        p(f"L{i}.gdn.in_qkv", (cfg.gdn_conv_dim, H), "gdn")
        p(f"L{i}.gdn.in_z", (cfg.gdn_value_dim, H), "gdn")
        p(f"L{i}.gdn.in_b", (Hv, H), "gdn")
        p(f"L{i}.gdn.in_a", (Hv, H), "gdn")
        p(f"L{i}.gdn.conv", (cfg.gdn_conv_dim, cfg.linear_conv_kernel_dim), "gdn")
        p(f"L{i}.gdn.A_log", (Hv,), "gdn")
        p(f"L{i}.gdn.dt_bias", (Hv,), "gdn")
        p(f"L{i}.gdn.norm", (cfg.linear_value_head_dim,), "norm")
        p(f"L{i}.gdn.out", (H, cfg.gdn_value_dim), "gdn")
        p(f"L{i}.mlp.gate", (I, H), "mlp")
        p(f"L{i}.mlp.up", (I, H), "mlp")
        p(f"L{i}.mlp.down", (H, I), "mlp")
    p("final_norm", (H,), "norm")
    if not cfg.tie_word_embeddings:
        p("lm_head", (V, H), "lm_head")
    return out


def mtp_param_specs(cfg: ModelConfig) -> dict[str, ParamSpec]:
    """The MTP head's weights (empty when ``cfg.mtp_num_hidden_layers`` is 0): ``mtp.fc`` [H, 2H], the two pre-fc
    norms, ``mtp_num_hidden_layers`` full-attention decoder layers ``mtp.L{j}.*`` (matrices in group ``mtp``, the
    weight-format recipes' class), ``mtp.norm``. The embedding and LM head are the main model's."""
    H = cfg.hidden_size
    out: dict[str, ParamSpec] = {}
    if not cfg.mtp_num_hidden_layers:
        return out

    def p(name, shape, group, dtype="bf16"):
        out[name] = ParamSpec(name, tuple(shape), dtype, group)

    p("mtp.fc", (H, 2 * H), "mtp")
    p("mtp.pre_fc_norm_embedding", (H,), "norm")
    p("mtp.pre_fc_norm_hidden", (H,), "norm")
    for j in range(cfg.mtp_num_hidden_layers):
        _attention_layer_specs(cfg, f"mtp.L{j}", p, matrix_group="mtp")
    p("mtp.norm", (H,), "norm")
    return out


_HF_SUFFIX = {
    "input_norm": "input_layernorm.weight",
    "post_norm": "post_attention_layernorm.weight",
    "attn.q": "self_attn.q_proj.weight",
    "attn.k": "self_attn.k_proj.weight",
    "attn.v": "self_attn.v_proj.weight",
    "attn.o": "self_attn.o_proj.weight",
    "attn.q_norm": "self_attn.q_norm.weight",
    "attn.k_norm": "self_attn.k_norm.weight",
    "gdn.in_qkv": "linear_attn.in_proj_qkv.weight",
    "gdn.in_z": "linear_attn.in_proj_z.weight",
    "gdn.in_b": "linear_attn.in_proj_b.weight",
    "gdn.in_a": "linear_attn.in_proj_a.weight",
    "gdn.conv": "linear_attn.conv1d.weight",
    "gdn.A_log": "linear_attn.A_log",
    "gdn.dt_bias": "linear_attn.dt_bias",
    "gdn.norm": "linear_attn.norm.weight",
    "gdn.out": "linear_attn.out_proj.weight",
    "mlp.gate": "mlp.gate_proj.weight",
    "mlp.up": "mlp.up_proj.weight",
    "mlp.down": "mlp.down_proj.weight",
}


def hf_name(ir_name: str, cfg: ModelConfig) -> str:
    """The checkpoint tensor name of IR parameter ``ir_name`` (see module docstring)."""
    if ir_name.startswith("mtp."):
        rest = ir_name[4:]
        if rest in ("fc", "pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            return f"mtp.{rest}.weight"
        layer, rest = rest.split(".", 1)
        return f"mtp.layers.{int(layer[1:])}.{_HF_SUFFIX[rest]}"
    pre = cfg.weight_prefix
    if ir_name == "embed":
        return pre + "embed_tokens.weight"
    if ir_name == "final_norm":
        return pre + "norm.weight"
    if ir_name == "lm_head":
        return "lm_head.weight"
    layer, rest = ir_name.split(".", 1)
    return f"{pre}layers.{int(layer[1:])}.{_HF_SUFFIX[rest]}"


def state_specs(cfg: ModelConfig) -> dict[str, StateSpec]:
    """The per-sequence state inventory: ``L{i}.kv`` (per context token: [2, Hkv, head_dim] in
    :data:`KV_DTYPE`), ``L{i}.conv`` ([conv_dim, width-1] fp32) and ``L{i}.recurrent`` ([Hv, dk, dv] fp32)."""
    out = {}
    for i, t in enumerate(cfg.layer_types):
        if t == FULL_ATTENTION:
            out[f"L{i}.kv"] = StateSpec(f"L{i}.kv", i, "kv", (2, cfg.num_key_value_heads, cfg.head_dim), KV_DTYPE)
        else:
            out[f"L{i}.conv"] = StateSpec(
                f"L{i}.conv", i, "conv", (cfg.gdn_conv_dim, cfg.linear_conv_kernel_dim - 1), CONV_STATE_DTYPE
            )
            out[f"L{i}.recurrent"] = StateSpec(
                f"L{i}.recurrent", i, "recurrent",
                (cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim),
                RECURRENT_STATE_DTYPE,
            )
    return out


class _Builder:
    def __init__(self, cfg: ModelConfig, lm_rows: str):
        self.cfg, self.g, self.lm_rows = cfg, Graph(), lm_rows

    def op(self, name, kind, inputs, *, params=None, attrs=None, states=None, layer=-1, n_out=1, out_names=None):
        outs = tuple(out_names or ([name] if n_out == 1 else [f"{name}.{j}" for j in range(n_out)]))
        o = Op(name, kind, tuple(inputs), outs, dict(params or {}), dict(attrs or {}), dict(states or {}), layer)
        specs = [TensorSpec(n, s, dt) for n, (s, dt) in zip(outs, infer(self.g, o))]
        self.g.add_op(o, specs)
        return outs[0] if n_out == 1 else outs

    def build(self) -> Graph:
        """Build the whole graph (params, states, inputs, layers, head)."""
        cfg, g = self.cfg, self.g
        g.meta = {"model": cfg.to_dict(), "passes": []}
        for spec in param_specs(cfg).values():
            g.add_param(spec)
        for spec in state_specs(cfg).values():
            g.add_state(spec)
        tokens = g.add_input(TensorSpec("tokens", ("T",), "i32"))
        positions = g.add_input(TensorSpec("positions", ("T",), "i32"))
        eps = cfg.rms_norm_eps
        x = self.op("embed", "Embedding", [tokens], params={"weight": "embed"})
        for i, t in enumerate(cfg.layer_types):
            x = self.decoder_layer(i, f"L{i}", t, x, positions)
        n = self.op("final_norm", "RMSNorm", [x], params={"weight": "final_norm"},
                    attrs={"eps": eps, "unit_offset": True})
        head = "embed" if cfg.tie_word_embeddings else "lm_head"
        logits = self.op("lm_head", "LMHead", [n], params={"weight": head}, attrs={"rows": self.lm_rows},
                         out_names=["logits"])
        g.outputs = (logits,)
        return g

    def decoder_layer(self, i: int, L: str, kind: str, x: str, positions: str) -> str:
        """``x += mixer(RMSNorm(x)); x += MLP(RMSNorm(x))`` for layer ``L`` (``L{i}`` or ``mtp.L{j}``) whose mixer is
        ``kind`` (full attention or GDN); returns the new residual stream tensor."""
        eps = self.cfg.rms_norm_eps
        n = self.op(f"{L}.input_norm", "RMSNorm", [x], params={"weight": f"{L}.input_norm"},
                    attrs={"eps": eps, "unit_offset": True}, layer=i)
        d = self.attention(i, n, positions, L) if kind == FULL_ATTENTION else self.gdn(i, n)
        x = self.op(f"{L}.attn_residual", "ResidualAdd", [x, d], layer=i)
        n = self.op(f"{L}.post_norm", "RMSNorm", [x], params={"weight": f"{L}.post_norm"},
                    attrs={"eps": eps, "unit_offset": True}, layer=i)
        gt = self.op(f"{L}.mlp.gate", "Linear", [n], params={"weight": f"{L}.mlp.gate"}, layer=i)
        up = self.op(f"{L}.mlp.up", "Linear", [n], params={"weight": f"{L}.mlp.up"}, layer=i)
        s = self.op(f"{L}.mlp.swiglu", "SwiGLU", [gt, up], layer=i)
        d = self.op(f"{L}.mlp.down", "Linear", [s], params={"weight": f"{L}.mlp.down"}, layer=i)
        return self.op(f"{L}.mlp_residual", "ResidualAdd", [x, d], layer=i)

    def build_mtp(self) -> Graph:
        """The MTP head's graph (see :func:`build_mtp_graph`)."""
        cfg, g = self.cfg, self.g
        g.meta = {"model": cfg.to_dict(), "passes": [], "mtp": True}
        head = "embed" if cfg.tie_word_embeddings else "lm_head"
        main = param_specs(cfg)
        for name in ("embed", head):
            g.add_param(main[name])
        for spec in mtp_param_specs(cfg).values():
            g.add_param(spec)
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        n_layers = cfg.mtp_num_hidden_layers
        base = cfg.num_hidden_layers  # the MTP layers' indices follow the model's
        for j in range(n_layers):
            g.add_state(StateSpec(f"mtp.L{j}.kv", base + j, "kv", (2, cfg.num_key_value_heads, cfg.head_dim),
                                  KV_DTYPE))
        tokens = g.add_input(TensorSpec("tokens", ("T",), "i32"))
        positions = g.add_input(TensorSpec("positions", ("T",), "i32"))
        hidden = g.add_input(TensorSpec("hidden", ("T", H), "f32"))
        e = self.op("mtp.embed", "Embedding", [tokens], params={"weight": "embed"})
        en = self.op("mtp.pre_fc_norm_embedding", "RMSNorm", [e], params={"weight": "mtp.pre_fc_norm_embedding"},
                     attrs={"eps": eps, "unit_offset": True})
        hn = self.op("mtp.pre_fc_norm_hidden", "RMSNorm", [hidden], params={"weight": "mtp.pre_fc_norm_hidden"},
                     attrs={"eps": eps, "unit_offset": True})
        cat = self.op("mtp.concat", "Concat", [en, hn])
        x = self.op("mtp.fc", "Linear", [cat], params={"weight": "mtp.fc"})
        for j in range(n_layers):
            x = self.decoder_layer(base + j, f"mtp.L{j}", FULL_ATTENTION, x, positions)
        o = self.op("mtp.norm", "RMSNorm", [x], params={"weight": "mtp.norm"}, attrs={"eps": eps, "unit_offset": True},
                    out_names=["mtp_hidden"])
        logits = self.op("mtp.lm_head", "LMHead", [o], params={"weight": head}, attrs={"rows": self.lm_rows},
                         out_names=["logits"])
        g.outputs = (logits, o)
        return g

    def attention(self, i: int, n: str, positions: str, layer_name: str | None = None) -> str:
        """Ops of one gated full-attention mixer of layer ``layer_name`` (default ``L{i}``; ``mtp.L0`` for the MTP
        head's); returns its o_proj output tensor."""
        prefix = layer_name or f"L{i}"
        cfg, L = self.cfg, f"{prefix}.attn"
        hd, Hq, Hkv, eps = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rms_norm_eps
        qg = self.op(f"{L}.q", "Linear", [n], params={"weight": f"{L}.q"}, layer=i)
        k = self.op(f"{L}.k", "Linear", [n], params={"weight": f"{L}.k"}, layer=i)
        v = self.op(f"{L}.v", "Linear", [n], params={"weight": f"{L}.v"}, layer=i)
        # q_proj rows are per head [query_h (hd) | gate_h (hd)] (HF: view(..., -1, 2*hd).chunk(2, -1))
        q = self.op(f"{L}.q_view", "View", [qg], attrs={"shape": (Hq, 2 * hd), "inner": (0, hd)}, layer=i)
        gate = self.op(f"{L}.gate_view", "View", [qg], attrs={"shape": (Hq, 2 * hd), "inner": (hd, 2 * hd)}, layer=i)
        kh = self.op(f"{L}.k_view", "View", [k], attrs={"shape": (Hkv, hd)}, layer=i)
        vh = self.op(f"{L}.v_view", "View", [v], attrs={"shape": (Hkv, hd)}, layer=i)
        qn = self.op(f"{L}.q_norm", "RMSNorm", [q], params={"weight": f"{L}.q_norm"},
                     attrs={"eps": eps, "unit_offset": True}, layer=i)
        kn = self.op(f"{L}.k_norm", "RMSNorm", [kh], params={"weight": f"{L}.k_norm"},
                     attrs={"eps": eps, "unit_offset": True}, layer=i)
        rope = {"rotary_dim": cfg.rotary_dim, "theta": cfg.rope_theta}
        qr = self.op(f"{L}.q_rope", "PartialRoPE", [qn, positions], attrs=rope, layer=i)
        kr = self.op(f"{L}.k_rope", "PartialRoPE", [kn, positions], attrs=rope, layer=i)
        a = self.op(f"{L}.attention", "GatedAttention", [qr, kr, vh, gate],
                    attrs={"scale": hd ** -0.5, "groups": cfg.attn_groups}, states={"kv": f"{prefix}.kv"}, layer=i)
        return self.op(f"{L}.o", "Linear", [a], params={"weight": f"{L}.o"}, layer=i)

    def gdn(self, i: int, n: str) -> str:
        """Ops of one Gated DeltaNet mixer; returns its out_proj output tensor."""
        cfg, L = self.cfg, f"L{i}.gdn"
        Hk, Hv, dk, dv = (cfg.linear_num_key_heads, cfg.linear_num_value_heads,
                          cfg.linear_key_head_dim, cfg.linear_value_head_dim)
        kd = cfg.gdn_key_dim
        qkv = self.op(f"{L}.in_qkv", "Linear", [n], params={"weight": f"{L}.in_qkv"}, layer=i)
        z = self.op(f"{L}.in_z", "Linear", [n], params={"weight": f"{L}.in_z"}, layer=i)
        b = self.op(f"{L}.in_b", "Linear", [n], params={"weight": f"{L}.in_b"}, layer=i)
        a = self.op(f"{L}.in_a", "Linear", [n], params={"weight": f"{L}.in_a"}, layer=i)
        c = self.op(f"{L}.conv", "CausalConv1d", [qkv], params={"weight": f"{L}.conv"},
                    attrs={"width": cfg.linear_conv_kernel_dim, "activation": "silu"},
                    states={"conv": f"L{i}.conv"}, layer=i)
        q = self.op(f"{L}.q_view", "View", [c], attrs={"start": 0, "stop": kd, "shape": (Hk, dk)}, layer=i)
        k = self.op(f"{L}.k_view", "View", [c], attrs={"start": kd, "stop": 2 * kd, "shape": (Hk, dk)}, layer=i)
        v = self.op(f"{L}.v_view", "View", [c], attrs={"start": 2 * kd, "stop": cfg.gdn_conv_dim, "shape": (Hv, dv)},
                    layer=i)
        qn = self.op(f"{L}.q_l2norm", "L2Norm", [q], attrs={"eps": 1e-6}, layer=i)
        kn = self.op(f"{L}.k_l2norm", "L2Norm", [k], attrs={"eps": 1e-6}, layer=i)
        gg, beta = self.op(f"{L}.gating", "GDNGating", [a, b],
                           params={"A_log": f"{L}.A_log", "dt_bias": f"{L}.dt_bias"}, n_out=2, layer=i)
        o = self.op(f"{L}.delta_rule", "GatedDeltaRule", [qn, kn, v, gg, beta],
                    attrs={"scale": dk ** -0.5, "chunk": 64}, states={"recurrent": f"L{i}.recurrent"}, layer=i)
        zh = self.op(f"{L}.z_view", "View", [z], attrs={"shape": (Hv, dv)}, layer=i)
        y = self.op(f"{L}.norm", "GatedRMSNorm", [o, zh], params={"weight": f"{L}.norm"},
                    attrs={"eps": cfg.rms_norm_eps}, layer=i)
        yf = self.op(f"{L}.y_flat", "View", [y], attrs={"shape": (cfg.gdn_value_dim,)}, layer=i)
        return self.op(f"{L}.out", "Linear", [yf], params={"weight": f"{L}.out"}, layer=i)


def build_mtp_graph(cfg: ModelConfig, *, lm_rows: str = "last") -> Graph:
    """The IR graph of one MTP-head step over T rows (README-mtp.md beside the fixture; vLLM ``qwen3_5_mtp.py``).

    Inputs ``tokens`` [T] (row t embeds S[t+1]), ``positions`` [T] (row t at RoPE position t) and ``hidden``
    [T, H] (the main model's hidden state h_t after its final norm, what its LM head reads). Per row:
    ``x = mtp.fc([RMSNorm(embed(token); pre_fc_norm_embedding) | RMSNorm(hidden; pre_fc_norm_hidden)])``, then
    ``mtp_num_hidden_layers`` full-attention decoder layers (their KV in states ``mtp.L{j}.kv``, over all earlier
    rows), ``mtp_hidden = RMSNorm(x; mtp.norm)`` and the draft ``logits = lm_head(mtp_hidden)`` (the main model's
    LM head; ``lm_rows`` as :func:`build_graph`). Outputs: ``(logits, mtp_hidden)``; ``mtp_hidden`` is what a
    chained draft feeds back as its ``hidden``. Every norm is the (1 + w) RMSNorm.

    Raises:
        ValueError: the config has no MTP head.
    """
    if not cfg.mtp_num_hidden_layers:
        raise ValueError("the config declares no MTP head (mtp_num_hidden_layers is 0)")
    return _Builder(cfg, lm_rows).build_mtp()


def build_graph(cfg: ModelConfig, *, lm_rows: str = "all") -> Graph:
    """The unfused IR graph of one model step over T tokens.

    Args:
        cfg: the model configuration.
        lm_rows: ``"all"`` computes logits for every token (teacher forcing); ``"last"`` only for the
            last one (generation).
    """
    return _Builder(cfg, lm_rows).build()
