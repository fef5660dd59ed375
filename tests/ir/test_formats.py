"""ChooseFormats with weight recipes and the KV dtype: param dtypes and storage tensors, GraphWeights
quantising fused params, the reference executor on stored codes + scales."""

import numpy as np
import pytest

from ninferc.ir.graph import SCALES_SUFFIX, ParamSpec, StateSpec
from ninferc.ir.ops import ShapeError
from ninferc.ir.passes import run_pipeline
from ninferc.ir.quant import QuantError, fake_quant, quantize
from ninferc.ir.qwen3_5 import build_graph
from ninferc.ir.reference import ReferenceExecutor
from ninferc.ir.tolerances import FP32_REORDER
from ninferc.ir.weights import GraphWeights


@pytest.fixture(scope="module")
def graphs(tiny_ckpt):
    g0 = build_graph(tiny_ckpt.config, lm_rows="last")
    return {r: run_pipeline(g0, weights=r) for r in ("bf16", "w8", "w4")}


def test_param_storage_shapes():
    assert ParamSpec("a", (8, 128), "bf16").storage() == [("a", (8, 128), "bf16")]
    assert ParamSpec("a", (8, 128), "w8").storage() == [("a", (8, 128), "i8"), ("a.scales", (8,), "f32")]
    assert ParamSpec("a", (8, 128), "w4").storage() == [("a", (8, 64), "u8"), ("a.scales", (8, 2), "f32")]
    assert ParamSpec("a", (8, 128), "w8").nbytes == 8 * 128 + 8 * 4
    assert ParamSpec("a", (8, 128), "w4").nbytes == 8 * 64 + 8 * 2 * 4
    assert ParamSpec("a", (8, 128), "w4").row_bytes() == 64 + 8
    with pytest.raises(ValueError, match="K % 64"):
        ParamSpec("a", (8, 96), "w4").storage()
    # int8 KV: codes + one fp32 scale per 64 elements per token per head
    assert StateSpec("kv", 0, "kv", (2, 4, 256), "i8").nbytes == 2 * 4 * 256 + 4 * (2 * 4 * 256 // 64)
    assert StateSpec("kv", 0, "kv", (2, 4, 256), "bf16").nbytes == 2 * 4 * 256 * 2


def test_recipes_assign_param_dtypes(graphs):
    g8, g4 = graphs["w8"], graphs["w4"]
    emb = next(op.params["weight"] for op in g8.ops() if op.kind == "Embedding")
    lm = next(op.params["weight"] for op in g8.ops() if op.kind == "LMHead")
    lin = [op.params["weight"] for op in g8.ops() if op.kind == "Linear"]
    assert lin and all(g8.params[n].dtype == "w8" for n in lin)
    assert g8.params[emb].dtype == "bf16" and g8.params[lm].dtype == "bf16"
    assert all(g4.params[n].dtype == "w4" for n in lin)
    assert g4.params[emb].dtype == "w8" and g4.params[lm].dtype == "w8"
    # small params stay fp32 in every recipe
    small = [n for n in g8.params if n not in set(lin) | {emb, lm}]
    assert small and all(g4.params[n].dtype == "f32" for n in small)
    assert g8.meta["weights"] == "w8" and g8.meta["kv_dtype"] == "bf16"
    assert sum(p.nbytes for p in g4.params.values()) < sum(p.nbytes for p in g8.params.values()) \
        < sum(p.nbytes for p in graphs["bf16"].params.values())


def test_kv_dtype_int8(tiny_ckpt):
    g = run_pipeline(build_graph(tiny_ckpt.config, lm_rows="last"), kv_dtype="int8")
    kv = [s for s in g.states.values() if s.kind == "kv"]
    assert kv and all(s.dtype == "i8" for s in kv)
    with pytest.raises(ShapeError, match="'fp8'.*bf16.*int8"):
        run_pipeline(build_graph(tiny_ckpt.config, lm_rows="last"), kv_dtype="fp8")


def test_bad_recipes(tiny_ckpt):
    g0 = build_graph(tiny_ckpt.config, lm_rows="last")
    with pytest.raises(QuantError, match="embedding.*w4.*bf16 or w8"):
        run_pipeline(g0, weights="w4,embedding=w4")
    with pytest.raises(QuantError, match="unknown weight recipe 'w3'"):
        run_pipeline(g0, weights="w3")
    with pytest.raises(QuantError, match="bad override"):
        run_pipeline(g0, weights="w8,mlpx=w4")
    with pytest.raises(QuantError, match="mlp is given twice"):
        run_pipeline(g0, weights="w4,mlp=w8,mlp=w4")


def test_recipe_name_quotes_the_users_recipe():
    """``--weights w4 --recipe ...`` errors quote what the user typed, not the joined ``w4,...`` string, and a
    class given twice is refused whichever order (no silent last-one-wins)."""
    from ninferc.ir.quant import recipe_name

    assert recipe_name("w4", "mlp=w8") == "w4,mlp=w8"
    assert recipe_name("bf16") == "bf16"
    with pytest.raises(QuantError, match=r"^--recipe 'nonsense': bad override 'nonsense'"):
        recipe_name("bf16", "nonsense")
    for ov in ("mlp=w8,mlp=w4", "mlp=w4,mlp=w8", "mlp=w8, mlp=w8"):
        with pytest.raises(QuantError, match=r"^--recipe .*: mlp is given twice"):
            recipe_name("w4", ov)
    with pytest.raises(QuantError, match="unknown weight format 'w3'"):
        recipe_name("w3", "mlp=w8")
    assert recipe_name("w4", " mlp = w8 ,gdn=w8 ") == "w4,mlp=w8,gdn=w8"  # stored normalised
    for bad in ("", " ", ",", "mlp=w8,,gdn=w8", "mlp=w8,"):
        with pytest.raises(QuantError, match="separated by single commas"):
            recipe_name("w4", bad)


def test_graph_weights_quantise_fused_params(graphs, tiny_ckpt):
    g = graphs["w4"]
    gw = GraphWeights(g, tiny_ckpt)
    gb = GraphWeights(graphs["bf16"], tiny_ckpt)
    fused = next(n for n, p in g.params.items() if p.parts and p.quantised)
    codes, scales = gw[fused], gw[fused + SCALES_SUFFIX]
    want = quantize(gb[fused], "w4", name=fused)
    assert codes.dtype == np.uint8 and scales.dtype == np.float32
    np.testing.assert_array_equal(codes, want.codes)
    np.testing.assert_array_equal(scales, want.scales)
    # the storage table lists codes then scales, with the shapes ParamSpec.storage gives
    st = gw.storage()
    assert list(st)[list(st).index(fused) + 1] == fused + SCALES_SUFFIX
    assert st[fused] == (tuple(codes.shape), "u8")
    assert len(gw) == sum(len(p.storage()) for p in g.params.values())


def test_reference_on_stored_codes_matches_fake_quant(graphs, tiny_ckpt, goldens):
    """The reference executor fed codes + scales (as an artifact stores them) equals the fake-quantised
    unfused model up to fp32 reordering: so GPU fidelity tests may use either."""
    ids = goldens["cases"][0]["prompt_ids"][:12]
    for r in ("w8", "w4"):
        g = graphs[r]
        gw = GraphWeights(g, tiny_ckpt)
        stored = {n: gw[n] for n in gw}
        a = ReferenceExecutor(g, stored)
        g0 = build_graph(tiny_ckpt.config, lm_rows="last")
        b = ReferenceExecutor(g0, fake_quant(tiny_ckpt, tiny_ckpt.specs, r))
        FP32_REORDER.check(a.forward(ids, a.new_state()), b.forward(ids, b.new_state()), f"{r}: stored vs fake-quant")


def test_bytes_by_format(graphs):
    for r, g in graphs.items():
        by = g.bytes_by_format()
        assert sum(by.values()) == sum(p.nbytes for p in g.params.values())
        assert set(by) == {p.dtype for p in g.params.values()}
    assert "w4" in graphs["w4"].bytes_by_format() and "w8" in graphs["w4"].bytes_by_format()
    assert "w8" not in graphs["bf16"].bytes_by_format()


def test_dequantize_codes_checks_scales():
    from ninferc.ir.quant import dequantize_codes

    qt = quantize(np.linspace(-1, 1, 4 * 128, dtype=np.float32).reshape(4, 128), "w4")
    np.testing.assert_array_equal(dequantize_codes("w4", qt.codes, qt.scales), qt.dequantize())
    with pytest.raises(QuantError, match=r"scales \[4\] do not match codes \[4, 64\] \(expected \[4, 2\]\)"):
        dequantize_codes("w4", qt.codes, qt.scales[:, 0])
    with pytest.raises(QuantError, match="unknown format 'w3'"):
        dequantize_codes("w3", qt.codes, qt.scales)
