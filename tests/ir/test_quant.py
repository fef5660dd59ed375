"""Quantised weight formats (ninferc.ir.quant): round-trip bounds, determinism, int4 packing, recipes,
and fidelity of the fake-quantised fixture model against the bf16 model (issue 6)."""

import hashlib

import ml_dtypes
import numpy as np
import pytest

from ninferc.ir.graph import ParamSpec
from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.quant import (FORMATS, GROUP_SIZE, GROUPS, QuantError, QuantTensor, assign_formats, fake_quant,
                              is_matrix, nbytes_as, pack_int4, quantize, quantize_weights, recipe, unpack_int4)
from ninferc.ir.reference import ReferenceExecutor

# Issue 6 ("Must show"): top-1 agreement with the bf16 engine over all golden teacher-forced positions.
TOP1_AGREEMENT_W8 = 0.98  # issue 6: w8 >= 0.98
TOP1_AGREEMENT_W4 = 0.90  # issue 6: w4 >= 0.90

QFORMATS = ("w8", "w4")


def _random(shape, kind, seed):
    r = np.random.default_rng(seed)
    if kind == "normal":
        return r.standard_normal(shape).astype(np.float32)
    if kind == "heavy":  # student-t, heavy tails: outliers dominate some groups
        return (r.standard_t(2.5, shape) * 0.02).astype(np.float32)
    if kind == "outliers":
        w = r.standard_normal(shape).astype(np.float32) * 0.01
        w[r.random(shape) < 0.002] *= 300
        return w
    if kind == "bf16":  # values exactly representable in bf16, like a checkpoint
        return r.standard_normal(shape).astype(ml_dtypes.bfloat16)
    raise ValueError(kind)


def _check_bound(w, qt: QuantTensor, what: str) -> float:
    """Assert |w - deq| <= error_bound elementwise; return max |w - deq| / |scale| (tightness)."""
    err = np.abs(np.asarray(w).astype(np.float64) - qt.dequantize().astype(np.float64))
    bound = qt.error_bound()
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), f"{what}: |w - deq| {err[worst]:.6g} > bound {bound[worst]:.6g} at {worst}"
    return float(np.max(err / np.abs(qt.scale_per_element())))


# ---- round trip --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", QFORMATS)
@pytest.mark.parametrize("seed,kind", list(enumerate(["normal", "heavy", "outliers", "bf16"])))
def test_round_trip_random_within_bound(fmt, seed, kind):
    w = _random((96, 512), kind, seed=seed)
    qt = quantize(w, fmt)
    tight = _check_bound(w, qt, f"{fmt} {kind}")
    assert tight > 0.45, f"{fmt} {kind}: bound never approached (max err/scale {tight:.3f}); is it stated right?"
    lo, hi = (-127, 127) if fmt == "w8" else (-8, 7)
    q = qt.q()
    assert q.min() >= lo and q.max() <= hi
    assert q.min() == lo, f"{fmt}: the low end of the code range ({lo}) is never used"


def test_w4_edge_groups_within_bound():
    """Ties (both extremes equal), the small/big = 15/16 switch-over, tiny and huge magnitudes."""
    base = np.linspace(-1, 1, GROUP_SIZE, dtype=np.float32)
    rows = [base, -base, base * 1e-30, base * 3e38,
            np.where(base > 0, base * (15 / 16), base), np.where(base > 0, base * (15 / 16) * 1.0001, base),
            np.where(base < 0, base * (15 / 16), base), np.full(GROUP_SIZE, -2.5, np.float32),
            np.full(GROUP_SIZE, 2.5, np.float32)]
    w = np.stack(rows).astype(np.float32)
    for fmt in QFORMATS:
        _check_bound(w, quantize(w, fmt), f"{fmt} edge groups")


@pytest.mark.parametrize("fmt", QFORMATS)
def test_round_trip_fixture_tensors_within_bound(tiny_ckpt, fmt):
    """Every matrix of the fixture checkpoint (embedding, LM head, all projections) within the bound."""
    n = 0
    for name, spec in tiny_ckpt.specs.items():
        if not is_matrix(spec):
            continue
        w = tiny_ckpt[name]
        qt = quantize(w, fmt, name=name)
        assert qt.shape == spec.shape and qt.nbytes == nbytes_as(spec.shape, fmt)
        _check_bound(w, qt, f"{fmt} {name}")
        n += 1
    assert n >= 8 * 6


def test_w4_negation_flips_scale_keeps_codes():
    w = _random((32, 256), "normal", seed=3)
    a, b = quantize(w, "w4"), quantize(-w, "w4")
    assert np.array_equal(a.codes, b.codes)
    assert np.array_equal(a.scales, -b.scales)
    assert (a.scales < 0).any() and (a.scales > 0).any()


