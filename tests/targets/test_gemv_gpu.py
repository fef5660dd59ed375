"""GPU tier for gemv (marked ``gpu``; skipped cleanly without CuPy or a CUDA device).

For the running device: compile each kernel with ninferc.targets.nvrtc for the device's arch, load that
exact cubin with ``cupy.RawModule(path=...)`` (CuPy's own compile path adds options that change
registers, ../shared/notes/cubin-resources.md), launch it cooperatively when the plan says so, and
compare with the numpy reference on fresh random inputs (outputs and workspace poisoned with NaN
first; never zeros). Every case runs twice: the grid-barrier counter must come back reusable. The folded
norm (``add_norm_parts`` producer, ``in_norm parts`` consumer) also runs as the pair it is in a decode step,
against the unfused chain.
Also: our occupancy calculator vs ``cuOccupancyMaxActiveBlocksPerMultiprocessor``, and cubin-read
registers / static shared / local bytes / launch bounds vs the driver's function attributes.

Quantised weights (issue 6, ``test_quant_*``): the same checks for the w8 / w4 kernels (fused
dequantisation), with codes and scales from ``ninferc.ir.quant.quantize`` of random bf16 weights and the
reference computed on the dequantised weights ``fl32(q * scale)`` (so the bound is the bf16 GEMV's: fp32
accumulation order only): every epilogue, both modes (forced), T in {1, 3, 4, 5, 8}, the tiny and the 27B
shapes, and the 27B LM head at w8.

The loading/launching helper lives here until the runtime owns it (``_LoadedKernel``).
CuPy calls used: ``cupy.RawModule(path=)``, ``RawModule.get_function(entry)`` -> ``RawKernel``,
``RawKernel.kernel`` (``cupy.cuda.Function``) called as ``fn(grid, block, args, shared_mem=...,
enable_cooperative_groups=...)`` (cooperative -> ``cuLaunchCooperativeKernel``),
``RawKernel.max_dynamic_shared_size_bytes = n`` (dynamic shared opt-in), ``RawKernel.num_regs /
shared_size_bytes / local_size_bytes / max_threads_per_block`` and
``cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, block, dynamic_smem)``.
"""

from __future__ import annotations

import functools
import inspect
import zlib

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from ninferc.errors import PlanError, TargetError  # noqa: E402
from ninferc.ir.quant import quantize  # noqa: E402
from ninferc.targets.arch import arch_for_compute_capability  # noqa: E402
from ninferc.targets.cubin import read_resources  # noqa: E402
from ninferc.targets.kernels import FAMILIES, representative_instances  # noqa: E402
from ninferc.ir.reference import ref_rmsnorm  # noqa: E402
from ninferc.targets.kernels.gemv import EPILOGUES, GemvFamily, GemvTuning, GemvProblem, kernel_args, norm_input, reference  # noqa: E402
from ninferc.targets.nvrtc import compile_cubin  # noqa: E402
from ninferc.targets.occupancy import occupancy  # noqa: E402
from ninferc.targets.plan import PlanContext, check_launch, compile_variants, family_variants  # noqa: E402
from ninferc.targets.target import make_target  # noqa: E402
from ninferc.testing import ARCH_SKUS  # noqa: E402
from weights_cache import host_cached  # noqa: E402

# Named tolerance for GEMV outputs (relative L2 error); moves to the shared tolerance presets module.
GEMV_REL_L2 = 2e-3
# add_norm_parts' bf16 xs vs the reference's bf16: they differ only where the fp32 value (accumulation
# order) lands on the other side of a bf16 rounding boundary, one bf16 ulp (2^-8 relative) at a few elements.
NORM_BF16_REL_L2 = 2e-3
# the folded pair vs the unfused chain (GEMV, fp32 RMSNorm, GEMV): x rounded to bf16 before the norm's 1/rms
# instead of after, plus the bf16 swiglu output
FOLDED_REL_L2 = 1e-2
BF16_NAN = 0x7FC0


# ------------------------------------------------------------------------------------------------
# device + loading helper
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device():
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
        dev = cp.cuda.Device()
        cc_str = dev.compute_capability  # "90", "89", "120"
    except Exception as exc:  # no driver / no device
        pytest.skip(f"no usable CUDA device: {exc}")
    cc = (int(cc_str[:-1]), int(cc_str[-1]))
    try:
        arch = arch_for_compute_capability(cc)
    except TargetError as exc:
        pytest.skip(str(exc))
    sms = dev.attributes["MultiProcessorCount"]
    if not dev.attributes.get("CooperativeLaunch", 1):
        pytest.skip("device does not support cooperative launch")
    return {"arch": arch, "sms": int(sms), "cc": cc}


