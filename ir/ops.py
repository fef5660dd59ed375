"""The op vocabulary of the IR: each kind's contract (formula, shapes, dtypes) and its shape inference.

Semantics follow `transformers/models/qwen3_5/modeling_qwen3_5.py` (transformers 5.17); each entry
names the HF class or function it mirrors. Shapes use ``T`` for the token extent of the step. Unless
stated otherwise tensors are fp32 (the reference executor computes in fp32 on bf16-stored weights; the
CUDA lowering stores GEMM inputs in bf16, see :mod:`ninferc.ir.passes.choose_formats`). The numpy
implementation of every kind is in :mod:`ninferc.ir.reference`.

Kinds (``attrs`` in parentheses):

* ``Embedding``: tokens[T] i32 -> x[T, H];  x = weight[tokens].  params: weight [V, H].
* ``RMSNorm`` (eps, unit_offset): x[..., D] -> y;  y = x * rsqrt(mean(x^2) + eps) * (1 + w if
  unit_offset else w).  HF `Qwen3_5RMSNorm` (unit_offset, zero-centred weights: input, post-attention,
  q/k and final norms).  params: weight [D].
* ``AddRMSNorm`` (eps, unit_offset): (x[T, D], r[T, D]) -> (s = x + r, y = RMSNorm(s)).  Fused form of
  ResidualAdd followed by RMSNorm (pass FuseAddRMSNorm).
* ``Linear`` (epilogue: ``none`` | ``swiglu``): x[T, K] -> y[T, N];  y = x @ W^T with W [N, K]
  (nn.Linear layout).  ``params['weight']`` is one name or a tuple of names concatenated along N (pass
  FuseSiblingLinears).  With ``swiglu`` the weight is [gate; up] (N = 2I) and y[T, I] = silu(g) * u.
* ``View`` (start, stop, shape, inner): x[T, ...] -> x.reshape(T, D)[:, start:stop].reshape(T, *shape)[..., inner0:inner1].
  No data movement: a window of its input (lowering turns it into offset and strides).
* ``CausalConv1d`` (width, activation): x[T, C] -> y[T, C];  depthwise causal conv over time with the
  previous width-1 inputs from state ``conv`` [C, width-1], then SiLU.  HF `causal_conv1d_fn` /
  `causal_conv1d_update`.  params: weight [C, width].
* ``L2Norm`` (eps): x[T, h, d] -> x * rsqrt(sum(x^2) + eps) over d.  HF `l2norm` (eps 1e-6).
* ``GDNGating``: (a[T, Hv], b[T, Hv]) -> (g, beta);  g = -exp(A_log) * softplus(a + dt_bias),
  beta = sigmoid(b).  params: A_log [Hv], dt_bias [Hv] (fp32 math).
* ``GatedDeltaRule`` (scale, chunk): (q[T, Hk, dk], k[T, Hk, dk], v[T, Hv, dv], g[T, Hv], beta[T, Hv])
  -> o[T, Hv, dv].  V head j uses Q/K head j // (Hv/Hk) (HF repeat_interleave).  Per token:
  S <- S * exp(g); S <- S + k (beta (v - S^T k))^T; o = S^T (q * scale).  State ``recurrent``
  [Hv, dk, dv] fp32.  HF `torch_recurrent_gated_delta_rule` / `torch_chunk_gated_delta_rule`.
* ``GatedRMSNorm`` (eps): (o[T, Hv, dv], z[T, Hv, dv]) -> o * rsqrt(mean(o^2) + eps) * w * silu(z);
  plain w (not 1 + w).  HF `Qwen3_5RMSNormGated`.  params: weight [dv].
* ``PartialRoPE`` (rotary_dim, theta): (x[T, h, d], positions[T] i32) -> y;  NeoX rotate-half on the
  first rotary_dim channels, channels rotary_dim.. untouched.  HF `apply_rotary_pos_emb` with
  `Qwen3_5TextRotaryEmbedding` (text positions: the 3 mrope sections coincide).
* ``GatedAttention`` (scale, groups): (q[T, Hq, d], k[T, Hkv, d], v[T, Hkv, d], gate[T, Hq, d]) ->
  y[T, Hq*d];  appends k, v to state ``kv`` at the step's positions, causal GQA softmax attention over
  the whole context (query head h uses KV head h // groups), then y = attn * sigmoid(gate).
  HF `Qwen3_5Attention` + `eager_attention_forward`.
* ``SwiGLU``: (g[T, I], u[T, I]) -> silu(g) * u.  HF `Qwen3_5MLP`.
* ``ResidualAdd``: (x, y) -> x + y.
* ``GatedDeltaNet`` (Hk, Hv, dk, dv, width, eps, scale, chunk, cols): proj[T, Dp] -> y[T, Hv*dv]; the whole
  GDN mixer between its input projection and out_proj (pass FuseGatedDeltaNet): causal conv + SiLU over
  proj[:, q|k|v], L2Norm(q), L2Norm(k), GDNGating(a, b), GatedDeltaRule, GatedRMSNorm(o, z).  ``cols``
  gives the [start, stop) columns of q, k, v, z, b, a in proj.  params: conv, A_log, dt_bias, norm;
  states: conv, recurrent.
* ``GatedAttentionBlock`` (Hq, Hkv, hd, eps, rotary_dim, theta, scale, cols): (proj[T, Dp], positions[T]) ->
  y[T, Hq*hd]; the attention mixer between its projection and o_proj (pass FuseGatedAttention): q/gate
  split, Q/K RMSNorm (1 + w), partial RoPE, GatedAttention.  ``cols``: [start, stop) of the per-head
  interleaved q|gate block, of k and of v in proj.  params: q_norm, k_norm; states: kv.
* ``LMHead`` (rows: ``all`` | ``last``): x[T, H] -> logits[T or 1, V] = x @ W^T.  params: weight [V, H]
  (the embedding when tied).
* ``Concat``: (a[T, A], b[T, B]) -> [T, A + B], a first.  The MTP head's input: [N(embedding) | N(hidden)]
  (vLLM ``qwen3_5_mtp.py``: ``torch.cat([inputs_embeds, hidden_states], dim=-1)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ninferc.ir.graph import Dim, Graph, Op

Shape = tuple[Dim, ...]


class ShapeError(ValueError):
    """An op's inputs do not match its contract (names op, input, expected and found)."""


