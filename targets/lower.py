"""Lowering: compiled IR graph -> kernel steps per mode, and the model's plan for one target.

A :class:`Step` is one kernel launch site: a kernel family, its problem (shape), the mode it runs in
(``decode``: one token per sequence, T = B; ``prefill``: a chunk of T tokens of B packed sequences;
``verify``: the speculative verify step, B sequences of K + 1 tokens, which runs the prefill steps but the GDN
state's and the attention's (:meth:`Program.for_mode`); ``both``), which runtime count is the family's ``tokens`` argument (T, B or R = logit rows), and a
binding of every kernel argument to a symbolic :class:`Ref` (an activation tensor of the graph, a
weight, a state pool, batch metadata, a workspace, a constant). The runtime resolves Refs to device
pointers and scalars; the plan evaluates the same steps' launches for representative T on a target.

Routes across families are chosen here and nowhere else: a Linear runs the decode GEMV (``gemv``, whose
own CTA shape and split-K route its cost model picks) while T <= :data:`GEMV_MAX_TOKENS` and the tensor-core
GEMM (``gemm``) above, the
boundary where the GEMV's token chunks start re-reading the weight matrix more than the GEMM's
tiles cost.

Norm folding (decode-size steps): an AddRMSNorm between two Linears
(:func:`ninferc.ir.passes.common.norms_between_linears`: the mixer or MLP output projection, the residual add
+ norm, the next projection) is done by the two GEMVs: the producer's epilogue ``add_norm_parts`` adds its
output into the residual stream, writes the norm's bf16 output pre-scaled by the norm weight and each CTA's
sum of squares; the consumer (``in_norm="parts"``) finishes the norm with the per-token factor. That norm
step, marked ``absorbed_by`` the producer (and ``absorbed_into`` the consumer), is left out of the launches of
a step size where both Linears run the GEMV (:func:`drop_unneeded_steps`); a prefill chunk's GEMMs store the
producer's output, and the norm step runs as its own kernel. The absorbed norm's output lives where the graph's
memory plan put it (PlanMemory places it as born at the producer, so the producer never overwrites its own
input); an artifact whose memory plan does not keep it apart from the producer's input is lowered unfused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.graph import SCALES_SUFFIX, Graph, Op
from ninferc.ir.passes.common import norms_between_linears
from ninferc.ir.passes.choose_formats import KV_DTYPES
from ninferc.targets.kernels import FAMILIES
from ninferc.targets.kernels.attention import AttentionProblem
from ninferc.targets.kernels.elementwise import EmbedProblem, RMSNormProblem, embed_arg_names, rmsnorm_arg_names
from ninferc.targets.kernels.gdn import SPLIT_ROUTES as GDN_SPLIT_ROUTES
from ninferc.targets.kernels.gdn import WY_ROUTES as GDN_WY_ROUTES
from ninferc.targets.kernels.gdn import GdnProblem
from ninferc.targets.kernels.gdn import arg_names as gdn_arg_names
from ninferc.targets.kernels.gdn import kernel_mode as gdn_kernel_mode
from ninferc.targets.kernels.gemm import GemmProblem, group_m_for
from ninferc.targets.kernels.gemm import arg_names as gemm_arg_names
from ninferc.targets.kernels.gemv import GemvProblem
from ninferc.targets.kernels.mlp_decode import MlpProblem
from ninferc.targets.kernels.sample import SampleProblem
from ninferc.targets.kernels.sample import arg_names as sample_arg_names
from ninferc.targets.plan import KernelSpec, Launch, PlanContext, family_variants

#: largest T served by the GEMV route of a Linear (its kernels hold 4 tokens per pass; two passes
#: still read the weights from L2 mostly); above it the tensor-core GEMM reads them once per M-tile
GEMV_MAX_TOKENS = 8
#: most draft tokens K of one speculative round: the ``verify`` mode's steps carry at most K + 1 = 6 tokens per
#: sequence (``--draft-tokens`` of ``run``, ``bench`` and ``serve`` take 1..K; the plan, 0..K)
MAX_DRAFT_TOKENS = 5
#: entries per sequence of the runtime's pinned host block of sampled ids (the sampler's ``history``, row stride):
#: two halves, which the runtime's metadata uploads alternate between (``Engine.write_meta``)
SAMPLED_IDS_LD = 128


@dataclass(frozen=True)
class Ref:
    """A symbolic kernel argument.

    kinds: ``tensor`` (graph activation ``name``, + ``offset`` elements), ``param`` (weight ``name``),
    ``state`` (pool of state ``name``), ``meta`` (batch metadata array ``name``: tokens, tok_pos,
    tok_seq, seq_start, seq_ctx, seq_slot, page_table, row_index, ids_pos -- the sampler's cursor into ids_host,
    the pinned host block of sampled ids -- and the sampling arrays), ``ws`` (workspace buffer ``name``),
    ``const`` (scalar ``value`` of ``dtype`` i32/f32/u64, or a host array ``name`` uploaded once such as
    RoPE inv_freq), ``null`` (a null pointer), ``barrier`` (the grid-barrier counter), ``logits``, ``parts``
    (int32: the norm parts -- row blocks -- of step ``name``'s add_norm_parts GEMV launch in the same step).
    """

    kind: str
    name: str = ""
    value: Any = None
    dtype: str = ""
    offset: int = 0


def T(name):  # noqa: N802 - tiny constructors keep the binding tables readable
    """Ref to graph activation ``name``."""
    return Ref("tensor", name)


def P(name):  # noqa: N802
    """Ref to weight ``name``."""
    return Ref("param", name)


def I32(v):  # noqa: N802
    """Ref to an int32 constant."""
    return Ref("const", value=int(v), dtype="i32")


def F32(v):  # noqa: N802
    """Ref to an fp32 constant."""
    return Ref("const", value=float(v), dtype="f32")


NULL = Ref("null")


@dataclass
class Step:
    """One kernel launch site (see module docstring). ``rows``: ``T``, ``B`` or ``R`` is passed to the
    family's ``launch`` as ``tokens``; ``batch``: pass ``batch=B`` as well."""

    name: str
    op: str
    mode: str
    family: str
    problem: Any
    rows: str
    bind: dict[str, Ref]
    batch: bool = False
    layer: int = -1
    #: AddRMSNorm steps between two Linears: the producer Linear step whose GEMV (add_norm_parts) does the
    #: residual add, and the consumer whose GEMV (in_norm parts) finishes the norm
    absorbed_by: str = ""
    absorbed_into: str = ""
    #: a gate|up Linear step whose MLP can run as one fused kernel: the down step (family ``mlp``) that launches it;
    #: this step is skipped where that launch is the fused kernel
    fused_into: str = ""
    #: a ``prefill`` step the ``verify`` mode replaces by its own (the GDN conv, ring update and core: the verify step
    #: keeps the conv ring and the state after every token)
    prefill_only: bool = False
    #: a GDN gated-norm step: the core step (prefill ``.core``, verify ``.verify``) it follows, needed only where that
    #: core's launch splits the columns (a route of ``ninferc.targets.kernels.gdn.SPLIT_ROUTES``: o to ``o_ws``)
    follows: str = ""


class LinearRoute:
    """Y = X @ W^T routed by T: ``gemv`` up to :data:`GEMV_MAX_TOKENS`, ``gemm`` above.

    The problem is a :class:`GemvProblem` (k, n, epilogue in ``store | swiglu``); the GEMM problem is
    derived from it.
    """

    name = "linear"
    arch_variants = True  # variants(problem, arch): see ninferc.targets.plan.family_variants

    def __init__(self):
        self.gemv, self.gemm = FAMILIES["gemv"], FAMILIES["gemm"]

    @staticmethod
    def gemm_problem(p: GemvProblem) -> GemmProblem:
        """The tensor-core GEMM problem equivalent to a GEMV problem."""
        return GemmProblem(p.k, p.n, "swiglu_bf16" if p.epilogue == "swiglu" else "store_f32", wfmt=p.wfmt)

    def variants(self, p: GemvProblem, arch=None) -> list[KernelSpec]:
        """GEMV and GEMM variants together (both routes are compiled); ``arch`` adds the target's
        arch-specific GEMM routes (:meth:`GemmFamily.variants`)."""
        return self.gemv.variants(p) + self.gemm.variants(self.gemm_problem(p), arch)

    def launch(self, p: GemvProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The GEMV launch up to GEMV_MAX_TOKENS, the GEMM launch above."""
        if tokens <= GEMV_MAX_TOKENS:
            return self.gemv.launch(p, tokens, ctx)
        return self.gemm.launch(self.gemm_problem(p), tokens, ctx)


class MlpRoute:
    """The down Linear of an MLP whose gate|up and down GEMVs can be one fused launch: the fused decode MLP
    (``mlp_decode``) where it serves the step (:meth:`ninferc.targets.kernels.mlp_decode.MlpDecodeFamily.serves`:
    enabled -- off by default, see that module's "Status" --, one token, quantised weights), else the down Linear's
    own route (:class:`LinearRoute` on ``problem.down``).
    The problem is an :class:`~ninferc.targets.kernels.mlp_decode.MlpProblem`; the gate|up step
    (``Step.fused_into``) is skipped where the fused kernel runs (:func:`drop_unneeded_steps`)."""

    name = "mlp"
    arch_variants = True

    def __init__(self):
        self.linear, self.fused = LinearRoute(), FAMILIES["mlp_decode"]

    def variants(self, p: MlpProblem, arch=None) -> list[KernelSpec]:
        """The down Linear's variants and, when the family is enabled, the fused kernel (when ``p`` has one)."""
        return self.linear.variants(p.down, arch) + (self.fused.variants(p) if self.fused.enabled else [])

    def launch(self, p: MlpProblem, tokens: int, ctx: PlanContext) -> Launch:
        """The fused launch where it serves ``tokens``, else the down Linear's launch."""
        if self.fused.serves(p, tokens, ctx):
            return self.fused.launch(p, tokens, ctx)
        return self.linear.launch(p.down, tokens, ctx)


class GdnVerifyRoute:
    """The GDN core of the speculative ``verify`` mode: ``gdn_recurrent`` mode ``verify`` over the B sequences' K + 1
    tokens, the state after token j of sequence b stored in slot ``seq_slot_out[b] + j``
    (:meth:`~ninferc.targets.kernels.gdn.GdnRecurrentFamily.verify_launch`)."""

    name = "gdn_verify"

    def variants(self, p: GdnProblem) -> list[KernelSpec]:
        """The verify kernel."""
        return [FAMILIES["gdn_recurrent"].prefill_spec(p, "verify")]

    def launch(self, p: GdnProblem, tokens: int, ctx: PlanContext, batch: int = 1) -> Launch:
        """Grid (Hv * dv / dv_block, B); route ``verify_split`` where the columns are split (o to ``o_ws``)."""
        return FAMILIES["gdn_recurrent"].verify_launch(p, tokens, ctx, batch=batch)


class GdnConvVerifyRoute:
    """The conv of the ``verify`` mode with its per-token rings: the conv output, and the ring after token j of
    sequence b into slot ``seq_slot_out[b] + j`` (``gdn_conv`` with ``verify``)."""

    name = "gdn_conv_verify"

    def variants(self, p: GdnProblem) -> list[KernelSpec]:
        """The verify kernel of ``gdn_conv``."""
        return [FAMILIES["gdn_conv"].spec(p, verify=True)]

    def launch(self, p: GdnProblem, tokens: int, ctx: PlanContext, batch: int = 1) -> Launch:
        """Grid (ceil(conv_dim / threads), B)."""
        return FAMILIES["gdn_conv"].launch(p, tokens, ctx, batch=batch, verify=True)


#: step family names that are routes over a registry family (:func:`family`)
class AttnVerifyRoute:
    """The attention of the ``verify`` mode: ``attn_decode`` with one row per token of the step, each with its own
    context and its sequence's page-table row (:meth:`~ninferc.targets.kernels.attention.AttnDecodeFamily.verify_launch`;
    never the fused-prep kernel: the mode's ``attn_prep`` step writes every token's K / V first)."""

    name = "attn_verify"

    def variants(self, p: AttentionProblem) -> list[KernelSpec]:
        """The decode kernels without the folded prep."""
        return FAMILIES["attn_decode"].variants(p, prep=False)

    def launch(self, p: AttentionProblem, tokens: int, ctx: PlanContext) -> Launch:
        """Grid (splits, Hkv, T)."""
        return FAMILIES["attn_decode"].verify_launch(p, tokens, ctx)


class AttnCombineVerifyRoute:
    """The ``verify`` mode's ``attn_combine``: the merge of :class:`AttnVerifyRoute`'s splits (its split count)."""

    name = "attn_combine_verify"

    def variants(self, p: AttentionProblem) -> list[KernelSpec]:
        """The combine kernel and the decode kernels whose split count it follows."""
        return [FAMILIES["attn_combine"].spec(p), *FAMILIES["attn_decode"].variants(p, prep=False)]

    def launch(self, p: AttentionProblem, tokens: int, ctx: PlanContext) -> Launch:
        """Grid (Hq * dim_ctas, T)."""
        return FAMILIES["attn_combine"].launch(p, tokens, ctx, prep=False)


ROUTES = {"linear": LinearRoute, "mlp": MlpRoute, "gdn_verify": GdnVerifyRoute, "gdn_conv_verify": GdnConvVerifyRoute,
          "attn_verify": AttnVerifyRoute, "attn_combine_verify": AttnCombineVerifyRoute}


def linear_problem(problem) -> GemvProblem:
    """The GEMV problem of a Linear step (an MLP step's down GEMV)."""
    return problem.down if isinstance(problem, MlpProblem) else problem


def family(name: str):
    """The family object for a step's ``family`` name (``linear`` is the GEMV/GEMM route, ``mlp`` the down Linear
    that may run the whole MLP fused, ``gdn_verify`` / ``gdn_conv_verify`` the verify mode's GDN kernels; the other
    names are keys of the family registry)."""
    route = ROUTES.get(name)
    return route() if route is not None else FAMILIES[name]


def arg_names(step: Step, launch: Launch) -> tuple[str, ...]:
    """The argument names of the kernel ``launch`` runs, in order."""
    fam = launch.kernel.family
    if fam == "gemv":
        return FAMILIES["gemv"].arg_names(linear_problem(step.problem))
    if fam == "gemm":
        return gemm_arg_names(LinearRoute.gemm_problem(linear_problem(step.problem)))
    if fam == "mlp_decode":
        return FAMILIES[fam].arg_names(step.problem)
    if fam == "embed":
        return embed_arg_names(step.problem)
    if fam == "sample":
        return sample_arg_names(step.problem)
    if fam == "rmsnorm":
        return rmsnorm_arg_names(step.problem)
    if fam.startswith("gdn_"):
        return gdn_arg_names(fam, gdn_kernel_mode(launch.kernel))
    if fam == "attn_decode":  # a fused-prep decode kernel takes proj ... instead of q
        return FAMILIES[fam].arg_names(step.problem, launch.kernel)
    return FAMILIES[fam].arg_names(step.problem)


def launch_scalars(step: Step, launch: Launch, ctx: PlanContext, batch: int) -> dict[str, np.generic]:
    """Scalars that come from the launch (token/row counts, split counts, rasterisation)."""
    fam = launch.kernel.family
    t = np.int32(launch.tokens)
    if fam == "gemv":
        return {"t_total": t, "splits": np.int32(launch.split_k)}
    if fam == "gemm":
        return {"t": t, "group_m": np.int32(group_m_for(launch))}
    if fam == "embed":
        return {"t": t}
    if fam in ("rmsnorm", "sample"):
        return {"rows": t}
    if fam.startswith("gdn_"):
        return {"num_seqs": np.int32(batch)}
    if fam == "attn_prep":
        return {"n_tokens": t}
    if fam == "attn_decode":  # the split rule of the kernel launched (a verify step's is never the fused-prep one)
        _, per = FAMILIES["attn_decode"].splits(step.problem, launch.tokens, ctx, prep=step.family == "attn_decode")
        return {"n_seqs": t, "splits": np.int32(launch.split_k), "pages_per_split": np.int32(per)}
    if fam == "attn_combine":
        return {"n_seqs": t, "splits": np.int32(launch.split_k)}
    return {}


def step_launch(step: Step, ctx: PlanContext, *, T: int, B: int, R: int) -> Launch:  # noqa: N803
    """Evaluate a step's launch for a step of T tokens, B sequences and R logit rows."""
    n = {"T": T, "B": B, "R": R}[step.rows]
    fam = family(step.family)
    if step.batch:
        return fam.launch(step.problem, n, ctx, batch=B)
    return fam.launch(step.problem, n, ctx)


def step_variants(step: Step, arch=None) -> list[KernelSpec]:
    """Every kernel the step's family may launch for its problem on ``arch`` (name or Arch; None: the
    portable variants only -- the GEMM's wgmma routes need the target)."""
    return family_variants(family(step.family), step.problem, arch)


# ---------------------------------------------------------------------------------------------------
# graph -> steps
# ---------------------------------------------------------------------------------------------------
@dataclass
class Program:
    """The lowered model: ``steps`` in execution order (each with its mode), plus the problems that
    size the runtime's buffers."""

    steps: list[Step] = field(default_factory=list)
    page_size: int = 64
    max_context: int = 4096

    def for_mode(self, mode: str) -> list[Step]:
        """Steps of ``decode``, ``prefill`` or ``verify`` (those marked ``both`` included), in order. ``verify`` is the
        speculative verify step (B sequences of K + 1 tokens, every token's logits): the prefill steps, the GDN ring
        update and core and the attention (split-KV rows per token, :class:`AttnVerifyRoute`) replaced by their
        verify kernels (``prefill_only`` steps left out)."""
        if mode == "verify":
            return [s for s in self.steps
                    if s.mode in ("verify", "both") or (s.mode == "prefill" and not s.prefill_only)]
        return [s for s in self.steps if s.mode in (mode, "both")]

    def sampler(self, greedy: bool) -> Step:
        """The sampling step (``argmax`` when greedy, else temperature/top-k/top-p)."""
        return next(s for s in self.steps if s.mode == ("sample_argmax" if greedy else "sample_sample"))

    def row_argmax(self) -> Step:
        """The argmax of every logits row (mode ``sample_rows``: no id history, no metadata advanced)."""
        return next(s for s in self.steps if s.mode == "sample_rows")

    def row_sampler(self) -> Step:
        """A draw from every logits row with that row's own parameters and Philox counter (mode
        ``sample_rows_sample``: no id history, no metadata advanced; temperature 0 rows take the argmax)."""
        return next(s for s in self.steps if s.mode == "sample_rows_sample")


#: IR KV-state dtype -> the attention kernels' ``kv_dtype`` (the inverse of ChooseFormats' KV_DTYPES)
KV_DTYPE_NAMES = {ir: name for name, ir in KV_DTYPES.items()}


def _scales(spec) -> Ref:
    """The scales tensor of a quantised param (bound only by the quantised kernels), else a null."""
    return P(spec.name + SCALES_SUFFIX) if spec.quantised else NULL


def _gdn_problem(op: Op, graph: Graph) -> GdnProblem:
    a = op.attrs
    proj_w = graph.tensors[op.inputs[0]].shape[1]
    p = GdnProblem(hk=a["Hk"], hv=a["Hv"], dk=a["dk"], dv=a["dv"], width=a["width"], scale=float(a["scale"]),
                   l2_eps=float(a["l2_eps"]), norm_eps=float(a["eps"]))
    want = {"q": (p.off_q, p.off_k), "k": (p.off_k, p.off_v), "v": (p.off_v, p.off_z), "z": (p.off_z, p.off_b),
            "b": (p.off_b, p.off_a), "a": (p.off_a, p.proj_dim)}
    got = {k: tuple(v) for k, v in a["cols"].items()}
    if got != want or proj_w != p.proj_dim:
        raise PlanError(f"{op.name}: projection columns {got} (width {proj_w}) do not match the GDN kernels' "
                        f"layout {want} (width {p.proj_dim}); the in-projection must be fused as qkv|z|b|a")
    return p


def _attn_problem(op: Op, graph: Graph, page_size: int, max_context: int) -> AttentionProblem:
    a = op.attrs
    kv_state = graph.states[op.states["kv"]]
    p = AttentionProblem(a["Hq"], a["Hkv"], a["hd"], a["rotary_dim"], float(a["theta"]), float(a["eps"]),
                         page_size, -(-max_context // page_size), kv_dtype=KV_DTYPE_NAMES[kv_state.dtype])
    want = {"qg": (0, p.k_offset), "k": (p.k_offset, p.v_offset), "v": (p.v_offset, p.proj_dim)}
    got = {k: tuple(v) for k, v in a["cols"].items()}
    if got != want or graph.tensors[op.inputs[0]].shape[1] != p.proj_dim:
        raise PlanError(f"{op.name}: projection columns {got} do not match the attention kernels' layout {want}")
    return p


def check_page_size(page_size: int) -> None:
    """Refuse a KV page size the attention kernels cannot take: ``page_size`` tokens per page must be a positive
    multiple of 32 (the attention kernels take a page as a whole number of warp-wide key groups:
    ``targets.kernels.attention``'s problem check asks page_size % 32 == 0; this check runs before any work).

    Raises:
        PlanError: naming the value and the rule.
    """
    if page_size < 32 or page_size % 32:
        raise PlanError(f"KV page size {page_size} must be a positive multiple of 32 tokens")


#: the speculating engine's buffer of bf16 hidden rows the MTP head reads (:func:`lower`'s ``mtp_hidden``): the main
#: program's final norm writes every token's row into it; the MTP program's input ``hidden`` gathers from it
MTP_HIDDEN_SRC = "mtp.hidden_src"


def _concat_slices(graph: Graph) -> dict[str, tuple[str, int, int]]:
    """norm output -> (Concat output, byte offset of its columns, the Concat's row width) for every ``Concat`` of two
    RMSNorm outputs read by the Concat alone (the MTP head's input): the two norms write the halves of its bf16 row
    (``ld_out``), and the Concat itself needs no kernel.

    Raises:
        PlanError: a Concat of anything else (no kernel lowers it)."""
    out = {}
    for op in graph.ops():
        if op.kind != "Concat":
            continue
        a, b = op.inputs
        producers = [graph.producer(t) for t in (a, b)]
        if any(p is None or p.kind != "RMSNorm" or len(graph.consumers(t)) != 1 for p, t in zip(producers, (a, b))):
            raise PlanError(f"no kernel lowers op {op.name} (Concat): its inputs must be two RMSNorm outputs read by it "
                            "alone (the norms then write the halves of its row)")
        wa, wb = (graph.tensors[t].shape[1] for t in (a, b))
        out[a] = (op.outputs[0], 0, wa + wb)
        out[b] = (op.outputs[0], 2 * wa, wa + wb)  # bf16 columns: bytes
    return out


def lower(graph: Graph, *, page_size: int = 64, max_context: int = 4096, fuse_norm: bool = True,
          mtp_hidden: bool = False) -> Program:
    """Lower a compiled graph (after :func:`ninferc.ir.passes.run_pipeline`) to kernel steps.

    ``fuse_norm=False`` keeps every AddRMSNorm a step of its own (no norm folded into the GEMVs): the
    reference side of an A/B benchmark (bench/fuse_norm_ab.py); the kernels it needs are a subset of the
    folded program's, so either program runs on the same artifact.

    ``mtp_hidden`` (the model's graph, an engine that speculates with the MTP head): the prefill, verify and decode
    steps also store the final norm's output for *every* token (bf16, in the engine's :data:`MTP_HIDDEN_SRC` buffer),
    which the head's rows read (a decode step's: a speculating server's steps that draft nothing,
    ``CudaBatchBackend._mtp_decode_rows``); the final norm's own launch keeps gathering the rows the LM head needs.

    The MTP head's graph (:func:`ninferc.ir.qwen3_5.build_mtp_graph`, ``meta["mtp"]``) lowers like the model's, with
    two rules of its own: its ``hidden`` input is the model's final-norm output, bf16 on the GPU, read by the
    hidden-side norm (``x_bf16``) gathering rows by the batch metadata ``hidden_rows``; its ``Concat`` is done by the two
    norms writing the halves of one row (:func:`_concat_slices`).

    Raises:
        PlanError: an op kind with no kernel, or a fused op whose layout the kernels do not take.
    """
    check_page_size(page_size)
    if max_context < 1:
        raise PlanError(f"max context {max_context} must be at least 1 token")
    prog = Program(page_size=page_size, max_context=max_context)
    add = prog.steps.append
    lm_inputs = {op.inputs[0] for op in graph.ops() if op.kind == "LMHead"}
    is_mtp = bool(graph.meta.get("mtp"))
    slices = _concat_slices(graph)
    folded = _norms_to_fold(graph) if fuse_norm else {}  # norm name -> (producer, consumer) Linear names
    norm_out = {p: graph.op(n) for n, (p, _) in folded.items()}  # producer Linear -> its norm
    norm_in = {c: graph.op(n) for n, (_, c) in folded.items()}   # consumer Linear -> its norm
    mlp_of = _fusable_mlps(graph, norm_in, norm_out)               # down Linear -> its gate|up Linear
    gate_up_of = {gu: dn for dn, gu in mlp_of.items()}
    for op in graph.ops():
        k, a, L = op.kind, op.attrs, op.layer
        if k == "Embedding":
            wspec = graph.params[op.params["weight"]]
            V, H = wspec.shape
            add(Step(op.name, op.name, "both", "embed", EmbedProblem(H, V, wfmt=wspec.dtype), "T",
                     {"tokens": Ref("meta", "tokens"), "table": P(wspec.name), "scales": _scales(wspec),
                      "x": T(op.outputs[0]), "h": I32(H), "vocab": I32(V)}, layer=L))
        elif k in ("RMSNorm", "AddRMSNorm"):
            D = graph.params[op.params["weight"]].shape[0]
            y = op.outputs[-1]
            gather = y in lm_inputs
            mode = "add_rmsnorm" if k == "AddRMSNorm" else "rmsnorm"
            y_ref, ld_out = T(y), 0
            if y in slices:  # one half of the MTP head's Concat row
                cat, off, ld_out = slices[y]
                y_ref = Ref("tensor", cat, offset=off)
            if is_mtp and op.inputs[0] == "hidden":  # the model's bf16 final-norm rows, gathered by hidden_rows
                prob = RMSNormProblem(D, mode, bool(a["unit_offset"]), True, float(a["eps"]), x_dtype="bf16",
                                      ld_out=ld_out)
                add(Step(op.name, op.name, "both", "rmsnorm", prob, "T",
                         {"x": T("hidden"), "d": NULL, "w": P(op.params["weight"]), "y": y_ref,
                          "row_index": Ref("meta", "hidden_rows"), "eps": F32(a["eps"])}, layer=L))
                continue
            prob = RMSNormProblem(D, mode, bool(a["unit_offset"]), gather, float(a["eps"]), ld_out=ld_out)
            pc = folded.get(op.name, ("", ""))
            add(Step(op.name, op.name, "both", "rmsnorm", prob, "R" if gather else "T",
                     {"x": T(op.inputs[0]), "d": T(op.inputs[1]) if k == "AddRMSNorm" else NULL,
                      "w": P(op.params["weight"]), "y": y_ref,
                      "row_index": Ref("meta", "row_index") if gather else NULL, "eps": F32(a["eps"])}, layer=L,
                     absorbed_by=pc[0], absorbed_into=pc[1]))
            if gather and mtp_hidden and not is_mtp:  # every token's hidden row for the MTP head (every mode)
                add(Step(f"{op.name}.mtp_hidden", op.name, "both", "rmsnorm",
                         RMSNormProblem(D, mode, bool(a["unit_offset"]), False, float(a["eps"])), "T",
                         {"x": T(op.inputs[0]), "d": T(op.inputs[1]) if k == "AddRMSNorm" else NULL,
                          "w": P(op.params["weight"]), "y": T(MTP_HIDDEN_SRC), "row_index": NULL,
                          "eps": F32(a["eps"])}, layer=L))
        elif k == "Concat":  # done by the two norms (_concat_slices)
            continue
        elif k in ("Linear", "LMHead"):
            wspec = graph.params[op.params["weight"]]
            N, K = wspec.shape
            ep = "swiglu" if a.get("epilogue", "none") == "swiglu" else "store"
            n_out = N // 2 if ep == "swiglu" else N
            extra = {}
            if op.name in norm_out:  # residual add + the next norm's inputs, in the GEMV
                norm = norm_out[op.name]
                prob = GemvProblem(K, n_out, "add_norm_parts", wfmt=wspec.dtype,
                                   unit_offset=bool(norm.attrs["unit_offset"]))
                extra = {"h": T(norm.inputs[0]), "norm_w": P(norm.params["weight"]), "xs": T(norm.outputs[-1]),
                         "ss_out": Ref("ws", "norm_ss")}
            elif op.name in norm_in:  # finishes the norm whose parts its producer wrote
                norm = norm_in[op.name]
                prob = GemvProblem(K, n_out, ep, wfmt=wspec.dtype, in_norm="parts")
                extra = {"ss_in": Ref("ws", "norm_ss"), "ss_parts": Ref("parts", folded[norm.name][0]),
                         "in_eps": F32(norm.attrs["eps"])}
            else:
                prob = GemvProblem(K, n_out, ep, wfmt=wspec.dtype)
            y = Ref("logits") if k == "LMHead" else T(op.outputs[0])
            fam_name = "linear"
            if op.name in mlp_of:  # the down Linear of a fusable MLP: the whole MLP where the fused kernel serves
                gu = graph.op(mlp_of[op.name])
                gspec, gnorm = graph.params[gu.params["weight"]], norm_in[gu.name]
                prob = MlpProblem(N, K, wspec.dtype, unit_offset=bool(norm_out[op.name].attrs["unit_offset"]))
                fam_name = "mlp"
                extra.update({"w_gu": P(gspec.name), "s_gu": _scales(gspec), "w_dn": P(wspec.name),
                              "s_dn": _scales(wspec), "x_gu": T(gu.inputs[0]), "ss_in": Ref("ws", "norm_ss"),
                              "ss_parts": Ref("parts", folded[gnorm.name][0]), "in_eps": F32(gnorm.attrs["eps"]),
                              "y_gu": T(gu.outputs[0]), "parts": Ref("ws", "mlp_parts"), "sync": Ref("ws", "mlp_sync"),
                              "hidden": I32(N), "inter": I32(K)})
            add(Step(op.name, op.name, "both", fam_name, prob, "R" if k == "LMHead" else "T",
                     {"x": T(op.inputs[0]), "w": P(wspec.name), "scales": _scales(wspec), "y": y,
                      "ws": Ref("ws", "gemv"),
                      "barrier": Ref("barrier"), "k": I32(K), "n_out": I32(linear_problem(prob).n), "ldx": I32(K),
                      **extra},
                     layer=L, fused_into=gate_up_of.get(op.name, "")))
        elif k == "GatedDeltaNet":
            p = _gdn_problem(op, graph)
            common = {"proj": T(op.inputs[0]), "conv_w": P(op.params["conv"]), "A_log": P(op.params["A_log"]),
                      "dt_bias": P(op.params["dt_bias"]), "norm_w": P(op.params["norm"]),
                      "conv_ring": Ref("state", op.states["conv"]), "rec_state": Ref("state", op.states["recurrent"]),
                      "y": T(op.outputs[0]), "conv_out": Ref("ws", "gdn_conv_out"), "o_ws": Ref("ws", "gdn_o"),
                      "wy_ws": Ref("ws", "gdn_wy"),
                      "tok_pos": Ref("meta", "tok_pos"), "tok_seq": Ref("meta", "tok_seq"),
                      "seq_start": Ref("meta", "seq_start"), "seq_slot": Ref("meta", "seq_slot"),
                      "seq_slot_out": Ref("meta", "seq_slot_out"),
                      "scale": F32(a["scale"]), "l2_eps": F32(a["l2_eps"]), "norm_eps": F32(a["eps"])}
            add(Step(f"{op.name}.decode", op.name, "decode", "gdn_recurrent", p, "T", common, layer=L))
            add(Step(f"{op.name}.conv", op.name, "prefill", "gdn_conv", p, "T", common, layer=L, prefill_only=True))
            add(Step(f"{op.name}.ring", op.name, "prefill", "gdn_ring_update", p, "T", common, batch=True, layer=L,
                     prefill_only=True))
            add(Step(f"{op.name}.conv_verify", op.name, "verify", "gdn_conv_verify", p, "T", common, batch=True,
                     layer=L))
            add(Step(f"{op.name}.wy", op.name, "prefill", "gdn_chunk_wy", p, "T", common, batch=True, layer=L,
                     prefill_only=True))
            add(Step(f"{op.name}.core", op.name, "prefill", "gdn_chunk", p, "T", common, batch=True, layer=L,
                     prefill_only=True))
            add(Step(f"{op.name}.verify", op.name, "verify", "gdn_verify", p, "T", common, batch=True, layer=L))
            add(Step(f"{op.name}.verify_norm", op.name, "verify", "gdn_gated_norm", p, "T", common, layer=L,
                     follows=f"{op.name}.verify"))
            add(Step(f"{op.name}.norm", op.name, "prefill", "gdn_gated_norm", p, "T", common, layer=L,
                     prefill_only=True, follows=f"{op.name}.core"))
        elif k == "GatedAttentionBlock":
            p = _attn_problem(op, graph, page_size, max_context)
            kv = op.states["kv"]
            kv_scales = ({"k_scales": Ref("state", kv, value="k_scales"), "v_scales": Ref("state", kv, value="v_scales")}
                         if p.kv_dtype != "bf16" else {})
            common = {"proj": T(op.inputs[0]), "q_norm_w": P(op.params["q_norm"]), "k_norm_w": P(op.params["k_norm"]),
                      "inv_freq": Ref("const", f"inv_freq:{p.rotary_dim}:{p.theta}"),
                      "tok_pos": Ref("meta", "tok_pos"), "tok_seq": Ref("meta", "tok_seq"),
                      "seq_start": Ref("meta", "seq_start"), "seq_ctx": Ref("meta", "seq_ctx"),
                      "page_table": Ref("meta", "page_table"), "q_out": Ref("ws", "attn_q"), "q": Ref("ws", "attn_q"),
                      "k_pages": Ref("state", kv, value="k"), "v_pages": Ref("state", kv, value="v"),
                      "ws": Ref("ws", "attn_partials"), "out": T(op.outputs[0]),
                      "max_pages": I32(p.max_pages), "eps": F32(p.eps), "scale": F32(p.scale), **kv_scales}
            add(Step(f"{op.name}.prep", op.name, "both", "attn_prep", p, "T", common, layer=L))
            add(Step(f"{op.name}.decode", op.name, "decode", "attn_decode", p, "T", common, layer=L))
            add(Step(f"{op.name}.combine", op.name, "decode", "attn_combine", p, "T", common, layer=L))
            add(Step(f"{op.name}.prefill", op.name, "prefill", "attn_prefill", p, "T", common, batch=True, layer=L,
                     prefill_only=True))
            # the verify mode: one split-KV row per token, its own context and its sequence's page-table row
            rows = {**common, "page_table": Ref("meta", "tok_pages"), "seq_ctx": Ref("meta", "tok_ctx")}
            add(Step(f"{op.name}.verify", op.name, "verify", "attn_verify", p, "T", rows, layer=L))
            add(Step(f"{op.name}.verify_combine", op.name, "verify", "attn_combine_verify", p, "T", rows, layer=L))
        else:
            raise PlanError(f"no kernel lowers op {op.name} of kind {op.kind}")
        if k == "LMHead":
            V = graph.params[op.params["weight"]].shape[0]
            bind = {"logits": Ref("logits"), "ld": I32(V), "vocab": I32(V), "temperature": Ref("meta", "temperature"),
                    "top_k": Ref("meta", "top_k"), "top_p": Ref("meta", "top_p"), "seed": Ref("meta", "seed"),
                    "step": Ref("meta", "rng_step"), "out": Ref("meta", "tokens"),
                    # the sampled ids also go to the runtime's pinned host block (read back without a copy), and
                    # the decode step's positions / context lengths advance on the device (no metadata upload)
                    "history": Ref("meta", "ids_host"), "hist_pos": Ref("meta", "ids_pos"),
                    "hist_ld": I32(SAMPLED_IDS_LD), "advance": I32(1), "ws": Ref("meta", "argmax_ws"),
                    "tok_pos": Ref("meta", "tok_pos"), "seq_ctx": Ref("meta", "seq_ctx")}
            for m in ("argmax", "sample"):
                add(Step(f"sample.{m}", op.name, f"sample_{m}", "sample", SampleProblem(V, m), "R", bind))
            # the argmax of every logits row of a step (the speculative verify step's greedy acceptance on the
            # device): no history, nothing advanced -- its rows are not sequences
            add(Step("sample.rows", op.name, "sample_rows", "sample", SampleProblem(V, "argmax"), "R",
                     {**bind, "history": NULL, "hist_pos": NULL, "advance": I32(0), "step": NULL,
                      "tok_pos": NULL, "seq_ctx": NULL}))
            # a draw from every row of a step with the row's own parameters and counter (a sampled verify step's
            # acceptance on the device: row j of a sequence drawn at counter draws + j)
            add(Step("sample.rows_sample", op.name, "sample_rows_sample", "sample", SampleProblem(V, "sample"), "R",
                     {**bind, "history": NULL, "hist_pos": NULL, "advance": I32(0), "tok_pos": NULL,
                      "seq_ctx": NULL}))
    return prog


def _fusable_mlps(graph: Graph, norm_in: dict, norm_out: dict) -> dict[str, str]:
    """down Linear -> gate|up Linear, for each MLP the fused decode kernel can run: the gate|up Linear (swiglu)
    finishes a folded norm (``norm_in``), its output is read by the down Linear alone, the down Linear starts the
    next folded norm (``norm_out``), and both weights have the same format."""
    out = {}
    for op in graph.ops():
        if op.kind != "Linear" or op.attrs.get("epilogue", "none") != "swiglu" or op.name not in norm_in:
            continue
        readers = graph.consumers(op.outputs[0])
        if len(readers) != 1 or readers[0].kind != "Linear" or readers[0].name not in norm_out:
            continue
        dn = readers[0]
        if graph.params[dn.params["weight"]].dtype == graph.params[op.params["weight"]].dtype:
            out[dn.name] = op.name
    return out


def _norms_to_fold(graph: Graph) -> dict[str, tuple[str, str]]:
    """The norms between two Linears (:func:`ninferc.ir.passes.common.norms_between_linears`) whose output's
    arena storage is apart from the producer's input (true for every graph PlanMemory placed since norms are
    folded; a graph planned otherwise keeps those norms unfused)."""
    mem = graph.meta.get("memory", {})
    tensors, aliases = mem.get("tensors", {}), mem.get("aliases", {})

    def span(t):
        p = tensors.get(aliases.get(t, t))
        return None if p is None else (p["offset_per_token"], p["offset_per_token"] + p["row_bytes"])

    out = {}
    for norm, (prod, cons) in norms_between_linears(graph).items():
        y, x = span(graph.op(norm).outputs[-1]), span(graph.op(prod).inputs[0])
        if y is not None and x is not None and (y[1] <= x[0] or x[1] <= y[0]):
            out[norm] = (prod, cons)
    return out


def drop_unneeded_steps(steps: list[Step], launches: dict[str, Launch]) -> list[Step]:
    """The steps of ``steps`` that must run, given every step's launch (by step name): a gate|up step only where its
    MLP's down step (``Step.fused_into``) does not launch the fused MLP kernel; ``attn_prep`` only where its
    layer's ``attn_decode`` launch (decode steps) is not a fused-prep kernel (template ``prep``); the GDN ``gdn_chunk_wy``
    step runs only before a ``wy`` / ``wy_split`` core route, a gated-norm step only after a split core route
    (``Step.follows``: ``chunked_split`` / ``wy_split`` in prefill, ``verify_split`` in verify; an unsplit core writes
    y itself); an AddRMSNorm step
    ``absorbed_by`` / ``absorbed_into`` two Linears is skipped when both launches are GEMVs (which then do the
    norm between them).

    Raises:
        PlanError: one of the two Linears runs the GEMV and the other not (the folded norm would be half done).
    """
    out = []
    for s in steps:
        if s.follows:  # a gated norm after its GDN core: only where the core split the columns
            core = launches.get(s.follows)
            if core is None or core.route not in GDN_SPLIT_ROUTES:
                continue
        if s.family == "gdn_chunk_wy":
            core = launches.get(s.name[: -len(".wy")] + ".core")
            if core is None or core.route not in GDN_WY_ROUTES:
                continue
        if s.fused_into:  # a gate|up step whose whole MLP the down step's fused kernel runs
            dn = launches.get(s.fused_into)
            if dn is not None and dn.kernel.family == "mlp_decode":
                continue
        if s.absorbed_by:
            prod, cons = launches.get(s.absorbed_by), launches.get(s.absorbed_into)
            gemv = [ln is not None and ln.kernel.family in ("gemv", "mlp_decode") for ln in (prod, cons)]
            if all(gemv):
                continue
            if any(gemv):
                raise PlanError(f"step {s.name}: its producer {s.absorbed_by} and consumer {s.absorbed_into} must both "
                                f"run the GEMV (found {prod.kernel.uri if prod else None} and "
                                f"{cons.kernel.uri if cons else None}); the folded norm needs both halves")
        if s.family == "attn_prep":  # a decode kernel with the prep folded in (AttnDecodeFamily.fuse_prep) does it
            dec = launches.get(s.name[: -len(".prep")] + ".decode")
            if dec is not None and dict(dec.kernel.params).get("prep"):
                continue
        out.append(s)
    return out