class _LoadedKernel:
    """One KernelSpec compiled by ninferc.targets.nvrtc for the device arch and loaded from that cubin."""

    def __init__(self, spec, arch, tmpdir):
        self.spec = spec
        self.arch = arch
        self.compiled = compile_cubin(spec.render(), arch.name, name=spec.uri)
        path = tmpdir / f"{spec.uri}.{arch.name}.cubin"
        path.write_bytes(self.compiled.cubin)
        self.module = cp.RawModule(path=str(path))
        self.raw = self.module.get_function(spec.entry)  # cupy.RawKernel bound to the exact cubin
        self.resources = read_resources(self.compiled.cubin, arch.name, self.compiled.ptx)[spec.entry]

    def _opt_in(self, dynamic_smem):
        if self.resources.static_smem_bytes + dynamic_smem > self.arch.max_smem_per_cta_default:
            self.raw.max_dynamic_shared_size_bytes = dynamic_smem

    def launch(self, launch, args):
        self._opt_in(launch.dynamic_smem_bytes)
        self.raw.kernel(launch.grid, launch.block, args, shared_mem=launch.dynamic_smem_bytes,
                        enable_cooperative_groups=launch.cooperative)

    def driver_occupancy(self, threads, dynamic_smem):
        self._opt_in(dynamic_smem)
        return cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(self.raw.kernel.ptr, threads, dynamic_smem)


