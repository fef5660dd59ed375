"""GDN kernel test cases, written once for two backends: the GPU (CuPy, tests/kernels/test_gdn_gpu.py) and
the CPU emulator of tests/kernels/cuda_host.py (tests/kernels/test_gdn.py, small shapes).

Every case draws fresh random inputs (never zeros), fills every output and every state row the step must
not read with garbage (NaN; bf16 outputs with 0xFFFF) before the launch, and compares with
:func:`ninferc.targets.kernels.gdn.reference_step` using the named tolerances of :mod:`ninferc.ir.tolerances`;
a failure message names the worst element (index, kernel value, reference value).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ninferc.ir.tolerances import BF16_ELEMENTWISE, FP32_REORDER, GDN_STATE, Tolerance
from ninferc.targets.kernels import gdn
from ninferc.targets.plan import PlanContext, compile_variants

F32 = np.float32
BF16_NAN = np.uint16(0xFFFF)


# ------------------------------------------------------------------------------------------------
# backends
# ------------------------------------------------------------------------------------------------


class HostBackend:
    """Runs kernels with the CPU emulator (tests/kernels/cuda_host.py); arrays are numpy.

    Args:
        reverse: schedule the threads of each CTA in reverse order (exposes missing barriers the other way).
    """

    name = "host"

    def __init__(self, reverse: bool = False):
        self.reverse = reverse
        self._k = {}

    def put(self, a):
        """A contiguous host copy of ``a`` (the emulator's "device" array)."""
        return np.ascontiguousarray(np.array(a, copy=True))

    def get(self, a):
        """A numpy copy of a "device" array."""
        return np.array(a, copy=True)

    def launch(self, launch, args):
        """Compile (once per URI) for the host and run ``launch`` with ``args``."""
        from cuda_host import HostKernel

        spec = launch.kernel
        if spec.uri not in self._k:
            self._k[spec.uri] = HostKernel(spec.render(), spec.entry)
        self._k[spec.uri].launch(launch.grid, launch.block, args, smem=launch.dynamic_smem_bytes,
                                 reverse=self.reverse)


class CupyBackend:
    """Runs kernels on the GPU through :class:`ninferc.runtime.kernels.DeviceKernel`; arrays are CuPy."""

    name = "gpu"

    def __init__(self):
        import cupy

        self.cp = cupy
        self._k = {}

    def put(self, a):
        """Upload ``a`` (a new device array)."""
        return self.cp.asarray(np.ascontiguousarray(a))

    def get(self, a):
        """Download a device array to numpy."""
        return self.cp.asnumpy(a)

    def launch(self, launch, args):
        """Compile (once per URI) for the device, launch ``launch`` with ``args`` and synchronise."""
        from ninferc.runtime.kernels import DeviceKernel

        spec = launch.kernel
        if spec.uri not in self._k:
            self._k[spec.uri] = DeviceKernel.from_spec(spec)
        self._k[spec.uri].launch(launch.grid, launch.block, args, smem=launch.dynamic_smem_bytes,
                                 cooperative=launch.cooperative)
        self.cp.cuda.get_current_stream().synchronize()


#: decode-kernel variants the tests run beside the registered family's (``GdnRecurrentFamily`` keyword arguments)
DECODE_VARIANTS = {"planned": None, "no_preload": {"preload": False}, "no_prewait": {"prewait": False},
                   "two_pass": {"one_pass": False}, "two_pass_no_preload": {"one_pass": False, "preload": False},
                   "one_pass_flat": {"one_pass_tree": False}}
#: verify-only variants (:func:`decode_family` finds them too): the core of one CTA per V head, and of two
VERIFY_VARIANTS = {"verify_whole": {"verify_split": 1}, "verify_split2": {"verify_split": 2}}


def decode_family(variant: str) -> gdn.GdnRecurrentFamily:
    """The registered decode family (``planned``) or a :data:`DECODE_VARIANTS` variant of it."""
    opts = {**DECODE_VARIANTS, **VERIFY_VARIANTS}[variant]
    return gdn.BY_NAME["gdn_recurrent"] if opts is None else gdn.GdnRecurrentFamily(**opts)


def make_ctx(problems, arch: str, sms: int, dv_block: int | None = None) -> PlanContext:
    """A plan context with the resources of every GDN variant of ``problems`` compiled for ``arch`` (and of the
    decode variants of :data:`DECODE_VARIANTS`)."""
    specs = []
    for p in problems:
        for fam in gdn.FAMILIES:
            specs += fam.variants(p)
        for v in [*DECODE_VARIANTS, *VERIFY_VARIANTS]:
            specs += decode_family(v).variants(p)
        if dv_block:
            specs += gdn.GdnChunkFamily(dv_block=dv_block).variants(p)
    built = compile_variants(specs, arch, jobs=1)
    return PlanContext(arch, sms, {u: r for u, (_, r) in built.items()})


# ------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------


def random_weights(p: gdn.GdnProblem, rng) -> dict[str, np.ndarray]:
    """conv_w [C, W] ~ N(0, 0.5^2); A = exp(A_log) in [0.05, 2]; dt_bias ~ N(0, 0.5^2); norm_w ~ 1 + N(0, 0.1^2)."""
    return {
        "conv_w": (rng.standard_normal((p.conv_dim, p.width)) * 0.5).astype(F32),
        "A_log": np.log(rng.uniform(0.05, 2.0, p.hv)).astype(F32),
        "dt_bias": (rng.standard_normal(p.hv) * 0.5).astype(F32),
        "norm_w": (1.0 + rng.standard_normal(p.dv) * 0.1).astype(F32),
    }


@dataclass
class SlotState:
    """Device-layout state of every slot: conv_ring [slots, W, C], rec_state [slots, Hv, dk, dv] (numpy)."""

    conv_ring: np.ndarray
    rec_state: np.ndarray


def garbage_state(p: gdn.GdnProblem, num_slots: int) -> SlotState:
    """All slots NaN (free slots are never trusted)."""
    return SlotState(np.full((num_slots, p.width, p.conv_dim), np.nan, F32),
                     np.full((num_slots, p.hv, p.dk, p.dv), np.nan, F32))


def seed_history(p: gdn.GdnProblem, st: SlotState, slot: int, length: int, rng) -> None:
    """Give ``slot`` the state of a sequence that has seen ``length`` > 0 tokens: random conv inputs for the
    positions a next step reads (other ring rows stay garbage) and a random recurrent state."""
    window = rng.standard_normal((p.conv_dim, p.width - 1)).astype(F32)
    for d in range(p.width - 1):  # positions < 0 of a short history are zeros in the window
        if length - (p.width - 1) + d < 0:
            window[:, d] = 0
    ring = gdn.ring_from_window(window, length, fill=np.nan)
    st.conv_ring[slot] = ring
    st.rec_state[slot] = (rng.standard_normal((p.hv, p.dk, p.dv)) * 0.3).astype(F32)


def random_proj(p: gdn.GdnProblem, T: int, rng) -> np.ndarray:
    """proj [T, proj_dim] ~ N(0, 1) (q|k|v|z|b|a)."""
    return rng.standard_normal((T, p.proj_dim)).astype(F32)


# ------------------------------------------------------------------------------------------------
# checks with diagnostics
# ------------------------------------------------------------------------------------------------


def bf16_to_f32(a: np.ndarray) -> np.ndarray:
    """uint16 bf16 bits -> fp32."""
    return (np.asarray(a, np.uint16).astype(np.uint32) << 16).view(np.float32)


def check(tol: Tolerance, out: np.ndarray, ref: np.ndarray, what: str) -> None:
    """``tol.check`` with the worst element (index, value, reference) and the NaN count in the message."""
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    try:
        tol.check(out, ref, what)
    except AssertionError as exc:
        info = ""
        if out.shape == ref.shape and out.size:
            bad = ~np.isfinite(out)
            if bad.any():
                idx = np.unravel_index(int(np.argmax(bad)), out.shape)
                info = f"; {int(bad.sum())} non-finite of {out.size}, first at {idx} (ref {ref[idx]:.6g})"
            else:
                err = np.abs(out - ref)
                idx = np.unravel_index(int(np.argmax(err)), out.shape)
                info = (f"; max |err| {err[idx]:.3g} at {idx}: kernel {out[idx]:.6g} vs ref {ref[idx]:.6g}; "
                        f"|ref| max {np.abs(ref).max():.3g}")
        raise AssertionError(f"{exc}{info}") from None


def check_ring(out: np.ndarray, ref: np.ndarray, what: str) -> None:
    """Rings must match exactly (copies of proj values; untouched rows keep their garbage)."""
    same = (out == ref) | (np.isnan(out) & np.isnan(ref))
    if not same.all():
        idx = np.unravel_index(int(np.argmin(same)), out.shape)
        raise AssertionError(f"{what}: {int((~same).sum())} ring values differ; first at [slot, row, channel] = "
                             f"{idx}: kernel {out[idx]} vs expected {ref[idx]}")


# ------------------------------------------------------------------------------------------------
# steps
# ------------------------------------------------------------------------------------------------


class Runner:
    """Runs GDN steps on a backend with device-side state kept between steps.

    Args:
        backend: :class:`HostBackend` or :class:`CupyBackend`.
        ctx: plan context for the target the kernels are planned for.
        problem: shapes. weights: :func:`random_weights`. state: initial slots (numpy; copied).
        route: prefill core route (``wy`` | ``chunked`` | ``recurrent``). dv_block: force the chunk kernel's block.
    """

    def __init__(self, backend, ctx: PlanContext, problem: gdn.GdnProblem, weights, state: SlotState,
                 route: str = "wy", dv_block: int | None = None):
        self.be, self.ctx, self.p, self.route = backend, ctx, problem, route
        self.prefill = gdn.GdnChunkFamily(route=route, dv_block=dv_block)
        self.w = {k: backend.put(v) for k, v in weights.items()}
        self.ring = backend.put(state.conv_ring)
        self.rec = backend.put(state.rec_state)

    def state(self) -> SlotState:
        """The device state copied back."""
        return SlotState(self.be.get(self.ring), self.be.get(self.rec))

    def _meta(self, batch: gdn.Batch) -> dict:
        be = self.be
        return {"tok_pos": be.put(batch.tok_pos), "tok_seq": be.put(batch.tok_seq),
                "seq_start": be.put(batch.seq_start), "seq_slot": be.put(batch.seq_slot),
                "num_seqs": batch.num_seqs}

    def decode(self, proj: np.ndarray, batch: gdn.Batch, variant: str = "planned", grid_y: int | None = None) -> np.ndarray:
        """One decode step (T = B) with the :data:`DECODE_VARIANTS` kernel ``variant`` (``grid_y``: fewer CTA rows
        than sequences, so a CTA loops over several); returns y as fp32 (from bf16)."""
        p, be = self.p, self.be
        T = batch.tokens
        ln = decode_family(variant).launch(p, T, self.ctx)
        if grid_y:
            ln = dataclasses.replace(ln, grid=(ln.grid[0], grid_y, 1))
        y = be.put(np.full((T, p.value_dim), BF16_NAN, np.uint16))
        bufs = {"proj": be.put(proj), **{k: v for k, v in self.w.items()}, "conv_ring": self.ring,
                "rec_state": self.rec, "y": y, **self._meta(batch)}
        be.launch(ln, gdn.kernel_args(ln, p, bufs))
        return bf16_to_f32(be.get(y))

    def prefill_step(self, proj: np.ndarray, batch: gdn.Batch) -> dict:
        """conv -> ring update -> (chunk_wy ->) core (-> gated norm); returns y (fp32 from bf16), conv_out and the
        launches. Workspaces start as NaN; a buffer a route must not need is passed as a null pointer."""
        p, be = self.p, self.be
        T, B = batch.tokens, batch.num_seqs
        conv = gdn.BY_NAME["gdn_conv"].launch(p, T, self.ctx)
        ring = gdn.BY_NAME["gdn_ring_update"].launch(p, T, self.ctx, batch=B)
        core = self.prefill.launch(p, T, self.ctx, batch=B)
        y = be.put(np.full((T, p.value_dim), BF16_NAN, np.uint16))
        conv_out = be.put(np.full((T, p.conv_dim), np.nan, F32))
        o_ws = be.put(np.full((T, p.value_dim), np.nan, F32))
        launches = [conv, ring]
        bufs = {"proj": be.put(proj), **{k: v for k, v in self.w.items()}, "conv_ring": self.ring,
                "rec_state": self.rec, "y": y, "conv_out": conv_out, "o_ws": o_ws, **self._meta(batch)}
        if core.route in gdn.WY_ROUTES:
            wy = gdn.BY_NAME["gdn_chunk_wy"].launch(p, T, self.ctx, batch=B)
            assert wy.workspace_bytes == 4 * T * p.hv * gdn.wy_record_floats(p)
            bufs["wy_ws"] = be.put(np.full((T, p.hv, gdn.wy_record_floats(p)), np.nan, F32))
            launches.append(wy)
        if core.route in ("chunked", "wy"):
            bufs.pop("o_ws")  # the fused routes must not need it (passed as null)
        launches.append(core)
        if core.route in gdn.SPLIT_ROUTES:
            bufs.pop("y")
            launches.append(gdn.BY_NAME["gdn_gated_norm"].launch(p, T, self.ctx))
        for ln in launches:
            b = dict(bufs)
            if ln.kernel.family == "gdn_gated_norm":
                b["y"] = y
            be.launch(ln, gdn.kernel_args(ln, p, b))
        return {"y": bf16_to_f32(be.get(y)), "conv_out": be.get(conv_out), "launches": launches}


    def verify_step(self, proj: np.ndarray, batch: gdn.Batch, slot_out, variant: str = "planned") -> dict:
        """The speculative verify step: the verify conv (the conv and the per-token rings in one kernel) ->
        recurrent verify core (of the :data:`DECODE_VARIANTS` family ``variant``; with its columns split over CTAs, then
        the gated norm), the state and ring after token j of sequence b going to slot ``slot_out[b] + j``; returns y
        (fp32 from bf16), conv_out and the launches."""
        p, be = self.p, self.be
        T, B = batch.tokens, batch.num_seqs
        fam = decode_family(variant)
        launches = [gdn.BY_NAME["gdn_conv"].launch(p, T, self.ctx, batch=B, verify=True),
                    fam.verify_launch(p, T, self.ctx, batch=B)]
        if launches[-1].route in gdn.SPLIT_ROUTES:  # the columns split over CTAs: o to o_ws, then the gated norm
            launches.append(gdn.BY_NAME["gdn_gated_norm"].launch(p, T, self.ctx))
        y = be.put(np.full((T, p.value_dim), BF16_NAN, np.uint16))
        conv_out = be.put(np.full((T, p.conv_dim), np.nan, F32))
        bufs = {"proj": be.put(proj), **self.w, "conv_ring": self.ring, "rec_state": self.rec, "y": y,
                "conv_out": conv_out, "seq_slot_out": be.put(np.asarray(slot_out, np.int32)), **self._meta(batch)}
        if launches[-1].route != "verify":  # an unsplit core writes y itself and gets no o_ws (a null pointer)
            bufs["o_ws"] = be.put(np.full((T, p.value_dim), np.nan, F32))
        for ln in launches:
            be.launch(ln, gdn.kernel_args(ln, p, bufs))
        return {"y": bf16_to_f32(be.get(y)), "conv_out": be.get(conv_out), "launches": launches}


def reference(p, proj, weights, st: SlotState, batch, mode) -> dict:
    """:func:`gdn.reference_step` on numpy copies of ``st``."""
    return gdn.reference_step(p, proj, weights, st.conv_ring, st.rec_state, batch, mode=mode)


def compare_step(p, batch, out_y, out_state: SlotState, ref: dict, what: str, conv_out=None) -> None:
    """y (bf16 vs fp32 reference), touched state slots (GDN_STATE), untouched slots bit-identical, rings exact."""
    check(BF16_ELEMENTWISE, out_y, ref["y"], f"{what}: y")
    touched = sorted({int(s) for b, s in enumerate(batch.seq_slot)
                      if batch.seq_start[b + 1] > batch.seq_start[b]})
    for s in touched:
        check(GDN_STATE, out_state.rec_state[s], ref["rec_state"][s], f"{what}: rec_state[slot {s}]")
    others = [s for s in range(out_state.rec_state.shape[0]) if s not in touched]
    for s in others:
        a, r = out_state.rec_state[s], ref["rec_state"][s]
        assert ((a == r) | (np.isnan(a) & np.isnan(r))).all(), f"{what}: untouched rec_state slot {s} was written"
    check_ring(out_state.conv_ring, ref["conv_ring"], f"{what}: conv_ring")
    if conv_out is not None:
        check(FP32_REORDER, conv_out, ref["conv_out"], f"{what}: conv_out")


# ------------------------------------------------------------------------------------------------
# scenarios (used by both test files)
# ------------------------------------------------------------------------------------------------


def scenario_decode(backend, ctx, p, starts, seed=0, variant="planned", grid_y=None):
    """One decode step for B = len(starts) sequences at positions ``starts`` (0 = fresh sequence over garbage),
    in slots 1, 3, 5, ... of 2B + 1 garbage-filled slots, by the decode kernel ``variant`` (:data:`DECODE_VARIANTS`)."""
    rng = np.random.default_rng(seed)
    B = len(starts)
    slots = [2 * b + 1 for b in range(B)]
    st = garbage_state(p, 2 * B + 1)
    for s, pos in zip(slots, starts):
        if pos > 0:
            seed_history(p, st, s, pos, rng)
    w = random_weights(p, rng)
    batch = gdn.Batch.make(starts, [1] * B, slots)
    proj = random_proj(p, B, rng)
    ref = reference(p, proj, w, st, batch, "recurrent")
    run = Runner(backend, ctx, p, w, st)
    y = run.decode(proj, batch, variant, grid_y)
    compare_step(p, batch, y, run.state(), ref, f"decode ({variant}) starts={starts}")


def scenario_prefill(backend, ctx, p, starts, lengths, route="wy", dv_block=None, seed=0):
    """One prefill step of packed sequences (positions ``starts``, ``lengths`` tokens) over garbage slots."""
    rng = np.random.default_rng(seed)
    B = len(starts)
    slots = [2 * b + 1 for b in range(B)]
    st = garbage_state(p, 2 * B + 1)
    for s, pos in zip(slots, starts):
        if pos > 0:
            seed_history(p, st, s, pos, rng)
    w = random_weights(p, rng)
    batch = gdn.Batch.make(starts, lengths, slots)
    proj = random_proj(p, batch.tokens, rng)
    ref = reference(p, proj, w, st, batch, "chunked")
    run = Runner(backend, ctx, p, w, st, route=route, dv_block=dv_block)
    out = run.prefill_step(proj, batch)
    compare_step(p, batch, out["y"], run.state(), ref, f"prefill {route} starts={starts} lengths={lengths}",
                 conv_out=out["conv_out"])
    return out


def scenario_chain(backend, ctx, p, route="wy", dv_block=None, seed=0, first=(70, 5), later=(3, 1)):
    """Two sequences: prefill ``first`` tokens (from position 0 over garbage), two decode steps, one more
    prefill of ``later`` tokens, one decode step; kernels vs the reference chain at every step."""
    rng = np.random.default_rng(seed)
    slots = [2, 0]
    st = garbage_state(p, 3)
    w = random_weights(p, rng)
    run = Runner(backend, ctx, p, w, st, route=route, dv_block=dv_block)
    ref_state = SlotState(st.conv_ring.copy(), st.rec_state.copy())
    pos = [0, 0]
    steps = [("prefill", list(first)), ("decode", [1, 1]), ("decode", [1, 1]), ("prefill", list(later)),
             ("decode", [1, 1])]
    for i, (kind, lens) in enumerate(steps):
        batch = gdn.Batch.make(pos, lens, slots)
        proj = random_proj(p, batch.tokens, rng)
        ref = reference(p, proj, w, ref_state, batch, "recurrent" if kind == "decode" else "chunked")
        if kind == "decode":
            y = run.decode(proj, batch)
            conv_out = None
        else:
            out = run.prefill_step(proj, batch)
            y, conv_out = out["y"], out["conv_out"]
        compare_step(p, batch, y, run.state(), ref, f"chain step {i} ({kind} {lens} at {pos})", conv_out=conv_out)
        ref_state = SlotState(ref["conv_ring"], ref["rec_state"])
        pos = [a + b for a, b in zip(pos, lens)]


def scenario_routes_agree(backend, ctx, p, starts, lengths, seed=0):
    """The wy, chunked and recurrent prefill of the same inputs agree with each other (y: BF16_ELEMENTWISE,
    state: GDN_STATE), the recurrent route being the simple oracle of the other two."""
    rng = np.random.default_rng(seed)
    B = len(starts)
    slots = list(range(B))
    st = garbage_state(p, B)
    for s, pos in zip(slots, starts):
        if pos > 0:
            seed_history(p, st, s, pos, rng)
    w = random_weights(p, rng)
    batch = gdn.Batch.make(starts, lengths, slots)
    proj = random_proj(p, batch.tokens, rng)
    outs = {}
    for route in ("wy", "chunked", "recurrent"):
        run = Runner(backend, ctx, p, w, st, route=route)
        outs[route] = (run.prefill_step(proj, batch)["y"], run.state())
    yr, sr = outs["recurrent"]
    for route in ("wy", "chunked"):
        yc, sc = outs[route]
        check(BF16_ELEMENTWISE, yc, yr, f"{route} vs recurrent: y")
        for s in slots:
            check(GDN_STATE, sc.rec_state[s], sr.rec_state[s], f"{route} vs recurrent: rec_state[slot {s}]")


def scenario_verify(backend, ctx, p, starts, lengths, current, seed=0, variant: str = "planned"):
    """A verify step (core kernel of the :data:`DECODE_VARIANTS` family ``variant``) of packed sequences (positions
    ``starts`` > 0, ``lengths`` tokens each) with per-token state
    slots: sequence b owns the G = max(lengths) + 1 slots ``b * G ..``, reads slot ``b * G + current[b]`` (one of
    its output slots, or the last one, which the step must leave alone) and writes the state after its token j
    into slot ``b * G + j``. Every output slot must hold the reference's state and conv window after token j;
    every other slot is bit-identical; y and conv_out as the reference's recurrent step."""
    rng = np.random.default_rng(seed)
    B, G = len(starts), max(lengths) + 1
    st = garbage_state(p, B * G)
    slots = [b * G + c for b, c in enumerate(current)]
    for s, pos in zip(slots, starts):
        seed_history(p, st, s, pos, rng)
    w = random_weights(p, rng)
    batch = gdn.Batch.make(starts, lengths, slots)
    proj = random_proj(p, batch.tokens, rng)
    slot_out = [b * G for b in range(B)]
    ref = gdn.reference_verify(p, proj, w, st.conv_ring, st.rec_state, batch, slot_out)
    run = Runner(backend, ctx, p, w, st)
    out = run.verify_step(proj, batch, slot_out, variant)
    got = run.state()
    what = f"verify ({variant}) starts={starts} lengths={lengths} current={current}"
    check(BF16_ELEMENTWISE, out["y"], ref["y"], f"{what}: y")
    check(FP32_REORDER, out["conv_out"], ref["conv_out"], f"{what}: conv_out")
    written = set()
    for b, n in enumerate(lengths):
        for j in range(n):
            s = slot_out[b] + j
            written.add(s)
            check(GDN_STATE, got.rec_state[s], ref["rec_state"][s], f"{what}: rec_state after token {j} of seq {b}")
            win = gdn.window_from_ring(got.conv_ring[s], starts[b] + j + 1)
            assert np.array_equal(win, ref["windows"][(b, j)]), f"{what}: conv window after token {j} of seq {b}"
    for s in range(B * G):
        if s in written:
            continue
        for name, a, r in (("rec_state", got.rec_state[s], st.rec_state[s]), ("conv_ring", got.conv_ring[s],
                                                                                 st.conv_ring[s])):
            assert ((a == r) | (np.isnan(a) & np.isnan(r))).all(), f"{what}: slot {s} ({name}) was written"
    return out