def _absmax_w4(w):
    """The w4 rule without the scale search (the absmax scale mag_0 of the module docstring): (deq, scales)."""
    N, K = w.shape
    g = w.reshape(N, K // GROUP_SIZE, GROUP_SIZE).astype(np.float32)
    pos, neg = np.maximum(g.max(-1), 0), np.maximum(-g.min(-1), 0)
    big, small = np.maximum(pos, neg), np.minimum(pos, neg)
    mag = np.maximum((big / np.float32(8)).astype(np.float32), (small / np.float32(7.5)).astype(np.float32))
    d = np.where(neg >= pos, mag, -mag).astype(np.float32)
    q = np.clip(np.rint((g / d[..., None]).astype(np.float32)), -8, 7)
    return (q * d[..., None]).astype(np.float32).reshape(N, K), d


@pytest.mark.parametrize("kind", ["normal", "heavy", "outliers", "bf16"])
def test_w4_scale_search_never_worse_than_absmax(kind):
    """The search keeps the absmax scale as a candidate, so no group's squared error grows (up to the fp32
    rounding of the selection metric), the scales lie in [lo, mag_0], and on these tensors it does help."""
    w = _random((64, 1024), kind, seed=5).astype(np.float32)
    qt = quantize(w, "w4")
    ref, d0 = _absmax_w4(w)
    w64 = w.astype(np.float64).reshape(64, -1, GROUP_SIZE)
    e_new = ((w64 - qt.dequantize().astype(np.float64).reshape(w64.shape)) ** 2).sum(-1)
    e_old = ((w64 - ref.astype(np.float64).reshape(w64.shape)) ** 2).sum(-1)
    assert np.all(e_new <= e_old * (1 + 1e-5) + 1e-30), f"{kind}: a group got worse than the absmax scale"
    assert e_new.sum() < 0.999 * e_old.sum(), f"{kind}: the search changed nothing ({e_new.sum()} vs {e_old.sum()})"
    ratio = np.abs(qt.scales) / np.abs(d0)
    assert np.all(ratio <= 1) and np.all(ratio >= 8 / 8.5 * (1 - 1e-6)), (ratio.min(), ratio.max())
    assert np.array_equal(np.sign(qt.scales), np.sign(d0)), "the search must not flip a scale's sign"


def test_w4_scale_search_picks_the_better_step():
    """A hand-checkable group: 63 values at 0.47 and one extreme at -1. The absmax step 1/8 puts 0.47 at
    3.76 -> 4 (error 0.03 each); the step 1/8.5 puts it at 3.995 -> 4 (error ~0.0006), the extreme at code -8
    (error 1/17 < step/2): the search must take the smaller step."""
    g = np.full((1, GROUP_SIZE), 0.47, np.float32)
    g[0, 5] = -1.0
    qt = quantize(g, "w4")
    assert abs(float(qt.scales[0, 0]) - 1 / 8.5) < 1e-6, qt.scales
    assert qt.q()[0, 5] == -8 and set(qt.q()[0].tolist()) == {-8, 4}
    _check_bound(g, qt, "hand group")


# ---- determinism ------------------------------------------------------------------------------------
def _digest(qt: QuantTensor) -> str:
    return hashlib.sha256(qt.codes.tobytes() + qt.scales.tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("fmt", QFORMATS)
def test_same_input_same_bytes(fmt):
    w = _random((64, 640), "heavy", seed=11)
    a = quantize(w, fmt)
    b = quantize(w.copy(), fmt)
    c = quantize(np.asfortranarray(w), fmt)  # memory layout must not matter
    d = quantize(w.astype(np.float64), fmt)  # fp32-exact values in a wider dtype: same fp32 input
    assert _digest(a) == _digest(b) == _digest(c) == _digest(d)
    # rows are independent: quantising row blocks (or the rows of a fused param) gives the same bytes
    top, bot = quantize(w[:24], fmt), quantize(w[24:], fmt)
    assert np.array_equal(np.concatenate([top.codes, bot.codes]), a.codes)
    assert np.array_equal(np.concatenate([top.scales, bot.scales]), a.scales)


#: sha256 (first 16 hex) of codes+scales of the fixture's L0.mlp.gate: pins the rounding rule across
#: machines and numpy versions. Change only with a deliberate change of the rule (and say so).
# w4 changed with the least-squares scale search (runs 45-55; was 897d6b787584d39e under the absmax scale).
FIXTURE_DIGESTS = {"w8": "493825e75e039002", "w4": "021e4a33c5e9111f"}


@pytest.mark.parametrize("fmt", QFORMATS)
def test_fixture_bytes_pinned(tiny_ckpt, fmt):
    got = _digest(quantize(tiny_ckpt["L0.mlp.gate"], fmt))
    assert got == FIXTURE_DIGESTS[fmt], f"{fmt}: quantised bytes of L0.mlp.gate changed: {got}"


# ---- int4 packing -----------------------------------------------------------------------------------
def test_int4_pack_unpack_all_codes():
    """All 16 x 16 code pairs: every byte value once, unpacked exactly; nibble order documented."""
    lo, hi = np.meshgrid(np.arange(-8, 8), np.arange(-8, 8), indexing="ij")
    q = np.stack([lo.ravel(), hi.ravel()], axis=1).reshape(1, -1).astype(np.int8)  # [1, 512]
    p = pack_int4(q)
    assert p.dtype == np.uint8 and p.shape == (1, 256)
    assert sorted(p.ravel().tolist()) == list(range(256))
    assert np.array_equal(unpack_int4(p), q)
    # element 2j in the low nibble, offset binary (q + 8)
    assert pack_int4(np.array([[1, -3]], np.int8)).tolist() == [[0x59]]
    assert pack_int4(np.array([[-8, 7]], np.int8)).tolist() == [[0xF0]]


def test_int4_pack_rejects_bad_codes():
    with pytest.raises(QuantError, match=r"\[-8, 7\]"):
        pack_int4(np.array([[8, 0]]))
    with pytest.raises(QuantError, match="K even"):
        pack_int4(np.zeros((2, 3), np.int8))


# ---- errors and zero rows/groups ----------------------------------------------------------------------
def test_w4_rejects_k_not_multiple_of_64():
    with pytest.raises(QuantError, match=r"K = 100"):
        quantize(np.ones((4, 100), np.float32), "w4", name="L0.x")
    quantize(np.ones((4, 100), np.float32), "w8")  # w8 has no constraint on K


def test_bad_inputs_rejected():
    with pytest.raises(QuantError, match="non-finite"):
        quantize(np.array([[1.0, np.nan]] * 2, np.float32), "w8")
    with pytest.raises(QuantError, match=r"\[N, K\]"):
        quantize(np.ones(64, np.float32), "w8")
    with pytest.raises(QuantError, match="unknown quantised format"):
        quantize(np.ones((2, 64), np.float32), "w3")


def test_zero_row_and_group_scale():
    w = _random((3, 128), "normal", seed=5)
    w[1] = 0.0           # a zero row
    w[2, 64:] = 0.0      # a zero group in a non-zero row
    q8 = quantize(w, "w8")
    assert q8.scales[1] == 1.0 and not q8.codes[1].any()
    assert q8.scales[2] != 1.0
    q4 = quantize(w, "w4")
    assert q4.scales[1].tolist() == [1.0, 1.0] and (q4.codes[1] == 0x88).all()
    assert q4.scales[2, 1] == 1.0 and (q4.codes[2, 32:] == 0x88).all() and q4.scales[2, 0] != 1.0
    for qt in (q8, q4):
        assert not qt.dequantize()[1].any()


# ---- recipes -----------------------------------------------------------------------------------------
def test_recipes_keep_sensitive_classes_wider():
    assert set(recipe("bf16").values()) == {"bf16"}
    w8, w4 = recipe("w8"), recipe("w4")
    for g in ("attention", "gdn", "mlp"):
        assert w8[g] == "w8" and w4[g] == "w4"
    assert w8["embedding"] == w8["lm_head"] == w8["norm"] == "bf16"
    assert w4["embedding"] == w4["lm_head"] == "w8" and w4["norm"] == "bf16"
    assert set(recipe("w4")) == set(GROUPS)
    assert recipe("w4,lm_head=bf16, gdn=w8")["lm_head"] == "bf16"
    for bad in ("w5", "w4,lmhead=w8", "w4,lm_head=int3", "w4,lm_head"):
        with pytest.raises(QuantError):
            recipe(bad)
    for bad in ("w4,norm=w8", "bf16,other=w4"):  # nothing in those classes is a matrix: refused, not ignored
        with pytest.raises(QuantError, match="never quantised"):
            recipe(bad)
    assert recipe("w4,norm=bf16")["norm"] == "bf16"


def test_assign_formats_on_fixture(tiny_ckpt):
    specs = tiny_ckpt.specs
    plan = assign_formats(specs, "w4")
    assert plan.fallbacks == {}
    assert plan.formats["embed"] == "w8" and plan.formats["lm_head"] == "w8"
    for name, spec in specs.items():
        if spec.group == "norm" or len(spec.shape) == 1 or name.endswith(".gdn.conv"):
            assert plan.formats[name] == "bf16", name
    for name in ("L0.gdn.in_b", "L0.gdn.in_a", "L0.gdn.in_qkv", "L0.mlp.down", "L3.attn.o"):
        assert plan.formats[name] == "w4", name
    w8 = assign_formats(specs, "w8")
    assert w8.formats["embed"] == w8.formats["lm_head"] == "bf16" and w8.formats["L3.attn.q"] == "w8"
    assert set(assign_formats(specs, "bf16").formats.values()) == {"bf16"}


def test_assign_formats_reports_fallback():
    specs = {"L0.mlp.down": ParamSpec("L0.mlp.down", (256, 700), "bf16", "mlp"),
             "L0.mlp.up": ParamSpec("L0.mlp.up", (700, 256), "bf16", "mlp")}
    plan = assign_formats(specs, "w4")
    assert plan.formats == {"L0.mlp.down": "bf16", "L0.mlp.up": "w4"}
    assert "K = 700" in plan.fallbacks["L0.mlp.down"]
    assert assign_formats(specs, "w8").fallbacks == {}


def test_quantize_weights_and_fake_quant(tiny_ckpt):
    specs = tiny_ckpt.specs
    out = quantize_weights(specs, tiny_ckpt, "w4")
    assert set(out) == set(specs)
    assert isinstance(out["L0.mlp.gate"], QuantTensor) and out["L0.mlp.gate"].format == "w4"
    assert isinstance(out["lm_head"], QuantTensor) and out["lm_head"].format == "w8"
    assert isinstance(out["L0.input_norm"], np.ndarray) and out["L0.input_norm"].dtype == ml_dtypes.bfloat16
    fq = fake_quant(tiny_ckpt, specs, "w4")
    assert len(fq) == len(specs) and set(fq) == set(specs)
    assert np.array_equal(fq["L0.mlp.gate"], out["L0.mlp.gate"].dequantize())
    assert fq["L0.mlp.gate"].dtype == np.float32
    assert np.array_equal(fq["L0.gdn.A_log"], np.asarray(tiny_ckpt["L0.gdn.A_log"]).astype(np.float32))


def test_nbytes_as_matches_tensors():
    for shape in ((64, 128), (5, 704)):
        w = _random(shape, "normal", seed=1)
        for fmt in QFORMATS:
            assert quantize(w, fmt).nbytes == nbytes_as(shape, fmt)
        assert nbytes_as(shape, "bf16") == w.size * 2
    assert nbytes_as((17408, 5120), "w4") == 17408 * 5120 // 2 + 4 * 17408 * 80
    assert FORMATS == ("bf16", "w8", "w4")


# ---- fidelity vs the bf16 model on the fixture goldens ------------------------------------------------
def _golden_logits(ex, goldens) -> np.ndarray:
    """Logits [240, V] at every golden teacher-forced position (prompt + greedy ids, one forward/case)."""
    rows = []
    for case in goldens["cases"]:
        P, n = len(case["prompt_ids"]), len(case["greedy_ids"])
        rows.append(ex.forward(case["prompt_ids"] + case["greedy_ids"], ex.new_state())[P - 1:P - 1 + n])
    return np.concatenate(rows)


def _mean_kl(ref, q) -> float:
    def logsm(x):
        x = np.asarray(x, np.float64)
        m = x.max(-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))
    lp, lq = logsm(ref), logsm(q)
    return float(np.mean(np.sum(np.exp(lp) * (lp - lq), axis=-1)))


@pytest.fixture(scope="module")
def bf16_logits(tiny_ckpt, goldens):
    return _golden_logits(ReferenceExecutor(build_graph(tiny_ckpt.config), tiny_ckpt), goldens)


@pytest.mark.parametrize("fmt,threshold", [("w8", TOP1_AGREEMENT_W8), ("w4", TOP1_AGREEMENT_W4)])
def test_fidelity_vs_bf16_model(tiny_ckpt, goldens, bf16_logits, fmt, threshold, record_property):
    """Top-1 agreement of the fake-quantised model with the bf16 model's own argmax over every golden
    position of goldens.json; mean KL(bf16 || quant) reported (bench/quant_fidelity.py has the table)."""
    ex = ReferenceExecutor(build_graph(tiny_ckpt.config), fake_quant(tiny_ckpt, tiny_ckpt.specs, fmt))
    q = _golden_logits(ex, goldens)
    assert np.all(np.isfinite(q))
    agree = float(np.mean(q.argmax(-1) == bf16_logits.argmax(-1)))
    kl = _mean_kl(bf16_logits, q)
    record_property(f"{fmt}_top1_agreement", agree)
    record_property(f"{fmt}_mean_kl", kl)
    print(f"{fmt}: top-1 agreement {agree:.4f} over {len(q)} positions, mean KL(bf16 || {fmt}) {kl:.3e}")
    assert agree >= threshold, f"{fmt}: top-1 agreement {agree:.4f} < {threshold} (issue 6); mean KL {kl:.3e}"
    assert 0 < kl < 1
