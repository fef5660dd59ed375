"""GPU tier for gemv_coop (marked ``gpu``; skipped cleanly without CuPy or a CUDA device).

For the running device: compile each kernel with ninferc.targets.nvrtc for the device's arch, load that
exact cubin with ``cupy.RawModule(path=...)`` (CuPy's own compile path adds options that change
registers, ../shared/notes/cubin-resources.md), launch it cooperatively when the plan says so, and
compare with the numpy reference on fresh random inputs (outputs and workspace poisoned with NaN
first; never zeros). Every case runs twice: the grid-barrier counter must come back reusable.
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
from ninferc.targets.kernels.gemv_coop import GemvProblem, kernel_args, reference  # noqa: E402
from ninferc.targets.nvrtc import compile_cubin  # noqa: E402
from ninferc.targets.occupancy import occupancy  # noqa: E402
from ninferc.targets.plan import PlanContext, make_plan  # noqa: E402

# Named tolerance for GEMV outputs (relative L2 error); moves to the shared tolerance presets module.
GEMV_REL_L2 = 2e-3
# add_rmsnorm's bf16 output vs the reference's bf16: they differ only where the fp32 value (accumulation
# order, sum-of-squares order) lands on the other side of a bf16 rounding boundary, one bf16 ulp (2^-8
# relative) at a few elements.
NORM_BF16_REL_L2 = 2e-3
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


@functools.lru_cache(maxsize=16)
def _weights(k, w_rows, seed):
    """Random bf16 weights [w_rows, k] (scaled so outputs are O(1)): fp32 copy holding the bf16 values
    (for the reference, no per-call conversion) and the device copy (bf16 bits as uint16)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((w_rows, k), dtype=np.float32) / np.float32(np.sqrt(k))).astype(ml_dtypes.bfloat16)
    return w.astype(np.float32), cp.asarray(w.view(np.uint16))


