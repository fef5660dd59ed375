"""The CUDA engine: an opened `.ninfer` artifact on the running GPU.

Start-up (:class:`Engine`), in order:
1. check the device can run the artifact's target (a plan for an older arch runs on a newer device
   by recompiling the same sources; an arch the device cannot run is a clear error);
2. compile every kernel source of the artifact for the device with the plan's NVRTC options (disk
   cache), load the exact cubins, read the driver's registers / shared memory / local bytes;
3. launch geometry: ``plan="device"`` re-derives every launch from the driver's figures and the
   device's SM count; ``plan="replay"`` keeps the artifact's plan (its target's SM count and the
   resources it assumed: same grids, routes, splits and cooperative caps) -- how a smaller card's plan is
   exercised on a larger GPU. Either way every launch is checked against the *device* (driver
   resources, our occupancy calculator cross-checked with the driver's query) before it can run;
4. the memory plan (weights + KV pages + GDN state + activations + workspaces + logits + graph
   allowance) is checked against free device memory, byte-exact, before anything is uploaded;
5. upload weights, allocate the pools, the activation arena and the workspaces once.

A step runs the lowered program (:mod:`ninferc.targets.lower`) for T tokens of B sequences; launches
and argument tuples are cached per (mode, T, B, R), and the decode step (model + sampler) is captured
as a CUDA graph per B and replayed. Per-step host work: one small copy of batch metadata (for a replayed
single-sequence decode step only when a KV page is added or the sampled-id block's half fills: the sampler
advances the positions on the device) and, when sampling, the sampled ids -- which ``Session.decode_stream``
reads from pinned host memory the sampler writes, with no copy on the stream.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ninferc.errors import NinfercError, PlanError, TargetError
from ninferc.ir.graph import KV_GROUP
from ninferc.ir.reference import rope_inv_freq
from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_bandwidth_gbs, device_sm_count
from ninferc.runtime.memory import MemoryPlan, engine_workspace_sizes
from ninferc.runtime.paged_kv import PagePool, Sequence, SlotPool
from ninferc.sampling import NonFiniteLogits, SamplingParams
from ninferc.targets.arch import SUPPORTED, get_arch, require_plan_runs_on
from ninferc.targets.skus import get_sku
from ninferc.targets.kernels import FAMILIES
from ninferc.targets.lower import (SAMPLED_IDS_LD, Ref, Step, arg_names, drop_unneeded_steps, launch_scalars, lower,
                                   step_launch)
from ninferc.targets.cubin import KernelResources
from ninferc.targets.plan import Launch, PlanContext, check_launch

#: pinned host metadata blocks in flight: a speculative round with one host read (CudaBatchBackend.verify_round) writes
#: up to K + 2 blocks before the GPU has reached its verify step; a block is reused only after its copy has run
META_RING = 8
GRAPH_ALLOWANCE = 64 << 20  # bytes kept free for CUDA graphs, cuBLAS-free CuPy pools and the driver
#: the metadata block's int32 arrays in order (Engine._meta_layout); tok_ctx and tok_pages last: write_meta uploads
#: them only for verify steps
META_I32 = ("tok_pos", "tok_seq", "seq_start", "seq_ctx", "seq_slot", "row_index", "tokens_in", "page_table",
            "ids_pos", "seq_slot_out", "hidden_rows", "tok_ctx", "tok_pages")


@dataclass
class StepPlan:
    """Launches and argument tuples of one (mode, T, B, R) step, ready to replay."""

    launches: list[tuple[Step, Launch, DeviceKernel, tuple]]


class Engine:
    """A compiled model resident on the GPU (see module docstring).

    Args:
        art: an opened :class:`ninferc.artifact.Artifact`.
        max_context: KV capacity per sequence (tokens).
        max_batch: sequences decoded together (B, :meth:`decode_batch`); it sizes the GDN slots, KV pages and
            decode workspaces.
        prefill_chunk: most tokens per prefill step (sizes the activation arena).
        max_logit_rows: most logit rows one step may return (default max_batch; tests raise it to read
            prompt-position logits).
        cuda_graph: capture and replay the decode step.
        plan: ``"device"`` or ``"replay"`` (see module docstring).
        log: callable for progress lines (stderr in the CLI).
        num_pages: KV pages in the pool (default ``max_batch`` sequences of ``max_context`` tokens; the server's
            ``--kv-capacity`` sets it).
        reserve: more named byte terms of the memory plan, allocated later by the caller (the server's prefix-cache
            checkpoints).
        spec_tokens: K, the draft tokens of speculative decoding with the artifact's MTP head (0: none). It adds the
            head's program (:attr:`mtp_program`, its weights, its KV pages, its arena), the verify step (``verify``
            mode: up to K + 1 tokens of each of ``max_batch`` sequences, every token's logits), K + 1 GDN state slots
            per sequence (slot ``g * (K + 1) + j`` of sequence group ``g``), and the bf16 buffer of hidden rows the
            head reads (:data:`~ninferc.targets.lower.MTP_HIDDEN_SRC`: ``max_batch`` pending rows, ``max_batch`` chain
            rows, then the rows of the last prefill or verify step).
        draft_lm_head: the drafts' LM head format with ``spec_tokens``: ``"bf16"`` (the model's head, as stored) or
            ``"w8"`` / ``"w4"``: the model's head quantised at load (:func:`ninferc.ir.quant.quantize`, the
            reference backend's rule) into a head of its own that only the MTP program reads (tensor
            ``mtp.draft_lm_head``, a term of the memory plan; its GEMV kernels compiled at load). The verify step keeps
            the full head, so output is unchanged; only acceptance can move.

    Raises:
        TargetError: no CuPy / device, or the device cannot run the artifact's arch.
        PlanError: a launch that does not fit the device (names kernel, limit, value).
        RuntimeMemoryError: the memory plan exceeds free device memory (every term listed).
        CompileError: NVRTC failed on the device.
        NinfercError: ``spec_tokens`` on an artifact without an MTP head, or outside 0..5; ``draft_lm_head`` not
            bf16 / w8 / w4, given without ``spec_tokens``, or with ``plan="replay"`` (its kernels are not the
            artifact's).
    """

    def __init__(self, art, *, max_context: int = 4096, max_batch: int = 1, prefill_chunk: int = 1024,
                 max_logit_rows: int | None = None, cuda_graph: bool = True, plan: str = "device",
                 log: Callable[[str], None] | None = None, num_pages: int | None = None,
                 reserve: dict | None = None, spec_tokens: int = 0, draft_lm_head: str = "bf16"):
        cp = cupy()
        self.cp, self.art, self.log = cp, art, (log or (lambda s: None))
        t0 = time.perf_counter()
        if plan not in ("device", "replay"):
            raise NinfercError(f"plan must be 'device' or 'replay', found {plan!r}")
        if max_context < 1 or max_batch < 1 or prefill_chunk < 1 or (num_pages is not None and num_pages < 1):
            raise NinfercError(f"max_context ({max_context}), max_batch ({max_batch}), prefill_chunk "
                               f"({prefill_chunk}) and num_pages ({num_pages}) must be >= 1")
        self._num_pages_asked = num_pages
        self._reserve = dict(reserve or {})
        hdr = art.header
        self.config, self.graph = art.config, art.graph()
        self.target = hdr["target"]["arch"]
        dev = cp.cuda.Device()
        cc = (int(dev.compute_capability[:-1]), int(dev.compute_capability[-1]))
        require_plan_runs_on(self.target, cc)
        self.dev_arch, self.dev_sms = device_arch(), device_sm_count()
        try:
            self.dev_arch_obj = get_arch(self.dev_arch)
        except TargetError:
            raise TargetError(f"device compute capability {cc} ({self.dev_arch}) has no ninferc target description; "
                              f"supported: {SUPPORTED}") from None
        self.plan_mode, self.cuda_graph = plan, cuda_graph
        import os

        self.check_finite = os.environ.get("NINFERC_CHECK_FINITE") == "1"
        # programmatic dependent launch (Arch.pdl, PDL-aware kernels only): the next kernel's CTAs are scheduled
        # while the previous one drains; NINFERC_PDL=0 turns it off (A/B benchmarks, debugging)
        self.pdl = self.dev_arch_obj.pdl and os.environ.get("NINFERC_PDL", "1") != "0"
        self.max_context, self.max_batch, self.prefill_chunk = max_context, max_batch, prefill_chunk
        self.page_size = hdr["compile"]["page_size"]
        self.max_pages = -(-max_context // self.page_size)
        from ninferc.targets.lower import MAX_DRAFT_TOKENS

        if not 0 <= spec_tokens <= MAX_DRAFT_TOKENS:
            raise NinfercError(f"spec_tokens {spec_tokens} must be in 0..{MAX_DRAFT_TOKENS}")
        self.spec_tokens = spec_tokens
        self.mtp_graph = art.mtp_graph() if spec_tokens else None
        if spec_tokens and self.mtp_graph is None:
            raise NinfercError("speculative decoding needs the MTP head, and this artifact has none (its checkpoint "
                               "declares no mtp_num_hidden_layers)")
        self.draft_lm_head, self._draft_head = draft_lm_head, None
        if draft_lm_head not in ("bf16", "w8", "w4"):
            raise NinfercError(f"--draft-lm-head must be bf16, w8 or w4, found {draft_lm_head!r}")
        if draft_lm_head != "bf16":
            if not spec_tokens:
                raise NinfercError("--draft-lm-head applies to speculative decoding (spec_tokens > 0)")
            if plan == "replay":
                raise NinfercError("--draft-lm-head w8 / w4 compiles the draft head's kernels for the device; a "
                                   "replayed plan has only the artifact's")
            self._draft_head = self._use_draft_head(draft_lm_head)
        #: GDN state slots: K + 1 per sequence when speculating (the verify step's state after every token)
        self.state_slots = max_batch * (spec_tokens + 1)
        #: tokens of the largest verify step (0: not speculating): its per-token attention rows (tok_ctx, tok_pages)
        self.verify_rows = verify_rows = max_batch * (spec_tokens + 1) if spec_tokens else 0
        self.max_logit_rows = max(max_batch, max_logit_rows or max_batch, verify_rows)
        self.program = lower(self.graph, page_size=self.page_size, max_context=max_context,
                             mtp_hidden=bool(spec_tokens))
        self.mtp_program = (lower(self.mtp_graph, page_size=self.page_size, max_context=max_context)
                            if spec_tokens else None)
        self.t_cap = max(prefill_chunk, max_batch, verify_rows)
        self.vocab = self.config.vocab_size

        # 2. kernels: compile for the device with the plan's options, load, read the driver's figures
        self.kernels: dict[str, DeviceKernel] = {}
        self._load_kernels(hdr)
        dev_res = {u: self._driver_resources(k) for u, k in self.kernels.items()}
        plan_res = {k["uri"]: KernelResources(**k["resources"]) for k in hdr["kernels"]}
        self.dev_bandwidth = device_bandwidth_gbs()
        self.dev_ctx = PlanContext(self.dev_arch_obj, self.dev_sms, dev_res, bandwidth_gbs=self.dev_bandwidth)
        if plan == "replay":
            sku = hdr["plan"].get("sku")
            bw = get_sku(sku, self.target).bandwidth_gbs if sku else None
            self.geo_ctx = PlanContext(self.target, hdr["plan"]["sms"], plan_res, bandwidth_gbs=bw)
        else:
            self.geo_ctx = self.dev_ctx
        if spec_tokens and plan != "replay":
            # kernels the artifact lacks: verify kernels newer than it, the MTP head's verify mode, a draft LM head's
            # narrower GEMV (--draft-lm-head needs spec_tokens and a device plan, checked above)
            self._compile_missing(self.program)
            self._compile_missing(self.mtp_program)
        self.resource_notes = [
            f"{u}: plan {plan_res[u].registers} regs / {plan_res[u].static_smem_bytes} B smem, device "
            f"{dev_res[u].registers} regs / {dev_res[u].static_smem_bytes} B"
            for u in dev_res if u in plan_res and (dev_res[u].registers != plan_res[u].registers
                                                   or dev_res[u].static_smem_bytes != plan_res[u].static_smem_bytes)]
        self._steps: dict[tuple, StepPlan] = {}
        self._graphs: dict[int, object] = {}

        # 4. memory plan before upload
        self.memory = self._memory_plan()
        free, total = cp.cuda.runtime.memGetInfo()
        self.memory.check(int(free), device=f"{dev.pci_bus_id if hasattr(dev, 'pci_bus_id') else 'the GPU'}")

        # 5. upload + allocate
        self._allocate_and_upload()
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.pages = PagePool(self.num_pages, self.page_size)
        self.slots = SlotPool(max_batch)
        self.load_s = time.perf_counter() - t0
        self._sessions: list[Session] = []
        self.log(f"engine: {self.target} artifact on {self.dev_arch} ({self.dev_sms} SMs), plan {plan}, "
                 f"{len(self.kernels)} kernels, load {self.load_s:.1f} s")
        if self.resource_notes:
            self.log(f"{len(self.resource_notes)} kernels compiled for {self.dev_arch} differ from the plan's "
                     f"{self.target} resources (plan {plan}: "
                     + ("launches re-derived from the driver's figures)" if plan == "device" else
                        "the plan's grids kept, each checked against the device)"))
        self.log("memory: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in self.memory.terms.items())
                 + f"; total {self.memory.total / 2**30:.3f} GiB; weights by format: "
                 + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in self.graph.bytes_by_format().items()))

    @classmethod
    def from_artifact(cls, art, *, max_context: int = 4096, cuda_graph: bool = True, prefill_chunk: int = 1024,
                      log=None, **kw) -> "Engine":
        """Open ``art`` (an :class:`~ninferc.artifact.Artifact` or a path) on the current GPU."""
        from ninferc.artifact import Artifact

        if not hasattr(art, "header"):
            art = Artifact.open(art)
        return cls(art, max_context=max_context, cuda_graph=cuda_graph, prefill_chunk=prefill_chunk, log=log, **kw)

    # ------------------------------------------------------------------------------------------
    # start-up helpers
    # ------------------------------------------------------------------------------------------
    def _load_kernels(self, hdr: dict) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from ninferc.targets.nvrtc import compile_cubin

        options = tuple(hdr["compile"]["options"])
        srcs = {k["uri"]: (self.art.blob(k["source_blob"]).decode(), k["entry"]) for k in hdr["kernels"]}
        with ThreadPoolExecutor(max_workers=8) as pool:  # NVRTC releases the GIL: compile in parallel
            list(pool.map(lambda it: compile_cubin(it[1][0], self.dev_arch, name=it[0], options=options),
                          srcs.items()))
        for uri, (src, entry) in srcs.items():
            self.kernels[uri] = DeviceKernel(src, entry, uri, options, arch=self.dev_arch)

    def use_program(self, program) -> None:
        """Run ``program`` (a :class:`ninferc.targets.lower.Program` lowered from this engine's graph, e.g.
        ``lower(graph, fuse_norm=False)`` for an A/B) from now on: kernels of its steps' variants that the
        artifact does not hold are rendered from the installed templates and compiled for the device with the
        artifact's options, their resources read from the driver; workspaces grow to what it needs; cached step
        plans and CUDA graphs are dropped.

        Raises:
            CompileError: NVRTC failed. PlanError: a "replay" engine (the artifact's plan has no resources for
                kernels it did not compile).
        """
        self._compile_missing(program)
        self.program = program
        for name, nbytes in engine_workspace_sizes(program, self.mtp_program, self.geo_ctx, t_cap=self.t_cap,
                                                   max_batch=self.max_batch, spec_tokens=self.spec_tokens).items():
            if name not in self.ws or nbytes > self.ws[name].nbytes:
                self.ws[name] = self.cp.empty(nbytes, self.cp.uint8)
        self._steps.clear()
        self._graphs.clear()

    def _compile_missing(self, program) -> None:
        """Render and compile, with the artifact's NVRTC options, the kernels of ``program``'s step variants that the
        artifact does not hold; their resources are read from the driver into the device plan's context.

        Raises:
            CompileError: NVRTC failed. PlanError: a "replay" engine."""
        from ninferc.targets.lower import step_variants

        options = tuple(self.art.header["compile"]["options"])
        for s in program.steps:
            for spec in step_variants(s, self.dev_arch):
                if spec.uri in self.kernels:
                    continue
                if self.plan_mode == "replay":
                    raise PlanError(f"{spec.uri}: not in the artifact, and a replayed plan has no resources for it")
                k = DeviceKernel(spec.render(), spec.entry, spec.uri, options, arch=self.dev_arch)
                self.kernels[spec.uri] = k
                self.dev_ctx.resources[spec.uri] = self._driver_resources(k)

    #: the MTP program's own LM head with ``draft_lm_head`` w8 / w4
    DRAFT_HEAD = "mtp.draft_lm_head"

    def _use_draft_head(self, fmt: str) -> dict | None:
        """Point the MTP graph's LM head at a head of its own in format ``fmt`` (param :attr:`DRAFT_HEAD`, class
        ``lm_head``). Returns its host storage {name: array} (codes, scales) quantised from the model's head, or
        None where the device generates weights (synthetic) or the model's head is already in ``fmt``."""
        from ninferc.ir.graph import ParamSpec

        g = self.mtp_graph
        op = next(o for o in g.ops() if o.kind == "LMHead")
        head = g.params[op.params["weight"]]
        if head.dtype == fmt:
            return None
        g.params[self.DRAFT_HEAD] = ParamSpec(self.DRAFT_HEAD, head.shape, fmt, "lm_head")
        op.params["weight"] = self.DRAFT_HEAD
        if getattr(self.art, "device_tensor", None) is not None:
            return {}
        from ninferc.ir.quant import dequantize_codes, quantize

        t0 = time.perf_counter()
        if head.dtype == "bf16":
            import ml_dtypes

            values = np.asarray(self.art.tensor(head.name)).view(np.uint16).view(ml_dtypes.bfloat16)
        else:  # the stored head dequantised (what its kernels multiply by)
            from ninferc.ir.graph import SCALES_SUFFIX

            values = dequantize_codes(head.dtype, self.art.tensor(head.name),
                                      self.art.tensor(head.name + SCALES_SUFFIX))
        qt = quantize(values, fmt, name=head.name)
        out = dict(zip([n for n, _, _ in g.params[self.DRAFT_HEAD].storage()], (qt.codes, qt.scales)))
        self.log(f"draft LM head: {head.name} ({head.dtype}) quantised to {fmt} in "
                 f"{time.perf_counter() - t0:.1f} s ({sum(a.nbytes for a in out.values()) / 2**20:.1f} MiB)")
        return out

    @staticmethod
    def _driver_resources(k: DeviceKernel) -> KernelResources:
        a = k.attributes()
        cubin = k.compiled
        from ninferc.targets.cubin import read_resources

        r = read_resources(cubin.cubin, k.arch, cubin.ptx).get(k.entry)
        return KernelResources(registers=a.registers, static_smem_bytes=a.static_smem_bytes, local_bytes=a.local_bytes,
                               max_threads=a.max_threads, uses_grid_sync=bool(r and r.uses_grid_sync),
                               barriers=r.barriers if r else 1)

    def step_plan(self, mode: str, T: int, B: int, R: int, *, mtp: bool = False) -> StepPlan:  # noqa: N803
        """Launches (+ argument tuples) for one step of the model (``mtp``: of the MTP head's program, modes
        ``decode``, ``prefill`` and ``verify``: a round's few rows per sequence); checked against the device; cached.
        ``R = 0`` in those modes: a step that computes no logits rows -- its steps of R rows (the gathered final norm
        and the LM head, a V x H GEMV: 2.5 GB of bf16 weights at the 27B shape) left out; the MTP head's rows whose
        only use is the head's KV (``CudaBatchBackend._mtp_rows``)."""
        key = (mode, T, B, R, mtp)
        sp = self._steps.get(key)
        if sp is not None:
            return sp
        if (mode in ("prefill", "verify") and T > self.t_cap or mode == "decode" and B > self.max_batch
                or R > self.max_logit_rows or B > self.max_batch):
            raise NinfercError(f"step of T={T}, B={B}, R={R} exceeds the engine's capacity (prefill chunk "
                               f"{self.prefill_chunk}, max batch {self.max_batch}, logit rows {self.max_logit_rows})")
        if mtp:  # the head's program; its sampler is the model's, over the head's own logits buffer
            if self.mtp_program is None:
                raise NinfercError("this engine was built without the MTP head (spec_tokens 0)")
            steps = ([self.program.sampler(mode == "sample_argmax")] if mode.startswith("sample_")
                     else self.mtp_program.for_mode(mode))
        elif mode in ("decode", "prefill", "verify"):
            if mode == "verify" and not self.spec_tokens:
                raise NinfercError("a verify step needs an engine built with spec_tokens (its K + 1 state slots)")
            steps = self.program.for_mode(mode)
        elif mode == "sample_rows":
            steps = [self.program.row_argmax()]
        elif mode == "sample_rows_sample":
            steps = [self.program.row_sampler()]
        else:
            steps = [self.program.sampler(mode == "sample_argmax")]
        if R == 0 and mode in ("decode", "prefill", "verify"):  # no logits rows: their gathered norm and LM head
            steps = [s for s in steps if s.rows != "R"]
        launches, memo = {}, {}
        for s in steps:
            # a launch depends only on the family, problem and counts: the 65 layers' steps share ~15 of
            # them, so a new prompt length costs ~15 route choices and device checks, not one per step
            lkey = (s.family, s.problem, s.rows, s.batch)
            ln = memo.get(lkey)
            if ln is None:
                ln = memo[lkey] = step_launch(s, self.geo_ctx, T=T, B=B, R=R)
                self._check_on_device(ln)
            launches[s.name] = (s, ln)
        steps = drop_unneeded_steps(steps, {n: ln for n, (_, ln) in launches.items()})
        out = []
        for s in steps:
            _, ln = launches[s.name]
            k = self.kernels.get(ln.kernel.uri)
            if k is None:
                raise PlanError(f"step {s.name}: kernel {ln.kernel.uri} is not in the artifact (built by another "
                                "ninferc version?); recompile the model")
            out.append((s, ln, k, self._args(s, ln, B, launches, mtp=mtp)))
        sp = StepPlan(out)
        self._steps[key] = sp
        return sp

    def _check_on_device(self, ln: Launch) -> None:
        """Check a launch against the device (driver resources, device SMs); a cooperative grid is also
        checked against the driver's own occupancy query."""
        uri = ln.kernel.uri
        res = self.dev_ctx.resources_of(ln.kernel)
        occ = self.dev_ctx.occupancy(ln.kernel, ln.dynamic_smem_bytes)
        cap = occ.ctas_per_sm * self.dev_sms
        # the same grid, block and shared memory, with the device's own occupancy (a replayed plan keeps
        # its grids; only whether the device can hold them is checked here)
        on_dev = dataclasses.replace(ln, ctas_per_sm=occ.ctas_per_sm, limiter=occ.limiter, coop_cap=cap,
                                     waves=-(-ln.ctas // cap) if cap else 0)
        check_launch(on_dev, self.dev_arch_obj, res, self.dev_sms)
        if ln.cooperative:
            drv = self.kernels[uri].driver_occupancy(ln.threads, ln.dynamic_smem_bytes)
            ours = self.dev_ctx.occupancy(ln.kernel, ln.dynamic_smem_bytes).ctas_per_sm
            if ln.ctas > drv * self.dev_sms:
                raise PlanError(f"{uri} on {self.dev_arch}: cooperative grid {ln.ctas} CTAs exceeds the driver's "
                                f"capacity {drv} CTAs/SM x {self.dev_sms} SMs = {drv * self.dev_sms}")
            if drv != ours:
                self.log(f"warning: {uri}: occupancy calculator says {ours} CTAs/SM, driver says {drv}")

    def _memory_plan(self) -> MemoryPlan:
        g = self.graph
        mp = MemoryPlan()
        mp.add("weights", sum(t["nbytes"] for t in self.art.header["tensors"]))
        if self.mtp_graph is not None and self.DRAFT_HEAD in self.mtp_graph.params:
            mp.add("draft_lm_head", self.mtp_graph.params[self.DRAFT_HEAD].nbytes)
        kv_layers = [s for s in g.states.values() if s.kind == "kv"]
        if self.mtp_graph is not None:  # the head's attention layer keeps its KV in the same pages
            kv_layers += [s for s in self.mtp_graph.states.values() if s.kind == "kv"]
        self.num_pages = self._num_pages_asked or self.max_batch * self.max_pages
        if kv_layers:
            # K (or V) bytes of one page: codes (+ scales for int8), StateSpec.nbytes per token / 2
            self.page_bytes = self.page_size * kv_layers[0].nbytes // 2
            mp.add("kv_pages", 2 * len(kv_layers) * self.num_pages * self.page_bytes)
        gdn = sum(s.nbytes for s in g.states.values() if s.kind in ("conv", "recurrent"))
        # the conv ring holds W rows (the state spec counts W-1)
        extra = sum(s.shape[0] * 4 for s in g.states.values() if s.kind == "conv")
        mp.add("gdn_state", self.state_slots * (gdn + extra))
        self.arena_row = g.meta["memory"]["arena_bytes_per_token"]
        mp.add("activations", self.t_cap * self.arena_row)
        if self.mtp_graph is not None:
            self.mtp_arena_row = self.mtp_graph.meta["memory"]["arena_bytes_per_token"]
            mp.add("mtp_activations", self.t_cap * self.mtp_arena_row)
            # bf16 hidden rows: pending + chain rows per sequence, then a step's rows (MTP_HIDDEN_SRC)
            self.mtp_src_rows = 2 * self.max_batch + self.t_cap
            mp.add("mtp_hidden_rows", self.mtp_src_rows * self.config.hidden_size * 2)
            mp.add("mtp_logits", self.max_batch * self.vocab * 4)
        self.ws_bytes = self._workspace_sizes()
        mp.add("workspace", sum(self.ws_bytes.values()))
        mp.add("logits", self.max_logit_rows * self.vocab * 4)
        mp.add("metadata", self._meta_layout())
        mp.add("graph_allowance", GRAPH_ALLOWANCE)
        for name, nbytes in self._reserve.items():
            mp.add(name, nbytes)
        return mp

    def _workspace_sizes(self) -> dict[str, int]:
        """Bytes per named workspace: the max over the launches the engine can make
        (:func:`ninferc.runtime.memory.engine_workspace_sizes`)."""
        return engine_workspace_sizes(self.program, self.mtp_program, self.geo_ctx, t_cap=self.t_cap,
                                      max_batch=self.max_batch, spec_tokens=self.spec_tokens)

    def _meta_layout(self) -> int:
        """Offsets (in int32 elements) of the per-step metadata arrays in one block; returns bytes."""
        Bc, Tc = self.max_batch, self.t_cap  # noqa: N806
        sizes = {"tok_pos": Tc, "tok_seq": Tc, "seq_start": Bc + 1, "seq_ctx": Bc, "seq_slot": Bc,
                 "row_index": self.max_logit_rows, "tokens_in": Tc, "page_table": Bc * self.max_pages,
                 "ids_pos": Bc, "seq_slot_out": Bc, "hidden_rows": Tc,
                 "tok_ctx": self.verify_rows, "tok_pages": self.verify_rows * self.max_pages}
        self.meta_off, off = {}, 0
        for name in META_I32:
            self.meta_off[name] = off
            off += -(-sizes[name] // 64) * 64
        self.meta_len = off
        # + the sampling arrays (32 B per sequence) and the split argmax's words (16 B per logits row); the pinned
        # host ring is host memory, not counted
        return 4 * (off + Tc + 64) + 32 * Bc + 16 * self.max_logit_rows

    def _allocate_and_upload(self) -> None:
        cp, g = self.cp, self.graph
        self.params = {}
        make = getattr(self.art, "device_tensor", None)  # synthetic weights are generated on the device
        specs = list(g.params.values())
        if self.mtp_graph is not None:  # the head's own weights (embedding and LM head are the model's)
            specs += [p for n, p in self.mtp_graph.params.items() if n not in g.params]
        for spec in specs:
            for name, shape, dtype in spec.storage():  # quantised params: codes, then fp32 scales
                if make is not None:
                    self.params[name] = make(name, shape, dtype, spec, cp)
                    continue
                host = np.ascontiguousarray(self._draft_head[name] if name in (self._draft_head or {})
                                            else self.art.tensor(name))
                if host.dtype.itemsize == 2 and host.dtype != np.float16:
                    host = host.view(np.uint16)
                self.params[name] = cp.asarray(host)
        self.states = {}
        states = list(g.states.values()) + (list(self.mtp_graph.states.values()) if self.mtp_graph is not None else [])
        for s in states:
            if s.kind == "kv":
                _, hkv, hd = s.shape
                shape = (self.num_pages, hkv, self.page_size, hd)
                if s.dtype == "i8":  # codes + one fp32 scale per KV_GROUP elements per token per head
                    sshape = (self.num_pages, hkv, self.page_size, hd // KV_GROUP)
                    self.states[s.name] = {"k": cp.empty(shape, cp.int8), "v": cp.empty(shape, cp.int8),
                                           "k_scales": cp.empty(sshape, cp.float32),
                                           "v_scales": cp.empty(sshape, cp.float32)}
                else:
                    self.states[s.name] = {"k": cp.empty(shape, cp.uint16), "v": cp.empty(shape, cp.uint16)}
            elif s.kind == "conv":
                C, wm1 = s.shape
                self.states[s.name] = cp.empty((self.state_slots, wm1 + 1, C), cp.float32)
            else:
                self.states[s.name] = cp.empty((self.state_slots,) + s.shape, cp.float32)
        self.arena = cp.empty(max(self.t_cap * self.arena_row, 256), cp.uint8)
        # zeroed once: the counters some kernels keep there (mlp_sync) start at zero and every launch leaves them so
        self.ws = {k: cp.zeros(v, cp.uint8) for k, v in self.ws_bytes.items()}
        self.logits = cp.empty((self.max_logit_rows, self.vocab), cp.float32)
        self.meta = cp.zeros(self.meta_len, cp.int32)
        # a ring of pinned host blocks: a block is rewritten only after the copy that read it has run (its
        # event), so queued steps never see a later step's metadata
        self.meta_ring = [cupy_pinned_int32(self.meta_len) for _ in range(META_RING)]
        self.meta_events = [None] * META_RING
        self.meta_next = 0
        # the sampler's ids, also written straight into pinned host memory (row b at b * SAMPLED_IDS_LD): each
        # metadata upload points the rows' cursors (ids_pos) at the start of the other half, and every sampler
        # launch advances them -- so an id is read back without a copy, and never overwritten before the step
        # after next (decode_stream reads id i before it queues step i + 2)
        self.ids_host = cupy_pinned_int32(self.max_batch * SAMPLED_IDS_LD)
        self.ids_base = 0
        # what the device's metadata holds after the last replayed decode step's sampler advanced it:
        # (sequence, its length, its page count, the rows' ids cursor offset in the half), or None when unknown
        self.device_meta: tuple | None = None
        self.tokens = cp.zeros(self.t_cap, cp.int32)
        self.barrier = cp.zeros(64, cp.uint32)
        Bc = self.max_logit_rows  # noqa: N806 -- a row per logits row (a verify step draws from every row)
        self.sampling = {"temperature": cp.zeros(Bc, cp.float32), "top_k": cp.zeros(Bc, cp.int32),
                         "top_p": cp.ones(Bc, cp.float32), "seed": cp.zeros(Bc, cp.uint64),
                         "rng_step": cp.zeros(Bc, cp.int32),
                         # a split argmax's meeting words per logits row (zero; every launch leaves them zero)
                         "argmax_ws": cp.zeros(2 * self.max_logit_rows, cp.uint64)}
        self.consts = {}
        mem = g.meta["memory"]
        self.tensor_ptr = {}
        base = self.arena.data.ptr
        for name, t in mem["tensors"].items():
            self.tensor_ptr[name] = base + self.t_cap * t["offset_per_token"]
        for name, root in mem["aliases"].items():
            if root in self.tensor_ptr:
                self.tensor_ptr[name] = self.tensor_ptr[root]
        if self.mtp_graph is not None:
            from ninferc.targets.lower import MTP_HIDDEN_SRC

            self.mtp_arena = cp.empty(max(self.t_cap * self.mtp_arena_row, 256), cp.uint8)
            H = self.config.hidden_size  # noqa: N806
            #: bf16 [mtp_src_rows, H]: rows 0..B-1 pending (the last hidden row of each sequence group whose next
            #: token is not known yet), B..2B-1 the draft chain's rows, then the last prefill / verify step's rows
            self.mtp_src = cp.empty((self.mtp_src_rows, H), cp.uint16)
            self.mtp_logits = cp.empty((self.max_batch, self.vocab), cp.float32)
            mm = self.mtp_graph.meta["memory"]
            mtp_ptr = {n: self.mtp_arena.data.ptr + self.t_cap * t["offset_per_token"]
                       for n, t in mm["tensors"].items()}
            for name, root in mm["aliases"].items():
                if root in mtp_ptr:
                    mtp_ptr[name] = mtp_ptr[root]
            mtp_ptr["hidden"] = self.mtp_src.data.ptr
            clash = set(mtp_ptr) & set(self.tensor_ptr)
            if clash:
                raise PlanError(f"the MTP head's tensors {sorted(clash)} share names with the model's")
            self.tensor_ptr.update(mtp_ptr)
            self.tensor_ptr[MTP_HIDDEN_SRC] = self.mtp_src.data.ptr + 2 * self.max_batch * H * 2

    # ------------------------------------------------------------------------------------------
    # argument binding
    # ------------------------------------------------------------------------------------------
    def _ref(self, ref: Ref, mtp: bool = False):
        cp = self.cp
        k = ref.kind
        if k == "tensor":
            ptr = self.tensor_ptr.get(ref.name)
            if ptr is None:
                raise PlanError(f"tensor {ref.name} has no place in the activation arena")
            return np.uint64(ptr + ref.offset)
        if k == "param":
            return self.params[ref.name]
        if k == "state":
            st = self.states[ref.name]
            return st[ref.value] if ref.value else st
        if k == "meta":
            if ref.name == "tokens":
                return self.tokens
            if ref.name == "ids_host":  # pinned host memory, addressed by the kernel through unified addressing
                return np.uint64(self.ids_host.ctypes.data)
            if ref.name in self.sampling:
                return self.sampling[ref.name]
            return np.uint64(self.meta.data.ptr + 4 * self.meta_off[ref.name])
        if k == "ws":
            return self.ws[ref.name]
        if k == "logits":  # the MTP head's steps (and the sampler drawing its drafts) have their own rows
            return self.mtp_logits if mtp else self.logits
        if k == "barrier":
            return self.barrier
        if k == "null":
            return np.uint64(0)
        if k == "const":
            if ref.name.startswith("inv_freq:"):
                if ref.name not in self.consts:
                    _, rot, theta = ref.name.split(":")
                    self.consts[ref.name] = cp.asarray(rope_inv_freq(int(rot), float(theta)))
                return self.consts[ref.name]
            return {"i32": np.int32, "f32": np.float32, "u64": np.uint64}[ref.dtype](ref.value)
        raise PlanError(f"unknown argument reference kind {k!r}")

    def _args(self, step: Step, ln: Launch, B: int, launches: dict, mtp: bool = False) -> tuple:  # noqa: N803
        scal = launch_scalars(step, ln, self.geo_ctx, B)
        args = []
        for name in arg_names(step, ln):
            if name in scal:
                args.append(scal[name])
            elif name in step.bind and step.bind[name].kind == "parts":  # the producer GEMV's norm parts
                src = launches.get(step.bind[name].name)
                if src is None:
                    raise PlanError(f"step {step.name}: argument {name} needs the launch of step "
                                    f"{step.bind[name].name}, which is not in this step")
                args.append(np.int32(FAMILIES[src[1].kernel.family].norm_parts(src[1])))
            elif name in step.bind:
                args.append(self._ref(step.bind[name], mtp))
            else:
                raise PlanError(f"step {step.name} ({ln.kernel.uri}): no binding for kernel argument {name!r}")
        return tuple(args)

    # ------------------------------------------------------------------------------------------
    # execution
    # ------------------------------------------------------------------------------------------
    def _launch_all(self, sp: StepPlan) -> None:
        lst = sp.launches
        for i, (step, ln, k, args) in enumerate(lst):
            k.launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes, cooperative=ln.cooperative,
                     stream=self.stream, pdl=self.pdl and k.pdl_capable)
            if self.check_finite and (i + 1 == len(lst) or lst[i + 1][0].op != step.op):
                self._check_op_outputs(step, ln)

    def _check_op_outputs(self, step: Step, ln: Launch) -> None:
        """Debug mode (``NINFERC_CHECK_FINITE=1``): after the last launch of an IR op, synchronise and fail
        on the first non-finite value in the op's outputs (names op, step and kernel)."""
        cp = self.cp
        self.stream.synchronize()
        rows = ln.tokens
        if step.op not in self.graph.g:
            return
        op = self.graph.op(step.op)
        for t in op.outputs:
            if t not in self.tensor_ptr:  # the logits
                bad = int((~cp.isfinite(self.logits[:rows])).sum())
                n = rows * self.vocab
            else:
                spec = self.graph.tensors[t]
                n = (1 if step.family == "rmsnorm" and step.rows == "R" else 1) * rows * spec.row_elems()
                itemsize = 2 if spec.dtype == "bf16" else 4
                mem = cp.cuda.UnownedMemory(self.tensor_ptr[t], itemsize * n, self.arena)
                a = cp.ndarray((n,), cp.uint16 if itemsize == 2 else cp.float32, cp.cuda.MemoryPointer(mem, 0))
                bad = int((((a & 0x7F80) == 0x7F80) if itemsize == 2 else ~cp.isfinite(a)).sum())
            if bad:
                raise NinfercError(f"non-finite values after op {op.name} (last step {step.name}, {ln.kernel.uri}, "
                                   f"T={ln.tokens}): {bad} of {n} in {t}")

    def profile(self, mode: str, T: int, B: int, R: int, reps: int = 5) -> list[tuple[str, str, float]]:  # noqa: N803
        """Per-launch GPU time of one step (metadata already written): [(step name, kernel family, ms)],
        the median over ``reps`` eager runs timed with CUDA events between launches (graph-free, so the
        gaps between kernels are not included)."""
        cp = self.cp
        sp = self.step_plan(mode, T, B, R)
        times = [[] for _ in sp.launches]
        with self.stream:
            for _ in range(reps):
                evs = [cp.cuda.Event() for _ in range(len(sp.launches) + 1)]
                evs[0].record(self.stream)
                for i, (step, ln, k, args) in enumerate(sp.launches):
                    k.launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes, cooperative=ln.cooperative,
                             stream=self.stream)
                    evs[i + 1].record(self.stream)
                evs[-1].synchronize()
                for i in range(len(sp.launches)):
                    times[i].append(cp.cuda.get_elapsed_time(evs[i], evs[i + 1]))
        return [(step.name, ln.kernel.family, float(np.median(t))) for (step, ln, _, _), t in zip(sp.launches, times)]

    def write_meta(self, *, tok_pos, tok_seq, seq_start, seq_ctx, seq_slot, row_index, page_rows,
                   tokens=None, seq_slot_out=None, hidden_rows=None, token_rows: bool = False) -> None:
        """Fill a pinned host metadata block and copy it to the device (async on the engine stream); with
        ``tokens`` (host ids), also place them in the device token buffer the embedding reads (otherwise
        that buffer keeps the ids the GPU sampler wrote). The rows' sampled-id cursors (``ids_pos``) are set to
        the start of the other half of their ``ids_host`` rows (``ids_base``), and ``device_meta`` is forgotten:
        the caller sets it again after a replayed decode step. ``seq_slot_out`` (verify steps: each sequence's first
        output state slot) and ``hidden_rows`` (MTP head steps: the row of the hidden buffer each row reads) are
        written when given. ``token_rows`` (verify steps): also every token's attention row -- its context
        ``tok_ctx = tok_pos + 1`` and its sequence's page-table row in ``tok_pages`` (the split-KV attention of the
        verify mode, :class:`ninferc.targets.lower.AttnVerifyRoute`).

        Raises:
            NinfercError: ``token_rows`` for more tokens than the engine's verify rows (max batch x (K + 1))."""
        if token_rows and len(tok_pos) > self.verify_rows:
            raise NinfercError(f"a verify step of {len(tok_pos)} tokens; this engine verifies at most "
                               f"{self.verify_rows} (max batch x (K + 1))")
        i = self.meta_next
        self.meta_next = (i + 1) % META_RING
        if self.meta_events[i] is not None:
            self.meta_events[i].synchronize()  # the copy that last read this block has completed
        h = self.meta_ring[i]
        o = self.meta_off
        for name, arr in (("tok_pos", tok_pos), ("tok_seq", tok_seq), ("seq_start", seq_start),
                          ("seq_ctx", seq_ctx), ("seq_slot", seq_slot), ("row_index", row_index),
                          ("seq_slot_out", seq_slot_out), ("hidden_rows", hidden_rows)):
            if arr is None:
                continue
            a = np.asarray(arr, np.int32)
            h[o[name]:o[name] + a.size] = a
        pt = o["page_table"]
        for b, pages in enumerate(page_rows):
            h[pt + b * self.max_pages: pt + b * self.max_pages + len(pages)] = pages
        if token_rows:
            pos = np.asarray(tok_pos, np.int32)
            h[o["tok_ctx"]:o["tok_ctx"] + pos.size] = pos + 1
            tp = o["tok_pages"]
            for t, b in enumerate(np.asarray(tok_seq, np.int64)):
                pages = page_rows[b]
                h[tp + t * self.max_pages: tp + t * self.max_pages + len(pages)] = pages
        if tokens is not None:
            t = np.asarray(tokens, np.int32)
            h[o["tokens_in"]:o["tokens_in"] + t.size] = t
        self.ids_base = SAMPLED_IDS_LD // 2 - self.ids_base
        h[o["ids_pos"]:o["ids_pos"] + len(seq_ctx)] = self.ids_base
        self.device_meta = None
        # the per-token attention rows (tok_ctx, tok_pages: last in the block, max batch x (K + 1) page-table rows)
        # travel only with the verify steps that read them, not with every decode step
        n = self.meta_len if token_rows else o["tok_ctx"]
        self.meta[:n].set(h[:n], stream=self.stream)
        if tokens is not None:
            with self.stream:
                self.tokens[:t.size] = self.meta[o["tokens_in"]:o["tokens_in"] + t.size]
        ev = self.cp.cuda.Event(disable_timing=True)
        ev.record(self.stream)
        self.meta_events[i] = ev

    @staticmethod
    def pinned_int32(n: int) -> np.ndarray:
        """A pinned host int32 array of ``n`` elements (:func:`cupy_pinned_int32`)."""
        return cupy_pinned_int32(n)

    @staticmethod
    def pinned_float32(n: int) -> np.ndarray:
        """A pinned host float32 array of ``n`` elements (:func:`cupy_pinned_int32`'s memory, read as float32)."""
        return cupy_pinned_int32(n).view(np.float32)

    def host(self, arr) -> np.ndarray:
        """A host copy of device array ``arr``, ordered after the work queued on the engine stream."""
        return arr.get(stream=self.stream)

    def mtp_hidden_rows(self, rows: int):
        """The MTP head's last output rows (``mtp_hidden``: bf16 [rows, H], the gathered rows of its final norm) as a
        device array view (uint16), for the draft chain's next step."""
        cp, H = self.cp, self.config.hidden_size  # noqa: N806
        mem = cp.cuda.UnownedMemory(int(self.tensor_ptr["mtp_hidden"]), rows * H * 2, self.mtp_arena)
        return cp.ndarray((rows, H), cp.uint16, cp.cuda.MemoryPointer(mem, 0))

    def run(self, mode: str, T: int, B: int, R: int, *, mtp: bool = False) -> None:  # noqa: N803
        """Launch one model step (``mtp``: one step of the MTP head's program); metadata already written."""
        self.device_meta = None
        self._launch_all(self.step_plan(mode, T, B, R, mtp=mtp))

    def sample_step(self, greedy: bool, B: int) -> None:  # noqa: N803
        """Launch the sampler over B rows of logits (argmax when greedy). It advances the rows' decode metadata
        and id cursors (the sample kernel's ``advance``), so ``device_meta`` is forgotten."""
        self.device_meta = None
        self._launch_all(self.step_plan("sample_argmax" if greedy else "sample_sample", B, B, B))

    def _captured(self, key, plans):
        """The CUDA graph of the step plans ``plans()`` launched in order, captured on first use under ``key``."""
        g = self._graphs.get(key)
        if g is None:
            sps = plans()
            self.stream.synchronize()
            self.stream.begin_capture()
            try:
                for sp in sps:
                    self._launch_all(sp)
            finally:
                g = self.stream.end_capture()
            self._graphs[key] = g
        return g

    def model_graph(self, B: int):  # noqa: N803
        """The captured decode step of B sequences without a sampler (captured on first use, one per B): the
        serving backend samples afterwards with a parameter row per sequence."""
        return self.step_graph("decode", B, B, B)

    def step_graph(self, mode: str, T: int, B: int, R: int, *, then: str | None = None,  # noqa: N803
                   mtp: bool = False):
        """The captured model step ``mode`` (``"decode"``, ``"prefill"`` or ``"verify"``) of T tokens, B sequences and
        R logit rows (``mtp``: of the MTP head's program), followed by step ``then`` of the same counts when given
        (e.g. ``"sample_rows"``, ``"sample_argmax"``); captured on first use, cached per shape. It reads the metadata
        block, so write it (:meth:`write_meta`) before each launch.

        Raises:
            NinfercError: a shape past the engine's capacity (:meth:`step_plan`)."""
        return self._captured(("model", mode, T, B, R, then, mtp), lambda: [
            self.step_plan(mode, T, B, R, mtp=mtp)] + ([self.step_plan(then, T, B, R, mtp=mtp)] if then else []))

    def decode_graph(self, B: int, greedy: bool):  # noqa: N803
        """The captured decode step (+ sampler) for B sequences (captured on first use)."""
        return self._captured((B, greedy), lambda: [
            self.step_plan("decode", B, B, B),
            self.step_plan("sample_argmax" if greedy else "sample_sample", B, B, B)])

    def decode_batch(self, sessions: list["Session"], tokens: list[int] | None = None) -> "DeviceLogits":
        """One decode step of B = ``len(sessions)`` sequences together (each session prefilled, distinct): every
        GEMV reads its weights once for the B tokens (the token tiles of ``gemv``), attention and GDN take
        each sequence's own context and state.

        Args:
            sessions: the sequences, in row order (B <= ``max_batch``).
            tokens: the B host ids to append (uploaded; the step runs eagerly, then the greedy sampler writes the
                next B ids to the device), or None: append the ids the greedy sampler wrote in the previous
                batched step, by replaying the captured B-sequence decode graph (model + greedy sampler) when
                CUDA graphs are on (eagerly otherwise). :meth:`batch_tokens` reads those ids back.

        Returns:
            the device logits [B, V] of the step.

        Raises:
            NinfercError: no sessions, more than ``max_batch``, a session twice or before its prefill, ``tokens``
                of the wrong length, a context past ``max_context``.
        """
        B = len(sessions)  # noqa: N806
        if not 1 <= B <= self.max_batch:
            raise NinfercError(f"decode_batch: {B} sequences; this engine decodes 1 to {self.max_batch} together "
                               "(max_batch)")
        if len({id(x) for x in sessions}) != B or any(x.seq is None for x in sessions):
            raise NinfercError("decode_batch: every session must be prefilled and appear once")
        if tokens is not None and len(tokens) != B:
            raise NinfercError(f"decode_batch: {len(tokens)} tokens for {B} sequences")
        for x in sessions:
            x.seq.ensure_capacity(x.seq.length + 1, self.pages, self.max_pages)
        rows = np.arange(B, dtype=np.int32)
        with self.stream:
            self.write_meta(tok_pos=[x.seq.length for x in sessions], tok_seq=rows, seq_start=np.arange(B + 1),
                            seq_ctx=[x.seq.length + 1 for x in sessions], seq_slot=[x.seq.slot for x in sessions],
                            row_index=rows, page_rows=[x.seq.pages for x in sessions],
                            tokens=None if tokens is None else list(tokens))
            if tokens is None and self.cuda_graph:
                self.decode_graph(B, True).launch(stream=self.stream)
            else:
                self.run("decode", B, B, B)
                self.sample_step(True, B)
        for x in sessions:
            x.seq.length += 1
            x._pending, x._last = False, None
        return DeviceLogits(self.logits[:B], self.stream)

    def batch_tokens(self, B: int) -> list[int]:  # noqa: N803
        """The B ids the greedy sampler wrote in the last :meth:`decode_batch` (one device-to-host read).

        Raises:
            NonFiniteLogits: a row's logits had a non-finite maximum (the sampler gave no token)."""
        return [_checked_id(int(t)) for t in self.tokens[:B].get(stream=self.stream)]

    def new_sequence(self) -> Sequence:
        """A sequence holding a free GDN slot (PoolExhausted when none is free)."""
        return Sequence(slot=self.slots.take())

    def free_sequence(self, seq: Sequence) -> None:
        """Return a sequence's pages and slot to the pools."""
        self.pages.give(seq.pages)
        self.slots.give(seq.slot)
        seq.pages = []

    def session(self) -> "Session":
        """A one-sequence session implementing :class:`ninferc.generate.Backend`. When every GDN slot is
        held by earlier sessions, the oldest is closed (its sequence freed)."""
        while len([x for x in self._sessions if x.seq is not None]) >= self.max_batch:
            self._sessions.pop(0).close()
        s = Session(self)
        self._sessions.append(s)
        return s


def _checked_id(tok: int) -> int:
    """A sampled id, or :class:`~ninferc.sampling.NonFiniteLogits` for the sampler's -1 (a row whose maximum was
    not finite: ``targets/kernels/sample.py``)."""
    if tok < 0:
        raise NonFiniteLogits("the model produced non-finite logits (a NaN or Inf) at this step; no token can be "
                              "drawn (NINFERC_CHECK_FINITE=1 names the first op that writes one)")
    return tok


def cupy_pinned_int32(n: int) -> np.ndarray:
    """A pinned (page-locked) host int32 array of n elements, so host-to-device copies are async."""
    mem = cupy().cuda.alloc_pinned_memory(4 * n)
    return np.frombuffer(mem, np.int32, n)


def _on_engine_stream(fn):
    """Run a Session method with the engine's stream as CuPy's current stream, so every CuPy copy and
    fill it makes is ordered with the engine's kernels (the stream is non-blocking)."""

    @functools.wraps(fn)
    def wrapper(self, *a, **kw):
        with self.e.stream:
            return fn(self, *a, **kw)

    return wrapper


class DeviceLogits:
    """Logits left on the device by a step: ``get()`` copies them to the host, ordered after the step."""

    def __init__(self, arr, stream):
        self.arr, self.stream = arr, stream

    def get(self) -> np.ndarray:
        """[R, V] fp32 host array."""
        return self.arr.get(stream=self.stream)


class Session:
    """One sequence on an :class:`Engine` (B = 1), usable by :func:`ninferc.generate.generate`.

    ``prefill`` and ``decode`` leave the logits of the last token on the device; :meth:`logits` copies
    them to the host; :meth:`sample` runs the GPU sampler and reads back only the sampled id.
    """

    def __init__(self, engine: Engine):
        self.e = engine
        self.seq: Sequence | None = None
        self.params: SamplingParams | None = None
        self._pending = False   # a graph replay already sampled the next token into the device buffer
        self._last: int | None = None
        self.ids_slot = 0  # where in Engine.ids_host (row 0) the sampler after the last decode writes its id

    # -- Backend protocol ------------------------------------------------------------------------
    @_on_engine_stream
    def prefill(self, ids: list[int], chunk: int, *, logit_rows: list[int] | None = None,
                reserve: int = 0) -> "object":
        """Start a new sequence with ``ids`` in chunks of ``chunk`` tokens.

        Args:
            logit_rows: absolute prompt positions whose logits to return (default: the last token).
            reserve: extra tokens of KV to reserve now (generation), so decode never allocates.

        Returns:
            device logits [R, V] of the requested rows (the last chunk's, or those in ``logit_rows``
            gathered across chunks as a host array when ``logit_rows`` is given).

        Raises:
            NinfercError: empty prompt, chunk outside [1, engine prefill_chunk], context too long.
        """
        e = self.e
        if not ids:
            raise NinfercError("prefill needs at least one token")
        if not 1 <= chunk <= e.prefill_chunk:
            raise NinfercError(f"--prefill-chunk {chunk} must be in [1, {e.prefill_chunk}] (the engine's chunk "
                               "capacity)")
        if self.seq is not None:
            e.free_sequence(self.seq)
        self.seq = e.new_sequence()
        self.seq.ensure_capacity(min(len(ids) + reserve, e.max_context) if reserve else len(ids), e.pages,
                                 e.max_pages)
        wanted = sorted(set(logit_rows)) if logit_rows is not None else None
        gathered = []
        for s in range(0, len(ids), chunk):
            part = ids[s:s + chunk]
            T = len(part)  # noqa: N806
            rows = [T - 1] if wanted is None else [p - s for p in wanted if s <= p < s + T]
            R = max(len(rows), 1)  # noqa: N806
            pos = np.arange(s, s + T, dtype=np.int32)
            e.write_meta(tok_pos=pos, tok_seq=np.zeros(T, np.int32), seq_start=[0, T], seq_ctx=[s + T],
                         seq_slot=[self.seq.slot], row_index=rows if rows else [T - 1], page_rows=[self.seq.pages],
                         tokens=part)
            e.run("prefill", T, 1, R)
            if wanted is not None and rows:
                gathered.append(e.logits[:len(rows)].get(stream=e.stream))
        self.seq.length = len(ids)
        self._pending, self._last = False, None
        if wanted is not None:
            return np.concatenate(gathered) if gathered else np.zeros((0, e.vocab), np.float32)
        return DeviceLogits(e.logits[:1], e.stream)

    @_on_engine_stream
    def decode(self, token: int | None = None) -> "object":
        """Append ``token`` and compute the logits after it; returns the device logits [1, V].

        When ``token`` is the id the GPU sampler just produced (or None) and CUDA graphs are on, the
        captured decode step (model + sampler) is replayed and the next id is sampled inside it;
        :meth:`sample` then only reads it back. Any other token (teacher forcing) is uploaded and the
        model step runs eagerly.

        The metadata upload is skipped when the previous replayed step's sampler already advanced the device's
        copy to this step's (``Engine.device_meta``: the same sequence, no new KV page, ids cursor within its
        half). ``ids_slot`` is where in ``Engine.ids_host`` this step's sampler writes the next id.
        """
        e = self.e
        seq = self.seq
        if seq is None:
            raise NinfercError("decode before prefill")
        seq.ensure_capacity(seq.length + 1, e.pages, e.max_pages)
        from_sampler = token is None or (self._last is not None and token == self._last)
        graph = from_sampler and e.cuda_graph and self.params is not None
        dm = e.device_meta
        if graph and dm is not None and dm[0] is seq and dm[1:3] == (seq.length, len(seq.pages)) \
                and dm[3] < SAMPLED_IDS_LD // 2:
            k = dm[3]  # the device holds this step's metadata already
        else:
            e.write_meta(tok_pos=[seq.length], tok_seq=[0], seq_start=[0, 1], seq_ctx=[seq.length + 1],
                         seq_slot=[seq.slot], row_index=[0], page_rows=[seq.pages],
                         tokens=None if from_sampler else [token])
            k = 0
        self.ids_slot = e.ids_base + k
        if graph:
            e.decode_graph(1, self.params.greedy).launch(stream=e.stream)
            e.device_meta = (seq, seq.length + 1, len(seq.pages), k + 1)
            self._pending = True
        else:
            e.run("decode", 1, 1, 1)
            self._pending = False
        self._last = None
        seq.length += 1
        return DeviceLogits(e.logits[:1], e.stream)

    @_on_engine_stream
    def set_sampling(self, params: SamplingParams) -> None:
        """Upload per-sequence sampling parameters (temperature, top-k, top-p, seed; RNG step reset)."""
        e = self.e
        e.sampling["temperature"][:1] = params.temperature
        e.sampling["top_k"][:1] = params.top_k
        e.sampling["top_p"][:1] = params.top_p
        e.sampling["seed"][:1] = np.uint64(params.seed)
        e.sampling["rng_step"][:1] = 0
        self.params = params

    @_on_engine_stream
    def sample(self, params: SamplingParams) -> int:
        """The next token from the latest logits, sampled on the GPU (one 4-byte device-to-host read)."""
        if self.params != params:
            self.set_sampling(params)
            self._pending = False
        if not self._pending:
            self.e.sample_step(params.greedy, 1)
        self._pending = False
        self._last = _checked_id(int(self.e.tokens[:1].get(stream=self.e.stream)[0]))
        return self._last

    def decode_stream(self, params: SamplingParams, n: int):
        """Yield the next ``n`` sampled ids, one decode step each, with one step queued ahead on the GPU.

        Continues from the id :meth:`sample` last returned (which the GPU sampler left in the device token
        buffer): step i appends the previous id and samples the next one on the GPU (the captured decode graph
        when CUDA graphs are on, else the eager step and sampler); the sampler also writes the id into pinned host
        memory (``Engine.ids_host``), read once the step's event has completed -- no copy on the stream, and with
        the metadata left to the device (:meth:`decode`) nothing but the graph launches between two steps. Step
        i + 1 is launched *before* id i is read back, so the host's per-token work (this loop, the caller's
        streaming, the next step's metadata) overlaps the GPU's step instead of leaving the GPU idle between
        steps. Ids are the same as a ``decode(tok); tok = sample(params)`` loop's.

        A consumer that stops early (``break`` after id i) leaves the step already queued to finish: the
        sequence then holds id i too, and :meth:`sample` returns the id that step sampled without running another
        step -- the state of ``decode(i); sample(params)``. Stopping at a stop id therefore appends it (as the
        next turn of a chat would).

        Raises:
            NinfercError: before :meth:`prefill`, or no sampled id to continue from (call :meth:`sample`)."""
        e = self.e
        if self.seq is None:
            raise NinfercError("decode_stream before prefill")
        if self._last is None:
            raise NinfercError("decode_stream continues from a sampled id: call sample() after prefill/decode")
        if n < 1:
            return
        cp = e.cp
        queued: list = []  # (ids_host slot, event) of launched steps whose id is not read yet

        def launch(i: int) -> None:
            with e.stream:
                if self.params != params:
                    self.set_sampling(params)
                self.decode(None)
                slot = self.ids_slot
                if not self._pending:
                    e.sample_step(params.greedy, 1)
                self._pending = False
                ev = cp.cuda.Event(disable_timing=True)
                ev.record(e.stream)
                queued.append((slot, ev))

        def take() -> int:
            slot, ev = queued.pop(0)
            ev.synchronize()
            return _checked_id(int(e.ids_host[slot]))

        launched = 0
        try:
            launch(0)
            launched = 1
            for i in range(n):
                if launched < n:
                    launch(launched)
                    launched += 1
                tok = take()
                self._last = tok
                yield tok
        finally:
            if queued:  # stopped early: the queued step appended the last id; its sample is the next one
                try:
                    self._last = take()
                    self._pending = True
                except NonFiniteLogits:  # no id to continue from (the error that stopped us, or the next)
                    self._last = None

    def synchronize(self) -> None:
        """Wait for the engine stream."""
        self.e.stream.synchronize()

    def close(self) -> None:
        """Free the sequence's KV pages and GDN slot."""
        if self.seq is not None:
            self.e.stream.synchronize()
            self.e.free_sequence(self.seq)
            self.seq = None
