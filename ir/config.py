"""Model configuration of the Qwen3.5 / 3.6 / 3.8 hybrid family, read from a Hugging Face `config.json`.

Semantic source: `transformers/models/qwen3_5/configuration_qwen3_5.py` (transformers 5.17):
`Qwen3_5TextConfig` (``model_type`` ``qwen3_5_text``) and `Qwen3_5Config` (``model_type`` ``qwen3_5``,
whose ``text_config`` holds the text model and whose weights live under ``model.language_model.``).
When ``layer_types`` is absent, layer i is ``full_attention`` iff (i + 1) % full_attention_interval == 0
(default interval 4), otherwise ``linear_attention`` (Gated DeltaNet) — `Qwen3_5TextConfig.__post_init__`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ninferc.errors import ConfigError

#: HF ``layer_types`` values and the IR's names for them.
FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"
SUPPORTED_MODEL_TYPES = ("qwen3_5_text", "qwen3_5")
#: most decoder layers a config may declare (the family's largest has 65; a larger number is a broken config that
#: would make every command build a graph of that many layers before the checkpoint can disagree)
MAX_LAYERS = 1024


@dataclass(frozen=True)
class ModelConfig:
    """Text-model hyper-parameters of one hybrid checkpoint (all sizes in elements, not bytes).

    Attributes mirror the HF names. Derived properties give the IR's shapes:
    attention q_proj output is ``num_attention_heads * head_dim * 2`` (query and the per-head sigmoid
    output gate, interleaved per head as [q_h | gate_h]); GDN ``in_proj_qkv`` output is
    ``2 * key_dim + value_dim`` with ``key_dim = linear_num_key_heads * linear_key_head_dim`` and
    ``value_dim = linear_num_value_heads * linear_value_head_dim``.

    Raises:
        ConfigError: from :meth:`from_hf_dict` / :meth:`validate` for an unsupported ``model_type``, a
            missing field, or inconsistent head counts; the message names the field and the value.
    """

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    vocab_size: int
    rms_norm_eps: float
    layer_types: tuple[str, ...]
    # gated full attention
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    partial_rotary_factor: float
    # Gated DeltaNet (linear attention)
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    attention_bias: bool = False
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    #: prefix of the text model's tensors in the checkpoint ("model." or "model.language_model.")
    weight_prefix: str = "model."
    #: decoder layers of the multi-token-prediction head (HF ``mtp_num_hidden_layers``; 0 = no MTP head)
    mtp_num_hidden_layers: int = 0
    name: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    # ---- derived sizes -------------------------------------------------------------------------
    @property
    def rotary_dim(self) -> int:
        """Number of leading head dims rotated by RoPE: int(head_dim * partial_rotary_factor) (HF
        `compute_default_rope_parameters`)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def gdn_key_dim(self) -> int:
        """GDN Q (and K) width: linear_num_key_heads * linear_key_head_dim."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def gdn_value_dim(self) -> int:
        """GDN V (and z, output) width: linear_num_value_heads * linear_value_head_dim."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def gdn_conv_dim(self) -> int:
        """Channels of the depthwise causal conv over q|k|v: 2 * key_dim + value_dim."""
        return 2 * self.gdn_key_dim + self.gdn_value_dim

    @property
    def gdn_heads_per_key_head(self) -> int:
        """V heads served by one Q/K head (HF `repeat_interleave` factor)."""
        return self.linear_num_value_heads // self.linear_num_key_heads

    @property
    def attn_groups(self) -> int:
        """Query heads per KV head (GQA group size)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Indices of the full-attention layers."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == FULL_ATTENTION)

    @property
    def gdn_layers(self) -> tuple[int, ...]:
        """Indices of the Gated DeltaNet (linear attention) layers."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == LINEAR_ATTENTION)

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any], *, source: str = "config.json") -> "ModelConfig":
        """Build from a parsed HF `config.json` (``qwen3_5_text``, or ``qwen3_5`` with ``text_config``).

        Raises:
            ConfigError: unsupported ``model_type``, a missing required field, or inconsistent values.
        """
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: must hold a JSON object, found {type(raw).__name__}")
        mt = raw.get("model_type")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: model_type {mt!r} is not supported; ninferc supports {list(SUPPORTED_MODEL_TYPES)}"
            )
        prefix = "model."
        text = raw
        if mt == "qwen3_5":
            text = raw.get("text_config")
            if not isinstance(text, dict):
                raise ConfigError(f"{source}: model_type 'qwen3_5' needs a 'text_config' object, found {text!r}")
            prefix = "model.language_model."
            text = dict(text)
            text.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", False))

        def req(key: str):
            if key not in text or text[key] is None:
                raise ConfigError(f"{source}: required field {key!r} is missing")
            return text[key]

        def num(key: str, v, kind=int):
            """``v`` as an int (integral numbers only: a fractional size is refused, not truncated) or a float."""
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
            if kind is int and ok and float(v).is_integer():
                return int(v)
            if kind is float and ok:
                return float(v)
            what = "an integer" if kind is int else "a finite number"
            raise ConfigError(f"{source}: {key} must be {what}, found {v!r}")

        n_layers = num("num_hidden_layers", req("num_hidden_layers"))
        layer_types = text.get("layer_types")
        if layer_types is None:
            interval = num("full_attention_interval", text.get("full_attention_interval", 4))
            if interval < 1:
                raise ConfigError(f"{source}: full_attention_interval must be >= 1, found {interval}")
            layer_types = [
                LINEAR_ATTENTION if (i + 1) % interval else FULL_ATTENTION for i in range(n_layers)
            ]
        rope = text.get("rope_parameters") or {}
        if not isinstance(rope, dict):
            raise ConfigError(f"{source}: rope_parameters must be an object, found {type(rope).__name__}")
        rope = dict(rope)
        if layer_types is not None and not isinstance(layer_types, (list, tuple)):
            raise ConfigError(f"{source}: layer_types must be a list, found {type(layer_types).__name__}")
        rope_theta = rope.get("rope_theta", text.get("rope_theta"))
        if rope_theta is None:
            raise ConfigError(f"{source}: required field 'rope_parameters.rope_theta' is missing")
        rope_type = rope.get("rope_type", "default")
        if rope_type != "default":
            raise ConfigError(
                f"{source}: rope_parameters.rope_type {rope_type!r} is not supported (only 'default')"
            )
        prf = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
        eos = text.get("eos_token_id", raw.get("eos_token_id"))
        eos_list = eos if isinstance(eos, list) else [] if eos is None else [eos]
        eos_ids = tuple(num("eos_token_id", e) for e in eos_list)
        hidden = num("hidden_size", req("hidden_size"))
        n_heads = num("num_attention_heads", req("num_attention_heads"))
        cfg = cls(
            model_type=mt,
            hidden_size=hidden,
            intermediate_size=num("intermediate_size", req("intermediate_size")),
            num_hidden_layers=n_layers,
            vocab_size=num("vocab_size", req("vocab_size")),
            rms_norm_eps=num("rms_norm_eps", text.get("rms_norm_eps", 1e-6), float),
            layer_types=tuple(layer_types),
            num_attention_heads=n_heads,
            num_key_value_heads=num("num_key_value_heads", req("num_key_value_heads")),
            head_dim=num("head_dim", text.get("head_dim") or hidden // max(n_heads, 1)),
            rope_theta=num("rope_parameters.rope_theta", rope_theta, float),
            partial_rotary_factor=num("partial_rotary_factor", prf, float),
            linear_num_key_heads=num("linear_num_key_heads", req("linear_num_key_heads")),
            linear_num_value_heads=num("linear_num_value_heads", req("linear_num_value_heads")),
            linear_key_head_dim=num("linear_key_head_dim", req("linear_key_head_dim")),
            linear_value_head_dim=num("linear_value_head_dim", req("linear_value_head_dim")),
            linear_conv_kernel_dim=num("linear_conv_kernel_dim", text.get("linear_conv_kernel_dim", 4)),
            tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
            hidden_act=str(text.get("hidden_act", "silu")),
            max_position_embeddings=num("max_position_embeddings", text.get("max_position_embeddings", 32768)),
            attention_bias=bool(text.get("attention_bias", False)),
            eos_token_ids=eos_ids,
            bos_token_id=text.get("bos_token_id", raw.get("bos_token_id")),
            pad_token_id=text.get("pad_token_id", raw.get("pad_token_id")),
            weight_prefix=prefix,
            mtp_num_hidden_layers=_int_field(text, "mtp_num_hidden_layers", 0, source),
            name=str(raw.get("_name_or_path", "")),
            extra={k: v for k, v in text.items() if k.startswith("mtp_")},
        )
        if text.get("mtp_use_dedicated_embeddings"):
            raise ConfigError(f"{source}: mtp_use_dedicated_embeddings=true is not supported (the MTP head must share "
                              "the model's embedding and LM head)")
        cfg.validate(source)
        return cfg

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> "ModelConfig":
        """Read ``MODEL_DIR/config.json``.

        Raises:
            ConfigError: the directory or its config.json is missing or not valid JSON, or see
                :meth:`from_hf_dict`.
        """
        from ninferc.errors import path_problem

        d = Path(model_dir)
        why = path_problem(d, "a checkpoint directory")
        if why:
            raise ConfigError(why)
        if not d.is_dir():
            raise ConfigError(f"{str(d)!r} is a file, not a checkpoint directory (a .ninfer artifact is run, not "
                              "compiled)")
        path = d / "config.json"
        if not path.is_file():
            raise ConfigError(f"{str(d)!r} has no config.json (expected a Hugging Face checkpoint directory)")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
        cfg = cls.from_hf_dict(raw, source=str(path))
        return cfg if cfg.name else _replace(cfg, name=d.name)

    def check_context(self, max_context: int, what: str = "--max-context") -> None:
        """Refuse a KV capacity beyond the positions the model was trained for.

        Args:
            max_context: tokens per sequence the caller wants to hold.
            what: how the caller names the value in the message (a CLI option or an argument).

        Raises:
            ConfigError: ``max_context`` < 1 or > ``max_position_embeddings`` (config.json; the positions
                RoPE was trained on, as transformers' own ``max_position_embeddings`` check uses it).
        """
        if not 1 <= max_context <= self.max_position_embeddings:
            raise ConfigError(f"{what} {max_context} is outside 1..{self.max_position_embeddings}, the model's "
                              "max_position_embeddings (its config.json, or the preset's value)")

    def validate(self, source: str = "config") -> None:
        """Check consistency of sizes and head counts.

        Raises:
            ConfigError: naming the first offending field and its value.
        """
        def bad(msg: str):
            raise ConfigError(f"{source}: {msg}")

        for key in (
            "hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
            "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
        ):
            v = getattr(self, key)
            if not isinstance(v, int) or v <= 0:
                bad(f"{key} must be a positive integer, found {v!r}")
        if len(self.layer_types) != self.num_hidden_layers:
            bad(f"layer_types has {len(self.layer_types)} entries but num_hidden_layers is {self.num_hidden_layers}")
        for i, t in enumerate(self.layer_types):
            if t not in (FULL_ATTENTION, LINEAR_ATTENTION):
                bad(f"layer_types[{i}] is {t!r}; supported: {FULL_ATTENTION!r}, {LINEAR_ATTENTION!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            bad(
                f"num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.linear_num_value_heads % self.linear_num_key_heads:
            bad(
                f"linear_num_value_heads ({self.linear_num_value_heads}) is not a multiple of "
                f"linear_num_key_heads ({self.linear_num_key_heads})"
            )
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            bad(f"partial_rotary_factor must be in (0, 1], found {self.partial_rotary_factor}")
        if self.rotary_dim % 2:
            bad(f"rotary dim head_dim*partial_rotary_factor = {self.rotary_dim} must be even")
        if self.hidden_act != "silu":
            bad(f"hidden_act {self.hidden_act!r} is not supported (only 'silu')")
        if self.attention_bias:
            bad("attention_bias=true is not supported by the Qwen3.5 family")
        if not (self.rms_norm_eps > 0 and math.isfinite(self.rms_norm_eps)):
            bad(f"rms_norm_eps must be positive, found {self.rms_norm_eps}")
        if not (self.rope_theta > 0 and math.isfinite(self.rope_theta)):
            bad(f"rope_parameters.rope_theta must be positive, found {self.rope_theta}")
        if not isinstance(self.max_position_embeddings, int) or self.max_position_embeddings < 1:
            bad(f"max_position_embeddings must be a positive integer, found {self.max_position_embeddings!r}")
        for e in self.eos_token_ids:
            if not 0 <= e < self.vocab_size:
                bad(f"eos_token_id {e} is outside the vocabulary 0..{self.vocab_size - 1} (vocab_size)")
        if self.num_hidden_layers > MAX_LAYERS:
            bad(f"num_hidden_layers {self.num_hidden_layers} is implausible (at most {MAX_LAYERS})")

    def to_dict(self) -> dict:
        """JSON-serialisable dict (the artifact header stores it); inverse of :meth:`from_dict`."""
        d = asdict(self)
        d["layer_types"] = list(self.layer_types)
        d["eos_token_ids"] = list(self.eos_token_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["layer_types"] = tuple(d["layer_types"])
        d["eos_token_ids"] = tuple(d.get("eos_token_ids", ()))
        cfg = cls(**d)
        cfg.validate("artifact header")
        return cfg


def _int_field(d: dict, key: str, default: int, source: str) -> int:
    """An integer field of a config dict (``default`` when absent or null).

    Raises:
        ConfigError: a value that is not an integer or is negative (names the field and the value).
    """
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{source}: {key} must be a non-negative integer, found {v!r}")
    return v


def _replace(cfg: ModelConfig, **kw) -> ModelConfig:
    from dataclasses import replace

    return replace(cfg, **kw)


# ---- presets ---------------------------------------------------------------------------------------
def _qwen38_27b() -> ModelConfig:
    """Qwen3.8-27B text model (DESIGN.md §1): 65 layers, layer i full attention iff (i+1) % 4 == 0."""
    n = 65
    return ModelConfig(
        model_type="qwen3_5_text",
        hidden_size=5120,
        intermediate_size=17408,
        num_hidden_layers=n,
        vocab_size=248320,
        rms_norm_eps=1e-6,
        layer_types=tuple(LINEAR_ATTENTION if (i + 1) % 4 else FULL_ATTENTION for i in range(n)),
        num_attention_heads=24,
        num_key_value_heads=4,
        head_dim=256,
        rope_theta=1e7,
        partial_rotary_factor=0.25,
        linear_num_key_heads=16,
        linear_num_value_heads=48,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        tie_word_embeddings=False,
        max_position_embeddings=262144,
        eos_token_ids=(248044,),
        name="qwen3.8-27b",
    )


PRESETS = {"qwen3.8-27b": _qwen38_27b}


def preset(name: str) -> ModelConfig:
    """A built-in model shape by name (no checkpoint needed).

    Raises:
        ConfigError: unknown preset name (lists the known ones).
    """
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}") from None