@functools.lru_cache(maxsize=24)
def _qweights(k, w_rows, fmt, seed):
    """Random bf16 weights [w_rows, k] (as :func:`_weights`) quantised to ``fmt`` by
    ``ninferc.ir.quant.quantize``: (fp32 dequantised weights ``fl32(q * scale)`` for the reference, device
    codes, device scales)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((w_rows, k), dtype=np.float32) / np.float32(np.sqrt(k))).astype(ml_dtypes.bfloat16)
    qt = quantize(w, fmt)
    return qt.dequantize(), cp.asarray(qt.codes), cp.asarray(qt.scales)


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
    ref_prob = GemvProblem(prob.k, prob.n, prob.epilogue, unit_offset=prob.unit_offset)
    t = launch.tokens
    ws = cp.full(max(launch.workspace_bytes // 4, 1), np.nan, dtype=cp.float32)
    barrier = cp.zeros(2, dtype=cp.uint32)
    rng = np.random.default_rng(seed)
    for rep in range(2):
        x = rng.standard_normal((t, prob.k), dtype=np.float32).astype(ml_dtypes.bfloat16)
        x_dev = cp.asarray(x.view(np.uint16))
        y_in, norm = None, {}
        if prob.epilogue == "swiglu":
            y = cp.full((t, prob.n), BF16_NAN, dtype=cp.uint16)
        elif prob.fused_norm:  # residual stream in, normalised bf16 out (poisoned)
            y_in = rng.standard_normal((t, prob.n), dtype=np.float32)
            y = cp.asarray(y_in)
            nw = rng.standard_normal(prob.n, dtype=np.float32) * np.float32(0.2)
            norm = {"norm_w": cp.asarray(nw), "xn": cp.full((t, prob.n), BF16_NAN, dtype=cp.uint16), "eps": 1e-6}
        elif prob.epilogue == "residual_add":
            y_in = rng.standard_normal((t, prob.n), dtype=np.float32)
            y = cp.asarray(y_in)
        else:
            y = cp.full((t, prob.n), np.nan, dtype=cp.float32)
        ws.fill(np.nan)
        args = kernel_args(prob, launch, w_dev, x_dev, y, ws, barrier, scales=s_dev, **norm)
        loaded.launch(launch, args)
        cp.cuda.get_current_stream().synchronize()
        if prob.fused_norm:
            ref, ref_xn = reference(ref_prob, x, w, y_in, norm_w=cp.asnumpy(norm["norm_w"]), eps=norm["eps"])
            got_xn = cp.asnumpy(norm["xn"]).view(ml_dtypes.bfloat16).astype(np.float32)
            e = _rel(got_xn, ref_xn.astype(np.float32))
            assert e < NORM_BF16_REL_L2, f"{launch.kernel.uri} T={t} split={launch.split_k} rep={rep}: xn rel L2 {e:.2e}"
        else:
            ref = reference(ref_prob, x, w, y_in)
        if prob.epilogue == "swiglu":
            out = cp.asnumpy(y).view(ml_dtypes.bfloat16).astype(np.float32)
            ref = ref.astype(np.float32)
        else:
            out = cp.asnumpy(y)
        err = _rel(out, ref)
        assert err < GEMV_REL_L2, f"{launch.kernel.uri} T={t} split={launch.split_k} rep={rep}: rel L2 {err:.2e}"
        if y_in is not None:  # the accumulated part alone must also be right
            acc = reference(GemvProblem(prob.k, prob.n, "store"), x, w)
            d = _rel(out - y_in, acc)
            assert d < GEMV_REL_L2, f"{launch.kernel.uri}: residual delta rel L2 {d:.2e}"
        if launch.cooperative:
            assert int(barrier.get()[0]) & 0x7FFFFFFF == 0, "grid barrier counter not left reusable"
            assert int(barrier.get()[1]) & 0x7FFFFFFF == 0, "group barrier counter not left reusable"


# ------------------------------------------------------------------------------------------------
# tests
# ------------------------------------------------------------------------------------------------

QKV = GemvProblem(5120, 12288 + 2048, "store")
DOWN = GemvProblem(17408, 5120, "residual_add")
O_PROJ = GemvProblem(6144, 5120, "residual_add")
GATE_UP = GemvProblem(5120, 17408, "swiglu")
MID_SWIGLU = GemvProblem(5120, 2048, "swiglu")
NARROW = GemvProblem(2048, 256, "residual_add")  # 8 row blocks at 256 threads: many K splits
TINY = [GemvProblem(256, 704, e) for e in ("store", "residual_add", "swiglu")]

FORCED = [  # (problem, T, threads, mode, splits or None = most that fit)
    (QKV, 1, 256, "plain", None), (QKV, 2, 512, "coop", 1),
    (DOWN, 1, 256, "coop", None), (DOWN, 3, 512, "coop", 2), (DOWN, 5, 512, "plain", None),
    (O_PROJ, 4, 256, "coop", None), (GATE_UP, 1, 256, "plain", None), (GATE_UP, 2, 512, "plain", None),
    (MID_SWIGLU, 2, 256, "coop", None), (MID_SWIGLU, 1, 512, "coop", 2), (NARROW, 1, 256, "coop", None),
    (NARROW, 6, 512, "coop", None),
    (TINY[0], 7, 256, "coop", None), (TINY[1], 1, 512, "coop", None), (TINY[2], 9, 256, "plain", None),
    (TINY[2], 3, 512, "coop", 1), (TINY[0], 1, 512, "plain", None),
]


@pytest.mark.parametrize("case", range(len(FORCED)))
def test_forced_variants_match_reference(device, loader, case):
    prob, t, threads, mode, splits = FORCED[case]
    gemv = FAMILIES["gemv_coop"]
    spec = gemv.spec(prob, threads, mode)
    loaded = loader(spec)
    ctx = PlanContext(device["arch"], device["sms"], {spec.uri: loaded.resources})
    try:
        launch = gemv.launch_variant(prob, t, ctx, threads, mode, splits)
    except PlanError as exc:  # a smaller device than the H200 the cases were sized for
        pytest.skip(str(exc))
    _run_and_check(loaded, prob, launch, seed=case)


@pytest.mark.parametrize("plan_sms", ["device", 92, 82])
@pytest.mark.parametrize("t", [1, 3, 4, 16])
@pytest.mark.parametrize("prob", [QKV, DOWN, O_PROJ, GATE_UP, MID_SWIGLU, NARROW, *TINY], ids=lambda p: f"k{p.k}_n{p.n}_{p.epilogue}")
def test_planned_launches_match_reference(device, loader, prob, t, plan_sms):
    """The family's own route choice for the device's SM count and for smaller cards (a 92- or 82-SM
    plan always fits a larger device), compiled for the device arch."""
    gemv = FAMILIES["gemv_coop"]
    loaded = {s.uri: loader(s) for s in gemv.variants(prob)}
    sms = device["sms"] if plan_sms == "device" else min(plan_sms, device["sms"])
    ctx = PlanContext(device["arch"], sms, {u: lk.resources for u, lk in loaded.items()})
    launch = gemv.launch(prob, t, ctx)
    _run_and_check(loaded[launch.kernel.uri], prob, launch, seed=t * 31 + sms)


@pytest.mark.parametrize("arch,sku", [("sm_86", "rtx3090"), ("sm_89", "l20"), ("sm_90", "h200"),
                                      ("sm_120a", "rtx5090")])
def test_every_arch_plan_runs_on_this_device(device, loader, arch, sku):
    """Per-arch golden regression: the plan made for each target (same template parameters, grids and
    splits) executes correctly here, compiled for the device's arch. Skips launches the device
    cannot co-host (a plan for a larger card on a smaller device)."""
    insts = [i for i in representative_instances("qwen3.8-27b") if i[0] != "lm_head"]
    plan = make_plan(insts, arch, sku=sku, tokens=(1, 4, 16))
    for name, _fam, prob in plan.instances:
        for ln in plan.launches[name]:
            lk = loader(ln.kernel)
            if ln.cooperative:
                dev_cap = occupancy(device["arch"], ln.threads, lk.resources.registers,
                                    lk.resources.static_smem_bytes, ln.dynamic_smem_bytes,
                                    barriers=lk.resources.barriers).ctas_per_sm * device["sms"]
                if ln.ctas > dev_cap:
                    continue
            _run_and_check(lk, prob, ln, seed=zlib.crc32(f"{arch}/{name}/{ln.tokens}".encode()))


NORM_CASES = [GemvProblem(17408, 5120, "add_rmsnorm", f) for f in ("bf16", "w8", "w4")] + [
    GemvProblem(6144, 5120, "add_rmsnorm", "bf16"), GemvProblem(704, 256, "add_rmsnorm", "bf16", unit_offset=False),
    GemvProblem(704, 256, "add_rmsnorm", "w4"), GemvProblem(256, 2048, "add_rmsnorm", "w8", unit_offset=False),
    GemvProblem(256, 704, "add_rmsnorm", "bf16")]  # N = 704: a CTA's 256 outputs straddle two tokens


@pytest.mark.parametrize("plan_sms", ["device", 82])
@pytest.mark.parametrize("t", [1, 3, 4, 8])
@pytest.mark.parametrize("prob", NORM_CASES, ids=lambda p: f"k{p.k}_n{p.n}_{p.wfmt}_u{int(p.unit_offset)}")
def test_add_rmsnorm_planned_launches_match_reference(device, loader, prob, t, plan_sms):
    """The fused residual add + RMSNorm epilogue (route coop_norm, two barriers) on the plan's own launch:
    h == y_in + acc, xn == bf16 RMSNorm(h) of the reference, both barrier words left reusable."""
    gemv = FAMILIES["gemv_coop"]
    loaded = {s.uri: loader(s) for s in gemv.variants(prob)}
    sms = device["sms"] if plan_sms == "device" else min(plan_sms, device["sms"])
    ctx = PlanContext(device["arch"], sms, {u: lk.resources for u, lk in loaded.items()})
    launch = gemv.launch(prob, t, ctx)
    if launch.route != "coop_norm":  # the fused grid does not fit this SM count: the store GEMV, norm apart
        assert launch == gemv.launch(prob.unfused(), t, ctx) and "add_rmsnorm" not in launch.kernel.uri
        prob = prob.unfused()
    _run_and_check(loaded[launch.kernel.uri], prob, launch, seed=t * 17 + sms)


@pytest.mark.parametrize("splits", [1, 2, 3])
@pytest.mark.parametrize("threads", [256, 512])
def test_add_rmsnorm_forced_splits(device, loader, threads, splits):
    """Every split count and thread count of the fused kernel -- 27B down_proj shape, T = 4."""
    gemv = FAMILIES["gemv_coop"]
    prob = GemvProblem(17408, 5120, "add_rmsnorm")
    spec = gemv.spec(prob, threads, "coop")
    loaded = loader(spec)
    ctx = PlanContext(device["arch"], device["sms"], {spec.uri: loaded.resources})
    try:
        launch = gemv.launch_variant(prob, 4, ctx, threads, "coop", splits)
    except PlanError as exc:  # that many splits exceed this variant's cooperative cap on this device
        if splits == 1:
            raise
        pytest.skip(str(exc))
    _run_and_check(loaded, prob, launch, seed=threads + splits)


def test_cubin_resources_equal_driver_attributes(device, loader):
    gemv = FAMILIES["gemv_coop"]
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
    gemv = FAMILIES["gemv_coop"]
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


@pytest.mark.parametrize("t", Q_TOKENS)
@pytest.mark.parametrize("mode", ["coop", "plain"])
@pytest.mark.parametrize("shape", Q_SHAPES, ids=_pid)
@pytest.mark.parametrize("fmt", QFORMATS)
def test_quant_forced_variants_match_reference(device, loader, fmt, shape, mode, t):
    """One forced variant per case (threads alternate with T; coop with the most splits the cap allows,
    falling back to the other thread count, skipped only when no cooperative grid fits the device)."""
    prob = _q(shape, fmt)
    gemv = FAMILIES["gemv_coop"]
    order = (256, 512) if t % 2 else (512, 256)
    last = None
    for threads in order:
        spec = gemv.spec(prob, threads, mode)
        loaded = loader(spec)
        ctx = PlanContext(device["arch"], device["sms"], {spec.uri: loaded.resources})
        try:
            launch = gemv.launch_variant(prob, t, ctx, threads, mode)
        except PlanError as exc:  # the cooperative grid of this T does not fit with even one split
            last = exc
            continue
        assert launch.kernel.param("wfmt") == fmt
        _run_and_check(loaded, prob, launch, seed=zlib.crc32(f"{prob}/{mode}/{t}".encode()))
        return
    pytest.skip(str(last))


@pytest.mark.parametrize("plan_sms", ["device", 82])
@pytest.mark.parametrize("t", Q_TOKENS)
@pytest.mark.parametrize("shape", Q_SHAPES, ids=_pid)
@pytest.mark.parametrize("fmt", QFORMATS)
def test_quant_planned_launches_match_reference(device, loader, fmt, shape, t, plan_sms):
    """The family's own route choice for the quantised kernels (their own registers, so their own caps
    and split limits), for the device's SM count and a smaller card's."""
    prob = _q(shape, fmt)
    gemv = FAMILIES["gemv_coop"]
    loaded = {s.uri: loader(s) for s in gemv.variants(prob)}
    sms = device["sms"] if plan_sms == "device" else min(plan_sms, device["sms"])
    ctx = PlanContext(device["arch"], sms, {u: lk.resources for u, lk in loaded.items()})
    launch = gemv.launch(prob, t, ctx)
    assert launch.split_k <= gemv.max_splits(prob)
    _run_and_check(loaded[launch.kernel.uri], prob, launch, seed=t * 31 + sms)


@pytest.mark.parametrize("t", Q_TOKENS)
def test_quant_lm_head_w8(device, loader, t):
    """The 27B LM head (K = 5120, N = 248320) at w8: planned route, plus forced plain at T = 1."""
    gemv = FAMILIES["gemv_coop"]
    loaded = {s.uri: loader(s) for s in gemv.variants(LM_HEAD)}
    ctx = PlanContext(device["arch"], device["sms"], {u: lk.resources for u, lk in loaded.items()})
    launch = gemv.launch(LM_HEAD, t, ctx)
    _run_and_check(loaded[launch.kernel.uri], LM_HEAD, launch, seed=t)
    if t == 1:
        forced = gemv.launch_variant(LM_HEAD, t, ctx, 512, "plain")
        _run_and_check(loaded[forced.kernel.uri], LM_HEAD, forced, seed=99)
