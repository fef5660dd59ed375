"""The numpy reference executor of the IR: the oracle every CUDA kernel is compared with.

Every op kind of :mod:`ninferc.ir.ops` has a small function here (``ref_<kind>``) computing in fp32
(float64 where a reduction order must not matter is *not* used: we mirror HF's fp32 forward) on the
stored bf16 weights. The semantic source is transformers 5.17 ``modeling_qwen3_5.py``; each function
names the HF function it mirrors.

:class:`ReferenceExecutor` runs a :class:`~ninferc.ir.graph.Graph` (unfused or fused) over T tokens of
one sequence, carrying :class:`SequenceState` (KV cache, conv window, recurrent matrix) between calls,
so prefill in chunks and decode steps compose exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ninferc.ir.graph import Graph, Op

F32 = np.float32


# ---------------------------------------------------------------------------------------------------
# op references (fp32 numpy; shapes in the docstrings, T = tokens of the step)
# ---------------------------------------------------------------------------------------------------
def ref_embedding(tokens: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x[T, H] = weight[tokens] (fp32).  tokens: int [T]; weight [V, H]."""
    return weight[np.asarray(tokens, dtype=np.int64)].astype(F32)


def ref_rmsnorm(x: np.ndarray, w: np.ndarray, eps: float, unit_offset: bool) -> np.ndarray:
    """y = x * rsqrt(mean(x^2, -1) + eps) * (1 + w if unit_offset else w), in fp32.

    x [..., D], w [D]. HF `Qwen3_5RMSNorm.forward` (unit_offset: the zero-centred weight of input,
    post-attention, q/k and final norms; (1 + w) is formed in fp32 from the stored bf16 w).
    """
    x = x.astype(F32)
    var = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
    y = x * (F32(1.0) / np.sqrt(var + F32(eps)))
    scale = (F32(1.0) + w.astype(F32)) if unit_offset else w.astype(F32)
    return (y * scale).astype(F32)


def ref_linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """y[T, N] = x[T, K] @ w[N, K]^T (fp32)."""
    return (x.astype(F32, copy=False) @ w.astype(F32, copy=False).T).astype(F32, copy=False)