def _need(cond: bool, op: Op, msg: str) -> None:
    if not cond:
        raise ShapeError(f"op {op.name} ({op.kind}): {msg}")


def _shape(g: Graph, t: str) -> Shape:
    return g.tensors[t].shape


def _param_shape(g: Graph, op: Op, role: str = "weight") -> tuple[int, ...]:
    names = op.params[role]
    if isinstance(names, tuple):
        shapes = [g.params[n].shape for n in names]
        _need(all(s[1:] == shapes[0][1:] for s in shapes), op, f"concatenated params {names} differ in shape {shapes}")
        return (sum(s[0] for s in shapes),) + tuple(shapes[0][1:])
    return g.params[names].shape


def _infer_embedding(g, op):
    (t,) = op.inputs
    _need(_shape(g, t) == ("T",), op, f"tokens must be [T], found {_shape(g, t)}")
    V, H = _param_shape(g, op)
    return [(("T", H), "f32")]


def _infer_rmsnorm(g, op):
    s = _shape(g, op.inputs[0])
    (D,) = _param_shape(g, op)
    _need(s[-1] == D, op, f"last dim {s[-1]} != weight dim {D}")
    return [(s, "f32")]


def _infer_add_rmsnorm(g, op):
    a, b = (_shape(g, t) for t in op.inputs)
    _need(a == b, op, f"operands differ: {a} vs {b}")
    (D,) = _param_shape(g, op)
    _need(a[-1] == D, op, f"last dim {a[-1]} != weight dim {D}")
    return [(a, "f32"), (a, "f32")]