@pytest.fixture(scope="module")
def loader(device, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cubins")
    cache = {}

    def get(spec):
        if spec.uri not in cache:
            cache[spec.uri] = _LoadedKernel(spec, device["arch"], tmp)
        return cache[spec.uri]

    return get


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------


def _bf16_weights(k, w_rows, seed):
    """Random bf16 weights [w_rows, k], scaled so outputs are O(1)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((w_rows, k), dtype=np.float32) / np.float32(np.sqrt(k))).astype(ml_dtypes.bfloat16)


# The host arrays are drawn (and quantised) once per machine and shared by the xdist workers (weights_cache.py, keyed
# by the generator's and the quantiser's code too); each worker keeps only its last few device copies (the 27B shapes
# are up to 178 MB each, and 14 workers share the card).
@functools.lru_cache(maxsize=1)
def _weight_sources() -> tuple[str, ...]:
    import ninferc.ir.quant

    return inspect.getsource(_bf16_weights), inspect.getsource(ninferc.ir.quant)


@functools.lru_cache(maxsize=4)
def _weights(k, w_rows, seed):
    """Random bf16 weights [w_rows, k] (:func:`_bf16_weights`): fp32 copy holding the bf16 values (for the
    reference, no per-call conversion) and the device copy (bf16 bits as uint16)."""
    h = host_cached(f"bf16_{w_rows}x{k}_s{seed}",
                    lambda: {"bits": np.ascontiguousarray(_bf16_weights(k, w_rows, seed).view(np.uint16))},
                    _weight_sources()[:1])
    return (h["bits"].astype(np.uint32) << 16).view(np.float32), cp.asarray(h["bits"])


@functools.lru_cache(maxsize=4)
def _qweights(k, w_rows, fmt, seed):
    """Random bf16 weights [w_rows, k] (as :func:`_weights`) quantised to ``fmt`` by
    ``ninferc.ir.quant.quantize``: (fp32 dequantised weights ``fl32(q * scale)`` for the reference, device
    codes, device scales)."""
    def make():
        qt = quantize(_bf16_weights(k, w_rows, seed), fmt)
        return {"deq": qt.dequantize(), "codes": np.ascontiguousarray(qt.codes), "scales": np.ascontiguousarray(qt.scales)}

    h = host_cached(f"{fmt}_{w_rows}x{k}_s{seed}", make, _weight_sources())
    return h["deq"], cp.asarray(h["codes"]), cp.asarray(h["scales"])


@functools.lru_cache(maxsize=1)
def _lm_head_w8(k, w_rows, seed):
    """w8 weights of the 27B LM head's size ([248320, 5120]) without quantising 1.3e9 values on the host
    (minutes of numpy): random codes in [-127, 127] drawn on the device (the w8 code range) and one random
    positive scale per row (the w8 scale domain). Same return value as :func:`_qweights`."""
    rs = cp.random.RandomState(seed)
    codes = cp.empty((w_rows, k), dtype=cp.int8)
    step = 8192
    for r0 in range(0, w_rows, step):
        r1 = min(w_rows, r0 + step)
        codes[r0:r1] = rs.randint(-127, 128, size=(r1 - r0, k), dtype=np.int32).astype(cp.int8)
    scales = (rs.uniform(0.5, 1.5, size=w_rows, dtype=np.float64) / (127 * np.sqrt(k) / 3)).astype(cp.float32)
    host_codes, host_scales = cp.asnumpy(codes), cp.asnumpy(scales)
    deq = np.empty((w_rows, k), dtype=np.float32)
    for r0 in range(0, w_rows, step):  # fl32(q * scale), row block by row block
        np.multiply(host_codes[r0:r0 + step], host_scales[r0:r0 + step, None], out=deq[r0:r0 + step],
                    dtype=np.float32)
    return deq, codes, scales


def _weights_for(prob):
    """(reference weights fp32 [w_rows, k], device w, device scales or None) for any weight format; the
    reference weights of a quantised problem are the dequantised ones, used with the bf16 twin problem
    (``reference(problem, x, codes, scales=...)`` is exactly that, see tests/kernels/test_gemv_quant.py)."""
    seed = 1234 + prob.k + prob.w_rows
    if not prob.quantized:
        return (*_weights(prob.k, prob.w_rows, seed), None)
    if prob.wfmt == "w8" and prob.w_rows >= 200_000:
        return _lm_head_w8(prob.k, prob.w_rows, seed)
    return _qweights(prob.k, prob.w_rows, prob.wfmt, seed)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "non-finite output (unwritten element or NaN)"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _run_and_check(loaded, prob, launch, seed):
    """Launch twice on fresh inputs; poisoned outputs/workspace; barrier counter left reusable."""
    w, w_dev, s_dev = _weights_for(prob)
    # the same GEMV on the (dequantised) fp32 weights
    ref_prob = GemvProblem(prob.k, prob.n, prob.epilogue, unit_offset=prob.unit_offset, in_norm=prob.in_norm)
    t = launch.tokens
    ws = cp.full(max(launch.workspace_bytes // 4, 1), np.nan, dtype=cp.float32)
    barrier = cp.zeros(1, dtype=cp.uint32)
    rng = np.random.default_rng(seed)
    for rep in range(2):
        x = rng.standard_normal((t, prob.k), dtype=np.float32).astype(ml_dtypes.bfloat16)
        x_dev = cp.asarray(x.view(np.uint16))
        y_in, extra, ref_extra = None, {}, {}
        if prob.epilogue == "swiglu":
            y = cp.full((t, prob.n), BF16_NAN, dtype=cp.uint16)
        elif prob.epilogue in ("residual_add", "add_norm_parts"):
            y_in = rng.standard_normal((t, prob.n), dtype=np.float32)
            y = cp.asarray(y_in)
        else:
            y = cp.full((t, prob.n), np.nan, dtype=cp.float32)
        if prob.norm_out:  # the parts are the launch's workspace (the engine's norm_ss)
            nw = rng.standard_normal(prob.n, dtype=np.float32) * np.float32(0.2)
            extra = {"norm_w": cp.asarray(nw), "xs": cp.full((t, prob.n), BF16_NAN, dtype=cp.uint16), "ss_out": ws}
            ref_extra = {"norm_w": nw}
        if prob.norm_in:
            ss = np.abs(rng.standard_normal((t, 7), dtype=np.float32)) * np.float32(prob.k / 7)
            extra = {"ss_in": cp.asarray(ss), "ss_parts": 7, "in_eps": 1e-6}
            ref_extra = {"ss_in": ss, "in_eps": 1e-6}
        ws.fill(np.nan)
        args = kernel_args(prob, launch, w_dev, x_dev, y, ws, barrier, scales=s_dev, **extra)
        loaded.launch(launch, args)
        cp.cuda.get_current_stream().synchronize()
        dp = bool(dict(launch.kernel.params).get("dp", False))  # x rounded to int16 per block as the kernel does
        ref = reference(ref_prob, x, w, y_in, **ref_extra, dp=dp)
        if prob.norm_out:
            ref, ref_xs, ref_ss = ref
            got_xs = cp.asnumpy(extra["xs"]).view(ml_dtypes.bfloat16).astype(np.float32)
            e = _rel(got_xs, ref_xs.astype(np.float32))
            assert e < NORM_BF16_REL_L2, f"{launch.kernel.uri} T={t} rep={rep}: xs rel L2 {e:.2e}"
            parts = cp.asnumpy(ws[:t * FAMILIES["gemv"].norm_parts(launch)]).reshape(t, -1)
            e = _rel(parts.sum(axis=1, keepdims=True), ref_ss)
            assert e < 1e-5, f"{launch.kernel.uri} T={t} rep={rep}: sum of the norm parts rel {e:.2e}"
            # and they sum the squares of the very h the kernel stored (within fp32 summation)
            own_ss = (cp.asnumpy(y).astype(np.float64) ** 2).sum(axis=1, keepdims=True)
            e = _rel(parts.sum(axis=1, keepdims=True), own_ss)
            assert e < 1e-5, f"{launch.kernel.uri} T={t} rep={rep}: sum of the norm parts vs its own h, rel {e:.2e}"
        if prob.epilogue == "swiglu":
            out = cp.asnumpy(y).view(ml_dtypes.bfloat16).astype(np.float32)
            ref = ref.astype(np.float32)
        else:
            out = cp.asnumpy(y)
        err = _rel(out, ref)
        assert err < GEMV_REL_L2, f"{launch.kernel.uri} T={t} split={launch.split_k} rep={rep}: rel L2 {err:.2e}"
        if y_in is not None:  # the accumulated part alone must also be right
            acc = reference(GemvProblem(prob.k, prob.n, "store"), x, w, dp=dp)
            d = _rel(out - y_in, acc)
            assert d < GEMV_REL_L2, f"{launch.kernel.uri}: residual delta rel L2 {d:.2e}"
        if launch.cooperative:
            assert int(barrier.get()[0]) & 0x7FFFFFFF == 0, "grid barrier counter not left reusable"


# ------------------------------------------------------------------------------------------------
# tests
# ------------------------------------------------------------------------------------------------

from gemv_cases import (DOWN, FORCED, FORCED_FAMILY, GATE_UP, MID_SWIGLU, NARROW, NORM_CASES, O_PROJ,  # noqa: E402,F401
                        QKV, TINY)


@pytest.mark.parametrize("case", range(len(FORCED)))
def test_forced_variants_match_reference(device, loader, case):
    prob, t, threads, mode, splits, kw = FORCED[case]
    gemv = FORCED_FAMILY
    spec = gemv.spec(prob, threads, mode, gemv.tile_for(t), kw)
    loaded = loader(spec)
    ctx = PlanContext(device["arch"], device["sms"], {spec.uri: loaded.resources})
    try:
        launch = gemv.launch_variant(prob, t, ctx, threads, mode, splits, max_tokens=gemv.tile_for(t), k_warps=kw)
    except PlanError as exc:  # the cases are sized for the H200's 132 SMs (checked on the CPU); on it this fails
        if device["sms"] >= 132:
            raise
        pytest.skip(f"{exc} (a {device['sms']}-SM device; the forced cases were sized for 132 SMs)")
    _run_and_check(loaded, prob, launch, seed=case)


@pytest.mark.parametrize("plan_sms", ["device", 92, 82])
@pytest.mark.parametrize("t", [1, 3, 4, 16])
@pytest.mark.parametrize("prob", [QKV, DOWN, O_PROJ, GATE_UP, MID_SWIGLU, NARROW, *TINY, *NORM_CASES],
                         ids=lambda p: f"k{p.k}_n{p.n}_{p.epilogue}_{p.wfmt}_{p.in_norm}_u{int(p.unit_offset)}")
def test_planned_launches_match_reference(device, loader, prob, t, plan_sms):
    """The family's own route choice for the device's SM count and for smaller cards (a 92- or 82-SM
    plan always fits a larger device), compiled for the device arch."""
    gemv = FAMILIES["gemv"]
    loaded = {s.uri: loader(s) for s in gemv.variants(prob)}
    sms = device["sms"] if plan_sms == "device" else min(plan_sms, device["sms"])
    ctx = PlanContext(device["arch"], sms, {u: lk.resources for u, lk in loaded.items()})
    launch = gemv.launch(prob, t, ctx)
    _run_and_check(loaded[launch.kernel.uri], prob, launch, seed=t * 31 + sms)


#: bf16 on fp32 FMAs with each weight vector converted once for the tile's tokens (the registered family's 4-token
#: tile from run 217 until 2026-12-06, when the tensor-core variants took the tiles whose K is a multiple of 64; what
#: any other K still takes; spelled out, tensor cores off, so that the test keeps checking it)
BF16_UNPACK = GemvFamily(GemvTuning(bf16_unpack_tiles=(4,), bf16_mma_tiles=()))
UNPACK_CASES = [QKV, DOWN, GATE_UP, MID_SWIGLU, GemvProblem(5120, 17408, "swiglu", in_norm="parts"),
                GemvProblem(17408, 5120, "add_norm_parts")]


@pytest.mark.parametrize("t", [3, 4, 13])
@pytest.mark.parametrize("prob", UNPACK_CASES, ids=lambda p: f"k{p.k}_n{p.n}_{p.epilogue}_{p.in_norm}")
def test_bf16_unpacked_weights_match_reference(device, loader, prob, t):
    """``bf16_unpack_tiles``: the planned launch at the 27B shapes with the weights converted once per vector for
    all of a 4-token tile's tokens (3: a partial chunk; 13: 8 + 5 or 4 x 3 + 1, as the plan chunks it)."""
    loaded = {s.uri: loader(s) for s in BF16_UNPACK.variants(prob)}
    ctx = PlanContext(device["arch"], device["sms"], {u: lk.resources for u, lk in loaded.items()})
    launch = BF16_UNPACK.launch(prob, t, ctx)
    assert dict(launch.kernel.params).get("unpack_w") == (1 if launch.kernel.param("max_tokens") == 4 else None), \
        launch.kernel.uri
    _run_and_check(loaded[launch.kernel.uri], prob, launch, seed=t * 17 + 5)


def _planned(insts, arch, sku, tokens):
    """(instance name, problem, launch) for each instance and T as the product plans them for ``arch`` on ``sku``
    (:func:`ninferc.targets.model_plan.plan_model`'s pieces: every variant compiled for ``arch`` and its resources
    read, the family's launch on a context of the SKU's SM count and bandwidth, each launch checked)."""
    tgt = make_target(arch, sku)
    specs = [s for _, fam, prob in insts for s in family_variants(fam, prob, tgt.arch)]
    ctx = PlanContext.for_target(tgt, {u: r for u, (_, r) in compile_variants(specs, tgt.arch).items()})
    for name, fam, prob in insts:
        for t in tokens:
            ln = fam.launch(prob, t, ctx)
            check_launch(ln, ctx.arch, ctx.resources_of(ln.kernel), ctx.sms)
            yield name, prob, ln


@pytest.mark.parametrize("arch,sku", list(ARCH_SKUS.items()))
def test_every_arch_plan_runs_on_this_device(device, loader, arch, sku):
    """Per-arch golden regression: the plan made for each target (same template parameters, grids and
    splits) executes correctly here, compiled for the device's arch. Skips launches the device
    cannot co-host (a plan for a larger card on a smaller device)."""
    insts = [i for i in representative_instances("qwen3.8-27b") if i[0] != "lm_head"]
    for name, prob, ln in _planned(insts, arch, sku, tokens=(1, 4, 8, 16)):
        lk = loader(ln.kernel)
        if ln.cooperative:
            dev_cap = occupancy(device["arch"], ln.threads, lk.resources.registers,
                                lk.resources.static_smem_bytes, ln.dynamic_smem_bytes,
                                barriers=lk.resources.barriers).ctas_per_sm * device["sms"]
            if ln.ctas > dev_cap:
                continue
        _run_and_check(lk, prob, ln, seed=zlib.crc32(f"{arch}/{name}/{ln.tokens}".encode()))


@pytest.mark.parametrize("plan_sms", ["device", 82])
@pytest.mark.parametrize("t", [1, 3, 8])
@pytest.mark.parametrize("fmt", ["bf16", "w8", "w4"])
def test_folded_norm_pair_matches_the_unfused_chain(device, loader, fmt, t, plan_sms):
    """The decode step's folded norm at the 27B shapes, each half on its planned launch: down_proj (K = 17408
    -> 5120, add_norm_parts) then gate|up (5120 -> 2 x 17408, swiglu, in_norm parts) reading the down launch's
    parts, against down_proj + fp32 AddRMSNorm + gate|up."""
    gemv = FAMILIES["gemv"]
    prod = GemvProblem(17408, 5120, "add_norm_parts", fmt)
    cons = GemvProblem(5120, 17408, "swiglu", fmt, in_norm="parts")
    loaded = {s.uri: loader(s) for p in (prod, cons) for s in gemv.variants(p)}
    sms = device["sms"] if plan_sms == "device" else min(plan_sms, device["sms"])
    ctx = PlanContext(device["arch"], sms, {u: lk.resources for u, lk in loaded.items()})
    lp, lc = gemv.launch(prod, t, ctx), gemv.launch(cons, t, ctx)
    wp, wp_dev, sp_dev = _weights_for(prod)
    wc, wc_dev, sc_dev = _weights_for(cons)
    rng = np.random.default_rng(t * 7 + sms)
    x = rng.standard_normal((t, prod.k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    h0 = rng.standard_normal((t, 5120), dtype=np.float32)
    nw = rng.standard_normal(5120, dtype=np.float32) * np.float32(0.2)
    h = cp.asarray(h0)
    xs = cp.full((t, 5120), BF16_NAN, dtype=cp.uint16)
    ss = cp.full(max(lp.workspace_bytes // 4, 1), np.nan, dtype=cp.float32)
    y = cp.full((t, 17408), BF16_NAN, dtype=cp.uint16)
    loaded[lp.kernel.uri].launch(lp, kernel_args(prod, lp, wp_dev, cp.asarray(x.view(np.uint16)), h, scales=sp_dev,
                                                 norm_w=cp.asarray(nw), xs=xs, ss_out=ss))
    loaded[lc.kernel.uri].launch(lc, kernel_args(cons, lc, wc_dev, xs, y, scales=sc_dev, ss_in=ss,
                                                 ss_parts=gemv.norm_parts(lp), in_eps=1e-6))
    cp.cuda.get_current_stream().synchronize()
    h_ref = h0 + x.astype(np.float32) @ wp.T
    assert _rel(cp.asnumpy(h), h_ref) < GEMV_REL_L2
    g = ref_rmsnorm(h_ref, nw, 1e-6, True) @ wc.T
    want = g[:, :17408] / (1 + np.exp(-g[:, :17408])) * g[:, 17408:]
    got = cp.asnumpy(y).view(ml_dtypes.bfloat16).astype(np.float32)
    e = _rel(got, want)
    assert e < FOLDED_REL_L2, f"{lp.kernel.uri} -> {lc.kernel.uri} T={t}: rel L2 {e:.2e}"
    xs_ref, ss_ref = norm_input(h_ref, nw, True)
    pair = reference(GemvProblem(5120, 17408, "swiglu", in_norm="parts"), xs_ref, wc, ss_in=ss_ref, in_eps=1e-6)
    e = _rel(got, pair.astype(np.float32))
    assert e < NORM_BF16_REL_L2 + GEMV_REL_L2, f"vs the pair's own reference: rel L2 {e:.2e}"


def test_cubin_resources_equal_driver_attributes(device, loader):
    gemv = FAMILIES["gemv"]
    for prob in TINY + TINY_Q:
        for spec in gemv.variants(prob):
            lk = loader(spec)
            r = lk.resources
            assert lk.raw.num_regs == r.registers, spec.uri
            assert lk.raw.shared_size_bytes == r.static_smem_bytes, spec.uri
            assert lk.raw.local_size_bytes == r.local_bytes, spec.uri
            assert lk.raw.max_threads_per_block == r.max_threads == spec.threads, spec.uri


def test_occupancy_calculator_equals_driver(device, loader):
    arch = device["arch"]
    gemv = FAMILIES["gemv"]
    for prob in TINY + TINY_Q:
        for spec in gemv.variants(prob):
            lk = loader(spec)
            r = lk.resources
            for threads in sorted({32, 64, 128, spec.threads}):
                for dyn in (0, 1024, 8 * 1024, 40 * 1024, 64 * 1024, arch.max_smem_per_cta_optin - r.static_smem_bytes):
                    want = lk.driver_occupancy(threads, dyn)
                    attr = lk.raw.max_dynamic_shared_size_bytes
                    got = occupancy(arch, threads, r.registers, r.static_smem_bytes, dyn, barriers=r.barriers,
                                    max_dynamic_smem=attr)
                    assert got.ctas_per_sm == want, (spec.uri, threads, dyn, attr, got)


# ------------------------------------------------------------------------------------------------
# quantised weights (w8 / w4 fused dequantisation)
# ------------------------------------------------------------------------------------------------

QFORMATS = ("w8", "w4")
Q_TOKENS = (1, 3, 4, 5, 8)
TINY_Q = [GemvProblem(p.k, p.n, p.epilogue, f) for f in QFORMATS for p in TINY]
Q_SHAPES = TINY + [QKV, GATE_UP, DOWN, O_PROJ, NARROW, MID_SWIGLU]  # the bf16 cases' shapes
LM_HEAD = GemvProblem(5120, 248320, "store", "w8")  # the 27B LM head at the w4 recipe's w8


def _q(prob, fmt):
    return GemvProblem(prob.k, prob.n, prob.epilogue, fmt)


def _pid(p):
    return f"k{p.k}_n{p.n}_{p.epilogue}"


#: w4 on tensor cores at every token tile and epilogue (the registered family: the 4-token tile but not its
#: add_norm_parts GEMVs, and the 8-token tile, whose rings take 51,200 B of dynamic shared memory)
W4_MMA = GemvFamily(GemvTuning(w4_mma_tiles=(1, 4, 8), w4_mma_epilogues=EPILOGUES))
#: w8 on tensor cores (fp16 mma) at every token tile (the registered family: none, since the w8 8-token tile moved to
#: the dp kernels; there only where a target cannot hold a tile's x, ``GemvFamily.fallback``)
W8_MMA = GemvFamily(GemvTuning(w8_mma_tiles=(1, 4, 8)))
#: bf16 on tensor cores (bf16 mma) at every token tile (the registered family: the 4- and 8-token tiles)
BF16_MMA = GemvFamily(GemvTuning(bf16_mma_tiles=(1, 4, 8)))
#: w8 / w4 on fp32 FMAs at the 1-token tile (the registered family runs that tile on integer dot products)
FMA = GemvFamily(GemvTuning(w8_dp_tiles=(), w4_dp_tiles=()))
#: w8 / w4 on integer dot products at the 1- and 4-token tiles, more CTA shapes (the registered family: w8 at every tile,
#: w4 at one token and its 4-token add_norm_parts GEMVs)
DP = GemvFamily(GemvTuning(w8_dp_tiles=(1, 4), w4_dp_tiles=(1, 4), w8_mma_tiles=(), w4_mma_tiles=(),
                    w4_token_tiles=(1, 4), dp_shapes=((128, 4), (256, 2), (128, 1), (256, 1))))


@pytest.mark.parametrize("t", Q_TOKENS)
@pytest.mark.parametrize("mode", ["coop", "plain"])
@pytest.mark.parametrize("shape", Q_SHAPES, ids=_pid)
@pytest.mark.parametrize("fmt", [*QFORMATS, "w4-mma", "w8-mma", "bf16-mma", "w8-fma", "w4-fma", "w8-dp", "w4-dp"])
def test_quant_forced_variants_match_reference(device, loader, fmt, shape, mode, t):
    """One forced variant per case (threads alternate with T; coop with the most splits the cap allows,
    falling back to the other thread count, skipped only when no cooperative grid fits the device -- or when
    the variant has no cooperative form: the w8 mma and the dp kernels are plain only). w4 runs as the family runs
    it (integer dot products for one token and for its 4-token add_norm_parts GEMVs, tensor cores for the other
    4-token ones) and, as ``w4-mma``, on tensor cores for every T and epilogue; w8 as the family runs it (integer dot
    products at every tile) and, as ``w8-mma``, on tensor cores at every tile; both formats as ``-fma``
    on fp32 FMAs at the 1-token tile and as ``-dp`` on integer dot products at both tiles (plain only); bf16 as
    ``bf16-mma`` on tensor cores at both tiles (plain only)."""
    gemv = {"w4-mma": W4_MMA, "w8-mma": W8_MMA, "bf16-mma": BF16_MMA, "w8-fma": FMA, "w4-fma": FMA, "w8-dp": DP, "w4-dp": DP}.get(
        fmt, FAMILIES["gemv"])
    if fmt.endswith("-fma") and t != 1:
        pytest.skip("above one token the FMA family's tiles are the registered family's (covered by w8 / w4)")
    fmt = fmt.split("-")[0]
    prob = _q(shape, fmt)
    assert dict(gemv.spec(prob, 128, "plain", 1).params).get("mma", False) == gemv.mma_for(prob, 1)
    order = (tuple((th, 1) for th in gemv.coop_threads_for(prob, gemv.tile_for(t))) if mode == "coop"
             else ((128, 4), (256, 2)) if t % 2 else ((256, 2), (128, 1)))
    if mode == "plain":  # only shapes the family has at this tile (the 4-token mma rings fit 128 threads only)
        order = tuple(s for s in order if s in gemv.shapes_for(prob, gemv.tile_for(t))) or gemv.shapes_for(
            prob, gemv.tile_for(t))[:1]
    last = None
    for threads, kw in order:
        spec = gemv.spec(prob, threads, mode, gemv.tile_for(t), kw)
        loaded = loader(spec)
        ctx = PlanContext(device["arch"], device["sms"], {spec.uri: loaded.resources})
        try:
            launch = gemv.launch_variant(prob, t, ctx, threads, mode, max_tokens=gemv.tile_for(t), k_warps=kw)
        except PlanError as exc:  # the cooperative grid of this T does not fit with even one split
            last = exc
            continue
        assert dict(launch.kernel.params).get("wfmt", "bf16") == fmt
        _run_and_check(loaded, prob, launch, seed=zlib.crc32(f"{prob}/{mode}/{t}".encode()))
        return
    pytest.skip(str(last) if last else f"{fmt} at T = {t}: no {mode} variant (w8 / bf16 mma and dp are plain only)")


@pytest.mark.parametrize("plan_sms", ["device", 82])
@pytest.mark.parametrize("t", Q_TOKENS)
@pytest.mark.parametrize("shape", Q_SHAPES, ids=_pid)
@pytest.mark.parametrize("fmt", QFORMATS)
def test_quant_planned_launches_match_reference(device, loader, fmt, shape, t, plan_sms):
    """The family's own route choice for the quantised kernels (their own registers, so their own caps
    and split limits), for the device's SM count and a smaller card's."""
    prob = _q(shape, fmt)
    gemv = FAMILIES["gemv"]
    loaded = {s.uri: loader(s) for s in gemv.variants(prob)}
    sms = device["sms"] if plan_sms == "device" else min(plan_sms, device["sms"])
    ctx = PlanContext(device["arch"], sms, {u: lk.resources for u, lk in loaded.items()})
    launch = gemv.launch(prob, t, ctx)
    assert launch.split_k <= gemv.max_splits(prob)
    _run_and_check(loaded[launch.kernel.uri], prob, launch, seed=t * 31 + sms)


@pytest.mark.parametrize("t", Q_TOKENS)
def test_quant_lm_head_w8(device, loader, t):
    """The 27B LM head (K = 5120, N = 248320) at w8: planned route, plus at T = 1 the family's other one-token
    shape forced (the persistent dp kernel of 640 threads; the plan takes 256)."""
    gemv = FAMILIES["gemv"]
    loaded = {s.uri: loader(s) for s in gemv.variants(LM_HEAD)}
    ctx = PlanContext(device["arch"], device["sms"], {u: lk.resources for u, lk in loaded.items()})
    launch = gemv.launch(LM_HEAD, t, ctx)
    _run_and_check(loaded[launch.kernel.uri], LM_HEAD, launch, seed=t)
    if t == 1:
        forced = gemv.launch_variant(LM_HEAD, t, ctx, 640, "plain", max_tokens=1, k_warps=1)
        assert forced.kernel.uri != launch.kernel.uri
        _run_and_check(loaded[forced.kernel.uri], LM_HEAD, forced, seed=99)


#: the persistent dp variants' options (GemvFamily dp_carry), at both token tiles and two CTA sizes
#: family options, and "ring": the weight-ring stages forced on every variant (None: the family's dp_ring, 0)
DP_OPTIONS = {"nocarry": dict(dp_carry=(False,), dp_deep_threads=(), ring=0), "carry": dict(dp_carry=(True,), ring=None),
              "late": dict(dp_carry=(False,), dp_preload="late", ring=0),
              "ring2": dict(dp_carry=(False,), ring=2), "ring3": dict(dp_carry=(False,), ring=3),
              "ring5": dict(dp_carry=(False,), ring=5),
              "ring3_late": dict(dp_carry=(False,), dp_preload="late", ring=3),
              "deep": dict(dp_carry=(False,), dp_deep_threads=(256, 640), ring=0),
              "cap": dict(dp_min_ctas=tuple((f, e, 1, t, 4) for f in ("w8", "w4") for e in EPILOGUES for t in (256,)),
                          ring=None)}
#: shapes with every epilogue / input mode a persistent dp kernel has: swiglu + in_norm, add_norm_parts, store +
#: in_norm, a row count that is not a multiple of the CTA's outputs (invalid rows in the last row block)
DP_PERSIST_SHAPES = [GemvProblem(2048, 2048, "swiglu", "w4", in_norm="parts"),
                     GemvProblem(2048, 1280, "add_norm_parts", "w4"),
                     GemvProblem(1024, 1000, "store", "w4", in_norm="parts"),
                     GemvProblem(1024, 1000, "residual_add", "w8")]


@pytest.mark.parametrize("t", [1, 3, 9])
@pytest.mark.parametrize("threads", [256, 640])
@pytest.mark.parametrize("shape", DP_PERSIST_SHAPES, ids=lambda p: f"k{p.k}_n{p.n}_{p.epilogue}_{p.wfmt}")
@pytest.mark.parametrize("option", list(DP_OPTIONS))
def test_persistent_dp_many_items_per_cta(device, loader, option, shape, threads, t):
    """The persistent dp kernels planned for a 2-SM device: each CTA runs many work items in a row -- the next item's
    first weights carried across the item boundary, token chunks changing inside a CTA's range (x restaged), the
    last row block's rows past N -- and each option gives the reference's result (the weight rings: their
    cp.async protocol, which the CPU emulator's instant copies cannot check)."""
    opts = dict(DP_OPTIONS[option])
    ring = opts.pop("ring")
    # token tiles (1, 4): T = 9 runs three 4-token chunks (the dp tiles; since run 209 the default tiles of bf16 / w8
    # also hold 8, and since 2a90bb5 w4's, where no dp variant exists -- bench/NOTES.md runs 213 and 247)
    gemv = GemvFamily(GemvTuning(token_tiles=(1, 4), w4_token_tiles=(1, 4), w8_dp_tiles=(1, 4), w4_dp_tiles=(1, 4),
                                 w8_mma_tiles=(), w4_mma_tiles=(), dp_shapes=((threads, 1),), **opts))
    tile = gemv.tile_for(t, shape.wfmt)
    assert gemv.persistent(shape, tile), f"{shape} at tile {tile}: no persistent dp variant"
    specs = [s for s in gemv.variants(shape) if s.threads == threads and s.param("max_tokens") == tile
             and s.param("mode") == "plain"]
    if ring:
        specs.append(gemv.spec(shape, threads, "plain", tile, 1, False, ring))
    loaded = {s.uri: loader(s) for s in specs}
    ctx = PlanContext(device["arch"], 2, {u: k.resources for u, k in loaded.items()})
    launch = gemv.launch_variant(shape, t, ctx, threads, "plain", max_tokens=tile, k_warps=1, ring=ring)
    # the option's ring, forced; options without one (carry, cap) get the family's default (dp_ring)
    assert dict(launch.kernel.params).get("ring", 0) == (ring if ring is not None else gemv.dp_ring)
    kp = dict(launch.kernel.params)
    deep = threads in gemv.dp_deep_threads and not kp.get("carry") and not kp.get("ring") and "preload" not in kp
    assert (kp.get("depth", 1) == 2) == deep
    if ctx.occupancy(launch.kernel, launch.dynamic_smem_bytes).ctas_per_sm < 1:
        pytest.skip(f"{launch.kernel.uri}: its {launch.dynamic_smem_bytes} B of rings and x do not fit this GPU's SM")
    loaded = loaded[launch.kernel.uri]
    items = gemv.row_blocks(shape, threads, 1, tile) * gemv.token_chunks(t, tile)
    assert launch.ctas < items, f"{launch.ctas} CTAs for {items} items: not several items per CTA"
    _run_and_check(loaded, shape, launch, seed=zlib.crc32(f"{option}/{shape}/{threads}/{t}".encode()))