def ref_silu(x: np.ndarray) -> np.ndarray:
    """silu(x) = x * sigmoid(x) (fp32)."""
    x = x.astype(F32)
    return x * _sigmoid(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    x = x.astype(F32)
    return (F32(1.0) / (F32(1.0) + np.exp(-x))).astype(F32)


def ref_swiglu(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """silu(g) * u, shapes [T, I] (HF `Qwen3_5MLP`)."""
    return (ref_silu(g) * u.astype(F32)).astype(F32)


def ref_view(x: np.ndarray, attrs: dict) -> np.ndarray:
    """x[T, ...] -> x.reshape(T, D)[:, start:stop].reshape(T, *shape)[..., inner0:inner1] (no copy)."""
    T = x.shape[0]
    flat = x.reshape(T, -1)
    start, stop = attrs.get("start", 0), attrs.get("stop", flat.shape[1])
    y = flat[:, start:stop].reshape((T,) + tuple(attrs.get("shape", (stop - start,))))
    inner = attrs.get("inner")
    return y if inner is None else y[..., inner[0]:inner[1]]


def ref_causal_conv1d(x: np.ndarray, w: np.ndarray, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal conv over time + SiLU, continuing from the previous inputs.

    x [T, C]; w [C, W]; window [C, W-1] = the previous W-1 inputs (oldest first; zeros at the start).
    y[t, c] = silu(sum_j w[c, j] * u[t + j, c]) with u = concat(window^T, x).  Returns (y [T, C], the new
    window [C, W-1] = last W-1 rows of u transposed).  HF `causal_conv1d_fn` / `causal_conv1d_update`.
    """
    T, C = x.shape
    W = w.shape[1]
    u = np.concatenate([window.T.astype(F32), x.astype(F32)], axis=0)  # [W-1+T, C]
    acc = np.zeros((T, C), dtype=F32)
    wf = w.astype(F32)
    for j in range(W):
        acc += u[j:j + T] * wf[:, j]
    return ref_silu(acc), np.ascontiguousarray(u[T:].T if W > 1 else np.zeros((C, 0), F32))


def ref_l2norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x * rsqrt(sum(x^2, -1) + eps), fp32 (HF `l2norm`)."""
    x = x.astype(F32)
    return (x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True, dtype=F32) + F32(eps))).astype(F32)


def ref_gdn_gating(a: np.ndarray, b: np.ndarray, A_log: np.ndarray, dt_bias: np.ndarray):
    """(g, beta) with g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b).

    a, b [T, Hv]; A_log, dt_bias [Hv]; fp32 (HF `Qwen3_5GatedDeltaNet.forward`).  softplus(x) =
    log(1 + exp(x)) (torch's threshold-20 linear branch differs by < 3e-9).
    """
    x = a.astype(F32) + dt_bias.astype(F32)
    sp = np.logaddexp(F32(0.0), x).astype(F32)
    g = (-np.exp(A_log.astype(F32)) * sp).astype(F32)
    return g, _sigmoid(b)


def _expand_heads(x: np.ndarray, hv: int) -> np.ndarray:
    """[T, Hk, d] -> [T, Hv, d] with head j <- head j // (Hv/Hk) (HF `repeat_interleave(dim=2)`)."""
    return np.repeat(x, hv // x.shape[1], axis=1)


def ref_gated_delta_rule_recurrent(q, k, v, g, beta, state, scale):
    """Gated delta rule, one token at a time (HF `torch_recurrent_gated_delta_rule`).

    q, k [T, Hk, dk] (already L2-normalised); v [T, Hv, dv]; g, beta [T, Hv]; state [Hv, dk, dv] fp32.
    Per token t and V head h: S <- S * exp(g); S <- S + k (beta * (v - S^T k))^T; o = S^T (q * scale).
    Returns (o [T, Hv, dv], new state).
    """
    Hv = v.shape[1]
    q = _expand_heads(q.astype(F32), Hv) * F32(scale)
    k = _expand_heads(k.astype(F32), Hv)
    v, g, beta = v.astype(F32), g.astype(F32), beta.astype(F32)
    S = state.astype(F32).copy()
    out = np.empty_like(v)
    for t in range(v.shape[0]):
        S *= np.exp(g[t])[:, None, None]
        kv_mem = np.einsum("hkv,hk->hv", S, k[t])
        delta = (v[t] - kv_mem) * beta[t][:, None]
        S += k[t][:, :, None] * delta[:, None, :]
        out[t] = np.einsum("hkv,hk->hv", S, q[t])
    return out, S


def ref_gated_delta_rule_chunked(q, k, v, g, beta, state, scale, chunk: int = 64):
    """The same function as :func:`ref_gated_delta_rule_recurrent`, computed chunk-parallel (WY / UT
    transform), mirroring HF `torch_chunk_gated_delta_rule` (its forward-substitution branch).

    Within a chunk of C tokens (cumulative log-decay c_i): A_ij = beta_i (k_i . k_j) exp(c_i - c_j)
    for j < i; U = (I + A)^-1; u = U (beta v); w = U (beta k exp(c)); then per chunk
    v_new = u - w S; o = (q exp(c)) S + (q k^T * decay mask) v_new; S <- S exp(c_last) +
    (k exp(c_last - c))^T v_new.
    """
    T, Hk, dk = q.shape
    Hv, dv = v.shape[1], v.shape[2]
    q = _expand_heads(q.astype(F32), Hv).transpose(1, 0, 2) * F32(scale)  # [Hv, T, dk]
    k = _expand_heads(k.astype(F32), Hv).transpose(1, 0, 2)
    v = v.astype(F32).transpose(1, 0, 2)
    beta = beta.astype(F32).T  # [Hv, T]
    g = g.astype(F32).T
    pad = (-T) % chunk
    if pad:
        q, k, v = (np.pad(x, ((0, 0), (0, pad), (0, 0))) for x in (q, k, v))
        beta, g = (np.pad(x, ((0, 0), (0, pad))) for x in (beta, g))
    n = (T + pad) // chunk
    q, k, v = (x.reshape(Hv, n, chunk, x.shape[-1]) for x in (q, k, v))
    beta, g = beta.reshape(Hv, n, chunk), g.reshape(Hv, n, chunk)
    kb, vb = k * beta[..., None], v * beta[..., None]
    c = np.cumsum(g, axis=-1, dtype=F32)
    upper = np.triu(np.ones((chunk, chunk), bool), 1)
    diff = c[..., :, None] - c[..., None, :]
    decay = np.exp(np.where(upper, -np.inf, diff)).astype(F32)  # [Hv, n, C, C], 0 above the diagonal
    A = -(kb @ k.swapaxes(-1, -2)) * decay
    A = np.where(np.tril(np.ones((chunk, chunk), bool), -1), A, F32(0))
    for i in range(1, chunk):  # forward substitution for (I + A_strict)^-1 (HF export branch)
        row = A[..., i, :i].copy()
        sub = A[..., :i, :i].copy()
        A[..., i, :i] = row + np.einsum("...j,...jk->...k", row, sub)
    U = A + np.eye(chunk, dtype=F32)
    u = U @ vb
    w = U @ (kb * np.exp(c)[..., None])
    attn = (q @ k.swapaxes(-1, -2)) * decay
    qd = q * np.exp(c)[..., None]
    kd = k * np.exp(c[..., -1:] - c)[..., None]
    cl = np.exp(c[..., -1])
    S = state.astype(F32).copy()
    out = np.zeros_like(v)
    for i in range(n):
        v_new = u[:, i] - w[:, i] @ S
        out[:, i] = qd[:, i] @ S + attn[:, i] @ v_new
        S = S * cl[:, i][:, None, None] + kd[:, i].swapaxes(-1, -2) @ v_new
    out = out.reshape(Hv, n * chunk, dv)[:, :T].transpose(1, 0, 2)
    return np.ascontiguousarray(out, dtype=F32), S.astype(F32)


def ref_gated_rmsnorm(o: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm(o) * w * silu(z) with a plain w (HF `Qwen3_5RMSNormGated`); o, z [..., D], w [D]."""
    o = o.astype(F32)
    var = np.mean(o * o, axis=-1, keepdims=True, dtype=F32)
    y = o * (F32(1.0) / np.sqrt(var + F32(eps))) * w.astype(F32)
    return (y * ref_silu(z)).astype(F32)


def rope_inv_freq(rotary_dim: int, theta: float) -> np.ndarray:
    """inv_freq[rotary_dim/2] = 1 / theta^(2i / rotary_dim) in fp32 (HF `compute_default_rope_parameters`:
    exponents formed in fp32, the power then rounded to fp32)."""
    e = np.arange(0, rotary_dim, 2, dtype=F32) / F32(rotary_dim)
    return (F32(1.0) / np.power(np.float64(theta), e.astype(np.float64)).astype(F32)).astype(F32)


def rope_cos_sin(positions: np.ndarray, rotary_dim: int, theta: float):
    """(cos, sin) [T, rotary_dim] as HF builds them: angle = fp32(pos * inv_freq) duplicated over both
    halves; cos/sin of that fp32 angle rounded to fp32."""
    inv = rope_inv_freq(rotary_dim, theta)
    ang = (np.asarray(positions, dtype=F32)[:, None] * inv[None, :]).astype(F32)
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang.astype(np.float64)).astype(F32), np.sin(ang.astype(np.float64)).astype(F32)


def ref_partial_rope(x: np.ndarray, positions: np.ndarray, rotary_dim: int, theta: float) -> np.ndarray:
    """NeoX RoPE on the first ``rotary_dim`` channels of every head; the rest pass through unchanged.

    x [T, h, d]; positions [T].  y_rot = x_rot * cos + rotate_half(x_rot) * sin with rotate_half(u) =
    [-u2, u1] over the halves of x_rot (HF `apply_rotary_pos_emb` / `rotate_half`).
    """
    x = x.astype(F32)
    cos, sin = rope_cos_sin(positions, rotary_dim, theta)
    cos, sin = cos[:, None, :], sin[:, None, :]
    xr = x[..., :rotary_dim]
    half = rotary_dim // 2
    rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    y = x.copy()
    y[..., :rotary_dim] = xr * cos + rot * sin
    return y


def ref_attention(q, k_ctx, v_ctx, positions, scale, groups):
    """Causal GQA attention over a whole context.

    q [T, Hq, d] at ``positions`` [T]; k_ctx, v_ctx [L, Hkv, d] hold positions 0..L-1 (the step's own
    keys included). Query head h uses KV head h // groups; token at position p attends to 0..p.
    Softmax in fp32 (HF `eager_attention_forward`). Returns [T, Hq, d].
    """
    q = q.astype(F32)
    T, Hq, d = q.shape
    L = k_ctx.shape[0]
    kk = np.repeat(k_ctx.astype(F32), groups, axis=1)  # [L, Hq, d]
    vv = np.repeat(v_ctx.astype(F32), groups, axis=1)
    s = np.einsum("thd,lhd->htl", q, kk) * F32(scale)  # [Hq, T, L]
    mask = np.arange(L)[None, :] > np.asarray(positions)[:, None]  # [T, L]
    s = np.where(mask[None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("htl,lhd->thd", p.astype(F32), vv).astype(F32)


# ---------------------------------------------------------------------------------------------------
# the executor
# ---------------------------------------------------------------------------------------------------
@dataclass
class SequenceState:
    """Per-sequence state carried across steps: ``length`` tokens seen; ``kv`` name -> (K [L, Hkv, d],
    V [L, Hkv, d]) fp32; ``conv`` name -> [C, W-1] fp32; ``recurrent`` name -> [Hv, dk, dv] fp32."""

    length: int = 0
    kv: dict = field(default_factory=dict)
    conv: dict = field(default_factory=dict)
    recurrent: dict = field(default_factory=dict)

    def kv_append(self, name: str, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append K / V rows [T, Hkv, d] (fp32) at positions ``length`` .. ``length + T - 1`` of KV state ``name``;
        returns the context's (K, V) [length + T, Hkv, d]. (``length`` itself advances after the whole step.)"""
        K, V = self.kv[name]
        K = np.concatenate([K, k], axis=0)
        V = np.concatenate([V, v], axis=0)
        self.kv[name] = (K, V)
        return K, V

    def copy(self) -> "SequenceState":
        """A deep copy (arrays copied), e.g. to branch a sequence."""
        return SequenceState(
            self.length,
            {n: (k.copy(), v.copy()) for n, (k, v) in self.kv.items()},
            {n: a.copy() for n, a in self.conv.items()},
            {n: a.copy() for n, a in self.recurrent.items()},
        )


def dequantize_param(spec, weights) -> np.ndarray:
    """fp32 [N, K] values of the quantised (``w8``/``w4``) param ``spec`` from its stored codes
    (``weights[spec.name]``) and scales (``weights[spec.name + ".scales"]``): ``fl32(q * scale)``, exactly
    what :func:`ninferc.ir.quant.dequantize` gives. Raises KeyError for a missing tensor, QuantError for scales
    that do not match the codes."""
    from ninferc.ir.graph import SCALES_SUFFIX
    from ninferc.ir.quant import dequantize_codes

    return dequantize_codes(spec.dtype, weights[spec.name], weights[spec.name + SCALES_SUFFIX])


class ReferenceExecutor:
    """Runs an IR graph in numpy for one sequence.

    Args:
        graph: an IR graph (fused or not) from :func:`ninferc.ir.qwen3_5.build_graph` and passes.
        weights: IR param name -> array (bf16 via ml_dtypes, or fp32), e.g. a
            :class:`ninferc.checkpoint.Checkpoint` or an artifact's tensor table. Converted to fp32
            lazily, once per name.
        gdn_mode: ``"auto"`` (HF's choice: recurrent for a 1-token step with state, chunked otherwise),
            ``"recurrent"`` or ``"chunked"``.
        emulate_storage: round every tensor the graph annotates as bf16 (GEMM inputs after
            ChooseFormats, the KV cache) to bf16 after it is produced — the CUDA engine's storage
            numerics, so its deviation from the fp32 goldens can be predicted on the CPU.

    Raises:
        KeyError: a param the graph needs is missing from ``weights``.
        ValueError: unknown op kind or gdn_mode.
    """

    def __init__(self, graph: Graph, weights: Mapping[str, np.ndarray], *, gdn_mode: str = "auto",
                 emulate_storage: bool = False):
        if gdn_mode not in ("auto", "recurrent", "chunked"):
            raise ValueError(f"gdn_mode must be auto|recurrent|chunked, found {gdn_mode!r}")
        self.graph, self.weights, self.gdn_mode = graph, weights, gdn_mode
        self.emulate_storage = emulate_storage
        self._w: dict = {}
        self._ops = list(graph.ops())

    def w(self, names) -> np.ndarray:
        """fp32 weight for a param name, or the concatenation (along dim 0) of a tuple of names."""
        key = names if isinstance(names, str) else tuple(names)
        if key not in self._w:
            if isinstance(key, str):
                spec = self.graph.params.get(key)
                if spec is not None and spec.quantised:  # codes + scales (an artifact): dequantise
                    self._w[key] = dequantize_param(spec, self.weights)
                else:
                    self._w[key] = np.asarray(self.weights[key]).astype(F32)
            else:
                self._w[key] = np.concatenate([self.w(n) for n in key], axis=0)
        return self._w[key]

    def new_state(self) -> SequenceState:
        """An empty sequence: zero conv windows and recurrent matrices, empty KV."""
        st = SequenceState()
        for s in self.graph.states.values():
            if s.kind == "conv":
                st.conv[s.name] = np.zeros(s.shape, F32)
            elif s.kind == "recurrent":
                st.recurrent[s.name] = np.zeros(s.shape, F32)
            elif s.kind == "kv":
                _, hkv, d = s.shape
                st.kv[s.name] = (np.zeros((0, hkv, d), F32), np.zeros((0, hkv, d), F32))
        return st

    def forward(self, tokens, state: SequenceState, *, capture: bool = False, inputs: dict | None = None):
        """Run one step over ``tokens`` (int [T]) at positions state.length .. state.length+T-1.

        ``inputs`` gives the graph's other inputs by name (the MTP graph's ``hidden`` [T, H]).
        Mutates ``state`` (appends KV, advances conv/recurrent state and ``length``).
        Returns logits [T or 1, V] fp32, or (logits, {tensor name: value}) when ``capture``.

        Raises:
            ValueError: no tokens; a graph input missing from ``inputs``.
        """
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        T = tokens.shape[0]
        if T == 0:
            raise ValueError("forward() needs at least one token")
        positions = np.arange(state.length, state.length + T, dtype=np.int64)
        env: dict[str, np.ndarray] = {"tokens": tokens, "positions": positions, **(inputs or {})}
        missing = [i for i in self.graph.inputs if i not in env]
        if missing:
            raise ValueError(f"forward(): graph inputs {missing} not given")
        for op in self._ops:
            outs = self._run(op, [env[t] for t in op.inputs], state, T)
            for name, val in zip(op.outputs, outs):
                if self.emulate_storage and self.graph.tensors[name].dtype == "bf16":
                    val = _round_bf16(val)
                env[name] = val
        state.length += T
        logits = env[self.graph.outputs[0]]
        return (logits, env) if capture else logits

    def _run(self, op: Op, xs: list, st: SequenceState, T: int) -> list:
        k, a, p = op.kind, op.attrs, op.params
        if k == "Embedding":
            return [ref_embedding(xs[0], self.w(p["weight"]))]
        if k == "RMSNorm":
            return [ref_rmsnorm(xs[0], self.w(p["weight"]), a["eps"], a["unit_offset"])]
        if k == "AddRMSNorm":
            s = (xs[0] + xs[1]).astype(F32)
            return [s, ref_rmsnorm(s, self.w(p["weight"]), a["eps"], a["unit_offset"])]
        if k == "Linear":
            y = ref_linear(xs[0], self.w(p["weight"]))
            if a.get("epilogue", "none") == "swiglu":
                n = y.shape[1] // 2
                y = ref_swiglu(y[:, :n], y[:, n:])
            return [y]
        if k == "View":
            return [ref_view(xs[0], a)]
        if k == "CausalConv1d":
            name = op.states["conv"]
            y, st.conv[name] = ref_causal_conv1d(xs[0], self.w(p["weight"]), st.conv[name])
            return [y]
        if k == "L2Norm":
            return [ref_l2norm(xs[0], a.get("eps", 1e-6))]
        if k == "GDNGating":
            return list(ref_gdn_gating(xs[0], xs[1], self.w(p["A_log"]), self.w(p["dt_bias"])))
        if k == "GatedDeltaRule":
            name = op.states["recurrent"]
            mode = self.gdn_mode
            if mode == "auto":
                mode = "recurrent" if (T == 1 and st.length > 0) else "chunked"
            fn = ref_gated_delta_rule_recurrent if mode == "recurrent" else ref_gated_delta_rule_chunked
            kw = {"chunk": a.get("chunk", 64)} if mode == "chunked" else {}
            o, st.recurrent[name] = fn(*xs, st.recurrent[name], a["scale"], **kw)
            return [o]
        if k == "GatedRMSNorm":
            return [ref_gated_rmsnorm(xs[0], xs[1], self.w(p["weight"]), a["eps"])]
        if k == "PartialRoPE":
            return [ref_partial_rope(xs[0], xs[1], a["rotary_dim"], a["theta"])]
        if k == "GatedAttention":
            q, kk, vv, gate = xs
            K, V = self._kv_append(st, op.states["kv"], kk, vv)
            positions = np.arange(st.length, st.length + T)
            o = ref_attention(q, K, V, positions, a["scale"], a["groups"])
            return [(o.reshape(T, -1) * _sigmoid(gate.reshape(T, -1))).astype(F32)]
        if k == "SwiGLU":
            return [ref_swiglu(xs[0], xs[1])]
        if k == "Concat":
            return [np.concatenate([xs[0].astype(F32), xs[1].astype(F32)], axis=1)]
        if k == "ResidualAdd":
            return [(xs[0] + xs[1]).astype(F32)]
        if k == "GatedDeltaNet":
            return [self._gdn_block(op, xs[0], st, T)]
        if k == "GatedAttentionBlock":
            return [self._attn_block(op, xs[0], xs[1], st, T)]
        if k == "LMHead":
            x = xs[0] if a.get("rows", "all") == "all" else xs[0][-1:]
            return [ref_linear(x, self.w(p["weight"]))]
        raise ValueError(f"reference executor: unknown op kind {k!r} (op {op.name})")

    def _kv_append(self, st, name: str, k: np.ndarray, v: np.ndarray):
        """Append the step's K / V rows [T, Hkv, d] to KV state ``name`` and return the whole context's (K, V)
        [L, Hkv, d] fp32. An int8 KV state (``dtype`` ``i8``: an artifact compiled with ``--kv-dtype int8``) keeps
        exactly what the int8 cache holds (:func:`ninferc.ir.quant.kv_int8_roundtrip`: per 64 elements, codes and
        an fp32 scale); a bf16 one is rounded to bf16 when emulating storage, else kept in fp32."""
        k, v = k.astype(F32), v.astype(F32)
        spec = self.graph.states.get(name)
        if spec is not None and spec.dtype == "i8":
            from ninferc.ir.quant import kv_int8_roundtrip

            k, v = kv_int8_roundtrip(k), kv_int8_roundtrip(v)
        elif self.emulate_storage:
            k, v = _round_bf16(k), _round_bf16(v)
        return st.kv_append(name, k, v)

    def _gdn_block(self, op: Op, proj: np.ndarray, st: SequenceState, T: int) -> np.ndarray:
        """The fused GatedDeltaNet op, composed from the unfused references (same numerics)."""
        a, p, c = op.attrs, op.params, op.attrs["cols"]
        cols = lambda n: proj[:, c[n][0]:c[n][1]]  # noqa: E731
        qkv = np.concatenate([cols("q"), cols("k"), cols("v")], axis=1)
        cname = op.states["conv"]
        conv, st.conv[cname] = ref_causal_conv1d(qkv, self.w(p["conv"]), st.conv[cname])
        kd = a["Hk"] * a["dk"]
        q = ref_l2norm(conv[:, :kd].reshape(T, a["Hk"], a["dk"]), a["l2_eps"])
        k = ref_l2norm(conv[:, kd:2 * kd].reshape(T, a["Hk"], a["dk"]), a["l2_eps"])
        v = conv[:, 2 * kd:].reshape(T, a["Hv"], a["dv"])
        g, beta = ref_gdn_gating(cols("a"), cols("b"), self.w(p["A_log"]), self.w(p["dt_bias"]))
        rname = op.states["recurrent"]
        mode = self.gdn_mode
        if mode == "auto":
            mode = "recurrent" if (T == 1 and st.length > 0) else "chunked"
        if mode == "recurrent":
            o, st.recurrent[rname] = ref_gated_delta_rule_recurrent(q, k, v, g, beta, st.recurrent[rname], a["scale"])
        else:
            o, st.recurrent[rname] = ref_gated_delta_rule_chunked(q, k, v, g, beta, st.recurrent[rname], a["scale"],
                                                                  chunk=a["chunk"])
        z = cols("z").reshape(T, a["Hv"], a["dv"])
        return ref_gated_rmsnorm(o, z, self.w(p["norm"]), a["eps"]).reshape(T, -1)

    def _attn_block(self, op: Op, proj: np.ndarray, positions: np.ndarray, st: SequenceState, T: int) -> np.ndarray:
        """The fused GatedAttentionBlock op, composed from the unfused references."""
        a, p, c = op.attrs, op.params, op.attrs["cols"]
        Hq, Hkv, hd = a["Hq"], a["Hkv"], a["hd"]
        qg = proj[:, c["qg"][0]:c["qg"][1]].reshape(T, Hq, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = proj[:, c["k"][0]:c["k"][1]].reshape(T, Hkv, hd)
        v = proj[:, c["v"][0]:c["v"][1]].reshape(T, Hkv, hd)
        q = ref_partial_rope(ref_rmsnorm(q, self.w(p["q_norm"]), a["eps"], True), positions, a["rotary_dim"], a["theta"])
        k = ref_partial_rope(ref_rmsnorm(k, self.w(p["k_norm"]), a["eps"], True), positions, a["rotary_dim"], a["theta"])
        K, V = self._kv_append(st, op.states["kv"], k, v)
        o = ref_attention(q, K, V, positions, a["scale"], a["groups"])
        return (o.reshape(T, -1) * _sigmoid(gate.reshape(T, -1))).astype(F32)


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """Round fp32 values to the nearest bf16 (ties to even) and back to fp32."""
    import ml_dtypes

    return np.asarray(x, F32).astype(ml_dtypes.bfloat16).astype(F32)