def _infer_linear(g, op):
    s = _shape(g, op.inputs[0])
    N, K = _param_shape(g, op)
    _need(len(s) == 2 and s[1] == K, op, f"input {s} does not end in K={K}")
    ep = op.attrs.get("epilogue", "none")
    if ep == "swiglu":
        _need(N % 2 == 0, op, f"swiglu needs an even N, found {N}")
        return [((s[0], N // 2), "f32")]
    _need(ep == "none", op, f"unknown epilogue {ep!r}")
    return [((s[0], N), "f32")]


def view_shape(in_shape: Shape, attrs: dict) -> Shape:
    """Output shape of a ``View`` with ``attrs`` applied to ``in_shape`` [T, ...] (trailing dims are
    flattened to D first, so the input must be a contiguous tensor)."""
    T = in_shape[0]
    D = 1
    for d in in_shape[1:]:
        D *= int(d)
    start, stop = attrs.get("start", 0), attrs.get("stop", D)
    if not (0 <= start < stop <= D):
        raise ShapeError(f"View window [{start}, {stop}) outside [0, {D})")
    width = stop - start
    shape = tuple(attrs.get("shape", (width,)))
    n = 1
    for d in shape:
        n *= d
    if n != width:
        raise ShapeError(f"View shape {shape} has {n} elements, window has {width}")
    inner = attrs.get("inner")
    if inner is not None:
        i0, i1 = inner
        if not (0 <= i0 < i1 <= shape[-1]):
            raise ShapeError(f"View inner window {inner} outside [0, {shape[-1]})")
        shape = shape[:-1] + (i1 - i0,)
    return (T,) + shape


def _infer_view(g, op):
    s = _shape(g, op.inputs[0])
    _need(len(s) >= 2 and s[0] == "T", op, f"View input must be [T, ...], found {s}")
    try:
        return [(view_shape(s, op.attrs), g.tensors[op.inputs[0]].dtype)]
    except ShapeError as exc:
        raise ShapeError(f"op {op.name}: {exc}") from None


def _infer_conv(g, op):
    s = _shape(g, op.inputs[0])
    C, W = _param_shape(g, op)
    _need(s == ("T", C), op, f"input {s} != [T, {C}]")
    _need(op.attrs.get("width") == W, op, f"width attr {op.attrs.get('width')} != weight width {W}")
    return [(s, "f32")]


def _infer_l2norm(g, op):
    s = _shape(g, op.inputs[0])
    _need(len(s) == 3, op, f"input must be [T, h, d], found {s}")
    return [(s, "f32")]


def _infer_gating(g, op):
    a, b = (_shape(g, t) for t in op.inputs)
    (Hv,) = g.params[op.params["A_log"]].shape
    _need(a == b == ("T", Hv), op, f"a {a} and b {b} must be [T, {Hv}]")
    return [(a, "f32"), (a, "f32")]


def _infer_gdr(g, op):
    q, k, v, gg, beta = (_shape(g, t) for t in op.inputs)
    _need(q == k and len(q) == 3, op, f"q {q} and k {k} must match and be [T, Hk, dk]")
    _need(len(v) == 3 and v[0] == "T", op, f"v must be [T, Hv, dv], found {v}")
    Hk, Hv = q[1], v[1]
    _need(Hv % Hk == 0, op, f"Hv={Hv} is not a multiple of Hk={Hk}")
    _need(gg == beta == ("T", Hv), op, f"g {gg} and beta {beta} must be [T, {Hv}]")
    return [(v, "f32")]


def _infer_gated_norm(g, op):
    o, z = (_shape(g, t) for t in op.inputs)
    _need(o == z, op, f"o {o} and z {z} differ")
    (D,) = _param_shape(g, op)
    _need(o[-1] == D, op, f"last dim {o[-1]} != weight dim {D}")
    return [(o, "f32")]


def _infer_rope(g, op):
    x, p = (_shape(g, t) for t in op.inputs)
    _need(len(x) == 3 and p == ("T",), op, f"x {x} must be [T, h, d], positions {p} must be [T]")
    rd = op.attrs["rotary_dim"]
    _need(0 < rd <= x[2] and rd % 2 == 0, op, f"rotary_dim {rd} must be even and <= head dim {x[2]}")
    return [(x, "f32")]


def _infer_attention(g, op):
    q, k, v, gate = (_shape(g, t) for t in op.inputs)
    _need(k == v and len(k) == 3, op, f"k {k} and v {v} must match and be [T, Hkv, d]")
    _need(len(q) == 3 and q[2] == k[2], op, f"q {q} must be [T, Hq, {k[2]}]")
    _need(q[1] % k[1] == 0, op, f"Hq={q[1]} is not a multiple of Hkv={k[1]}")
    _need(gate == q, op, f"gate {gate} must match q {q}")
    return [(("T", q[1] * q[2]), "f32")]


def _infer_swiglu(g, op):
    a, b = (_shape(g, t) for t in op.inputs)
    _need(a == b, op, f"gate {a} and up {b} differ")
    return [(a, "f32")]


def _infer_add(g, op):
    a, b = (_shape(g, t) for t in op.inputs)
    _need(a == b, op, f"operands differ: {a} vs {b}")
    return [(a, "f32")]


def _infer_gdn_block(g, op):
    (s,) = (_shape(g, t) for t in op.inputs)
    a = op.attrs
    _need(len(s) == 2, op, f"proj must be [T, Dp], found {s}")
    for name, (c0, c1) in a["cols"].items():
        _need(0 <= c0 < c1 <= s[1], op, f"column window {name}=[{c0},{c1}) outside proj width {s[1]}")
    C, W = g.params[op.params["conv"]].shape
    _need(C == 2 * a["Hk"] * a["dk"] + a["Hv"] * a["dv"] and W == a["width"], op,
          f"conv weight {[C, W]} does not match dims")
    return [((s[0], a["Hv"] * a["dv"]), "f32")]


def _infer_attn_block(g, op):
    s, p = (_shape(g, t) for t in op.inputs)
    a = op.attrs
    _need(len(s) == 2 and p == ("T",), op, f"proj {s} must be [T, Dp], positions {p} must be [T]")
    for name, (c0, c1) in a["cols"].items():
        _need(0 <= c0 < c1 <= s[1], op, f"column window {name}=[{c0},{c1}) outside proj width {s[1]}")
    return [((s[0], a["Hq"] * a["hd"]), "f32")]


def _infer_lm_head(g, op):
    s = _shape(g, op.inputs[0])
    V, H = _param_shape(g, op)
    _need(len(s) == 2 and s[1] == H, op, f"input {s} must be [T, {H}]")
    rows = op.attrs.get("rows", "all")
    _need(rows in ("all", "last"), op, f"rows must be 'all' or 'last', found {rows!r}")
    return [(("T" if rows == "all" else 1, V), "f32")]


def _infer_concat(g, op):
    a, b = (_shape(g, t) for t in op.inputs)
    _need(len(a) == 2 and len(b) == 2 and a[0] == b[0], op, f"inputs {a} and {b} must be [T, A] and [T, B]")
    return [((a[0], int(a[1]) + int(b[1])), "f32")]


@dataclass(frozen=True)
class OpDef:
    """An op kind: its name, number of inputs/outputs, and shape/dtype inference."""

    kind: str
    n_inputs: int
    n_outputs: int
    infer: Callable[[Graph, Op], list[tuple[Shape, str]]]
    #: state roles the op needs (``kv``, ``conv``, ``recurrent``)
    states: tuple[str, ...] = ()


OPS: dict[str, OpDef] = {
    d.kind: d
    for d in [
        OpDef("Embedding", 1, 1, _infer_embedding),
        OpDef("RMSNorm", 1, 1, _infer_rmsnorm),
        OpDef("AddRMSNorm", 2, 2, _infer_add_rmsnorm),
        OpDef("Linear", 1, 1, _infer_linear),
        OpDef("View", 1, 1, _infer_view),
        OpDef("CausalConv1d", 1, 1, _infer_conv, ("conv",)),
        OpDef("L2Norm", 1, 1, _infer_l2norm),
        OpDef("GDNGating", 2, 2, _infer_gating),
        OpDef("GatedDeltaRule", 5, 1, _infer_gdr, ("recurrent",)),
        OpDef("GatedRMSNorm", 2, 1, _infer_gated_norm),
        OpDef("PartialRoPE", 2, 1, _infer_rope),
        OpDef("GatedAttention", 4, 1, _infer_attention, ("kv",)),
        OpDef("SwiGLU", 2, 1, _infer_swiglu),
        OpDef("ResidualAdd", 2, 1, _infer_add),
        OpDef("LMHead", 1, 1, _infer_lm_head),
        OpDef("GatedDeltaNet", 1, 1, _infer_gdn_block, ("conv", "recurrent")),
        OpDef("GatedAttentionBlock", 2, 1, _infer_attn_block, ("kv",)),
        OpDef("Concat", 2, 1, _infer_concat),
    ]
}


def infer(graph: Graph, op: Op) -> list[tuple[Shape, str]]:
    """Shapes and dtypes of ``op``'s outputs from its inputs, params and attrs.

    Raises:
        ShapeError: unknown kind, wrong arity, or inputs that break the kind's contract.
    """
    d = OPS.get(op.kind)
    if d is None:
        raise ShapeError(f"op {op.name}: unknown kind {op.kind!r}; known: {sorted(OPS)}")
    _need(len(op.inputs) == d.n_inputs, op, f"expects {d.n_inputs} inputs, has {len(op.inputs)}")
    _need(len(op.outputs) == d.n_outputs, op, f"expects {d.n_outputs} outputs, has {len(op.outputs)}")
    for role in d.states:
        _need(role in op.states and op.states[role] in graph.states, op, f"needs state {role!r}")
    return d.infer(graph, op)
